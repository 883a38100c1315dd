"""Suite ``peers``: the channels' round trip and throughput next to other IPC mechanisms, same run.

Transports: ``ump`` and ``multihop`` (ours) and the peers of
:mod:`multihop.bench.peers`: ``multiprocessing.Pipe``, ``multiprocessing.Queue``
and, when pyzmq is installed (the ``zmq`` extra), a ZeroMQ ``PAIR`` socket over
``ipc://``.  Every transport runs a traced round-trip case and a one-way
throughput case per size between the same two cores (CPUs).  The analysis
compares each case with the Pipe case of the same size and kind.
"""

from __future__ import annotations

import multihop as mh
from multihop.bench.peers import PeerBench, Recv, Send, available_peers
from multihop.bench.suites.common import SuiteContext, record_rtt, record_totals
from multihop.bench.suites.options import BenchOptions

NAME = "peers"
SIZES = (64, 4096)


def _transports() -> tuple[str, ...]:
    return ("ump", "multihop") + available_peers()


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Nothing to check: the suite runs on the shared runtime (``--cores``/``--routing``, or the attached one)."""


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return len(_transports()) * len(SIZES)


def run(ctx: SuiteContext) -> None:
    """Every transport at every size: a traced round trip and a one-way stream."""
    rt = ctx.runtime()
    n_rtt, n_one = (2000, 4000) if ctx.quick else (20_000, 100_000)
    src, dst = rt.cores[0], rt.cores[1 % len(rt.cores)]
    for size in SIZES:
        for transport in _transports():
            ctx.progress.step(f"{transport} {size} B")
            ours = transport in ("ump", "multihop")
            bench = PeerBench(rt, src, dst, transport=transport if ours else "ump", window=16)
            params = {
                "suite": NAME,
                "transport": transport,
                "routing": rt.routing if ours else None,
                "size": size,
                "src_core": src,
                "dst_core": dst,
                "window": 16 if transport == "multihop" else -1,
            }
            if ours:

                def rtt(ch: mh.Channel) -> float:
                    params["hops"] = int(ch.stats()["hops"])
                    record_rtt(ctx, params, ch.send, ch.recv, n_rtt, size)
                    return 0.0

                bench.channel_case("rtt", n_rtt, size, rtt)
                rate = bench.stream_ours(n_one, size)
            else:

                def peer_rtt(send: Send, recv: Recv) -> float:
                    record_rtt(ctx, params, send, recv, n_rtt, size)
                    return 0.0

                bench.peer_case(transport, "rtt", n_rtt, peer_rtt)
                rate = bench.stream_peer(n_one, size, peer=transport)
            record_totals(ctx, params, "oneway", n_one, int(n_one / rate * 1e9))
