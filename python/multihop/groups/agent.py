"""The per-core process of a calibration run: measures message costs to other cores' agents.

One agent runs on each core being calibrated (a spawned process pinned to
that core's CPU, with a dispatcher attached to the core).  It exports
``<prefix>-<core>`` and does one thing at a time, in its main thread, on
blocking calls, the way a live member does (a second thread in the process
measurably slowed every call, so there is none).  The calibrator drives it
over a control channel, one pair at a time:

``S<core>``  serve the agent of ``core``: take its channel (accepting it the
             first time) and answer it until it says ``E``; then ``s`` back;
             while serving, ``P`` is echoed (round trips) and ``H<n>`` is
             answered ``h``, then, after a hold long enough for the peer to
             write n messages, the n messages are received one call at a time
             and ``r`` + float64 (median ns per receive) goes back;
``M<core>``  measure towards ``core`` (whose agent is serving): answer ``R`` +
             three float64 (send ns, recv ns, round trip ns);
``Q``        end.

Every figure is a median over many tries, so a descheduling on a shared
machine moves it little.  The costs include Python's call overhead: the model
predicts what Python dispatchers see, which is what the live shoot-down
(:mod:`multihop.groups.live`) measures.
"""

from __future__ import annotations

import os
import statistics
import struct
import time
from typing import Any

import multihop as mh

__all__ = ["run_agent", "service_name", "HOLD_S"]

HOLD_S = 0.003
"""How long an agent waits after ``h`` before receiving a burst (the peer writes it meanwhile)."""


def service_name(prefix: str, core: int) -> str:
    """The name the agent of ``core`` exports."""
    return f"{prefix}-{core}"


def _serve(ch: mh.Channel) -> None:
    """Answer one peer's measurements until it says ``E``."""
    while True:
        m = ch.recv(timeout=120)
        if m[:1] == b"P":
            ch.send(m)
        elif m[:1] == b"H":
            n = struct.unpack("<I", m[1:5])[0]
            ch.send(b"h")
            time.sleep(HOLD_S)
            times = []
            for _ in range(n):
                t0 = time.perf_counter_ns()
                ch.recv(timeout=30)
                times.append(time.perf_counter_ns() - t0)
            ch.send(b"r" + struct.pack("<d", statistics.median(times)))
        elif m[:1] == b"E":
            return


def _measure(ch: mh.Channel, rounds: int, bursts: int, burst: int) -> tuple[float, float, float]:
    """(send ns, recv ns, round trip ns) towards the agent serving the other end of ``ch``."""
    for _ in range(min(20, rounds)):  # warm the rings and the caches
        ch.send(b"P")
        ch.recv(timeout=30)
    rtts = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        ch.send(b"P")
        ch.recv(timeout=30)
        rtts.append(time.perf_counter_ns() - t0)
    sends, recvs = [], []
    msg = b"S" * 8
    for _ in range(bursts):
        ch.send(b"H" + struct.pack("<I", burst))
        if ch.recv(timeout=30) != b"h":
            raise mh.ProtocolError("calibration peer did not hold")
        t0 = time.perf_counter_ns()
        for _ in range(burst):
            ch.send(msg)
        sends.append((time.perf_counter_ns() - t0) / burst)
        recvs.append(struct.unpack("<d", ch.recv(timeout=30)[1:9])[0])
    ch.send(b"E")
    return statistics.median(sends), statistics.median(recvs), statistics.median(rtts)


def run_agent(name: str, core: int, cpu: int | None, prefix: str, rounds: int, bursts: int, burst: int,
              ready: Any) -> None:
    """The agent's body (runs in a spawned process until the calibrator says ``Q``)."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(service_name(prefix, core))
        ready.set()
        control = svc.accept(timeout=120)
        served: dict[int, mh.Channel] = {}  # peers bound to this agent, by their core
        outgoing: dict[int, mh.Channel] = {}  # this agent's channels to peers
        try:
            while True:
                m = control.recv(timeout=600)
                if m[:1] == b"Q":
                    return
                peer = struct.unpack("<I", m[1:5])[0]
                if m[:1] == b"S":
                    if peer not in served:
                        ch = svc.accept(timeout=60)
                        served[struct.unpack("<I", ch.recv(timeout=30))[0]] = ch
                    _serve(served[peer])
                    control.send(b"s")
                elif m[:1] == b"M":
                    if peer not in outgoing:
                        outgoing[peer] = d.bind(service_name(prefix, peer), transport="ump", timeout=60)
                        outgoing[peer].send(struct.pack("<I", core))
                    control.send(b"R" + struct.pack("<ddd", *_measure(outgoing[peer], rounds, bursts, burst)))
        finally:
            for ch in (*served.values(), *outgoing.values(), control):
                ch.close()
