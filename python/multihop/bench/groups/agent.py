"""The per-core process of a calibration run: measures message costs to other cores' agents.

One agent runs on each core being calibrated (a spawned process pinned to
that core's CPU, with a dispatcher attached to the core).  It exports
``<prefix>-<core>`` and does one thing at a time, in its main thread, on
blocking calls, the way a live member does (a second thread in the process
measurably slowed every call, so there is none).  The calibrator drives it
over a control channel, one pair at a time:

``S<core>``  serve the agent of ``core``: take its channel (accepting it the
             first time) and run :func:`~multihop.bench.groups.probe.ack_loop` on it
             until it says ``E``; then ``s`` back;
``M<core>``  measure towards ``core`` (whose agent is serving), over a channel of
             the calibration's transport (UMP, or multi-hop through the monitors): one-member
             shoot-downs (:func:`~multihop.bench.groups.probe.time_rounds`) and a
             burst probe; answer ``R`` + three float64 (send ns, recv ns,
             round trip ns);
``W<core>``  like ``M``, but the one-way probe
             (:func:`~multihop.bench.groups.probe.one_way_probe`): answer ``R`` + 0, 0 and
             the median ns from a send to the serving agent's receive returning;
``Q``        end.

Every figure is a median over many tries, so a descheduling on a shared
machine moves it little.  The costs include Python's call overhead: the model
predicts what Python dispatchers see, which is what the live shoot-down
(:mod:`multihop.bench.groups.live`) measures.
"""

from __future__ import annotations

import os
import statistics
import struct
from typing import Any

import multihop as mh
from multihop.bench.groups.probe import PAUSE_US, ack_loop, one_way_probe, send_cost_probe, time_rounds

__all__ = ["run_agent", "service_name"]


def service_name(prefix: str, core: int) -> str:
    """The name the agent of ``core`` exports."""
    return f"{prefix}-{core}"


def _measure(ch: mh.Channel, rounds: int, bursts: int, burst: int) -> tuple[float, float, float]:
    """(send ns, recv ns, round trip ns) towards the agent serving the other end of ``ch``."""
    rtt = statistics.median(time_rounds([ch], rounds, min(20, rounds)))
    send, recv = send_cost_probe(ch, bursts, burst)
    ch.send(b"E")
    return send, recv, rtt


def _one_way(ch: mh.Channel, rounds: int) -> float:
    """The one-way probe towards the agent serving the other end of ``ch`` (then ``E``)."""
    ns = one_way_probe(ch, rounds, PAUSE_US)
    ch.send(b"E")
    return ns


def run_agent(
    name: str,
    core: int,
    cpu: int | None,
    prefix: str,
    rounds: int,
    bursts: int,
    burst: int,
    ready: Any,
    transport: str = "ump",
    spin_us: int | None = None,
) -> None:
    """The agent's body (runs in a spawned process until the calibrator says ``Q``).

    ``spin_us`` sets how long this process's receives spin before they park
    (``MULTIHOP_SPIN_US``, read once at its first wait): 0 parks at once, as
    the group endpoints do (the calibration's wake-up probe).
    """
    if spin_us is not None:
        os.environ["MULTIHOP_SPIN_US"] = str(spin_us)
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
                    ack_loop(served[peer])
                    control.send(b"s")
                elif m[:1] in (b"M", b"W"):
                    if peer not in outgoing:
                        # multi-hop: a window that holds a whole burst, so the burst probe never waits for credit
                        window = {"window": max(16, 2 * burst)} if transport == "multihop" else {}
                        outgoing[peer] = d.bind(service_name(prefix, peer), transport=transport, timeout=60, **window)
                        outgoing[peer].send(struct.pack("<I", core))
                    if m[:1] == b"W":
                        control.send(b"R" + struct.pack("<ddd", 0.0, 0.0, _one_way(outgoing[peer], rounds)))
                    else:
                        control.send(b"R" + struct.pack("<ddd", *_measure(outgoing[peer], rounds, bursts, burst)))
        finally:
            for ch in (*served.values(), *outgoing.values(), control):
                ch.close()
