"""Suite ``peers``: the channels' round trip and throughput next to other IPC mechanisms, same run.

Transports: ``ump`` and ``multihop`` (ours) and the peers of
:mod:`multihop.bench.peers`: ``multiprocessing.Pipe``, ``multiprocessing.Queue``
and, when pyzmq is installed (the ``zmq`` extra), a ZeroMQ ``PAIR`` socket over
``ipc://``.  Every transport runs a traced round-trip case and a one-way
throughput case per size between the same two cores (CPUs).  The analysis
compares each case with the Pipe case of the same size and kind.

Each case is measured ``--repeats`` times, the repeat loop outermost: one
repeat of every transport and size, then the next, so a transport and its
Pipe baseline are measured minutes apart in no repeat (see
:mod:`multihop.bench.suites.common`).  Our round trips are the same
measurement as the ``channels`` suite's (the same code, server, pinning,
size, count and warm-up), so the two suites' figures of one run must agree:
the report's consistency section compares them.
"""

from __future__ import annotations

import multihop as mh
from multihop.bench.peers import PeerBench, available_peers
from multihop.bench.suites.common import SuiteContext, channel_rtt, channel_stream, peer_rtt, peer_stream
from multihop.bench.suites.options import BenchOptions
from multihop.defaults import DEFAULT_WINDOW

NAME = "peers"
SIZES = (64, 4096)


def _transports() -> tuple[str, ...]:
    return ("ump", "multihop") + available_peers()


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Nothing to check: the suite runs on the shared runtime (``--cores``/``--routing``, or the attached one)."""


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return ctx.repeats * len(_transports()) * len(SIZES)


def run(ctx: SuiteContext) -> None:
    """Every transport at every size: a traced round trip and a one-way stream, each ``ctx.repeats`` times."""
    rt = ctx.runtime()
    n_rtt, n_one = (2000, 4000) if ctx.quick else (20_000, 100_000)
    src, dst = rt.cores[0], rt.cores[1 % len(rt.cores)]
    for rep in range(ctx.repeats):
        for size in SIZES:
            for transport in _transports():
                ctx.progress.step(f"{transport} {size} B, repeat {rep + 1}/{ctx.repeats}")
                ours = transport in ("ump", "multihop")
                bench = PeerBench(rt, src, dst, transport=transport if ours else "ump", window=DEFAULT_WINDOW)
                params = {
                    "suite": NAME,
                    "transport": transport,
                    "routing": rt.routing if ours else None,
                    "size": size,
                    "src_core": src,
                    "dst_core": dst,
                    "window": DEFAULT_WINDOW if transport == "multihop" else -1,
                }
                if ours:
                    channel_rtt(ctx, bench, params, n_rtt, size, rep)  # sets params["hops"]
                    channel_stream(ctx, bench, params, n_one, size, rep)
                else:
                    peer_rtt(ctx, bench, transport, params, n_rtt, size, rep)
                    peer_stream(ctx, bench, transport, params, n_one, size, rep)
