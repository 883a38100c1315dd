"""A real `multihop bench --quick` run writes a trace that `analyze` turns into a report."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import multihop.analysis as analysis

PNG = b"\x89PNG\r\n\x1a\n"


def test_quick_suites_trace_feeds_the_analysis(tmp_path: Path, spark: Any) -> None:
    out = tmp_path / "traces"
    r = subprocess.run(
        [sys.executable, "-m", "multihop.cli", "bench", "all", "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=os.environ.copy(),
    )
    assert r.returncode == 0, r.stderr
    for line in ("[6/6] channels multihop 4096 B", "[4/4] window 64", "[3/3] hops: core 0 -> core 3"):
        assert line in r.stderr  # the progress lines
    report = analysis.run([str(out)], str(tmp_path / "report"))
    assert report.name == "report.md" and report.stat().st_size > 0
    pngs = list(report.parent.glob("*.png"))
    assert pngs, "no plots"
    for p in pngs:
        data = p.read_bytes()
        assert data.startswith(PNG) and len(data) > 1000, p
    with open(report.parent / "latency.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["transport"] for r in rows} == {"ump", "multihop"}
    assert {int(r["hops"]) for r in rows if r["transport"] == "multihop"} == {1, 2, 4}
    with open(report.parent / "cost_per_hop.csv") as f:
        slope = [r for r in csv.DictReader(f) if r["transport"] == "multihop"]
    assert slope and int(slope[0]["hops_min"]) == 1 and int(slope[0]["hops_max"]) == 4
    assert (report.parent / "throughput_vs_window.png").exists()
    assert (report.parent / "latency_vs_hops.png").exists()


def test_unknown_suite_is_a_clear_error() -> None:
    r = subprocess.run([sys.executable, "-m", "multihop.cli", "bench", "nope", "--quick"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "unknown suite 'nope'" in r.stderr
