"""Suite ``hops``: multi-hop latency and throughput against the number of monitors on the path.

Ring routing on virtual cores (monitors pinned modulo the real CPUs): from
core 0 to core d the path visits d + 1 monitors.
"""

from __future__ import annotations

import os

import multihop as mh
from multihop.bench import peers
from multihop.bench.suites.common import SuiteContext, record_rtt, record_totals

NAME = "hops"


def _targets(quick: bool) -> list[int]:
    return [0, 1, 3] if quick else [0, 1, 3, 7]  # 1, 2, 4 (, 8) monitors from core 0


def steps(quick: bool) -> int:
    """Steps this suite reports."""
    return len(_targets(quick))


def run(ctx: SuiteContext) -> None:
    """Round trip and one-way throughput from core 0 to cores 0, 1, 3 (, 7) in ring mode."""
    ncores = 4 if ctx.quick else 8
    n_rtt, n_one = (1600, 2000) if ctx.quick else (8000, 20_000)
    with mh.Runtime.start(f"bench-hops-{os.getpid()}", cores=list(range(ncores)), routing="ring") as rt:
        for dst in _targets(ctx.quick):
            ctx.progress.step(f"core 0 -> core {dst}")
            bench = peers.PeerBench(rt, 0, dst, transport="multihop", window=16)
            params = {"suite": NAME, "transport": "multihop", "routing": "ring", "size": 64, "src_core": 0,
                      "dst_core": dst, "window": 16}

            def rtt(ch: mh.Channel) -> float:
                params["hops"] = int(ch.stats()["hops"])
                record_rtt(ctx, params, ch.send, ch.recv, n_rtt, 64)
                return 0.0

            bench.channel_case("rtt", n_rtt, 64, rtt)
            rate = bench.stream_ours(n_one, 64)
            record_totals(ctx, params, "oneway", n_one, int(n_one / rate * 1e9))
