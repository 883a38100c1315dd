"""Calibration of the live group path: what each process of a group shoot-down costs, measured on that path.

A live shoot-down (:mod:`multihop.bench.groups.shootdown`) is not two processes
talking over a ring: every frame goes through the sender's monitor and the
receiver's (each a process of its own on its core's CPU), the group
endpoints are Python that park as soon as they have nothing to do (and must
be woken by the next frame), and on virtual cores all of them take turns on
the same CPUs.  :func:`calibrate_group_path` measures each of those parts on
its own and puts them into a machine model with ``route = "monitors"``
(:mod:`multihop.groups.model`), so the simulator can compose them for many
members:

* **latency** and **switch**: the UMP calibration of the cores
  (:func:`~multihop.bench.groups.calibrate.calibrate`, pairs from the root), whose
  agents spin while they wait;
* **wake**: the same agents' one-way probe (a message sent after a pause
  longer than any receiver polls, timed from the sender's stamp to the
  receive returning), once with receivers that spin through the pause and
  once with receivers that park at once (``MULTIHOP_SPIN_US=0``, as the group
  endpoints do): the difference is one wake-up of a parked receiver (median
  over the pairs on two CPUs, or over all pairs when there are none);
* **switch** where no two cores share a CPU (real cores: the UMP
  calibration has no pair to measure it on, yet every monitor takes turns
  with its core's dispatchers): the one-way probe between two agents pinned
  to the root's CPU, the receiver parking at once (the ring, the sender
  parking, the receiver running);
* **forward**: the monitors' own account of their forwarding steps' CPU time
  per frame (sampled by the monitors, ``sampled_cpu_ns / sampled_messages``
  in their status), over the reference rounds below, or, when the monitors
  sample no step of group frames (their sampling counts channel messages),
  over the calibration agents' round trips and bursts on a multi-hop
  channel between the same two cores (:func:`measure_forward`);
* the **endpoints' costs**, from reference shoot-downs of the live group
  path (:func:`reference_members`) with k = 1, 2, ... member processes on
  the cores that share the member's CPU, each on a core of its own while
  there are enough (so, as live, their monitors forward traffic between the
  member's turns), then cycling over them: a member's CPU time per round
  from the kernel's schedstat (all its threads, kernel time included: the
  keeper thread, the parking and the wake-ups are part of what it costs;
  median over chunks of rounds), the root's from its own thread's CPU clock
  around each round (median).  ``handle``: a member's CPU per request alone
  on its CPU; ``send``: the root's wall time per request in a burst;
  ``ack`` and ``root_work``: the root's CPU per round against the number of
  members is a least-squares line, whose slope less ``send`` is what each
  reply costs it (a turn of its own: woken, take the frame, park again) and
  whose value at no member is its own work per round (the convergecast's
  bookkeeping, its request to itself, which its endpoint delivers without a
  frame, waiting and waking), played before its first send (traced here:
  16 of the root's 28 us per round come before it).  A member's and the
  root's figures are their whole CPU time, the kernel's switching into them
  included, so the model charges the switch only to turns of a monitor
  (``switch_to = "monitors"``), whose figures are its forwarding steps
  alone;
* **crowd**: what a member's request costs more with 1, 2, ... other members
  on its CPU, from the same rounds, as a table (measured at 8 virtual cores:
  +5, +11, +27 us with 1, 2, 3 others: the growth steepens, it is not a
  line); **crowd_root**: on virtual cores, the same rounds with k members on
  the cores that share the *root's* CPU: the root's CPU per round there
  less with k members on the member's CPU.

The reference rounds crowd one CPU at a time, never with the member counts
the model is then asked about (members on every CPU): the prediction for
many members is the simulator's composition of these parts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import multiprocessing as mp
import os
import queue
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import multihop as mh
from multihop import groups
from multihop.bench.groups.calibrate import calibrate, measure
from multihop.bench.groups.probe import PAUSE_US
from multihop.bench.peers import spawned
from multihop.groups.errors import GroupError
from multihop.groups.model import MachineModel
from multihop.groups.simulate import Workload
from multihop.groups.stored import PATH_STORED_NAME, kept_path

__all__ = [
    "GroupPathCosts",
    "calibrate_group_path",
    "measure_group_path",
    "measure_wake",
    "group_path_model",
    "cpu_ns",
    "PATH_STORED_NAME",
    "measure_forward",
]

_CTX = mp.get_context("spawn")
BASE_STORED_NAME = "groups-path-base.toml"
"""Where it stores the UMP calibration it starts from."""
_CHUNK = 20  # rounds per reading of a member's CPU time (the median over chunks leaves a disturbed one out)


@dataclass(frozen=True)
class GroupPathCosts:
    """The live group path's parts, in ns (see the module docstring for how each is measured)."""

    send: float  # the root's time per request it sends
    ack: float  # the root's CPU per member per round beyond the send (taking the member's reply)
    root_work: float  # the root's CPU per round that does not grow with the members
    handle: float  # a member's CPU per request (take it, order, deliver, reply, park again)
    forward: float  # a monitor's CPU per frame forwarded
    wake: float  # a parked process's wake-up
    handover: float  # a hand-over on one CPU to a parked process (0: not measured)
    crowd: tuple[float, ...]  # what a member's request costs more with 1, 2, ... other members on its CPU
    round_trip: float  # the one-member reference shoot-down (median), for the record
    crowd_root: tuple[float, ...] = (0.0,)  # what the root's round costs more with 1, 2, ... members on its CPU


def cpu_ns(pid: int) -> int:
    """CPU time of process ``pid`` so far, all threads, in ns (the kernel's schedstat; 0 if it is gone)."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(path) as f:
                total += int(f.read().split()[0])
    return total


def _monitor_samples(rt: mh.Runtime, cores: Sequence[int]) -> tuple[int, int]:
    """(sampled CPU ns, sampled frames) of the monitors of ``cores``."""
    cpu = frames = 0
    for m in rt.status()["monitors"]:
        if m.get("core") in cores:
            cpu += int(m["data"].get("sampled_cpu_ns", 0))
            frames += int(m["data"].get("sampled_messages", 0))
    return cpu, frames


def _path_member(name: str, core: int, cpu: int | None, group: str, q: Any, stop: Any) -> None:
    """A member of a reference shoot-down: join, report (pid, node, core), answer until ``stop``."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        g = d.join(group, timeout=120)
        q.put((os.getpid(), g.node, core))
        while not stop.is_set():
            with contextlib.suppress(mh.Timeout):
                g.recv(timeout=0.2)
        with contextlib.suppress(mh.MultihopError):
            d.leave(group, timeout=10)


def _reference(rt: mh.Runtime, root: int, members: Sequence[int], rounds: int, warmup: int, bursts: int, burst: int) -> dict[str, float]:
    """Shoot-downs from ``root`` to one member process on each of ``members`` (a core may be listed more than once:
    several processes on it): per round medians and CPU."""
    name = f"cal-path-{os.getpid()}-{time.monotonic_ns()}"
    groups.group(rt, name, order="fifo", tree="flat", window=256)
    spread = len(os.sched_getaffinity(0)) > 1
    q, stop = _CTX.Queue(), _CTX.Event()
    old = os.sched_getaffinity(0)
    with contextlib.ExitStack() as stack:
        d = stack.enter_context(rt.dispatcher(root))
        g = d.join(name, timeout=60)
        copies = len(members)
        for member in members:
            stack.enter_context(spawned(_path_member, rt.name, member, rt.cpu_of(member) if spread else None, name, q, stop, grace=15.0))
        stack.callback(stop.set)
        joined: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + 120
        while len(joined) < copies:
            if time.monotonic() > deadline:
                raise mh.Timeout(f"{len(joined)} of {copies} reference members joined within 120 s")
            with contextlib.suppress(queue.Empty):
                joined.append(q.get(timeout=0.5))
        while len(g.view.nodes) < copies + 1:
            if time.monotonic() > deadline:
                raise mh.Timeout("the reference group did not form")
            g.sync(timeout=10)
        if spread:
            os.sched_setaffinity(0, {rt.cpu_of(root)})
            stack.callback(os.sched_setaffinity, 0, old)
        pids = [os.getpid()] + [int(j[0]) for j in joined]
        for _ in range(warmup):
            g.convergecast(b"", timeout=30, unicast=True)
            while g.try_recv() is not None:
                pass
        watched = sorted({root, *members})
        mon0 = _monitor_samples(rt, watched)
        ep = g._ep
        handled0, frames0 = ep.handle_ns, ep.handled
        times, root_cpu, member_cpu = [], [], []
        each: list[list[float]] = []  # per chunk, each member's CPU per request
        for chunk in range(0, rounds, _CHUNK):
            todo = min(_CHUNK, rounds - chunk)
            before = [cpu_ns(p) for p in pids[1:]]
            for _ in range(todo):
                c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
                g.convergecast(b"", timeout=30, unicast=True)
                times.append(time.perf_counter_ns() - t0)
                root_cpu.append(time.thread_time_ns() - c0)  # the root's own part of the round (no loop around it)
                while g.try_recv() is not None:
                    pass
            each.append([(cpu_ns(p) - b) / todo for p, b in zip(pids[1:], before, strict=True)])
            member_cpu.append(statistics.mean(each[-1]))
        mon1 = _monitor_samples(rt, watched)
        # the endpoint's own account of taking a frame (its request to itself and the replies)
        handled = (ep.handle_ns - handled0) / max(1, ep.handled - frames0)
        sends = []
        node = int(joined[0][1])
        for _ in range(bursts):
            g.convergecast(b"", timeout=30, unicast=True)  # the members have caught up
            t0 = time.perf_counter_ns()
            for _ in range(burst):
                g.send(node, b"")
            sends.append((time.perf_counter_ns() - t0) / burst)
        while g.try_recv() is not None:
            pass
        with contextlib.suppress(mh.MultihopError):
            d.leave(name, timeout=10)
    return {
        "round": float(statistics.median(times)),
        "root_cpu": float(statistics.median(root_cpu)),
        "member_cpu": float(statistics.median(member_cpu)),
        **{  # per member core (the mean of its processes)
            f"member_cpu@{core}": float(statistics.mean(statistics.median(c[i] for c in each) for i, j in enumerate(joined) if j[2] == core))
            for core in set(members)
        },
        "send": float(statistics.median(sends)),
        "mon_cpu": float(mon1[0] - mon0[0]),
        "mon_frames": float(mon1[1] - mon0[1]),
        "handled": float(handled),
    }


def measure_group_path(
    rt: mh.Runtime, root: int, member: int, *, rounds: int = 300, warmup: int = 30, bursts: int = 9, burst: int = 32
) -> GroupPathCosts:
    """The endpoints' and monitors' costs from reference shoot-downs ``root`` -> ``member`` (wake left 0)."""
    for core in (root, member):
        if core not in rt.cores:
            raise GroupError(f"core {core} is not in runtime {rt.name!r} (its cores: {rt.cores})")
    if root == member:
        raise GroupError(f"the reference member needs a core other than the root {root}")
    sets = reference_members(rt, root, member)
    refs = [_reference(rt, root, cores, rounds, warmup, bursts, burst) for cores in sets]
    one = refs[0]
    send = one["send"]
    # the root's CPU per round against the members: a straight line by least squares; its slope is what each
    # member costs the root (its send, and a turn for the reply: woken, take it, park again), the rest is its own
    counts = [float(len(cores)) for cores in sets]
    root_slope, root_line = _line(counts, [r["root_cpu"] for r in refs])
    ack = max(0.0, root_slope - send)
    root_work = max(0.0, root_line)
    frames = sum(r["mon_frames"] for r in refs)
    forward = sum(r["mon_cpu"] for r in refs) / frames if frames else 0.0
    # a member's CPU per request alone on its CPU, and what it costs more with 1, 2, ... others there (a table:
    # measured, not a line, the growth steepens as the CPU's caches fill)
    handle = one["member_cpu"]
    crowd = tuple(max(0.0, r["member_cpu"] - handle) for r in refs[1:])
    # the root's CPU per round with k members on its own CPU (virtual cores) against k on the member's: what
    # its round costs more with k others there (its turns start cold)
    near = [c for c in rt.cores if c != root and rt.cpu_of(c) == rt.cpu_of(root)][: len(sets)]
    crowd_root = tuple(
        max(0.0, _reference(rt, root, near[:k], rounds, warmup, bursts, burst)["root_cpu"] - refs[k - 1]["root_cpu"]) for k in range(1, len(near) + 1)
    )
    return GroupPathCosts(send, ack, root_work, handle, forward, 0.0, 0.0, crowd, one["round"], crowd_root or (0.0,))


def reference_members(rt: mh.Runtime, root: int, member: int) -> list[list[int]]:
    """The member cores of the reference rounds: k = 1, 2, ... members on the cores that share ``member``'s CPU
    (the root's excepted), each on a core of its own while there are enough (so their monitors forward
    traffic too, as in a live shoot-down), then cycling over them; as many rounds as cores share that CPU,
    at least three."""
    pool = [member, *[c for c in rt.cores if c not in (root, member) and rt.cpu_of(c) == rt.cpu_of(member)]]
    count = max(3, len(pool))
    return [[pool[i % len(pool)] for i in range(k)] for k in range(1, count + 1)]


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, value at x = 0) of the least-squares line through the points."""
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def measure_wake(rt: mh.Runtime, root: int, cores: Sequence[int], *, rounds: int = 200) -> float:
    """One wake-up of a parked receiver, ns: the one-way probe (a message sent after a pause) from ``root`` to
    each of ``cores`` over UMP, received by an agent that parks at once against one that spins through the
    pause; the difference of the medians (median over the pairs on two CPUs, else over all)."""
    chosen = [root, *[c for c in cores if c != root]]
    wanted = [(root, c) for c in chosen[1:]]
    spinning = measure(rt, chosen, wanted, rounds=rounds, bursts=1, burst=4, spin_us=20 * PAUSE_US, one_way=True)
    parked = measure(rt, chosen, wanted, rounds=rounds, bursts=1, burst=4, spin_us=0, one_way=True)
    diffs = {pair: parked[pair][2] - spinning[pair][2] for pair in wanted}
    cross = [v for (a, b), v in diffs.items() if rt.cpu_of(a) != rt.cpu_of(b)]
    return max(0.0, float(statistics.median(cross or list(diffs.values()))))


def monitor_poll_ns() -> float:
    """How long the monitors poll for the next frame before they park, ns: ``MULTIHOP_MONITOR_POLL_US`` as the
    runtime's monitors read it (they inherit this process's environment), default 200 us."""
    try:
        return float(int(os.environ.get("MULTIHOP_MONITOR_POLL_US", "200"))) * 1000
    except ValueError:
        return 200_000.0


def measure_forward(rt: mh.Runtime, root: int, member: int, *, rounds: int = 200) -> float:
    """A monitor's CPU per frame forwarded, ns: the monitors of ``root`` and ``member`` sample their forwarding
    steps while the calibration agents exchange round trips and bursts over a multi-hop channel between them
    (0 if no step was sampled)."""
    before = _monitor_samples(rt, [root, member])
    measure(rt, [root, member], [(root, member), (member, root)], rounds=rounds, bursts=9, burst=64, transport="multihop")
    after = _monitor_samples(rt, [root, member])
    frames = after[1] - before[1]
    return (after[0] - before[0]) / frames if frames > 0 else 0.0


def measure_handover(rt: mh.Runtime, root: int, other: int, *, rounds: int = 200) -> float:
    """A hand-over on one CPU, ns: the one-way probe from ``root``'s agent to ``other``'s, both pinned to the root's
    CPU, the receiver parking at once (the median: the ring, the sender parking, the receiver running)."""
    cpu = rt.cpu_of(root)
    got = measure(rt, [root, other], [(root, other)], rounds=rounds, bursts=1, burst=4, spin_us=0, one_way=True, cpus={root: cpu, other: cpu})
    return float(got[(root, other)][2])


def group_path_model(base: MachineModel, root: int, costs: GroupPathCosts) -> MachineModel:
    """``base`` (a UMP calibration: latency, CPU sharing, switch) as the live group path: route through the
    monitors, their forward cost and polling, parked endpoints (spin 0), the wake-up, the switch (the
    base's between virtual cores, else the hand-over on one CPU), and the endpoints' costs as
    the send and receive costs between ``root`` and every other core."""
    n = len(base.cores)
    send = [list(r) for r in base.send]
    recv = [list(r) for r in base.recv]
    i = base.cores.index(root)
    for j in range(n):
        if j != i:
            send[i][j] = costs.send  # the root sends a request
            recv[i][j] = costs.handle  # the member takes it, delivers, answers and parks again
            send[j][i] = 0.0  # the answer's send is inside the member's handling
            recv[j][i] = costs.ack  # the root takes the answer
    shared = len(set(base.cpu_of.values())) < len(base.cores)
    return dataclasses.replace(
        base,
        name=f"{base.name}+group-path",
        # a change of process on a CPU: the UMP calibration measured it between virtual cores; where no two
        # cores share a CPU it could not, and the monitors still take turns with their dispatchers: the hand-over
        switch=base.switch if shared else costs.handover,
        send=tuple(tuple(r) for r in send),
        recv=tuple(tuple(r) for r in recv),
        route="monitors",
        forward=costs.forward,
        crowd=costs.crowd,
        crowd_root=costs.crowd_root,
        switch_to="monitors",
        wake=costs.wake,
        spin=0.0,
        poll=monitor_poll_ns(),
        description=f"{base.description}; group path from core {root}: {costs}",
    )


def calibrate_group_path(
    rt: mh.Runtime,
    root: int | None = None,
    *,
    rounds: int = 300,
    out: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[MachineModel, GroupPathCosts, Workload]:
    """Measure the live group path of ``rt`` from ``root`` (default: its first core).

    Returns the model (:func:`group_path_model`, also stored at ``out``,
    default :data:`PATH_STORED_NAME` beside the runtime's kept model, :func:`~multihop.bench.groups.calibrate.stored_path`,
    which outlives the runtime), the measured
    parts, and the workload that plays a flat unicast shoot-down on it (direct
    acks, the root's own per-round work).

    Raises:
        GroupError: a root the runtime lacks, or a runtime of one core.
    """
    src = rt.cores[0] if root is None else root
    if src not in rt.cores:
        raise GroupError(f"core {src} is not in runtime {rt.name!r} (its cores: {rt.cores})")
    others = [c for c in rt.cores if c != src]
    if not others:
        raise GroupError("the group path needs a core besides the root")
    say = progress or (lambda _: None)
    base = calibrate(rt, pairs="from", source=src, rounds=rounds, bursts=5, burst=32, out=kept_path(rt.name, BASE_STORED_NAME))
    say(f"UMP calibration: switch {base.switch:,.0f} ns")
    wake = measure_wake(rt, src, others, rounds=rounds)
    say(f"wake-up of a parked receiver: {wake:,.0f} ns")
    # the reference member: on another CPU when there is one (the live members are mostly there)
    member = next((c for c in others if rt.cpu_of(c) != rt.cpu_of(src)), others[0])
    handover = measure_handover(rt, src, member, rounds=rounds)
    say(f"hand-over on one CPU: {handover:,.0f} ns")
    costs = measure_group_path(rt, src, member, rounds=rounds)
    if costs.forward == 0.0:  # the monitors sampled no step of group frames: sample them on multi-hop channel traffic
        costs = dataclasses.replace(costs, forward=measure_forward(rt, src, member, rounds=rounds))
    costs = dataclasses.replace(costs, wake=wake, handover=handover)
    say(f"group path {src} -> {member}: {costs}")
    model = group_path_model(base, src, costs)
    model.save(Path(out) if out is not None else kept_path(rt.name, PATH_STORED_NAME))
    return model, costs, Workload("direct", root_work=costs.root_work)
