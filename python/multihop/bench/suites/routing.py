"""Suite ``routing``: direct, ring and fat-tree on the same topology, bind time and round trip per core pair.

The topology is virtual (two sockets; monitors pinned modulo the real CPUs):
4 cores in 2 sockets with ``--quick``, 8 in 2 otherwise; ``--cores`` replaces
the cores (split in two sockets, first half and second half) and
``--routing`` restricts the run to that one mode.  With ``--attach`` the
attached runtime is measured as it is (its cores, topology and mode).  For
each mode a runtime is started, an echo server serves every core, and for
every ordered core pair (src, dst), including src = dst, this process binds
from src to the echo service on dst several times (each bind timed, recorded
as a case with ``size = -1``: no payload) and then runs traced 64-byte round
trips over the last channel.  The analysis turns the cases into heat maps per
mode.  It needs at least two cores.  Per mode, every pair is measured
``--repeats`` times, the repeat loop outside the pair loops.
"""

from __future__ import annotations

import os
import time

import multihop as mh
from multihop.bench.suites.common import SuiteContext, need_cores, record_rtt, record_samples, sampling
from multihop.bench.suites.echo_server import echo_server, service_name
from multihop.bench.suites.options import BenchOptions
from multihop.defaults import DEFAULT_WINDOW
from multihop.rts import MODES

NAME = "routing"


def two_sockets(cores: list[int]) -> list[list[int]]:
    """`cores` split into two sockets: the first half and the second half (one socket if one core)."""
    half = len(cores) // 2
    return [cores[:half], cores[half:]] if half else [list(cores)]


def _cores(options: BenchOptions) -> list[int]:
    if options.cores is not None:
        return list(options.cores)
    return list(range(4 if options.quick else 8))


def plan(ctx: SuiteContext) -> tuple[list[int], mh.Topology, tuple[str, ...]]:
    """The cores, topology and routing modes the suite runs (shared with ``resources``)."""
    if ctx.attached is not None:
        return list(ctx.attached.cores), ctx.attached.topology, (ctx.attached.routing,)
    cores = _cores(ctx.options)
    modes = (ctx.options.routing,) if ctx.options.routing else MODES
    return cores, mh.Topology(sockets=two_sockets(cores)), modes


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Two cores at least: a core-pair map of one core says nothing about routing."""
    cores = attached.cores if attached is not None else _cores(options)
    need_cores(NAME, "core pairs to route between", cores, attached)


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    cores, _, modes = plan(ctx)
    return ctx.repeats * len(modes) * len(cores) ** 2


def run(ctx: SuiteContext) -> None:
    """Every mode, every core pair: binds and round trips."""
    cores, topo, modes = plan(ctx)
    n_bind, n_rtt = (3, 800) if ctx.quick else (10, 4000)
    two_cpus = len(os.sched_getaffinity(0)) > 1
    old = os.sched_getaffinity(0)
    for mode in modes:
        with ctx.own_runtime(NAME, cores, mode, topo) as rt, echo_server(rt):
            ds = {c: rt.dispatcher(c) for c in cores}
            try:
                for rep in range(ctx.repeats):
                    for src in cores:
                        if two_cpus:
                            os.sched_setaffinity(0, {rt.cpu_of(src)})
                        for dst in cores:
                            ctx.progress.step(f"{mode}: core {src} -> core {dst}, repeat {rep + 1}/{ctx.repeats}")
                            _pair(ctx, rt, ds[src], mode, src, dst, n_bind, n_rtt, rep)
            finally:
                os.sched_setaffinity(0, old)
                for d in ds.values():
                    d.detach()


def _pair(ctx: SuiteContext, rt: mh.Runtime, d: mh.Dispatcher, mode: str, src: int, dst: int, n_bind: int, n_rtt: int, rep: int) -> None:
    params = {"suite": NAME, "transport": "multihop", "routing": mode, "src_core": src, "dst_core": dst, "window": DEFAULT_WINDOW}
    t_send: list[int] = []
    t_recv: list[int] = []
    ch = None
    with sampling(rt) as s:
        for _i in range(n_bind):
            if ch is not None:
                ch.close()
            t0 = time.monotonic_ns()
            ch = d.bind(service_name(dst), transport="multihop", window=DEFAULT_WINDOW, timeout=30)
            t_recv.append(time.monotonic_ns())
            t_send.append(t0)
    assert ch is not None
    with ch:
        hops = int(ch.stats()["hops"])
        record_samples(ctx, dict(params, size=-1, hops=hops, op="bind"), t_send, t_recv, repeat=rep, load=s.columns())
        record_rtt(ctx, dict(params, size=64, hops=hops, op="rtt"), ch.send, ch.recv, n_rtt, 64, repeat=rep, runtime=rt)
