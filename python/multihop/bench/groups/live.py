"""A shoot-down measured on a live runtime with today's channels (flat unicast over UMP).

The loops are :mod:`multihop.bench.groups.probe`'s, the ones the calibration times.

The root (this process, attached to ``root`` and pinned to its CPU) has one
UMP channel to each member process (spawned, one per member core, pinned to
that core's CPU).  One round: the root sends a message on every channel, in
the tree's order, then receives one acknowledgement from each; every member
receives and acknowledges at once.  The figure is the median round over
``rounds`` (after a warm-up), and is what the machine model predicts with
:func:`~multihop.groups.simulate.simulate` on a flat tree with direct acks:
the two should agree, which is how a calibrated model is validated.

Phase 2 replaces the unicast loop by the monitors' fan-out; this module is
the baseline it will be measured against.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import multihop as mh
from multihop.bench.groups.probe import ack_loop, time_rounds
from multihop.bench.peers import spawned
from multihop.groups.errors import GroupError

__all__ = ["LiveShootdown", "measure_shootdown"]


@dataclass(frozen=True)
class LiveShootdown:
    """A measured shoot-down: the median round and the 10th and 90th percentiles, in ns."""

    root: int
    members: tuple[int, ...]
    median: float
    p10: float
    p90: float
    rounds: int


def _member(name: str, core: int, cpu: int | None, service: str, ready: Any) -> None:
    """A member: bind to the root, then acknowledge every message until ``q``."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        ch = d.bind(service, transport="ump", timeout=30)
        ready.set()
        try:
            ack_loop(ch)
        except mh.MultihopError:
            pass  # the root went away
        ch.close()


def measure_shootdown(rt: mh.Runtime, root: int, members: Sequence[int], rounds: int = 300, warmup: int = 30) -> LiveShootdown:
    """Measure ``rounds`` flat shoot-downs from ``root`` to one process on each of ``members``.

    Raises:
        GroupError: no member, a core listed twice, or a core the runtime lacks.
    """
    listed = list(members)
    if not listed or len(set(listed)) != len(listed):
        raise GroupError(f"a shoot-down needs distinct member cores, got {listed}")
    for core in [root, *listed]:
        if core not in rt.cores:
            raise GroupError(f"core {core} is not in runtime {rt.name!r} (its cores: {rt.cores})")
    spread = len(os.sched_getaffinity(0)) > 1
    service = f"mh-shootdown-{os.getpid()}-{time.monotonic_ns()}"
    ctx = mp.get_context("spawn")
    old = os.sched_getaffinity(0)
    times: list[int] = []
    with contextlib.ExitStack() as stack:
        d = stack.enter_context(rt.dispatcher(root))
        svc = d.export(service)
        readies = []
        for core in listed:
            ready = ctx.Event()
            stack.enter_context(spawned(_member, rt.name, core, rt.cpu_of(core) if spread else None, service, ready, grace=10.0))
            readies.append(ready)
        chans = {}
        for _ in listed:
            ch = svc.accept(timeout=60)
            chans[ch.peer_pid] = ch
        for core, ready in zip(listed, readies, strict=True):
            if not ready.wait(60):
                raise mh.MonitorError(f"the shoot-down member on core {core} did not start within 60 s")
        order = list(chans.values())
        if spread:
            os.sched_setaffinity(0, {rt.cpu_of(root)})
            stack.callback(os.sched_setaffinity, 0, old)
        try:
            times = time_rounds(order, rounds, warmup)
        finally:
            for ch in order:
                with contextlib.suppress(mh.MultihopError):
                    ch.send(b"q")
                ch.close()
    q = statistics.quantiles(times, n=10)
    return LiveShootdown(root, tuple(listed), statistics.median(times), q[0], q[-1], rounds)
