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


def test_channels_suite_trace_feeds_the_analysis(tmp_path: Path, spark: Any) -> None:
    out = tmp_path / "traces"
    r = subprocess.run(
        [sys.executable, "-m", "multihop.cli", "bench", "channels", "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=os.environ.copy(),
    )
    assert r.returncode == 0, r.stderr
    assert "[6/6] channels multihop 4096 B" in r.stderr  # the progress lines
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
    assert {int(r["hops"]) for r in rows if r["transport"] == "multihop"} == {2}
    assert all(int(r["samples"]) == 300 for r in rows)


def test_unknown_suite_is_a_clear_error() -> None:
    r = subprocess.run([sys.executable, "-m", "multihop.cli", "bench", "nope", "--quick"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "unknown suite 'nope'" in r.stderr
