"""Suite ``routing``: direct, ring and fat-tree on the same topology, bind time and round trip per core pair.

The topology is virtual (two sockets; monitors pinned modulo the real CPUs):
4 cores in 2 sockets with ``--quick``, 8 in 2 otherwise.  For each mode a
runtime is started, an echo server serves every core, and for every ordered
core pair (src, dst), including src = dst, this process binds from src to the
echo service on dst several times (each bind timed, recorded as a case with
``size = -1``: no payload) and then runs traced 64-byte round trips over the
last channel.  The analysis turns the cases into heat maps per mode.
"""

from __future__ import annotations

import os
import time

import multihop as mh
from multihop.bench.suites.common import SuiteContext, record_rtt, record_samples
from multihop.bench.suites.echo_server import echo_server, service_name
from multihop.rts import MODES

NAME = "routing"


def _sockets(quick: bool) -> list[list[int]]:
    return [[0, 1], [2, 3]] if quick else [[0, 1, 2, 3], [4, 5, 6, 7]]


def steps(quick: bool) -> int:
    """Steps this suite reports."""
    n = sum(len(s) for s in _sockets(quick))
    return len(MODES) * n * n


def run(ctx: SuiteContext) -> None:
    """Every mode, every core pair: binds and round trips."""
    sockets = _sockets(ctx.quick)
    cores = [c for s in sockets for c in s]
    n_bind, n_rtt = (3, 800) if ctx.quick else (10, 4000)
    two_cpus = len(os.sched_getaffinity(0)) > 1
    old = os.sched_getaffinity(0)
    for mode in MODES:
        topo = mh.Topology(sockets=sockets)
        with mh.Runtime.start(f"bench-routing-{os.getpid()}", cores=cores, routing=mode, topology=topo) as rt, echo_server(rt):
            ds = {c: rt.dispatcher(c) for c in cores}
            try:
                for src in cores:
                    if two_cpus:
                        os.sched_setaffinity(0, {rt.cpu_of(src)})
                    for dst in cores:
                        ctx.progress.step(f"{mode}: core {src} -> core {dst}")
                        _pair(ctx, ds[src], mode, src, dst, n_bind, n_rtt)
            finally:
                os.sched_setaffinity(0, old)
                for d in ds.values():
                    d.detach()


def _pair(ctx: SuiteContext, d: mh.Dispatcher, mode: str, src: int, dst: int, n_bind: int, n_rtt: int) -> None:
    params = {"suite": NAME, "transport": "multihop", "routing": mode, "src_core": src, "dst_core": dst, "window": 16}
    t_send: list[int] = []
    t_recv: list[int] = []
    ch = None
    for i in range(n_bind):
        if ch is not None:
            ch.close()
        t0 = time.monotonic_ns()
        ch = d.bind(service_name(dst), transport="multihop", window=16, timeout=30)
        t_recv.append(time.monotonic_ns())
        t_send.append(t0)
    assert ch is not None
    with ch:
        hops = int(ch.stats()["hops"])
        record_samples(ctx, dict(params, size=-1, hops=hops, op="bind"), t_send, t_recv)
        record_rtt(ctx, dict(params, size=64, hops=hops, op="rtt"), ch.send, ch.recv, n_rtt, 64)
