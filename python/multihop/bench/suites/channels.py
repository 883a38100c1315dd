"""Suite ``channels``: UMP versus multi-hop, round trip and one-way throughput, sizes 0 B to 64 KiB, and per process layout.

Per layout (:mod:`multihop.bench.layouts`: who started the runtime and the
ends), 64-byte multi-hop round trips and window-16 streams (round trips only
with ``--quick``) next to Pipe's between two processes started the same way,
in the same run: cases with
transport ``multihop@LAYOUT`` and ``pipe@LAYOUT`` (a runtime of the layout's
own is started for each; with ``--attach``, the layouts are left out).
"""

from __future__ import annotations

import time

import multihop as mh
from multihop.bench import layouts, peers
from multihop.bench.suites.common import SuiteContext, record_rtt, record_samples, record_totals
from multihop.bench.suites.options import BenchOptions

NAME = "channels"


def _sizes(quick: bool) -> tuple[int, ...]:
    return (0, 64, 4096, 65536) if quick else (0, 64, 1024, 4096, 16384, 65536)


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Nothing to check: the suite runs on the shared runtime (``--cores``/``--routing``, or the attached one)."""


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return 2 * len(_sizes(ctx.quick)) + (0 if ctx.attached is not None else len(layouts.LAYOUTS))


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
            params = {
                "suite": NAME,
                "transport": transport,
                "routing": rt.routing,
                "size": size,
                "src_core": src,
                "dst_core": dst,
                "window": 16 if transport == "multihop" else -1,
            }

            def rtt(ch: mh.Channel) -> float:
                params["hops"] = int(ch.stats()["hops"])
                record_rtt(ctx, params, ch.send, ch.recv, n_rtt // scale, size)
                return 0.0

            bench.channel_case("rtt", n_rtt // scale, size, rtt)
            t0 = time.monotonic_ns()
            rate = bench.stream_ours(n_one // scale, size)
            duration = int(n_one // scale / rate * 1e9) if rate > 0 else time.monotonic_ns() - t0
            record_totals(ctx, params, "oneway", n_one // scale, duration)
    if ctx.attached is None:
        _per_layout(ctx, rt.routing)


def _per_layout(ctx: SuiteContext, routing: str) -> None:
    """64 B multi-hop round trip and window-16 stream per layout, each next to Pipe's (ends started alike)."""
    n_rtt, n_one = 1000 if ctx.quick else 10_000, 100_000
    for lay in layouts.LAYOUTS:
        ctx.progress.step(f"layout {lay.name}")
        with layouts.LayoutRun(lay, routing=routing) as run:
            src, dst = run.cores
            for transport in ("multihop", "pipe"):
                params = {
                    "suite": NAME,
                    "transport": f"{transport}@{lay.name}",
                    "routing": run.rt.routing,
                    "size": 64,
                    "src_core": src,
                    "dst_core": dst,
                    "window": 16 if transport == "multihop" else -1,
                    "hops": 2 if transport == "multihop" else 0,
                    "layout": lay.name,
                }
                got = run.case_result(transport, "rtt", n_rtt)
                record_samples(ctx, params, got["send_ns"], got["recv_ns"])
                if not ctx.quick:  # each case starts two processes: --quick keeps to round trips
                    rate = run.case(transport, "stream", n_one)
                    record_totals(ctx, params, "oneway", n_one, int(n_one / rate * 1e9))
