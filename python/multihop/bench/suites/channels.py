"""Suite ``channels``: UMP versus multi-hop, round trip and one-way throughput, sizes 0 B to 64 KiB, and per process layout.

Per layout (:mod:`multihop.bench.layouts`: who started the runtime and the
ends), 64-byte multi-hop round trips and window-16 streams (round trips only
with ``--quick``) next to Pipe's between two processes started the same way,
in the same run: cases with
transport ``multihop@LAYOUT`` and ``pipe@LAYOUT`` (a runtime of the layout's
own is started for each; with ``--attach``, the layouts are left out).

Every case is measured ``--repeats`` times (3 with ``--quick``, 5 otherwise),
the repeat loop outermost (see :mod:`multihop.bench.suites.common`); the
per-layout cases once with ``--quick`` (each starts two processes the
layout's way), else as often as the others.
"""

from __future__ import annotations

import contextlib

import multihop as mh
from multihop.bench import layouts, peers
from multihop.bench.suites.common import SuiteContext, channel_rtt, channel_stream, record_samples, record_totals, sampling
from multihop.bench.suites.options import BenchOptions
from multihop.defaults import DEFAULT_WINDOW

NAME = "channels"


def _sizes(quick: bool) -> tuple[int, ...]:
    return (0, 64, 4096, 65536) if quick else (0, 64, 1024, 4096, 16384, 65536)


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Nothing to check: the suite runs on the shared runtime (``--cores``/``--routing``, or the attached one)."""


def _layout_repeats(ctx: SuiteContext) -> int:
    return 1 if ctx.quick else ctx.repeats


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return ctx.repeats * 2 * len(_sizes(ctx.quick)) + (0 if ctx.attached is not None else _layout_repeats(ctx) * len(layouts.LAYOUTS))


def run(ctx: SuiteContext) -> None:
    """Both transports between the first two cores of the run, at every size, each case ``ctx.repeats`` times."""
    rt = ctx.runtime()
    n_rtt, n_one = (2000, 4000) if ctx.quick else (20_000, 100_000)  # as the peers suite: the same figures
    src, dst = rt.cores[0], rt.cores[1 % len(rt.cores)]
    for rep in range(ctx.repeats):
        for transport in ("ump", "multihop"):
            for size in _sizes(ctx.quick):
                ctx.progress.step(f"{transport} {size} B, repeat {rep + 1}/{ctx.repeats}")
                # big messages cost more per message: fewer of them, same order of time
                scale = 1 if size <= 4096 else 4
                bench = peers.PeerBench(rt, src, dst, transport=transport, window=DEFAULT_WINDOW)
                params = {
                    "suite": NAME,
                    "transport": transport,
                    "routing": rt.routing,
                    "size": size,
                    "src_core": src,
                    "dst_core": dst,
                    "window": DEFAULT_WINDOW if transport == "multihop" else -1,
                }
                channel_rtt(ctx, bench, params, n_rtt // scale, size, rep)  # sets params["hops"]
                channel_stream(ctx, bench, params, n_one // scale, size, rep)
    if ctx.attached is None:
        _per_layout(ctx, rt.routing)


def _per_layout(ctx: SuiteContext, routing: str) -> None:
    """64 B multi-hop round trip and window-16 stream per layout, each next to Pipe's (ends started alike)."""
    n_rtt, n_one = 1000 if ctx.quick else 10_000, 100_000
    reps = _layout_repeats(ctx)
    with contextlib.ExitStack() as stack:  # with repeats, every layout's runtime stays up for them all
        runs = [stack.enter_context(layouts.LayoutRun(lay, routing=routing)) for lay in layouts.LAYOUTS] if reps > 1 else []
        for rep in range(reps):
            for i, lay in enumerate(layouts.LAYOUTS):
                ctx.progress.step(f"layout {lay.name}" + (f", repeat {rep + 1}/{reps}" if reps > 1 else ""))
                if runs:
                    _layout_cases(ctx, runs[i], n_rtt, n_one, rep)
                else:
                    with layouts.LayoutRun(lay, routing=routing) as run:
                        _layout_cases(ctx, run, n_rtt, n_one, rep)


def _layout_cases(ctx: SuiteContext, run: layouts.LayoutRun, n_rtt: int, n_one: int, rep: int) -> None:
    src, dst = run.cores
    lay = run.layout
    for transport in ("multihop", "pipe"):
        params = {
            "suite": NAME,
            "transport": f"{transport}@{lay.name}",
            "routing": run.rt.routing,
            "size": 64,
            "src_core": src,
            "dst_core": dst,
            "window": DEFAULT_WINDOW if transport == "multihop" else -1,
            "hops": 2 if transport == "multihop" else 0,
            "layout": lay.name,
        }
        ours = run.rt if transport == "multihop" else None
        with sampling(ours, extra_cpu=lambda: run.daemon_cpu_s) as s:
            got = run.case_result(transport, "rtt", n_rtt)
        record_samples(ctx, params, got["send_ns"], got["recv_ns"], repeat=rep, load=s.columns())
        if not ctx.quick:  # each case starts two processes: --quick keeps to round trips
            with sampling(ours, extra_cpu=lambda: run.daemon_cpu_s) as s:
                rate = run.case(transport, "stream", n_one)
            record_totals(ctx, params, "oneway", n_one, int(n_one / rate * 1e9), repeat=rep, load=s.columns())
