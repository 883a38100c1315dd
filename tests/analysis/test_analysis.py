"""Tests for multihop.analysis: input checks, the Spark computations against known data, the report.

Synthetic traces with known distributions (uniform, exponential, a linear
latency = a + b * hops) and a second run at twice the latency check
percentiles (within percentile_approx's rank accuracy), the cost per hop,
baseline ratios and the comparison across runs.  One shared local[2] Spark
session (the `spark` fixture in tests/conftest.py) serves every test that needs Spark; the
bad-input tests need none, as the inputs are checked before Spark starts.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest

from multihop import cli
from multihop.analysis import AnalysisUnavailable, SparkUnavailable, TraceError, main, run
from multihop.analysis.command import build_parser
from multihop.analysis.inputs import check_file, find_traces
from multihop.analysis.job import PERCENTILE_ACCURACY, QUANTILES
from multihop.analysis.spark import (
    DEFAULT_MASTER,
    ENV_MASTER,
    choose_master,
    find_java,
    java_version,
    preset_conf,
    required_java,
)
from multihop.bench.trace import META_SCHEMA_VERSION, TraceWriter, case_name, table_schema
from multihop.errors import MultihopError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
N = 20_000
N_EXPO = 100_000
N_PAIR = 2_000


def bounds(x: np.ndarray, q: float, acc: int = PERCENTILE_ACCURACY) -> tuple[float, float]:
    """The values whose rank is within q +- 1/acc of the sorted sample (one rank of slack)."""
    xs = np.sort(np.asarray(x))
    n = xs.size
    lo = max(0, math.floor((q - 1 / acc) * n) - 1)
    hi = min(n - 1, math.ceil((q + 1 / acc) * n))
    return float(xs[lo]), float(xs[hi])


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def num(value: str) -> float:
    return float(value) if value != "" else math.nan


def _write_run(
    out: Path,
    run_id: str,
    started: str,
    scale: int,
    rng: np.random.Generator,
    base: dict[str, np.ndarray],
) -> dict[str, Any]:
    """One run: pipe baseline, multihop at 0-3 hops (linear), exponential, core pairs, windows.

    ``base`` holds the pipe latencies and the multihop noise, shared by the runs, so that a run
    at ``scale`` 2 has exactly twice the latencies of the run at scale 1.
    """
    expected: dict[str, Any] = {}
    with TraceWriter(out, run_id=run_id, suite="lat", machine={"started_at": started}) as w:
        send = np.arange(N, dtype=np.int64) * 10_000 + 5_000_000
        pipe = base["pipe"] * scale
        p = {"transport": "pipe", "size": 64}
        w.add_messages("pipe-64", p, send, send + pipe)
        w.add_case("pipe-64", p, messages=N, duration_ns=scale * 10**9)
        expected["pipe-64"] = pipe
        noise = base["noise"]
        expected["noise"] = noise
        for h in range(4):
            lat = (2000 + 500 * h + noise) * scale
            p = {
                "transport": "multihop",
                "routing": "ring",
                "size": 64,
                "hops": h,
                "src_core": 0,
                "dst_core": h + 1,
            }
            w.add_messages(f"mh-64-h{h}", p, send, send + lat)
            w.add_case(f"mh-64-h{h}", p, messages=N, duration_ns=scale * (h + 1) * 10**9)
            expected[f"mh-64-h{h}"] = lat
        if scale == 1:
            expo = rng.exponential(1000.0, N_EXPO).astype(np.int64)
            s2 = np.arange(N_EXPO, dtype=np.int64) * 1000
            w.add_messages("expo", {"transport": "ump", "size": 256, "hops": 0}, s2, s2 + expo, kind="oneway")
            expected["expo"] = expo
            s3 = np.arange(N_PAIR, dtype=np.int64) * 1000
            for src in range(3):
                for dst in range(3):
                    if src == dst:
                        continue
                    both = []
                    for win in (8, 16):  # two cases per core pair: the medians need the messages
                        lat = 1000 + 100 * src + 10 * dst + rng.integers(0, 5, N_PAIR)
                        p = {"transport": "multihop", "routing": "direct", "size": 128, "hops": 1,
                             "window": win, "src_core": src, "dst_core": dst}  # fmt: skip
                        w.add_messages(f"pair-w{win}-{src}-{dst}", p, s3, s3 + lat)
                        both.append(lat)
                    expected[("direct", src, dst)] = np.concatenate(both)
            for win in (1, 2, 4, 8):
                p = {"transport": "ump", "size": 64, "hops": 0, "window": win}
                w.add_case(f"ump-w{win}", p, messages=10_000 * win, duration_ns=10**9)
    return expected


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("traces")
    rng = np.random.default_rng(2024)
    base = {
        "pipe": rng.integers(1000, 2000, N),
        "noise": rng.exponential(300.0, N).astype(np.int64),
    }
    a = _write_run(root, "runA", "2026-01-01T00:00:00+00:00", 1, rng, base)
    b = _write_run(root, "runB", "2026-01-02T00:00:00+00:00", 2, rng, base)
    return {"root": root, "A": a, "B": b}


@pytest.fixture(scope="module")
def report(traces: dict[str, Any], spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("report")
    path = run([str(traces["root"])], out)
    assert path == out / "report.md"
    return out


# ---------------------------------------------------------------- the numbers


def _by(rows: list[dict[str, str]], **keys: str) -> dict[str, str]:
    found = [r for r in rows if all(r[k] == v for k, v in keys.items())]
    assert len(found) == 1, (keys, found)
    return found[0]


def test_percentiles_within_stated_accuracy(report: Path, traces: dict[str, Any]) -> None:
    rows = read_csv(report / "latency.csv")
    for case in ("pipe-64", "expo", "mh-64-h2"):
        x = traces["A"][case]
        r = _by(rows, run_id="runA", case=case)
        assert int(r["samples"]) == x.size
        assert int(r["min_ns"]) == x.min() and int(r["max_ns"]) == x.max()
        assert num(r["mean_ns"]) == pytest.approx(x.mean(), rel=1e-9)
        for col, q in (("p50_ns", 0.5), ("p90_ns", 0.9), ("p99_ns", 0.99), ("p999_ns", 0.999)):
            lo, hi = bounds(x, q)
            assert lo <= num(r[col]) <= hi, (case, col, lo, r[col], hi)
    expo = _by(rows, run_id="runA", case="expo")
    assert expo["kind"] == "oneway" and expo["transport"] == "ump" and expo["size"] == "256"
    # the exponential distribution's quantiles: -1000 ln(1 - q), to within sampling noise
    assert num(expo["p99_ns"]) == pytest.approx(1000 * math.log(100), rel=0.05)
    assert num(expo["p50_ns"]) == pytest.approx(1000 * math.log(2), rel=0.05)


def test_cdf_points(report: Path, traces: dict[str, Any]) -> None:
    rows = [r for r in read_csv(report / "latency_cdf.csv") if r["run_id"] == "runA" and r["case"] == "expo"]
    assert [float(r["quantile"]) for r in rows] == list(QUANTILES)
    values = [int(r["latency_ns"]) for r in rows]
    assert values == sorted(values)
    x = traces["A"]["expo"]
    assert values[0] == x.min() and values[-1] == x.max()
    for r in rows[1:-1:7]:
        lo, hi = bounds(x, float(r["quantile"]))
        assert lo <= int(r["latency_ns"]) <= hi


def test_cost_per_hop_is_the_least_squares_line(report: Path, traces: dict[str, Any]) -> None:
    rows = read_csv(report / "cost_per_hop.csv")
    noise = traces["A"]["noise"]
    for run_id, scale in (("runA", 1), ("runB", 2)):
        r = _by(rows, run_id=run_id, transport="multihop", size="64", kind="rtt")
        assert (r["cases"], r["hops_min"], r["hops_max"], r["samples"]) == (
            "4",
            "0",
            "3",
            str(4 * N),
        )
        assert num(r["slope_ns_per_hop"]) == pytest.approx(500 * scale, rel=1e-9)
        hops = np.repeat(np.arange(4), N)
        lat = np.concatenate([traces[run_id[-1]][f"mh-64-h{h}"] for h in range(4)]).astype(float)
        slope, intercept = np.polyfit(hops, lat, 1)
        assert num(r["intercept_ns"]) == pytest.approx(intercept, rel=1e-9)
        r2 = np.corrcoef(hops, lat)[0, 1] ** 2
        assert num(r["r2"]) == pytest.approx(r2, rel=1e-6)
    assert num(_by(rows, run_id="runA", transport="multihop", size="64")["intercept_ns"]) == pytest.approx(2000 + noise.mean(), rel=1e-9)
    # groups with one hop count (the direct core pairs, ump) have no line
    assert {(r["transport"], r["size"]) for r in rows} == {("multihop", "64")}


def test_baseline_ratios_against_pipe(report: Path, traces: dict[str, Any]) -> None:
    rows = read_csv(report / "baseline_ratios.csv")
    a = traces["A"]
    for h in range(4):
        r = _by(rows, run_id="runA", case=f"mh-64-h{h}")
        assert r["baseline_case"] == "pipe-64"
        for col, q in (("p50_ratio", 0.5), ("p99_ratio", 0.99)):
            lo_c, hi_c = bounds(a[f"mh-64-h{h}"], q)
            lo_b, hi_b = bounds(a["pipe-64"], q)
            assert lo_c / hi_b <= num(r[col]) <= hi_c / lo_b
        assert num(r["mean_ratio"]) == pytest.approx(a[f"mh-64-h{h}"].mean() / a["pipe-64"].mean(), rel=1e-9)
        assert num(r["throughput_ratio"]) == pytest.approx(1 / (h + 1))
    w4 = _by(rows, run_id="runA", case="ump-w4")  # a throughput-only case: no latency ratio
    assert w4["p50_ratio"] == "" and num(w4["throughput_ratio"]) == pytest.approx(40_000 / N)
    cases = {r["case"] for r in rows}
    assert "pipe-64" not in cases and "expo" not in cases  # no pipe case of size 256


def test_comparison_across_runs(report: Path) -> None:
    rows = read_csv(report / "run_comparison.csv")
    assert {r["case"] for r in rows} == {"pipe-64", "mh-64-h0", "mh-64-h1", "mh-64-h2", "mh-64-h3"}
    for r in rows:
        assert r["first_run"] == "runA" and r["runs"] == "2"
        if r["run_id"] == "runA":
            assert num(r["p50_ratio"]) == 1.0 and num(r["throughput_ratio"]) == 1.0
        else:
            assert num(r["p50_ratio"]) == pytest.approx(2.0, rel=2e-3)
            assert num(r["p99_ratio"]) == pytest.approx(2.0, rel=2e-3)
            assert num(r["throughput_ratio"]) == pytest.approx(0.5)


def test_core_pair_medians(report: Path, traces: dict[str, Any]) -> None:
    rows = read_csv(report / "core_pairs.csv")
    direct = [r for r in rows if r["routing"] == "direct"]
    assert len(direct) == 6 and {(r["transport"], r["size"]) for r in direct} == {("multihop", "128")}
    for r in direct:
        x = traces["A"][("direct", int(r["src_core"]), int(r["dst_core"]))]
        assert int(r["samples"]) == x.size == 2 * N_PAIR
        lo, hi = bounds(x, 0.5)
        assert lo <= num(r["p50_ns"]) <= hi
    ring = _by(rows, run_id="runB", routing="ring", src_core="0", dst_core="3")
    lo, hi = bounds(traces["B"]["mh-64-h2"], 0.5)
    assert lo <= num(ring["p50_ns"]) <= hi


def test_throughput_tables(report: Path) -> None:
    by_window = [r for r in read_csv(report / "throughput_by_window.csv") if r["run_id"] == "runA"]
    assert [(r["window"], num(r["throughput_msgs"])) for r in by_window] == [
        ("1", 10_000.0), ("2", 20_000.0), ("4", 40_000.0), ("8", 80_000.0)
    ]  # fmt: skip
    per_case = read_csv(report / "throughput.csv")
    assert num(_by(per_case, run_id="runB", case="mh-64-h1")["throughput_msgs"]) == pytest.approx(N / 4)
    by_size = read_csv(report / "throughput_by_size.csv")
    assert num(_by(by_size, run_id="runA", transport="pipe", size="64")["throughput_msgs"]) == pytest.approx(N)
    machines = read_csv(report / "machines.csv")
    assert [m["run_id"] for m in machines] == ["runA", "runB"]


# ---------------------------------------------------------------- the report


def test_report_files(report: Path) -> None:
    md = (report / "report.md").read_text()
    html = (report / "report.html").read_text()
    titles = ["Latency per case", "Throughput per case", "Cost per hop", "Ratios to the baseline",
              "Comparison across runs", "Plots"]  # fmt: skip
    for title in titles:
        assert title in md and title in html
    names = ["latency", "latency_cdf", "throughput", "throughput_by_size",
             "throughput_by_window", "cost_per_hop", "baseline_ratios", "run_comparison",
             "core_pairs", "machines"]  # fmt: skip
    for name in names:
        assert (report / f"{name}.csv").stat().st_size > 0
        assert f"{name}.csv" in md
    pngs = sorted(p.name for p in report.glob("*.png"))
    assert pngs == sorted([
        # run A's suite has 18 cases: one CDF per routing mode (no routing: pipe and expo)
        "latency_cdf_runA_lat_direct_messages.png", "latency_cdf_runA_lat_no_routing_messages.png",
        "latency_cdf_runA_lat_ring_messages.png", "latency_cdf_runB_lat.png", "latency_vs_hops.png",
        "throughput_vs_size.png", "throughput_vs_window.png",
        "heatmap_runA_lat_direct_multihop_128.png",  # the ring cases all start on core 0: no heat map
    ])  # fmt: skip
    assert "1 core-pair group(s) cover a single source or destination core" not in md
    assert "2 core-pair group(s) cover a single source or destination core" in md
    for name in pngs:
        data = (report / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 1000
        assert f"]({name})" in md
    # self-contained: every <img> is a data URI
    imgs = re.findall(r'<img src="([^"]+)"', html)
    assert len(imgs) == len(pngs) and all(src.startswith("data:image/png;base64,") for src in imgs)
    assert html.lstrip().startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")


def test_session_is_borrowed_not_stopped(report: Path, spark: Any) -> None:  # noqa: F811
    assert spark.range(3).count() == 3


def _tiny(out: Path, run_id: str, baseline: str | None = None) -> Path:
    send = np.arange(200, dtype=np.int64) * 1000
    with TraceWriter(out, run_id=run_id, suite="tiny") as w:
        p = {"transport": "pipe", "size": 32, "src_core": 0, "dst_core": 1}
        w.add_messages("pipe-tiny", p, send, send + 1000 + send % 7)
        w.add_case("pipe-tiny", p, messages=200, duration_ns=10**8)
        p = {"transport": "ump", "size": 32, "hops": 0, "src_core": 1, "dst_core": 0}
        w.add_messages("ump-tiny", p, send, send + 3000 + send % 7)
        w.add_case("ump-tiny", p, messages=200, duration_ns=2 * 10**8, baseline=baseline)
    return w.run_dir


def test_cli_with_a_case_as_baseline(
    spark: Any,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = _tiny(tmp_path / "t", "tiny")
    out = tmp_path / "rep"
    assert main([str(run_dir), "-o", str(out), "--baseline", "pipe-tiny"]) == 0
    printed = capsys.readouterr().out
    assert f"report: {out / 'report.md'}" in printed
    ratios = read_csv(out / "baseline_ratios.csv")
    assert [(r["case"], r["baseline_case"]) for r in ratios] == [("ump-tiny", "pipe-tiny")]
    assert 2.9 < num(ratios[0]["p50_ratio"]) < 3.1 and num(ratios[0]["throughput_ratio"]) == 0.5
    pairs = read_csv(out / "core_pairs.csv")  # one case per pair: the medians come from the case quantiles
    assert [(r["routing"], r["transport"], r["src_core"], r["dst_core"]) for r in pairs] == [
        ("(none)", "pipe", "0", "1"),
        ("(none)", "ump", "1", "0"),
    ]
    md = (out / "report.md").read_text()
    assert "Throughput against window plot skipped" in md
    assert "Comparison across runs skipped" in md
    assert "Cost per hop skipped" in md
    assert not (out / "throughput_vs_window.png").exists()
    assert not list(out.glob("heatmap_*.png"))  # one pair per transport: a table, not a map
    assert "2 core-pair group(s) cover a single source or destination core" in md


def test_files_as_input_and_the_cases_own_baseline(spark: Any, tmp_path: Path) -> None:  # noqa: F811
    run_dir = _tiny(tmp_path / "t", "own", baseline="pipe-tiny")
    out = tmp_path / "rep"
    run([str(run_dir / "messages.parquet"), str(run_dir / "cases.parquet")], out)
    ratios = read_csv(out / "baseline_ratios.csv")
    assert [(r["case"], r["baseline_case"]) for r in ratios] == [("ump-tiny", "pipe-tiny")]
    assert not (out / "machines.csv").exists()


def test_bad_baseline_selector(spark: Any, tmp_path: Path) -> None:  # noqa: F811
    run_dir = _tiny(tmp_path / "t", "sel")
    with pytest.raises(TraceError, match="neither a case name .* nor a selector"):
        run([str(run_dir)], tmp_path / "rep", baseline="colour=red")


# ---------------------------------------------------------------- bad input (no Spark needed)


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match=r"empty.*: empty directory"):
        run([str(tmp_path / "empty")], tmp_path / "rep")
    assert not (tmp_path / "rep").exists()


def test_trace_without_rows(tmp_path: Path) -> None:
    run_dir = TraceWriter(tmp_path / "t", run_id="nothing").close()
    with pytest.raises(TraceError, match="hold no message and no case rows"):
        run([str(run_dir)], tmp_path / "rep")


def test_directory_without_traces_and_missing_paths(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "notes.txt").write_text("hi")
    with pytest.raises(TraceError, match="no trace found"):
        find_traces([tmp_path / "d"])
    with pytest.raises(TraceError, match="no such file or directory"):
        find_traces([tmp_path / "nope"])
    with pytest.raises(TraceError, match="no trace paths"):
        find_traces([])


def test_parquet_of_another_schema(tmp_path: Path) -> None:
    f = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), f)
    with pytest.raises(
        TraceError,
        match=r"other\.parquet: not a multihop trace: "
        r"no 'multihop\.table' metadata \(its columns: a, b\)",
    ):
        run([str(f)], tmp_path / "rep")


def test_not_parquet(tmp_path: Path) -> None:
    f = tmp_path / "x.parquet"
    f.write_text("not parquet at all")
    with pytest.raises(TraceError, match=r"x\.parquet: not a readable Parquet file"):
        find_traces([f])


def _rewrite_version(path: Path, version: str) -> None:
    t = pq.read_table(path)
    meta = dict(t.schema.metadata)
    meta[META_SCHEMA_VERSION.encode()] = version.encode()
    pq.write_table(t.replace_schema_metadata(meta), path)


@pytest.mark.parametrize(("version", "what"), [("2", "older"), ("4", "newer"), ("x", "unknown")])
def test_other_schema_versions(tmp_path: Path, version: str, what: str) -> None:
    run_dir = _tiny(tmp_path, "v")
    _rewrite_version(run_dir / "messages.parquet", version)
    with pytest.raises(
        TraceError,
        match=rf"messages\.parquet: trace schema version {version} \({what}\); "
        r"this multihop reads version 3",
    ):
        run([str(tmp_path)], tmp_path / "rep")


def test_a_version_1_trace_as_written_then(tmp_path: Path) -> None:
    """A cases file of schema 1 (throughput columns, no version 2 metadata) is refused, with advice."""
    schema = table_schema("cases")
    old = pa.schema(
        [*schema, pa.field("throughput_msgs", pa.float64()), pa.field("throughput_bytes", pa.float64())],
        metadata={META_SCHEMA_VERSION.encode(): b"1", b"multihop.table": b"cases"},
    )
    f = tmp_path / "cases.parquet"
    pq.write_table(old.empty_table(), f)
    with pytest.raises(TraceError, match=r"version 1 \(older\); this multihop reads version 3: re-run the benchmark"):
        check_file(f)


def test_wrong_column_type_and_wrong_table(tmp_path: Path) -> None:
    schema = table_schema("cases")
    idx = schema.get_field_index("size")
    bad = schema.set(idx, pa.field("size", pa.string()))
    f = tmp_path / "cases.parquet"
    pq.write_table(bad.empty_table(), f)
    with pytest.raises(TraceError, match="column 'size' has type string, expected int64"):
        check_file(f)
    good = tmp_path / "good.parquet"
    pq.write_table(table_schema("machine").empty_table(), good)
    with pytest.raises(TraceError, match="holds the 'machine' table, expected 'messages'"):
        check_file(good, "messages")


def test_incomplete_run_dir_and_duplicate_runs(tmp_path: Path) -> None:
    run_dir = _tiny(tmp_path / "a", "dup")
    copy = _tiny(tmp_path / "b", "dup")
    with pytest.raises(TraceError, match="run 'dup' is given twice"):
        find_traces([run_dir, copy])
    (copy / "cases.parquet").unlink()
    with pytest.raises(TraceError, match="incomplete run directory: missing cases.parquet"):
        find_traces([copy])


def test_errors_are_multihop_errors() -> None:
    assert issubclass(TraceError, MultihopError) and issubclass(TraceError, ValueError)
    assert issubclass(SparkUnavailable, AnalysisUnavailable) and issubclass(AnalysisUnavailable, MultihopError)


def test_cli_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 1  # as every multihop subcommand (cli.py's docstring)
    assert "multihop analyze: TraceError: " in capsys.readouterr().err
    assert cli.main(["analyze", str(tmp_path / "empty"), "-o", str(tmp_path / "rep")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("multihop analyze: TraceError: ") and "empty directory" in err
    assert not (tmp_path / "rep").exists()


def test_one_analyze_parser() -> None:
    """`multihop analyze` and `python -m multihop.analysis` take the same, documented arguments."""
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    ours = sub.choices["analyze"]
    alone = build_parser()

    def spec(p: argparse.ArgumentParser) -> list[tuple[tuple[str, ...], str | None, Any]]:
        return [(tuple(a.option_strings), a.dest, a.default) for a in p._actions if a.dest != "help"]

    assert spec(ours) == spec(alone)
    assert all(a.help for a in ours._actions)
    text = ours.format_help()
    assert "MULTIHOP_SPARK_MASTER" in text and "COLUMN=VALUE" in text and "report directory" in text


# ---------------------------------------------------------------- session rules (no Spark needed)


def _fake_java(d: Path, version: str, starts: bool = False) -> Path:
    """A `java` answering `-version` like OpenJDK `version` (Java 8 says "1.8.0_392"); anything else fails."""
    java = d / "bin" / "java"
    java.parent.mkdir(parents=True, exist_ok=True)
    java.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-version" ]; then echo \'openjdk version "{version}" 2024-01-16\' >&2; exit 0; fi\n'
        'echo "fake java: no JVM here" >&2\nexit 1\n'
    )
    java.chmod(0o755)
    return java


def test_java_missing_or_too_old_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(SparkUnavailable, match="apt-get install -y openjdk-17-jre-headless"):
        find_java({"PATH": str(tmp_path)})
    with pytest.raises(SparkUnavailable, match="JAVA_HOME=.* has no executable bin/java"):
        find_java({"JAVA_HOME": str(tmp_path), "PATH": ""})
    java = _fake_java(tmp_path / "jdk", "17.0.9")
    assert find_java({"JAVA_HOME": str(tmp_path / "jdk")}) == str(java)
    assert java_version(str(java)) == 17
    _fake_java(tmp_path / "old", "1.8.0_392")
    assert java_version(str(tmp_path / "old" / "bin" / "java")) == 8
    with pytest.raises(SparkUnavailable, match=r"JAVA_HOME=.*old is Java 8; this PySpark needs Java 17 or newer"):
        find_java({"JAVA_HOME": str(tmp_path / "old")}, minimum=17)
    assert find_java({"JAVA_HOME": str(tmp_path / "old")}, minimum=8).endswith("old/bin/java")
    _fake_java(tmp_path / "j11", "11.0.22")
    with pytest.raises(SparkUnavailable, match=r"java \(first `java` on PATH\) is Java 11; this PySpark needs Java 17"):
        find_java({"PATH": str(tmp_path / "j11" / "bin")}, minimum=17)
    assert required_java("4.0.1") == 17 and required_java("3.5.3") == 8
    assert required_java() == (17 if int(pyspark.__version__.split(".")[0]) >= 4 else 8)
    broken = tmp_path / "broken" / "bin" / "java"
    broken.parent.mkdir(parents=True)
    broken.write_text("#!/bin/sh\necho 'Error: could not create the Java VM' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(SparkUnavailable, match="gives no Java version .Error: could not create the Java VM"):
        find_java({"JAVA_HOME": str(broken.parent.parent)})


def test_master_precedence() -> None:
    assert choose_master(None, {}, None) == DEFAULT_MASTER == "local[*]"
    assert choose_master(None, {ENV_MASTER: "local[3]"}, None) == "local[3]"
    assert choose_master("local[1]", {ENV_MASTER: "local[3]"}, None) == "local[1]"
    assert choose_master(None, {ENV_MASTER: "local[3]"}, "spark://h:7077") is None
    with pytest.warns(RuntimeWarning, match="set by spark-submit"):
        assert choose_master("local[1]", {}, "spark://h:7077") is None


def test_preset_conf_reads_submit_args_and_defaults(tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text("# comment\nspark.master   spark://d:7077\nspark.ui.enabled true\n")
    env = {"SPARK_CONF_DIR": str(tmp_path)}
    assert preset_conf(env) == {"spark.master": "spark://d:7077", "spark.ui.enabled": "true"}
    env["PYSPARK_SUBMIT_ARGS"] = "--master local[5] --conf spark.sql.shuffle.partitions=3 pyspark-shell"
    conf = preset_conf(env)
    assert conf["spark.master"] == "local[5]" and conf["spark.sql.shuffle.partitions"] == "3"
    assert preset_conf({"SPARK_CONF_DIR": str(tmp_path / "none")}) == {}


def test_messages_only(spark: Any, tmp_path: Path) -> None:  # noqa: F811
    run_dir = _tiny(tmp_path / "t", "msgs")
    out = tmp_path / "rep"
    run([str(run_dir / "messages.parquet")], out)
    rows = read_csv(out / "latency.csv")  # the parameters come from the messages themselves
    assert [(r["case"], r["transport"], r["size"], r["hops"]) for r in rows] == [
        ("pipe-tiny", "pipe", "32", "-1"), ("ump-tiny", "ump", "32", "0")
    ]  # fmt: skip
    md = (out / "report.md").read_text()
    assert "No cases rows: throughput tables skipped." in md
    assert "Throughput against message size plot skipped" in md
    assert not (out / "throughput.csv").exists()
    ratios = read_csv(out / "baseline_ratios.csv")  # pipe cases exist: transport=pipe is the default
    assert [(r["case"], r["baseline_case"]) for r in ratios] == [("ump-tiny", "pipe-tiny")]


# ---------------------------------------------------------------- a `bench all`-like trace: suites kept apart

N_MIX = 2000


def _mixed(out: Path) -> dict[str, Any]:
    """One run with every bench suite's kind of case, sharing parameters the way `bench all` does.

    Each suite's figures are known exactly; the other suites' cases would
    distort them if a table mixed suites (the audit's G1).
    """
    s = np.arange(N_MIX, dtype=np.int64) * 10_000
    noise = np.random.default_rng(7).integers(0, 200, N_MIX)
    exp: dict[str, Any] = {}
    with TraceWriter(out, run_id="mixed", suite="all") as w:

        def rtt(suite: str, p: dict[str, Any], lat: np.ndarray, n: int | None = None) -> str:
            p = dict(p, suite=suite, kind="rtt")
            name = case_name(p)
            k = lat.size if n is None else n
            w.add_messages(name, p, s[:k], s[:k] + lat[:k], suite=suite)
            w.add_case(name, p, messages=k, duration_ns=10**9, suite=suite)
            return name

        def totals(suite: str, p: dict[str, Any], messages: int, duration_ns: int, **extra: Any) -> None:
            p = dict(p, suite=suite, kind="oneway")
            w.add_case(case_name(p), p, messages=messages, duration_ns=duration_ns, kind="oneway", suite=suite, **extra)

        for h, dst in ((1, 0), (2, 1), (4, 3)):  # hops: 1000 + 300 per hop
            rtt("hops", {"transport": "multihop", "routing": "ring", "size": 64, "window": 16, "hops": h,
                         "src_core": 0, "dst_core": dst}, 1000 + 300 * h + noise)  # fmt: skip
        for k in (1, 2, 4):  # fanout: k sequential round trips, 50 samples each, hops growing with k
            rtt("fanout", {"transport": "multihop", "routing": "direct", "size": 64, "window": 16, "fanout": k,
                           "hops": 1 + k, "src_core": 0}, 5000 * k + noise, n=50)  # fmt: skip
        for t in ("ump", "multihop"):  # channels: 0 -> 1 on the machine
            for size in (0, 64):
                p = {"transport": t, "routing": "direct", "size": size, "src_core": 0, "dst_core": 1,
                     "hops": 0 if t == "ump" else 2, "window": 16 if t == "multihop" else -1}  # fmt: skip
                rtt("channels", p, 90_000 + noise)  # far from the routing suite's 0 -> 1
                totals("channels", p, 10_000, (2 if t == "ump" else 4) * 10**7 * (1 + size // 64))
        exp["by_size"] = {("ump", 0): 500_000.0, ("ump", 64): 250_000.0, ("multihop", 0): 250_000.0,
                          ("multihop", 64): 125_000.0}  # fmt: skip
        for win in (1, 4):  # window: 1000 msg/s per window slot
            totals("window", {"transport": "multihop", "routing": "direct", "size": 64, "window": win, "hops": 2,
                              "src_core": 0, "dst_core": 1}, 1000 * win, 10**9)  # fmt: skip
        for mode in ("direct",):  # routing: every pair of 4 virtual cores, binds and round trips
            for src in range(4):
                for dst in range(4):
                    hops = 1 if src == dst else 2
                    p = {"transport": "multihop", "routing": mode, "window": 16, "hops": hops, "src_core": src,
                         "dst_core": dst}  # fmt: skip
                    rtt("routing", dict(p, size=-1, op="bind"), np.full(3, 50_000 + 1000 * hops))
                    exp[("pair", src, dst)] = 1000 + 100 * src + 10 * dst
                    rtt("routing", dict(p, size=64, op="rtt"), exp[("pair", src, dst)] + noise % 3, n=100)
        for t, lat in (("pipe", 20_000), ("ump", 2_000), ("multihop", 4_000)):  # peers: against Pipe
            p = {"transport": t, "routing": None if t == "pipe" else "direct", "size": 64, "src_core": 0, "dst_core": 1}
            rtt("peers", p, lat + noise)
            totals("peers", p, 10_000, 10**8 if t == "pipe" else 10**7)
        for t in ("ump", "multihop"):  # resources: totals that are not a throughput
            for comp, msgs in (("monitor", 6400), ("channel", 400), ("idle-monitor", 0)):
                totals("resources", {"transport": t, "routing": "direct", "size": 64, "window": 16 if t == "multihop" else -1,
                                     "component": comp, "channels": 16, "links": 12}, msgs, 10**9,
                       rss_bytes=5_000_000, cpu_s=0.25)  # fmt: skip
    exp["noise"] = noise
    return exp


@pytest.fixture(scope="module")
def mixed(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:  # noqa: F811
    traces = tmp_path_factory.mktemp("mixed")
    exp = _mixed(traces)
    out = tmp_path_factory.mktemp("mixed-report")
    run([str(traces)], out)
    return out, exp


def test_mixed_suites_cost_per_hop_is_the_hops_suite_alone(mixed: tuple[Path, dict[str, Any]]) -> None:
    out, exp = mixed
    rows = read_csv(out / "cost_per_hop.csv")
    assert sorted((r["suite"], r["size"]) for r in rows) == [("hops", "64"), ("routing", "-1"), ("routing", "64")]
    hops = _by(rows, suite="hops")
    assert (hops["hops_min"], hops["hops_max"], hops["cases"]) == ("1", "4", "3")
    assert num(hops["slope_ns_per_hop"]) == pytest.approx(300, rel=1e-9)  # fanout's 5000 k stays out
    assert num(hops["intercept_ns"]) == pytest.approx(1000 + exp["noise"].mean(), rel=1e-9)
    assert num(_by(rows, suite="routing", size="-1")["slope_ns_per_hop"]) == pytest.approx(1000, rel=1e-9)
    assert not [r for r in rows if r["suite"] in ("fanout", "channels", "peers")]


def test_mixed_suites_throughput_tables(mixed: tuple[Path, dict[str, Any]]) -> None:
    out, exp = mixed
    by_size = read_csv(out / "throughput_by_size.csv")
    assert {r["suite"] for r in by_size} == {"channels", "peers"}  # no resources zeros, no window points
    for (t, size), value in exp["by_size"].items():
        r = _by(by_size, suite="channels", transport=t, size=str(size), kind="oneway")
        assert num(r["throughput_msgs"]) == pytest.approx(value) and r["cases"] == "1"
    by_window = read_csv(out / "throughput_by_window.csv")
    assert [(r["suite"], r["window"], num(r["throughput_msgs"])) for r in by_window] == [
        ("window", "1", 1000.0), ("window", "4", 4000.0)
    ]  # fmt: skip
    per_case = read_csv(out / "throughput.csv")
    assert "resources" not in {r["suite"] for r in per_case} and len(per_case) == 60 - 6
    resources = read_csv(out / "resources.csv")
    assert {r["suite"] for r in resources} == {"resources"} and len(resources) == 6
    idle = _by(resources, transport="ump", component="idle-monitor")
    assert idle["messages"] == "0" and idle["cpu_us_per_msg"] == "" and idle["links"] == "12"
    assert num(_by(resources, transport="ump", component="channel")["cpu_us_per_msg"]) == pytest.approx(625.0)


def test_mixed_suites_core_pairs_are_the_routing_suite(mixed: tuple[Path, dict[str, Any]]) -> None:
    out, exp = mixed
    pairs = read_csv(out / "core_pairs.csv")
    assert {r["suite"] for r in pairs} == {"routing"} and len(pairs) == 2 * 16
    for r in pairs:
        if r["size"] == "64":  # the channels and peers suites' 0 -> 1 (90 us, 2-20 us) are not in it
            assert (
                exp[("pair", int(r["src_core"]), int(r["dst_core"]))] <= num(r["p50_ns"]) <= exp[("pair", int(r["src_core"]), int(r["dst_core"]))] + 2
            )
    maps = sorted(p.name for p in out.glob("heatmap_*.png"))
    assert maps == ["heatmap_mixed_routing_direct_multihop_64.png", "heatmap_mixed_routing_direct_multihop_bind.png"]


def test_mixed_suites_baseline_is_peers_pipe_only(mixed: tuple[Path, dict[str, Any]]) -> None:
    out, _ = mixed
    ratios = read_csv(out / "baseline_ratios.csv")
    assert {r["suite"] for r in ratios} == {"peers"}
    assert sorted((r["case"].split("transport=")[1].split(",")[0], r["case"].split("kind=")[1].split(",")[0]) for r in ratios) == [
        ("multihop", "oneway"),
        ("multihop", "rtt"),
        ("ump", "oneway"),
        ("ump", "rtt"),
    ]
    assert {r["baseline_case"].split("transport=")[1] for r in ratios} == {"pipe"}
    ump = [r for r in ratios if "transport=ump" in r["case"]]
    assert num(next(r for r in ump if "kind=oneway" in r["case"])["throughput_ratio"]) == pytest.approx(10.0)
    assert 0.09 < num(next(r for r in ump if "kind=rtt" in r["case"])["p50_ratio"]) < 0.11


def test_percentiles_beyond_the_sample_resolution_are_not_shown(mixed: tuple[Path, dict[str, Any]]) -> None:
    out, _ = mixed
    lat = read_csv(out / "latency.csv")
    fan = [r for r in lat if r["suite"] == "fanout"]
    assert len(fan) == 3 and all(r["samples"] == "50" for r in fan)
    assert all(r["p50_ns"] and r["p90_ns"] and r["p99_ns"] == "" and r["p999_ns"] == "" for r in fan)
    binds = [r for r in lat if r["size"] == "-1"]
    assert binds and all(r["samples"] == "3" and r["p50_ns"] and r["p90_ns"] == "" for r in binds)
    pairs = [r for r in lat if r["suite"] == "routing" and r["size"] == "64"]
    assert all(r["samples"] == "100" and r["p99_ns"] and r["p999_ns"] == "" for r in pairs)
    full = [r for r in lat if r["suite"] == "hops"]
    assert all(r["samples"] == str(N_MIX) and r["p999_ns"] for r in full)
    md = (out / "report.md").read_text()
    assert "Percentiles beyond a case's sample resolution are not shown" in md
    assert "p90 for 16 case(s) (fewer than 10 samples)" in md  # binds
    assert "p99 for 19 case(s) (fewer than 100 samples)" in md  # binds, fanout
    assert "p99.9 for 35 case(s) (fewer than 1000 samples)" in md  # binds, fanout, routing
    cdf = [r for r in read_csv(out / "latency_cdf.csv") if r["suite"] == "fanout"]
    assert len(cdf) == 3 * len(QUANTILES)  # the CDF keeps every point: it is the sample itself


def test_mixed_suites_plots_have_readable_legends(mixed: tuple[Path, dict[str, Any]]) -> None:
    out, _ = mixed
    md = (out / "report.md").read_text()
    cdfs = sorted(p.name for p in out.glob("latency_cdf_*.png"))
    assert cdfs == sorted(
        [f"latency_cdf_mixed_{s}.png" for s in ("channels", "fanout", "hops", "peers")]
        + ["latency_cdf_mixed_routing_direct_binds.png", "latency_cdf_mixed_routing_direct_messages.png"]
    )
    # 16 core pairs per figure: coloured by hop count, one legend entry per hop count
    assert md.count("One line per case, coloured by hop count.") == 2
    assert "legend omitted" not in md
    for name in [*cdfs, "throughput_vs_size.png", "throughput_vs_window.png", "latency_vs_hops.png", "resources.png"]:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 1000


def test_size_zero_is_on_the_throughput_plot(mixed: tuple[Path, dict[str, Any]]) -> None:
    from matplotlib.figure import Figure

    from multihop.analysis.plots import _size_ticks

    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([0, 64, 4096, 65536], [1, 2, 3, 4])
    _size_ticks(ax, [0, 64, 4096, 65536])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0 B", "64 B", "4 KiB", "64 KiB"]
    lo, _ = ax.get_xlim()
    assert ax.get_xscale() == "symlog" and lo < 0  # 0 B is inside the axis, not at -infinity
    assert (mixed[0] / "throughput_vs_size.png").stat().st_size > 1000


def test_scope_names_the_bench_suites() -> None:
    from multihop.analysis.scope import BENCH_SUITES, SCOPES
    from multihop.bench.suites import SUITES

    assert set(BENCH_SUITES) == set(SUITES) - {"all"}
    assert all(set(v) <= set(BENCH_SUITES) for v in SCOPES.values())


# ---------------------------------------------------------------- the report directory


def test_an_earlier_reports_files_are_replaced_not_left(spark: Any, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "rep"
    first = _tiny(tmp_path / "a", "first")
    run([str(first)], out)
    (out / "notes.txt").write_text("mine")
    (out / "heatmap_mine.png").write_bytes(b"not ours")
    before = {p.name for p in out.iterdir()}
    assert "latency_cdf_first_tiny.png" in before and "resources.csv" not in before
    (out / "resources.csv").write_text("stale, from an older multihop")  # one of our names: ours
    second = _tiny(tmp_path / "b", "second")
    run([str(second)], out)
    after = {p.name for p in out.iterdir()}
    assert "latency_cdf_first_tiny.png" not in after and "latency_cdf_second_tiny.png" in after
    assert "resources.csv" not in after  # not produced this time (no resources cases): not left stale
    assert {"notes.txt", "heatmap_mine.png"} <= after  # not ours: kept
    assert "first" not in (out / "latency.csv").read_text()


# ---------------------------------------------------------------- `multihop analyze` without what it needs


def _analyze_cmd(trace: Path, out: Path, env: dict[str, str], pre: str = "") -> subprocess.CompletedProcess[str]:
    code = f"{pre}import sys; from multihop.cli import main; sys.exit(main(['analyze', {str(trace)!r}, '-o', {str(out)!r}]))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def _env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYSPARK_SUBMIT_ARGS", "SPARK_HOME")}
    env.update(changes)
    return env


def test_analyze_without_java_fails_before_any_jvm(tmp_path: Path) -> None:
    trace = _tiny(tmp_path / "t", "nojava")
    r = _analyze_cmd(trace, tmp_path / "rep", _env(PATH=str(tmp_path / "empty")))
    assert r.returncode == 1, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if not x.startswith("analyze: ")]  # the rest is progress
    assert line.startswith("multihop analyze: SparkUnavailable: no `java` on PATH and JAVA_HOME is not set")
    assert "apt-get install -y openjdk-17-jre-headless" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "rep").exists()


def test_analyze_with_a_too_old_java(tmp_path: Path) -> None:
    trace = _tiny(tmp_path / "t", "oldjava")
    _fake_java(tmp_path / "j11", "11.0.22")
    r = _analyze_cmd(trace, tmp_path / "rep", _env(PATH=str(tmp_path / "j11" / "bin")))
    assert r.returncode == 1, r.stderr
    assert "is Java 11; this PySpark needs Java 17 or newer" in r.stderr and "Traceback" not in r.stderr
    r = _analyze_cmd(trace, tmp_path / "rep", _env(JAVA_HOME=str(tmp_path / "j11"), PATH=os.defpath))
    assert r.returncode == 1 and f"JAVA_HOME={tmp_path / 'j11'} is Java 11" in r.stderr


def test_spark_failing_to_start_is_a_clear_error(tmp_path: Path) -> None:
    """A `java` that passes the version check but cannot run a JVM: spark-submit's launcher fails."""
    trace = _tiny(tmp_path / "t", "nojvm")
    _fake_java(tmp_path / "fake", "17.0.9")
    r = _analyze_cmd(trace, tmp_path / "rep", _env(PATH=f"{tmp_path / 'fake' / 'bin'}:/usr/bin:/bin"))
    assert r.returncode == 1, r.stderr
    line = [x for x in r.stderr.splitlines() if x.startswith("multihop analyze:")]
    assert line and line[0].startswith("multihop analyze: SparkUnavailable: Spark failed to start (master local[*]): ")
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("missing", ["pyspark", "matplotlib"])
def test_analyze_without_the_analysis_extra(tmp_path: Path, missing: str) -> None:
    trace = _tiny(tmp_path / "t", f"no-{missing}")
    r = _analyze_cmd(trace, tmp_path / "rep", _env(), pre=f"import sys; sys.modules[{missing!r}] = None; ")
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith(f"multihop analyze: AnalysisUnavailable: multihop analyze needs the analysis extra; missing: {missing} (")
    assert "pip install 'multihop[analysis]'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "rep").exists()


# ---------------------------------------------------------------- the CLI, in this process's Spark session


def test_cli_analyze_borrows_the_running_session(
    spark: Any,
    tmp_path: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    trace = _tiny(tmp_path / "t", "borrow")
    assert cli.main(["analyze", str(trace), "-o", str(tmp_path / "rep")]) == 0
    assert f"report: {tmp_path / 'rep' / 'report.md'}" in capsys.readouterr().out
    assert "Spark master `local[2]`" in (tmp_path / "rep" / "report.md").read_text()  # the fixture's session
    assert spark.range(5).count() == 5  # and it still runs
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()  # with nothing left cached


# ---------------------------------------------------------------- set-up: Java for PySpark

ROOT = Path(__file__).resolve().parents[2]


def _ensure_java(env: dict[str, str], as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
    cmd = [shutil.which("bash") or "/bin/bash", str(ROOT / ".ci" / "ensure-java")]
    if as_nobody and os.getuid() == 0:  # the not-root path, without installing anything
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A temporary directory other users can read (pytest's are private to root): for `nobody`."""
    d = Path(tempfile.mkdtemp(prefix="mh-java-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_setup_checks_the_java_version(open_dir: Path) -> None:
    assert "bash .ci/ensure-java" in (ROOT / ".ci" / "setup").read_text()
    tmp_path = open_dir
    for name, version in (("j11", "11.0.22"), ("j8", "1.8.0_392"), ("j21", "21.0.2")):
        _fake_java(tmp_path / name, version)
        for d in (tmp_path / name, tmp_path / name / "bin"):
            d.chmod(0o755)
    base = {"PATH": "/usr/bin:/bin"}
    ok = _ensure_java(dict(base, JAVA_HOME=str(tmp_path / "j21")))
    assert ok.returncode == 0 and ok.stderr == ""  # silent when all is well
    for name, major in (("j11", 11), ("j8", 8)):
        r = _ensure_java(dict(base, JAVA_HOME=str(tmp_path / name)))
        assert r.returncode == 1
        assert f"JAVA_HOME={tmp_path / name} is Java {major}; PySpark needs Java 17 or newer" in r.stderr
    r = _ensure_java({"PATH": f"{tmp_path / 'j11' / 'bin'}:/usr/bin:/bin"}, as_nobody=True)
    assert r.returncode == 1 and "is Java 11, too old (PySpark needs Java 17 or newer)" in r.stderr
    assert "installing it needs root" in r.stderr and "apt-get install -y openjdk-17-jre-headless" in r.stderr
    r = _ensure_java({"PATH": str(tmp_path / "empty")}, as_nobody=True)
    assert r.returncode == 1 and r.stderr.startswith("setup: Java is missing (PySpark needs Java 17 or newer)")
    assert _ensure_java({"PATH": os.environ["PATH"]}).returncode == 0  # this machine's Java


def test_a_selector_baseline_stays_within_each_suite(spark: Any, tmp_path: Path) -> None:  # noqa: F811
    traces = tmp_path / "t"
    _mixed(traces)
    run([str(traces)], tmp_path / "rep", baseline="transport=ump")
    ratios = read_csv(tmp_path / "rep" / "baseline_ratios.csv")
    assert {r["suite"] for r in ratios} == {"channels", "peers"}  # fanout, hops, ...: no ump case to match
    for r in ratios:
        case, base = r["case"], r["baseline_case"]
        assert "transport=ump" in base and f"suite={r['suite']}" in base  # the same suite's ump case
        for key in ("kind=", "size="):
            assert case.split(key)[1].split(",")[0] == base.split(key)[1].split(",")[0]
    chan = _by(
        ratios,
        suite="channels",
        case=next(r["case"] for r in ratios if r["suite"] == "channels" and "kind=oneway" in r["case"] and "size=0" in r["case"]),
    )
    assert num(chan["throughput_ratio"]) == pytest.approx(0.5)  # multihop 250k against ump 500k msg/s


# ---------------------------------------------------------------- what the plots show (issue 26 §5)


def _lat_rows(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the latency table for cases given by their parameters (as the bench suites name them)."""
    cols = ("transport", "routing", "size", "hops", "window", "src_core", "dst_core", "fanout")
    out = []
    for p in cases:
        row: dict[str, Any] = {c: p.get(c, None if c in ("transport", "routing") else -1) for c in cols}
        row.update(run_id=p.get("run_id", "r"), suite=p["suite"], kind=p["kind"], case=case_name(p), p50_ns=1000.0)
        out.append(row)
    return out


def test_cdf_legend_tells_the_plain_broker_from_dispatch() -> None:
    """Plain broker and dispatch differ only in params (path, peers): each gets its own legend entry."""
    from multihop.analysis.plots import draw_cdf

    cases = [
        {"suite": "dispatch", "kind": "oneway", "transport": "ump", "routing": "direct", "size": 64, "hops": 0, "fanout": k,
         "path": path, "peers": int(path == "dispatch")}
        for path in ("plain", "dispatch") for k in (1, 10)
    ] + [
        {"suite": "dispatch", "kind": "oneway", "transport": "ump", "routing": "direct", "size": 1024, "hops": 0, "fanout": 4,
         "op": "macro", "peers": 1, "compress": 30, "threshold": -1},
        {"suite": "dispatch", "kind": "rtt", "transport": "ump", "routing": "direct", "size": -1, "hops": 0, "fanout": 2, "op": "takeover", "peers": 3},
    ]  # fmt: skip
    rows = _lat_rows(cases)
    points = {("r", r["case"]): [(float(i + j), i / 10) for i in range(11)] for j, r in enumerate(rows)}
    fig, title, _ = draw_cdf(("r", "dispatch"), rows, points)
    fig.canvas.draw()
    box = fig.axes[0].title.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width  # the title, a long list of what varies, stays on the figure
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(legend) == 6 and len(set(legend)) == 6, legend
    assert sorted(x.split(", ")[0] for x in legend if x.startswith("path")) == ["path dispatch"] * 2 + ["path plain"] * 2
    assert sorted(x.split(", fanout ")[1] for x in legend if x.startswith("path")) == ["1", "1", "10", "10"]
    assert len(title) > 80  # long enough to need its wrap


def test_cdf_titles_say_what_the_cases_are_and_name_a_run_only_among_several() -> None:
    from multihop.analysis.plots import draw_cdf

    run = "20261206T051715Z-ce421c"
    cases = [
        {"run_id": run, "suite": "channels", "kind": "rtt", "transport": t, "routing": "direct", "size": s}
        for t in ("ump", "multihop")
        for s in (0, 64)
    ]
    rows = _lat_rows(cases)
    points = {(run, r["case"]): [(1.0, 0.0), (2.0, 1.0)] for r in rows}
    fig, title, _ = draw_cdf((run, "channels"), rows, points, runs=1)
    assert run not in title and run not in fig.axes[0].get_title()
    assert title == "Latency CDF: channels: round trips, 4 case(s) by transport, size"
    _, several, _ = draw_cdf((run, "channels"), rows, points, runs=2)
    assert several.count(run) == 1


def test_throughput_against_window_says_what_each_line_is_with_its_range() -> None:
    from multihop.analysis.plots import _window_ticks, draw_xy
    from multihop.analysis.table import Table

    cols = ["run_id", "suite", "transport", "kind", "size", "window", "cases", "throughput_msgs", "throughput_min", "throughput_max"]
    rows = [("r", "window", "multihop", "oneway", 64, w, 3, 1e5 * w, 0.8e5 * w, 1.3e5 * w) for w in (1, 4, 16, 64)]
    fig, caption = draw_xy(
        Table("throughput_by_window", "", cols, rows), x="window", title="Throughput against window", xlabel="w", axis=_window_ticks
    )
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["multi-hop one-way, 64 B"]
    (bars,) = ax.containers  # one line, with error bars: the range over the repeats
    lows = [seg[0][1] for seg in bars.lines[2][0].get_segments()]
    assert lows == pytest.approx([0.8e5 * w for w in (1, 4, 16, 64)])
    assert "range (min-max) over its repeats" in caption
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4", "16", "64"]


def test_groups_plot_ticks_sit_at_the_member_counts() -> None:
    from multihop.analysis.groups import draw_groups

    fig = draw_groups({"pipe": [(1, 40.0), (3, 90.0)], "group-radix": [(1, 60.0), (3, 80.0)]})
    ax = fig.axes[0]
    assert list(ax.get_xticks()) == [1, 3] and [t.get_text() for t in ax.get_xticklabels()] == ["1", "3"]
    assert list(ax.get_xticks(minor=True)) == []
    fig = draw_groups({"pipe": [(1, 40.0), (3, 90.0), (7, 100.0), (15, 120.0), (31, 150.0)]})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and list(ax.get_xticks()) == [1, 3, 7, 15, 31]


def test_memory_per_channel_has_an_axis_of_its_own() -> None:
    """27 MiB monitors and 0.15-0.4 MiB channels: each component its own panel, so the channels' bars are visible."""
    from multihop.analysis.plots import draw_resources

    rows = [
        {"run_id": "r", "suite": "resources", "routing": m, "transport": t, "component": comp, "repeat": rep,
         "rss_bytes": int(rss * (1 << 20) * (1 + 0.01 * rep)), "cpu_s": 0.01}
        for m in ("direct", "ring") for rep in range(3)
        for t, comp, rss in (("multihop", "monitor", 27.0), ("ump", "monitor", 26.5), ("multihop", "channel", 0.4), ("ump", "channel", 0.15))
    ]  # fmt: skip
    fig = draw_resources(rows)
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_ylabel() or ax.get_title()}
    rss = [ax for ax in fig.axes if ax.get_title() == "channel"][0]  # the first: the RSS row
    heights = [b.get_height() for b in rss.patches]
    assert min(heights) == pytest.approx(0.15, rel=0.02) and rss.get_ylim()[1] < 1.0  # not on a 30 MiB scale
    assert min(heights) / rss.get_ylim()[1] > 0.2  # the smallest bar is a fifth of its axis, not a sliver
    assert "monitor" in panels and [t.get_text() for t in rss.texts]  # bars say their value
