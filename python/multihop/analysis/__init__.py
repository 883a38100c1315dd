"""PySpark analysis of benchmark traces: percentiles, throughput, cost per hop, comparisons, plots.

``run(trace_paths, report_dir, master=None, baseline=None)`` checks the traces,
computes the tables in Spark and writes ``report.md``, ``report.html``, one CSV
per table and PNG plots; ``main(argv)`` is the ``multihop analyze`` command.
pyarrow, PySpark and matplotlib (the ``analysis`` extra) are imported only
when an analysis runs, and checked first (importing this package needs none
of them).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from multihop.analysis.deps import AnalysisUnavailable
from multihop.analysis.spark import SparkUnavailable

__all__ = ["AnalysisUnavailable", "SparkUnavailable", "TraceError", "main", "run"]


def __getattr__(name: str) -> Any:
    """``TraceError`` on first use: it lives with the trace schema, which needs pyarrow (an extra)."""
    if name == "TraceError":
        from multihop.bench.trace import TraceError

        return TraceError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run(
    trace_paths: Sequence[str | os.PathLike[str]],
    report_dir: str | os.PathLike[str],
    master: str | None = None,
    baseline: str | None = None,
) -> Path:
    """Analyse traces and write the report; return the path of ``report.md``.

    See :func:`multihop.analysis.job.run`.
    """
    from multihop.analysis.job import run as _run

    return _run(trace_paths, report_dir, master=master, baseline=baseline)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``multihop analyze`` command; see :func:`multihop.analysis.command.main`."""
    from multihop.analysis.command import main as _main

    return _main(argv)
