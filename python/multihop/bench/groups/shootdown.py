"""One-to-all shoot-downs and group throughput measured live through the monitors (phase 2).

A shoot-down is a convergecast: the root sends one message to every member,
each member's endpoint acknowledges it at once (an empty reply), and the
round ends when the root has every acknowledgement.  Modes:

* ``unicast``: the root's dispatcher sends one message per member (each by
  unicast through the monitors) and each member acknowledges straight back
  to the root (``convergecast(unicast=True)``): Barrelfish's "unicast";
* ``broadcast``: one message from the root's dispatcher, its monitor sends a
  copy to every member core (the ``flat`` tree): a shared broadcast;
* ``radix`` (``radix:2``) and ``numa``: the monitors forward copies down
  those trees.

In the three tree modes the acknowledgements are aggregated back up the same
tree by the monitors (``core-rs/monitor/src/multicast/ccast.rs``): each monitor sends its
parent one merged report, the root's monitor sends the root one result.

Members are processes (one per member core, pinned to that core's CPU on a
machine with several CPUs), the root is the calling process.  The baseline is
the same round over ``multiprocessing`` Pipes (the root writes to each
member's pipe, each answers).  :func:`measure_throughput` floods a group from
one sender and times until every member has every message (fifo against
total order).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import multihop as mh
from multihop import groups
from multihop.bench.peers import spawned
from multihop.groups.errors import GroupError

__all__ = [
    "MODES",
    "Rounds",
    "measure_group_shootdown",
    "measure_pipe_shootdown",
    "measure_throughput",
    "tree_of_mode",
]

MODES: tuple[str, ...] = ("unicast", "broadcast", "radix", "numa")
"""Shoot-down modes, in the order the benchmarks show them."""

_CTX = mp.get_context("spawn")


def tree_of_mode(mode: str) -> str:
    """The group tree a shoot-down mode uses."""
    return {"unicast": "flat", "broadcast": "flat", "radix": "radix:2", "numa": "numa"}[mode]


@dataclass(frozen=True)
class Rounds:
    """Timed rounds (ns), with their start times (CLOCK_MONOTONIC ns) for traces."""

    mode: str
    members: int
    starts: tuple[int, ...]
    times: tuple[int, ...]

    @property
    def median(self) -> float:
        """The median round, ns."""
        return float(statistics.median(self.times))

    @property
    def p10(self) -> float:
        """The 10th percentile round, ns."""
        return statistics.quantiles(self.times, n=10)[0]

    @property
    def p90(self) -> float:
        """The 90th percentile round, ns."""
        return statistics.quantiles(self.times, n=10)[-1]


def _pin(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def _member(name: str, core: int, cpu: int | None, group: str, q: Any, stop: Any, count: int) -> None:
    """A member: join, then deliver (acknowledging convergecasts) until ``stop``; report ``count`` deliveries."""
    _pin(cpu)
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        g = d.join(group, timeout=120)
        q.put(("joined", core, g.node, time.monotonic_ns()))
        got = 0
        while not stop.is_set():
            try:
                g.recv(timeout=0.2)
            except mh.Timeout:
                continue
            got += 1
            if count and got == count:
                q.put(("all", core, g.node, time.monotonic_ns()))
        with contextlib.suppress(mh.MultihopError):
            d.leave(group, timeout=10)


def _wait_reports(q: Any, kind: str, n: int, timeout: float) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise mh.Timeout(f"{len(out)} of {n} group members reported {kind!r} within {timeout} s")
        try:
            item = q.get(timeout=min(left, 0.5))
        except queue.Empty:
            continue
        if item[0] == kind:
            out.append(item)
    return out


@contextlib.contextmanager
def _group_members(rt: mh.Runtime, group: str, cores: Sequence[int], count: int = 0) -> Any:
    spread = len(os.sched_getaffinity(0)) > 1
    q, stop = _CTX.Queue(), _CTX.Event()
    with contextlib.ExitStack() as stack:
        for core in cores:
            stack.enter_context(spawned(_member, rt.name, core, rt.cpu_of(core) if spread else None, group, q, stop, count, grace=15.0))
        stack.callback(stop.set)
        _wait_reports(q, "joined", len(cores), 120 + 2 * len(cores))
        yield q


def _check(rt: mh.Runtime, root: int, members: Sequence[int]) -> list[int]:
    listed = list(members)
    if not listed or len(set(listed)) != len(listed) or root in listed:
        raise GroupError(f"a shoot-down needs distinct member cores other than the root {root}, got {listed}")
    for core in [root, *listed]:
        if core not in rt.cores:
            raise GroupError(f"core {core} is not in runtime {rt.name!r} (its cores: {rt.cores})")
    return listed


def measure_group_shootdown(
    rt: mh.Runtime,
    root: int,
    members: Sequence[int],
    mode: str,
    rounds: int = 200,
    warmup: int = 20,
    group: str | None = None,
    aggregate: bool = True,
) -> Rounds:
    """Time ``rounds`` shoot-downs from ``root`` to one member process on each of ``members`` (see the module text).

    With ``aggregate=False`` a tree mode's acks go straight back to the root instead of being merged up
    the tree by the monitors (the baseline of the aggregation).

    Raises:
        GroupError: an unknown mode, no member, a core listed twice or lacking.
    """
    if mode not in MODES:
        raise GroupError(f"unknown shoot-down mode {mode!r}; valid: {', '.join(MODES)}")
    listed = _check(rt, root, members)
    name = group or f"sd-{mode}-{len(listed)}-{os.getpid()}-{time.monotonic_ns()}"
    groups.group(rt, name, order="fifo", tree=tree_of_mode(mode), window=64)
    starts: list[int] = []
    times: list[int] = []
    old = os.sched_getaffinity(0)
    with contextlib.ExitStack() as stack:
        d = stack.enter_context(rt.dispatcher(root))
        g = d.join(name, timeout=60)
        stack.enter_context(_group_members(rt, name, listed))
        deadline = time.monotonic() + 60
        while len(g.view.nodes) < len(listed) + 1:
            if time.monotonic() > deadline:
                raise mh.Timeout(f"the shoot-down group has {len(g.view.nodes)} members, not {len(listed) + 1}")
            g._ep.pump(0.01)
        if len(old) > 1:
            os.sched_setaffinity(0, {rt.cpu_of(root)})
            stack.callback(os.sched_setaffinity, 0, old)
        unicast = mode == "unicast"
        clock = time.monotonic_ns
        for i in range(warmup + rounds):
            t0 = clock()
            part = g.convergecast(b"", timeout=30, unicast=unicast, aggregate=aggregate)
            t1 = clock()
            while g.try_recv() is not None:
                pass  # its own request, delivered to itself
            if part.missing:
                raise mh.MultihopError(f"shoot-down round {i}: members {sorted(part.missing)} missing")
            if i >= warmup:
                starts.append(t0)
                times.append(t1 - t0)
        with contextlib.suppress(mh.MultihopError):
            d.leave(name, timeout=10)
    return Rounds(mode, len(listed), tuple(starts), tuple(times))


def _pipe_member(conn: Any, cpu: int | None) -> None:
    _pin(cpu)
    while True:
        m = conn.recv_bytes()
        if m == b"q":
            return
        conn.send_bytes(b"")


def measure_pipe_shootdown(rt: mh.Runtime, root: int, members: Sequence[int], rounds: int = 200, warmup: int = 20) -> Rounds:
    """The same rounds over ``multiprocessing`` Pipes, member processes pinned like the group's."""
    listed = _check(rt, root, members)
    spread = len(os.sched_getaffinity(0)) > 1
    starts: list[int] = []
    times: list[int] = []
    old = os.sched_getaffinity(0)
    with contextlib.ExitStack() as stack:
        conns = []
        for core in listed:
            a, b = _CTX.Pipe()
            stack.enter_context(spawned(_pipe_member, b, rt.cpu_of(core) if spread else None, grace=10.0))
            stack.callback(a.send_bytes, b"q")
            conns.append(a)
        if spread:
            os.sched_setaffinity(0, {rt.cpu_of(root)})
            stack.callback(os.sched_setaffinity, 0, old)
        clock = time.monotonic_ns
        for i in range(warmup + rounds):
            t0 = clock()
            for c in conns:
                c.send_bytes(b"x")
            for c in conns:
                c.recv_bytes()
            t1 = clock()
            if i >= warmup:
                starts.append(t0)
                times.append(t1 - t0)
    return Rounds("pipe", len(listed), tuple(starts), tuple(times))


def measure_throughput(
    rt: mh.Runtime, root: int, members: Sequence[int], order: str, n: int = 20_000, size: int = 64, window: int = 64
) -> tuple[int, int]:
    """Broadcast ``n`` messages of ``size`` bytes from ``root`` to a group of ``order``; returns (deliveries, ns).

    The time runs from the first send to the last member's last delivery.
    """
    listed = _check(rt, root, members)
    name = f"tp-{order}-{os.getpid()}-{time.monotonic_ns()}"
    groups.group(rt, name, order=order, tree="flat", window=window)
    data = b"x" * size
    with contextlib.ExitStack() as stack:
        d = stack.enter_context(rt.dispatcher(root))
        g = d.join(name, timeout=60)
        q = stack.enter_context(_group_members(rt, name, listed, count=n))
        deadline = time.monotonic() + 60
        while len(g.view.nodes) < len(listed) + 1:
            if time.monotonic() > deadline:
                raise mh.Timeout("the throughput group did not form")
            g._ep.pump(0.01)
        t0 = time.monotonic_ns()
        for _ in range(n):
            g.send(g.broadcast, data, timeout=60)
            while g.try_recv() is not None:
                pass
        ends = _wait_reports(q, "all", len(listed), 120)
        while g.try_recv() is not None:
            pass
        with contextlib.suppress(mh.MultihopError):
            d.leave(name, timeout=10)
    return n * len(listed), max(e[3] for e in ends) - t0
