"""Suite ``channels``: UMP versus multi-hop, round trip and one-way throughput, sizes 0 B to 64 KiB."""

from __future__ import annotations

import time

import multihop as mh
from multihop.bench import peers
from multihop.bench.suites.common import SuiteContext, record_rtt, record_totals
from multihop.bench.suites.options import BenchOptions

NAME = "channels"


def _sizes(quick: bool) -> tuple[int, ...]:
    return (0, 64, 4096, 65536) if quick else (0, 64, 1024, 4096, 16384, 65536)


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Nothing to check: the suite runs on the shared runtime (``--cores``/``--routing``, or the attached one)."""


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return 2 * len(_sizes(ctx.quick))


def run(ctx: SuiteContext) -> None:
    """Both transports between the first two cores of the run, at every size."""
    rt = ctx.runtime()
    n_rtt, n_one = (2000, 3000) if ctx.quick else (20_000, 100_000)
    src, dst = rt.cores[0], rt.cores[1 % len(rt.cores)]
    for transport in ("ump", "multihop"):
        for size in _sizes(ctx.quick):
            ctx.progress.step(f"{transport} {size} B")
            # big messages cost more per message: fewer of them, same order of time
            scale = 1 if size <= 4096 else 4
            bench = peers.PeerBench(rt, src, dst, transport=transport, window=16)
            params = {"suite": NAME, "transport": transport, "routing": rt.routing, "size": size, "src_core": src,
                      "dst_core": dst, "window": 16 if transport == "multihop" else -1}

            def rtt(ch: mh.Channel) -> float:
                params["hops"] = int(ch.stats()["hops"])
                record_rtt(ctx, params, ch.send, ch.recv, n_rtt // scale, size)
                return 0.0

            bench.channel_case("rtt", n_rtt // scale, size, rtt)
            t0 = time.monotonic_ns()
            rate = bench.stream_ours(n_one // scale, size)
            duration = int(n_one // scale / rate * 1e9) if rate > 0 else time.monotonic_ns() - t0
            record_totals(ctx, params, "oneway", n_one // scale, duration)
