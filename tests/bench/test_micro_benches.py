"""The pytest-benchmark micro-benchmarks of benches/micro stay runnable, and stay out of the test suite.

They are run here once each with ``--benchmark-disable`` (each benchmarked
function called once, its result checked by the benchmark's own asserts), in a
fresh pytest: a micro-benchmark broken by a change fails the suite, while the
timing itself is only ever done by ``pytest benches/micro --benchmark-only``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_micro_benchmarks_run_and_are_not_collected_by_the_suite(tmp_path: Path) -> None:
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "benches/micro",
            "--benchmark-disable",
            "-q",
            "-p",
            "no:cacheprovider",
            "--benchmark-storage",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    counts = r.stdout.strip().splitlines()[-1]
    passed = re.match(r"(\d+) passed", counts)
    assert passed and int(passed.group(1)) >= 15 and "failed" not in counts and "error" not in counts, counts
