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

The runtime's processes (the model's ``route``, ``forward``, ``wake`` and
``spin``; their defaults turn these rules off):

* with ``route = "monitors"`` a message from core a to core b is a frame
  that a's monitor forwards (``forward`` ns of CPU a's time), that reaches
  b's monitor ``latency(a, b)`` later, which forwards it (``forward`` ns of
  b's CPU) to b's dispatcher (a message to its own core: one monitor).  A
  monitor's turn is one forwarding step: every frame it has when the turn
  starts, in arrival order.  A monitor is a process of its own on its
  core's CPU, at idle priority: it gets a turn only when no dispatcher there
  has something ready (a dispatcher never waits for a monitor's next frame,
  a monitor waits for every dispatcher), and a turn that changes process
  costs the switch as above (with ``switch_to = "monitors"`` only a turn
  that changes *to* a monitor pays it: the dispatchers' costs were measured
  with the kernel's switching into them inside).  So a frame a dispatcher sends waits for the
  rest of that dispatcher's turn;
* a process that has had nothing to do for longer than its spin since its
  last turn (a dispatcher's ``spin``, a monitor's ``poll``) is parked.  A
  message that reaches a parked process while its CPU sleeps (nothing runs
  there and every process of that CPU is parked) is ready ``wake`` ns later:
  the cross-CPU wake-up of an idle CPU.  On a CPU that is awake (a process
  runs or still polls there, e.g. the monitor that hands a dispatcher its
  frame) it is ready at once, and the switch is the cost.  A message that
  comes during a wake-up under way is not ready before it ends.  At time 0
  the root runs, every member is parked, and the monitors have just worked
  (a shoot-down among others, back to back);
* a dispatcher's receive of the multicast costs more with every other
  dispatcher of the multicast on its CPU (``model.crowding``: ``crowd`` per
  other, or the measured table), and the root's own work per round
  ``crowd_root`` more (the same, with the others on the root's CPU).

The result is the shoot-down time (the root has every ack, or the last member
is done) and, per core, when it had the message and when it acked.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from multihop.groups.errors import GroupError
from multihop.groups.model import MachineModel
from multihop.groups.tree import Tree

__all__ = ["Workload", "SimResult", "simulate", "ACKS"]

ACKS: tuple[str, ...] = ("tree", "direct", "none")


@dataclass(frozen=True)
class Workload:
    """What the multicast asks of the members: acknowledgement scheme and local work (ns).

    ``root_work`` is the root's own part of a round that does not grow with
    the members (a live convergecast's set-up and result), played before its
    first send.
    """

    acks: str = "tree"
    work: float = 0.0
    root_work: float = 0.0

    def __post_init__(self) -> None:
        if self.acks not in ACKS:
            raise GroupError(f"unknown ack scheme {self.acks!r}; valid: {', '.join(ACKS)}")
        if not self.work >= 0:
            raise GroupError(f"work must be >= 0 ns, got {self.work!r}")
        if not self.root_work >= 0:
            raise GroupError(f"root_work must be >= 0 ns, got {self.root_work!r}")


@dataclass(frozen=True)
class SimResult:
    """The simulated times, in nanoseconds from the root's first send."""

    shootdown: float
    received: dict[int, float] = field(default_factory=dict)  # when each core had the message
    acked: dict[int, float] = field(default_factory=dict)  # when each core sent its ack (root: when done)
    busy: dict[int, float] = field(default_factory=dict)  # CPU time each core spent on this multicast
    forwarded: dict[int, float] = field(default_factory=dict)  # CPU time each core's monitor spent (route "monitors")
    wakes: int = 0  # how many times a parked dispatcher was woken


def simulate(model: MachineModel, tree: Tree, workload: Workload = Workload()) -> SimResult:
    """Play ``tree``'s multicast on ``model``; see the module docstring for the schedule.

    Raises:
        GroupError / ModelError: a tree core the model does not have.
    """
    for core in tree.cores:
        model.cost("send", core, core)  # ModelError for a core the model lacks
    cost = model.cost
    root = tree.root
    via_monitors = model.route == "monitors"
    pending_acks = {c: (len(tree.children_of(c)) if workload.acks == "tree" else 0) for c in tree.cores}
    if workload.acks == "direct":
        pending_acks[root] = len(tree.cores) - 1
    work_done: dict[int, bool] = {}
    received: dict[int, float] = {root: 0.0}
    acked: dict[int, float] = {}
    busy = {c: 0.0 for c in tree.cores}
    forwarded: dict[int, float] = {}
    # a process is (core, is_monitor); a task is (ready, tie, process, kind, from, to)
    Proc = tuple[int, bool]
    cpu_free: dict[int, float] = {}
    cpu_last: dict[int, Proc] = {}
    queued: dict[int, list[tuple[float, int, Proc, str, int, int]]] = {}  # per CPU
    procs: list[Proc] = [(c, False) for c in tree.cores] + ([(c, True) for c in tree.cores] if via_monitors else [])
    on_cpu: dict[int, list[Proc]] = {}
    for p in procs:
        on_cpu.setdefault(model.cpu_of[p[0]], []).append(p)
    waiting = dict.fromkeys(procs, 0)  # tasks queued per process
    crowding = {c: sum(1 for o in tree.cores if o != c and model.cpu_of[o] == model.cpu_of[c]) for c in tree.cores}
    # when each process last ran: the root starts running, the members are parked, the monitors have just
    # forwarded the previous round's frames (a shoot-down among others)
    last_done = {p: (0.0 if p[1] or p[0] == root else -math.inf) for p in procs}
    awake: dict[Proc, float] = {}  # when each process's last wake-up ends
    wakes = 0
    tie = 0
    finish = 0.0

    def push(t: float, proc: Proc, kind: str, frm: int, to: int) -> None:
        nonlocal tie
        tie += 1
        heapq.heappush(queued.setdefault(model.cpu_of[proc[0]], []), (t, tie, proc, kind, frm, to))

    def parked(p: Proc, t: float) -> bool:
        return waiting[p] == 0 and t - last_done[p] > (model.poll if p[1] else model.spin)

    def arrive(t: float, proc: Proc, kind: str, frm: int, to: int) -> None:
        """A message reaches ``proc`` at ``t``: ready then, or after a wake-up when its CPU sleeps."""
        nonlocal wakes
        cpu = model.cpu_of[proc[0]]
        if parked(proc, t) and cpu_free.get(cpu, -math.inf) < t and all(parked(p, t) for p in on_cpu[cpu]):
            t += model.wake  # nothing runs or polls on its CPU: the wake-up comes first
            awake[proc] = t
            wakes += 1
        else:
            t = max(t, awake.get(proc, t))  # it may still be waking up
        waiting[proc] += 1
        push(t, proc, kind, frm, to)

    def to_dispatcher(t: float, core: int, kind: str, frm: int) -> None:
        arrive(t, (core, False), kind, frm, core)

    def deliver(t: float, frm: int, to: int, kind: str) -> None:
        """A message of ``kind`` leaves dispatcher ``frm`` for dispatcher ``to`` at ``t``."""
        if via_monitors:
            arrive(t, (frm, True), "out:" + kind, frm, to)  # the sender's monitor takes it from the link
        else:
            to_dispatcher(t + cost("latency", frm, to), to, kind, frm)

    def next_start(cpu: int) -> float:
        return max(cpu_free.get(cpu, 0.0), queued[cpu][0][0])

    def pick(q: list[tuple[float, int, Proc, str, int, int]], cpu: int, start: float) -> tuple[float, int, Proc, str, int, int]:
        """Run until blocked (a dispatcher keeps its CPU while it has work ready), dispatchers before monitors."""
        holder = cpu_last.get(cpu)
        best: list[tuple[float, int, Proc, str, int, int] | None] = [None, None, None, None]
        for e in q:
            if e[0] > start:
                continue
            # 0: the dispatcher that has the CPU, 1: another dispatcher, 2: the monitor that has it, 3: another
            rank = (2 if e[2][1] else 0) + (0 if e[2] == holder else 1)
            b = best[rank]
            if b is None or e < b:
                best[rank] = e
        return next(e for e in best if e is not None)

    push(0.0, (root, False), "start", root, root)
    waiting[(root, False)] += 1
    while any(queued.values()):  # bounded: one data event per core, at most one ack per member, two hops of each
        # the CPU whose next task starts first runs it (ties: lowest CPU id); a task never
        # waits for one that starts later, so what it sends cannot change this choice
        cpu = min((c for c, q in queued.items() if q), key=lambda c: (next_start(c), c))
        q = queued[cpu]
        start = next_start(cpu)
        item = pick(q, cpu, start)
        q.remove(item)
        heapq.heapify(q)
        _, _, proc, kind, frm, to = item
        core, is_monitor = proc
        if cpu_last.get(cpu, proc) != proc and (is_monitor or model.switch_to == "any"):
            start += model.switch
        cpu_free[cpu] = math.inf  # running: what this turn sends finds its CPU awake
        now = start
        if is_monitor:
            # one forwarding step: every frame this monitor has at its start, in arrival order
            step = [item] + sorted(e for e in q if e[2] == proc and e[0] <= start)
            for e in step[1:]:
                q.remove(e)
            heapq.heapify(q)
            for _, _, _, kind, frm, to in step:
                now += model.forward
                stage, _, what = kind.partition(":")
                if stage == "out" and to != frm:  # across to the receiver's monitor
                    arrive(now + cost("latency", frm, to), (to, True), "in:" + what, frm, to)
                else:  # onto the receiver's link (a message to its own core needs one monitor only)
                    to_dispatcher(now, to, what, frm)
                waiting[proc] -= 1
            forwarded[core] = forwarded.get(core, 0.0) + now - start
            last_done[proc] = now
            cpu_free[cpu] = now
            cpu_last[cpu] = proc
            continue
        waiting[proc] -= 1
        if kind == "data" or kind == "start":
            if kind == "data":
                now += cost("recv", frm, core) + model.crowding(crowding[core])
                received[core] = now
            else:
                now += workload.root_work + model.crowding(crowding[core], root=True)
            for child in tree.children_of(core):
                now += cost("send", core, child)
                deliver(now, core, child, "data")
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
                deliver(now, core, target, "ack")
        busy[core] += now - start
        last_done[proc] = now
        cpu_free[cpu] = now
        cpu_last[cpu] = proc
    return SimResult(finish, received, acked, busy, forwarded, wakes)
