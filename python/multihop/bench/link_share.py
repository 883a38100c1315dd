"""A flood and a ping-pong sharing one monitor link (issue 16 §2): the scenario of the ``fairness`` suite.

Two channels cross the same link between the monitors of two cores: a
*flood* (a process sending 64-byte messages in batches of 16 as fast as its
credit window lets it, another receiving them) and a *ping-pong* (this
process, timing round trips against an echo server). The ping-pong's round
trip is measured alone, then with the flood running; the ratio says how much
the flood holds it back (goal: at most 2x).

Processes: flood sender and ping-pong client on the first core's CPU, flood
receiver and echo server on the second's, each pinned. The flood's window
defaults to 1024 messages, much more than a monitor link's ring takes
(``LINK_FAIR_SLOTS``, 128 such messages), so the rest waits in the monitor's
fair queue. To compare against an unfair link, start the runtime with
``MULTIHOP_LINK_QUANTUM`` set to a gigabyte in the monitors' environment (each
channel's whole backlog then goes out in one turn, as a first-come queue).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

import multihop as mh
from multihop.bench import peers
from multihop.bench.suites.common import rtt_trace

if TYPE_CHECKING:
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Event

__all__ = ["FLOOD_WINDOW", "UNFAIR_QUANTUM", "Flood", "RttRun", "flooding", "ping_pong"]

FLOOD_WINDOW = 1024
"""The flood's credit window, in messages."""

UNFAIR_QUANTUM = 1 << 30
"""A link quantum that makes deficit round robin serve whole backlogs: the unfair baseline."""

_FLOOD_BATCH = 16


@dataclass
class Flood:
    """A running flood: what it sent, read once it stopped."""

    sent: Synchronized[int]  # written by the flood's sender when it stops
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        """Messages per second the flood sent while it ran."""
        return self.sent.value / self.seconds if self.seconds > 0 else 0.0


@dataclass
class RttRun:
    """One ping-pong run: sampled sequence numbers, send and receive times (ns)."""

    seq: np.ndarray
    send_ns: np.ndarray
    recv_ns: np.ndarray

    @property
    def median_us(self) -> float:
        """Median of the sampled round trips, in microseconds."""
        return float(np.median(self.recv_ns - self.send_ns)) / 1000.0


def _flood_receiver(name: str, core: int, cpu: int | None, service: str, ready: Event) -> None:
    peers._pin(cpu)
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(service)
        ready.set()
        ch = svc.accept(timeout=30)
        for _ in range(1 << 40):  # ends when the sender closes (bounded by the bench's run)
            try:
                ch.recv_batch(4096, timeout=60)
            except (mh.ChannelClosed, mh.Timeout):
                return


def _flood_sender(
    name: str, core: int, cpu: int | None, service: str, window: int, size: int, going: Event, stop: Event, sent: Synchronized[int]
) -> None:
    peers._pin(cpu)
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d, d.bind(service, transport="multihop", window=window, timeout=30) as ch:
        msgs = [b"f" * size] * _FLOOD_BATCH
        n = 0
        going.set()
        while not stop.is_set():
            n += ch.send_batch(msgs, timeout=30)
        sent.value = n


@contextlib.contextmanager
def flooding(rt: mh.Runtime, src: int, dst: int, window: int = FLOOD_WINDOW, size: int = 64) -> Iterator[Flood]:
    """A flood from core `src` to core `dst` for the block (both processes stopped when it ends)."""
    ctx = peers._CTX
    ready, going, stop = ctx.Event(), ctx.Event(), ctx.Event()
    sent = ctx.Value("q", 0)
    service = f"flood-{os.getpid()}-{time.monotonic_ns()}"
    cpu = {c: rt.cpu_of(c) for c in (src, dst)}
    flood = Flood(sent)
    with peers.spawned(_flood_receiver, rt.name, dst, cpu[dst], service, ready, grace=30):
        if not ready.wait(30):
            raise mh.MonitorError("the flood's receiver did not start")
        with peers.spawned(_flood_sender, rt.name, src, cpu[src], service, window, size, going, stop, sent, grace=30):
            if not going.wait(30):
                raise mh.MonitorError("the flood's sender did not start")
            t0 = time.monotonic()
            try:
                yield flood
            finally:
                flood.seconds = time.monotonic() - t0
                stop.set()


def ping_pong(rt: mh.Runtime, src: int, dst: int, n: int, size: int = 64, every: int = 1) -> RttRun:
    """`n` round trips of `size` bytes from core `src` to an echo server on `dst` (one in `every` timed)."""
    bench = peers.PeerBench(rt, src, dst, transport="multihop")
    warm = min(n // 10, 1000)

    def body(ch: mh.Channel) -> RttRun:
        def recv() -> bytes:
            return ch.recv(timeout=60)

        rtt_trace(ch.send, recv, warm, size, max(warm, 1))
        return RttRun(*rtt_trace(ch.send, recv, n, size, every))

    return bench.channel_case("rtt", n + warm, size, body)
