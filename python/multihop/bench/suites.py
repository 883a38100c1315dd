"""Benchmark suites run by ``multihop bench SUITE``; each writes a Parquet trace.

Implemented so far: ``channels`` (UMP versus multi-hop, round trip and
one-way throughput over a range of sizes), ``hops`` (multi-hop round trip
and throughput against the number of monitors on the path, ring mode on
virtual cores), ``window`` (multi-hop throughput against the credit window)
and ``all``. Every round trip is recorded with
its send and receive timestamps (CLOCK_MONOTONIC ns) into preallocated numpy
arrays and handed to the trace writer when the case ends, so tracing adds two
clock reads per message and nothing else.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

import multihop as mh
from multihop.bench import peers
from multihop.bench.trace import TraceWriter, case_name

SUITES = ("channels", "hops", "window", "all")


def _rtt_trace(ch: mh.Channel, n: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """n round trips of `size` bytes; their send and receive times."""
    msg = b"x" * size
    send_ns = np.empty(n, dtype=np.int64)
    recv_ns = np.empty(n, dtype=np.int64)
    clock = time.monotonic_ns
    for i in range(n):
        send_ns[i] = clock()
        ch.send(msg, timeout=30)
        ch.recv(timeout=30)
        recv_ns[i] = clock()
    return send_ns, recv_ns


def channels(rt: mh.Runtime, writer: TraceWriter, quick: bool, progress: Callable[[str], None]) -> None:
    """UMP versus multi-hop: round trip and one-way throughput for sizes 0 B to 64 KiB."""
    sizes = (0, 64, 4096) if quick else (0, 64, 1024, 4096, 65536)
    n_rtt, n_one = (300, 3000) if quick else (5000, 50_000)
    src, dst = rt.cores[0], rt.cores[1 % len(rt.cores)]
    cases = [(t, s) for t in ("ump", "multihop") for s in sizes]
    for i, (transport, size) in enumerate(cases, 1):
        progress(f"[{i}/{len(cases)}] channels {transport} {size} B")
        bench = peers.PeerBench(rt, src, dst, transport=transport, window=16)
        params = {"suite": "channels", "transport": transport, "routing": rt.routing, "size": size, "src_core": src,
                  "dst_core": dst, "window": 16 if transport == "multihop" else -1}
        got: dict[str, tuple[np.ndarray, np.ndarray]] = {}

        def rtt_body(ch: mh.Channel) -> float:
            got["rtt"] = _rtt_trace(ch, n_rtt, size)
            return 0.0

        hops = [0]

        def hops_of(ch: mh.Channel) -> None:
            hops[0] = int(ch.stats()["hops"])

        bench._channel_case("rtt", n_rtt, size, lambda ch: (hops_of(ch), rtt_body(ch))[1])
        rtt_params = dict(params, hops=hops[0], kind="rtt")
        name = case_name(rtt_params)
        send_ns, recv_ns = got["rtt"]
        writer.add_messages(name, rtt_params, send_ns, recv_ns, kind="rtt")
        writer.add_case(name, rtt_params, messages=n_rtt, duration_ns=int(recv_ns[-1] - send_ns[0]), nbytes=2 * n_rtt * size, kind="rtt")

        t0 = time.monotonic_ns()
        rate = bench.stream_ours(n_one, size)
        dur = int(n_one / rate * 1e9) if rate > 0 else time.monotonic_ns() - t0
        one_params = dict(params, hops=hops[0], kind="oneway")
        writer.add_case(case_name(one_params), one_params, messages=n_one, duration_ns=dur, nbytes=n_one * size, kind="oneway")


def _record_rtt(writer: TraceWriter, bench: peers.PeerBench, params: dict, n: int, size: int) -> None:
    """One traced round-trip case over `bench`'s transport."""
    got: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def body(ch: mh.Channel) -> float:
        params["hops"] = int(ch.stats()["hops"])
        got["rtt"] = _rtt_trace(ch, n, size)
        return 0.0

    bench._channel_case("rtt", n, size, body)
    p = dict(params, kind="rtt")
    send_ns, recv_ns = got["rtt"]
    writer.add_messages(case_name(p), p, send_ns, recv_ns, kind="rtt")
    writer.add_case(case_name(p), p, messages=n, duration_ns=int(recv_ns[-1] - send_ns[0]), nbytes=2 * n * size, kind="rtt")


def _record_oneway(writer: TraceWriter, bench: peers.PeerBench, params: dict, n: int, size: int) -> None:
    """One one-way throughput case (totals only)."""
    rate = bench.stream_ours(n, size)
    p = dict(params, kind="oneway")
    writer.add_case(case_name(p), p, messages=n, duration_ns=max(int(n / rate * 1e9), 1), nbytes=n * size, kind="oneway")


def hops(writer: TraceWriter, quick: bool, progress: Callable[[str], None]) -> None:
    """Multi-hop latency and throughput against the number of monitors on the path (ring mode)."""
    ncores = 4 if quick else 8
    n_rtt, n_one = (200, 2000) if quick else (2000, 20_000)
    with mh.Runtime.start(f"bench-hops-{os.getpid()}", cores=list(range(ncores)), routing="ring") as rt:
        targets = [0, 1, 3] if quick else [0, 1, 3, 7]  # 1, 2, 4 (, 8) monitors from core 0
        for i, dst in enumerate(targets, 1):
            progress(f"[{i}/{len(targets)}] hops: core 0 -> core {dst}")
            bench = peers.PeerBench(rt, 0, dst, transport="multihop", window=16)
            params = {"suite": "hops", "transport": "multihop", "routing": "ring", "size": 64, "src_core": 0, "dst_core": dst, "window": 16}
            _record_rtt(writer, bench, params, n_rtt, 64)
            _record_oneway(writer, bench, params, n_one, 64)


def window(rt: mh.Runtime, writer: TraceWriter, quick: bool, progress: Callable[[str], None]) -> None:
    """Multi-hop one-way throughput against the credit window."""
    n_one = 2000 if quick else 50_000
    src, dst = rt.cores[0], rt.cores[1 % len(rt.cores)]
    windows = (1, 4, 16, 64)
    for i, w in enumerate(windows, 1):
        progress(f"[{i}/{len(windows)}] window {w}")
        bench = peers.PeerBench(rt, src, dst, transport="multihop", window=w)
        params = {"suite": "window", "transport": "multihop", "routing": rt.routing, "size": 64, "src_core": src,
                  "dst_core": dst, "window": w, "hops": 2 if src != dst else 1}
        _record_oneway(writer, bench, params, n_one // 4 if w == 1 else n_one, 64)


def run(suite: str, out: str | os.PathLike[str], quick: bool, cores: list[int], routing: str) -> Path:
    """Start a runtime, run `suite` against it, write its trace under `out`; returns the run directory."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; available: {', '.join(SUITES)}")

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    writer = TraceWriter(out, suite=suite)
    chosen = ("channels", "hops", "window") if suite == "all" else (suite,)
    if "channels" in chosen or "window" in chosen:
        with mh.Runtime.start(f"bench-{suite}-{os.getpid()}", cores=cores, routing=routing) as rt:
            if "channels" in chosen:
                channels(rt, writer, quick, progress)
            if "window" in chosen:
                window(rt, writer, quick, progress)
    if "hops" in chosen:
        hops(writer, quick, progress)
    return writer.close()
