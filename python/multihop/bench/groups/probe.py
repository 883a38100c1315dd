"""The loops a calibration and a live shoot-down both run, so the model is fitted on the code it predicts.

A round trip on this machine is not one number: the spinning receiver looks
at the clock and yields every 64 polls, so whether a reply lands while it
polls or while it is in ``sched_yield`` depends on how much Python work each
side does between calls, and a loop that does a little more can settle at
twice the round trip.  So the calibration's round trips are shoot-downs of one
member, timed by :func:`time_rounds` against :func:`ack_loop`, exactly the
code :mod:`multihop.bench.groups.live` runs with many members.

Messages a member understands (first byte): ``H`` + u32 n (a receive-cost
probe: answer ``h``, wait :data:`HOLD_S`, receive n messages one call at a
time, answer ``r`` + float64 median ns per receive), ``T`` + u32 n (a
one-way probe: answer ``t``, then take n messages, each an i64 send time
(CLOCK_MONOTONIC ns) the peer stamped just before sending it after a pause,
acknowledge each with ``a``, and answer ``r`` + float64 median ns from stamp
to the return of the receive), ``E`` or ``q`` (stop, returned to the
caller); anything else is acknowledged with ``a``.
"""

from __future__ import annotations

import statistics
import struct
import time
from collections.abc import Sequence

import multihop as mh

__all__ = ["ack_loop", "time_rounds", "send_cost_probe", "one_way_probe", "HOLD_S", "PAUSE_US"]

PAUSE_US = 300
"""How long :func:`one_way_probe` pauses before each message: longer than any receiver polls with the
GIL held, so a receiver that parks at once is parked when the message comes."""

HOLD_S = 0.003
"""How long a member waits after ``h`` before receiving a burst (the peer writes it meanwhile)."""


def ack_loop(ch: mh.Channel, timeout: float = 120.0) -> bytes:
    """Acknowledge every message on ``ch`` until ``E`` or ``q``, which is returned."""
    while True:
        m = ch.recv(timeout=timeout)
        first = m[:1]
        if first == b"x":
            ch.send(b"a")
        elif first == b"H":
            n = struct.unpack("<I", m[1:5])[0]
            ch.send(b"h")
            time.sleep(HOLD_S)
            times = []
            for _ in range(n):
                t0 = time.perf_counter_ns()
                ch.recv(timeout=30)
                times.append(time.perf_counter_ns() - t0)
            ch.send(b"r" + struct.pack("<d", statistics.median(times)))
        elif first == b"T":
            n = struct.unpack("<I", m[1:5])[0]
            ch.send(b"t")
            ways = []
            for _ in range(n):
                stamp = ch.recv(timeout=30)
                ways.append(time.monotonic_ns() - struct.unpack("<q", stamp[:8])[0])
                ch.send(b"a")
            ch.send(b"r" + struct.pack("<d", statistics.median(ways)))
        elif first in (b"E", b"q"):
            return m
        else:
            ch.send(b"a")


def time_rounds(chans: Sequence[mh.Channel], rounds: int, warmup: int) -> list[int]:
    """``warmup`` + ``rounds`` shoot-downs over ``chans`` (send on each, then one ack from each); ns of each timed one."""
    times: list[int] = []
    for i in range(warmup + rounds):
        t0 = time.perf_counter_ns()
        for ch in chans:
            ch.send(b"x")
        for ch in chans:
            ch.recv(timeout=60)
        if i >= warmup:
            times.append(time.perf_counter_ns() - t0)
    return times


def send_cost_probe(ch: mh.Channel, bursts: int, burst: int) -> tuple[float, float]:
    """(send ns, the peer's recv ns) per message: medians over ``bursts`` bursts of ``burst`` sends into a ring with room."""
    sends, recvs = [], []
    msg = b"S" * 8
    for _ in range(bursts):
        ch.send(b"H" + struct.pack("<I", burst))
        if ch.recv(timeout=30) != b"h":
            raise mh.ProtocolError("the calibration peer did not hold for the burst")
        t0 = time.perf_counter_ns()
        for _ in range(burst):
            ch.send(msg)
        sends.append((time.perf_counter_ns() - t0) / burst)
        recvs.append(struct.unpack("<d", ch.recv(timeout=30)[1:9])[0])
    return statistics.median(sends), statistics.median(recvs)


def one_way_probe(ch: mh.Channel, n: int, pause_us: int = PAUSE_US) -> float:
    """Median ns from send to the peer's receive returning, for ``n`` messages each sent ``pause_us`` after the
    peer acknowledged the one before (the peer runs :func:`ack_loop`).  With a peer that parks at once this
    includes its wake-up; with one that spins longer than the pause it does not."""
    ch.send(b"T" + struct.pack("<I", n))
    if ch.recv(timeout=30) != b"t":
        raise mh.ProtocolError("the calibration peer did not start the one-way probe")
    for _ in range(n):
        until = time.perf_counter_ns() + pause_us * 1000
        while time.perf_counter_ns() < until:
            pass  # a busy pause: this side stays awake, only the peer waits
        ch.send(struct.pack("<q", time.monotonic_ns()))
        if ch.recv(timeout=30) != b"a":
            raise mh.ProtocolError("the calibration peer did not acknowledge a one-way message")
    return float(struct.unpack("<d", ch.recv(timeout=30)[1:9])[0])
