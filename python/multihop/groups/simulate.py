"""A discrete-event simulation of one multicast (and its acknowledgements) over a tree on a machine model.

:func:`simulate` is a pure function of ``(model, tree, workload)``: no clock,
no randomness, the same answer every time, so tests, the tree builder and the
benchmarks share it.  What it plays (Smelt's schedule):

* the root starts at time 0 and sends to its children in the tree's order,
  busy ``send(root, child)`` for each; a message is visible ``latency`` later;
* a core handles what reached it in arrival order, one thing at a time:
  receiving costs it ``recv(from, to)``; having received the message it
  forwards it to its children in order, then does ``work`` (the local part of
  a shoot-down, e.g. invalidating a TLB);
* acknowledgements (``Workload.acks``): ``"tree"`` (a convergecast: a core
  acks its parent once its own work is done and every child has acked it),
  ``"direct"`` (every member acks the root itself), or ``"none"`` (a plain
  broadcast: done when the last member has received and done its work);
* cores that share a CPU (``model.cpu_of``: virtual cores) take turns: the
  core that has the CPU keeps it while it has something ready to handle (it
  runs until it blocks), otherwise the CPU goes to what has waited longest,
  and a turn that changes core costs ``model.switch``.

The result is the shoot-down time (the root has every ack, or the last member
is done) and, per core, when it had the message and when it acked.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from multihop.groups.errors import GroupError
from multihop.groups.model import MachineModel
from multihop.groups.tree import Tree

__all__ = ["Workload", "SimResult", "simulate", "ACKS"]

ACKS: tuple[str, ...] = ("tree", "direct", "none")


@dataclass(frozen=True)
class Workload:
    """What the multicast asks of the members: acknowledgement scheme and local work (ns)."""

    acks: str = "tree"
    work: float = 0.0

    def __post_init__(self) -> None:
        if self.acks not in ACKS:
            raise GroupError(f"unknown ack scheme {self.acks!r}; valid: {', '.join(ACKS)}")
        if not self.work >= 0:
            raise GroupError(f"work must be >= 0 ns, got {self.work!r}")


@dataclass(frozen=True)
class SimResult:
    """The simulated times, in nanoseconds from the root's first send."""

    shootdown: float
    received: dict[int, float] = field(default_factory=dict)  # when each core had the message
    acked: dict[int, float] = field(default_factory=dict)  # when each core sent its ack (root: when done)
    busy: dict[int, float] = field(default_factory=dict)  # CPU time each core spent on this multicast


def simulate(model: MachineModel, tree: Tree, workload: Workload = Workload()) -> SimResult:
    """Play ``tree``'s multicast on ``model``; see the module docstring for the schedule.

    Raises:
        GroupError / ModelError: a tree core the model does not have.
    """
    for core in tree.cores:
        model.cost("send", core, core)  # ModelError for a core the model lacks
    cost = model.cost
    root = tree.root
    pending_acks = {c: (len(tree.children_of(c)) if workload.acks == "tree" else 0) for c in tree.cores}
    if workload.acks == "direct":
        pending_acks[root] = len(tree.cores) - 1
    work_done: dict[int, bool] = {}
    received: dict[int, float] = {root: 0.0}
    acked: dict[int, float] = {}
    busy = {c: 0.0 for c in tree.cores}
    cpu_free: dict[int, float] = {}
    cpu_last: dict[int, int] = {}
    queued: dict[int, list[tuple[float, int, int, str, int]]] = {}  # per CPU: (ready, tie, core, kind, from)
    tie = 0
    finish = 0.0

    def push(t: float, core: int, kind: str, frm: int) -> None:
        nonlocal tie
        tie += 1
        heapq.heappush(queued.setdefault(model.cpu_of[core], []), (t, tie, core, kind, frm))

    def next_start(cpu: int) -> float:
        return max(cpu_free.get(cpu, 0.0), queued[cpu][0][0])

    push(0.0, root, "start", root)
    while any(queued.values()):  # bounded: one data event per core, at most one ack per member
        # the CPU whose next task starts first runs it (ties: lowest CPU id); a task never
        # waits for one that starts later, so what it sends cannot change this choice
        cpu = min((c for c, q in queued.items() if q), key=lambda c: (next_start(c), c))
        q = queued[cpu]
        start = next_start(cpu)
        # run until blocked: the core that had the CPU keeps it while it has work ready
        mine = [e for e in q if e[2] == cpu_last.get(cpu) and e[0] <= start]
        item = min(mine) if mine else q[0]
        q.remove(item)
        heapq.heapify(q)
        t, _, core, kind, frm = item
        if cpu_last.get(cpu, core) != core:
            start += model.switch
        now = start
        if kind == "data" or kind == "start":
            if kind == "data":
                now += cost("recv", frm, core)
                received[core] = now
            for child in tree.children_of(core):
                now += cost("send", core, child)
                push(now + cost("latency", core, child), child, "data", core)
            now += workload.work
            work_done[core] = True
        else:  # an ack
            now += cost("recv", frm, core)
            pending_acks[core] -= 1
        if workload.acks == "none":
            finish = max(finish, now)
        elif work_done.get(core) and pending_acks[core] == 0 and core not in acked:
            target = root if workload.acks == "direct" else tree.parent_of(core)
            if core == root:
                acked[core] = now
                finish = now
            elif target is not None:
                now += cost("send", core, target)
                acked[core] = now
                push(now + cost("latency", core, target), target, "ack", core)
        busy[core] += now - start
        cpu_free[cpu] = now
        cpu_last[cpu] = core
    return SimResult(finish, received, acked, busy)
