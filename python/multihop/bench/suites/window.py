"""Suite ``window``: multi-hop one-way throughput against the credit window, and fair link sharing.

Besides one stream per window size, the suite measures a 64-byte ping-pong
over the monitor link between the first two cores alone and next to a flood
on the same link (issue 16 §2, :mod:`multihop.bench.link_share`): round-trip
cases with ``load`` ``alone`` and ``flood`` (fair link queues), and, unless
the runtime is attached, ``flood-unfair`` on a runtime of its own whose
monitors serve each channel's whole backlog in turn (the baseline). Their
latency CDFs share the suite's plot in ``multihop analyze``.

Every case is measured ``--repeats`` times, the repeat loop outermost: one
stream per window, then the next round, so that a window is never judged by
one short stream measured at a moment of its own (``--quick``'s streams take
a few milliseconds each).  The ping-pongs likewise: alone, flooded, flooded
on unfair queues, then again.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import multihop as mh
from multihop import rts
from multihop.bench import link_share, peers
from multihop.bench.suites.common import SuiteContext, channel_stream, sampling
from multihop.bench.suites.options import BenchOptions
from multihop.bench.trace import case_name
from multihop.defaults import DEFAULT_WINDOW

NAME = "window"
WINDOWS = (1, 4, 16, 64)


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Nothing to check: the suite runs on the shared runtime (``--cores``/``--routing``, or the attached one)."""


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return ctx.repeats * (len(WINDOWS) + (2 if ctx.attached is not None else 3))


def run(ctx: SuiteContext) -> None:
    """64-byte one-way streams between the first two cores, one per window size, each ``ctx.repeats`` times."""
    rt = ctx.runtime()
    n_one = 4000 if ctx.quick else 50_000
    src, dst = rt.cores[0], rt.cores[1 % len(rt.cores)]
    hops = len(rts.path(rts.routing_table(rt.topology, rt.routing, rt.cores), src, dst))
    for rep in range(ctx.repeats):
        for w in WINDOWS:
            ctx.progress.step(f"window {w}, repeat {rep + 1}/{ctx.repeats}")
            bench = peers.PeerBench(rt, src, dst, transport="multihop", window=w)
            n = n_one // 4 if w == 1 else n_one
            params = {
                "suite": NAME,
                "transport": "multihop",
                "routing": rt.routing,
                "size": 64,
                "src_core": src,
                "dst_core": dst,
                "window": w,
                "hops": hops,
            }
            channel_stream(ctx, bench, params, n, 64, rep)
    _fairness(ctx, rt, src, dst, hops)


@contextlib.contextmanager
def _unfair_runtime(cores: list[int], routing: str) -> Iterator[mh.Runtime]:
    """A runtime whose monitors serve each channel's whole backlog in turn (their environment says so)."""
    old = os.environ.get("MULTIHOP_LINK_QUANTUM")
    os.environ["MULTIHOP_LINK_QUANTUM"] = str(link_share.UNFAIR_QUANTUM)
    try:
        rt = mh.Runtime.start(f"bench-unfair-{os.getpid()}", cores=cores, routing=routing)
    finally:
        if old is None:
            del os.environ["MULTIHOP_LINK_QUANTUM"]
        else:
            os.environ["MULTIHOP_LINK_QUANTUM"] = old
    try:
        yield rt
    finally:
        rt.stop()


def _fairness(ctx: SuiteContext, rt: mh.Runtime, src: int, dst: int, hops: int) -> None:
    """Ping-pong alone and next to a flood on the same monitor link (fair queues, then the unfair baseline)."""
    n = 1000 if ctx.quick else 5000
    params = {
        "suite": NAME,
        "transport": "multihop",
        "routing": rt.routing,
        "size": 64,
        "src_core": src,
        "dst_core": dst,
        "window": DEFAULT_WINDOW,
        "hops": hops,
        "flood_window": link_share.FLOOD_WINDOW,
    }

    def record(runtime: mh.Runtime, load: str, flooded: bool, rep: int) -> None:
        ctx.progress.step(f"ping-pong, {load}, repeat {rep + 1}/{ctx.repeats}")
        with sampling(runtime) as s, contextlib.ExitStack() as stack:
            if flooded:
                stack.enter_context(link_share.flooding(runtime, src, dst))
            run = link_share.ping_pong(runtime, src, dst, n, every=ctx.every)
        _record_run(ctx, dict(params, load=load), run, n, rep, s.columns())

    with contextlib.ExitStack() as stack:
        unfair = stack.enter_context(_unfair_runtime(list(rt.cores), rt.routing)) if ctx.attached is None else None
        for rep in range(ctx.repeats):
            record(rt, "alone", False, rep)
            record(rt, "flood", True, rep)
            if unfair is not None:
                record(unfair, "flood-unfair", True, rep)


def _record_run(ctx: SuiteContext, params: dict[str, object], run: link_share.RttRun, n: int, rep: int, load: dict[str, object] | None) -> None:
    p = dict(params, kind="rtt")
    name = case_name(p)
    duration = int(run.recv_ns[-1] - run.send_ns[0]) if len(run.seq) else 1
    ctx.writer.add_messages(name, p, run.send_ns, run.recv_ns, kind="rtt", seq=run.seq, every=1, suite=NAME, repeat=rep)
    ctx.writer.add_case(name, p, messages=n, duration_ns=max(duration, 1), nbytes=2 * n * 64, kind="rtt", suite=NAME, repeat=rep, load=load)
