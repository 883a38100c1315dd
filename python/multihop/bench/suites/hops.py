"""Suite ``hops``: multi-hop latency and throughput against the number of monitors on the path.

Default: ring routing on virtual cores 0-3 (0-7 without ``--quick``;
monitors pinned modulo the real CPUs), from core 0 to cores 0, 1 and 3 (and
7): 1, 2, 4 (and 8) monitors on the path.  ``--cores`` and ``--routing``
replace the cores and the routing mode, and ``--attach`` runs on that
runtime as it is: the suite then reads the routing table and measures, for
each distinct path length (up to 3, or 4 without ``--quick``, preferring 1,
2, 4 and 8 monitors), the first core pair in core order with that length.
It needs at least two cores (two distinct path lengths).  Every pair is
measured ``--repeats`` times, the repeat loop outermost.
"""

from __future__ import annotations

import multihop as mh
from multihop import rts
from multihop.bench import peers
from multihop.bench.suites.common import SuiteContext, channel_rtt, channel_stream, need_cores
from multihop.bench.suites.options import BenchOptions
from multihop.defaults import DEFAULT_WINDOW

NAME = "hops"
_ROUTING = "ring"


def _cores(options: BenchOptions) -> list[int]:
    if options.cores is not None:
        return list(options.cores)
    return list(range(4 if options.quick else 8))


def _machine_topology(cores: list[int]) -> mh.Topology:
    """The topology a runtime started on `cores` without one gets (the machine's, or flat for virtual cores)."""
    machine = mh.Topology.from_sysfs()
    return machine.restrict(cores) if all(c in machine for c in cores) else mh.Topology.flat(cores)


def _plan(ctx: SuiteContext) -> tuple[list[int], str, mh.Topology]:
    """The cores, routing mode and topology the suite runs on."""
    if ctx.attached is not None:
        return list(ctx.attached.cores), ctx.attached.routing, ctx.attached.topology
    cores = _cores(ctx.options)
    return cores, ctx.options.routing or _ROUTING, _machine_topology(cores)


def pairs(cores: list[int], routing: str, topology: mh.Topology, quick: bool) -> list[tuple[int, int, int]]:
    """The (src, dst, monitors on the path) the suite measures: one pair per chosen path length."""
    table = rts.routing_table(topology, routing, cores)
    first: dict[int, tuple[int, int]] = {}
    for src in cores:
        for dst in cores:
            first.setdefault(len(rts.path(table, src, dst)), (src, dst))
    preferred = (1, 2, 4) if quick else (1, 2, 4, 8)
    chosen = [n for n in preferred if n in first]
    chosen += [n for n in sorted(first) if n not in chosen][: max(0, len(preferred) - len(chosen))]
    return [(*first[n], n) for n in sorted(chosen)]


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Two cores at least: a line through latency against hops needs two path lengths."""
    cores = attached.cores if attached is not None else _cores(options)
    need_cores(NAME, "two distinct path lengths", cores, attached)


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return ctx.repeats * len(pairs(*_plan(ctx), ctx.quick))


def run(ctx: SuiteContext) -> None:
    """Round trip and one-way throughput over each chosen core pair, each ``ctx.repeats`` times."""
    cores, routing, topology = _plan(ctx)
    n_rtt, n_one = (1600, 2000) if ctx.quick else (8000, 20_000)
    with ctx.own_runtime(NAME, cores, routing, topology) as rt:
        for rep in range(ctx.repeats):
            for src, dst, monitors in pairs(cores, routing, topology, ctx.quick):
                ctx.progress.step(f"core {src} -> core {dst} ({monitors} monitor(s) on the path), repeat {rep + 1}/{ctx.repeats}")
                bench = peers.PeerBench(rt, src, dst, transport="multihop", window=DEFAULT_WINDOW)
                params = {
                    "suite": NAME,
                    "transport": "multihop",
                    "routing": routing,
                    "size": 64,
                    "src_core": src,
                    "dst_core": dst,
                    "window": DEFAULT_WINDOW,
                }
                channel_rtt(ctx, bench, params, n_rtt, 64, rep)  # sets params["hops"]
                channel_stream(ctx, bench, params, n_one, 64, rep)
