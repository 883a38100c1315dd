"""Benchmark of the trace analysis: synthetic trace rows, then ``multihop.analysis.run``.

Usage::

    PYTHONPATH=python .venv/bin/python benches/bench_analysis.py [--rows 10000000] [--keep DIR]

Writes a synthetic run (about 200 cases: latency against transport, size and
hops; one case per core pair for three routing modes; a window sweep) with
:class:`multihop.bench.trace.TraceWriter`, then times the analysis.  Prints the
time to write the trace, the Spark start-up, the analysis itself and the
rows per second, and the ratio of the analysis to a baseline measured in the
same run: one plain Spark pass that only counts the messages table.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from multihop.bench.trace import TraceWriter


def _cases() -> list[tuple[str, str, dict[str, object]]]:
    """The synthetic cases as (suite, name, params)."""
    cases: list[tuple[str, str, dict[str, object]]] = []
    for size in (64, 256, 1024, 4096):
        cases.append(("latency", f"pipe-{size}", {"transport": "pipe", "size": size}))
        cases.append(("latency", f"ump-{size}", {"transport": "ump", "size": size, "hops": 0}))
        for hops in range(1, 5):
            cases.append(
                (
                    "latency",
                    f"multihop-{size}-h{hops}",
                    {"transport": "multihop", "size": size, "hops": hops},
                )
            )
    cores = 8
    for routing in ("direct", "ring", "fat-tree"):
        for src in range(cores):
            for dst in range(cores):
                if src == dst:
                    continue
                if routing == "direct":
                    hops = 1
                elif routing == "ring":
                    hops = min((dst - src) % cores, (src - dst) % cores)
                else:
                    hops = 1 if src // 4 == dst // 4 else 3
                params = {
                    "transport": "multihop", "routing": routing, "size": 64,
                    "hops": hops, "src_core": src, "dst_core": dst,
                }  # fmt: skip
                cases.append(("pairs", f"pair-{routing}-{src}-{dst}", params))
    for window in (1, 2, 4, 8, 16, 32):
        cases.append(
            (
                "window",
                f"ump-w{window}",
                {"transport": "ump", "size": 64, "hops": 0, "window": window},
            )
        )
    return cases


def write_trace(out: Path, rows: int, seed: int = 7) -> tuple[Path, int]:
    """Write one synthetic run of ``rows`` message rows under ``out``; return (run dir, rows)."""
    rng = np.random.default_rng(seed)
    cases = _cases()
    per_case = max(1, rows // len(cases))
    send = np.arange(per_case, dtype=np.int64) * 5_000 + 1_000_000_000
    recv = np.empty_like(send)  # preallocated, reused for every case, as a benchmark would
    total = 0
    with TraceWriter(out, run_id="bench-analysis", suite="synthetic", flush_rows=2_000_000) as w:
        for i, (suite, name, params) in enumerate(cases):
            n = per_case if i < len(cases) - 1 else rows - per_case * (len(cases) - 1)
            if n != send.size:
                send = np.arange(n, dtype=np.int64) * 5_000 + 1_000_000_000
                recv = np.empty_like(send)
            hops = max(0, int(params.get("hops", 0)))  # type: ignore[call-overload]
            base = 800 + 450 * hops + int(params["size"]) // 8  # type: ignore[call-overload]
            np.add(send, base, out=recv)
            recv += rng.exponential(200.0, n).astype(np.int64)
            w.add_messages(name, params, send, recv, suite=suite)
            window = int(params.get("window", 1))  # type: ignore[call-overload]
            w.add_case(name, params, messages=n, duration_ns=n * 5_000 // window, suite=suite)
            total += n
    return w.run_dir, total


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="message rows (default 10M)")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--keep", type=Path, default=None, help="write trace and report here and keep them")
    args = parser.parse_args(argv)

    from multihop.analysis import run
    from multihop.analysis.spark import get_session, stop_if_created

    work = args.keep or Path(tempfile.mkdtemp(prefix="multihop-bench-analysis-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        trace_root = work / "traces"
        if trace_root.exists():
            shutil.rmtree(trace_root)
        t0 = time.perf_counter()
        run_dir, rows = write_trace(trace_root, args.rows)
        t_write = time.perf_counter() - t0
        size_mb = sum(f.stat().st_size for f in run_dir.iterdir()) / 1e6
        print(f"trace: {rows:,} message rows, {size_mb:.0f} MB, written in {t_write:.1f} s "
              f"({rows / t_write:,.0f} rows/s)")  # fmt: skip

        t0 = time.perf_counter()
        spark, created = get_session(args.master)
        t_start = time.perf_counter() - t0
        master_used = spark.sparkContext.master
        try:
            t0 = time.perf_counter()
            n = spark.read.parquet(str(run_dir / "messages.parquet")).select("send_ns").count()
            t_count = time.perf_counter() - t0
            assert n == rows, (n, rows)
            t0 = time.perf_counter()
            report = run([str(run_dir)], work / "report", master=args.master)
            t_run = time.perf_counter() - t0
        finally:
            stop_if_created(spark, created)
        total = t_start + t_run
        print(f"spark start-up ({master_used}): {t_start:.1f} s")
        print(f"baseline, count one column: {t_count:.1f} s")
        print(f"analysis run(): {t_run:.1f} s = {rows / t_run:,.0f} rows/s "
              f"({t_run / t_count:.1f}x the counting pass)")  # fmt: skip
        print(f"start-up + analysis: {total:.1f} s = {rows / total:,.0f} rows/s (goal: under 60 s)")
        print(f"report: {report}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
