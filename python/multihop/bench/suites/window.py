"""Suite ``window``: multi-hop one-way throughput against the credit window."""

from __future__ import annotations

import multihop as mh
from multihop import rts
from multihop.bench import peers
from multihop.bench.suites.common import SuiteContext, record_totals
from multihop.bench.suites.options import BenchOptions

NAME = "window"
WINDOWS = (1, 4, 16, 64)


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Nothing to check: the suite runs on the shared runtime (``--cores``/``--routing``, or the attached one)."""


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return len(WINDOWS)


def run(ctx: SuiteContext) -> None:
    """64-byte one-way streams between the first two cores, one per window size."""
    rt = ctx.runtime()
    n_one = 4000 if ctx.quick else 50_000
    src, dst = rt.cores[0], rt.cores[1 % len(rt.cores)]
    hops = len(rts.path(rts.routing_table(rt.topology, rt.routing, rt.cores), src, dst))
    for w in WINDOWS:
        ctx.progress.step(f"window {w}")
        bench = peers.PeerBench(rt, src, dst, transport="multihop", window=w)
        n = n_one // 4 if w == 1 else n_one
        rate = bench.stream_ours(n, 64)
        params = {"suite": NAME, "transport": "multihop", "routing": rt.routing, "size": 64, "src_core": src,
                  "dst_core": dst, "window": w, "hops": hops}
        record_totals(ctx, params, "oneway", n, int(n / rate * 1e9))
