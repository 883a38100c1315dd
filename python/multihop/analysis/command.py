"""The ``multihop analyze`` command: arguments in, report out.

``main(argv)`` runs it stand-alone; a CLI with sub-commands can instead call
:func:`add_arguments` on its ``analyze`` sub-parser and :func:`run_args` with
the parsed namespace.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from multihop.errors import MultihopError

__all__ = ["DEFAULT_REPORT_DIR", "add_arguments", "build_parser", "main", "run_args"]

DEFAULT_REPORT_DIR = "report"
"""Where the report goes when ``-o`` is not given (relative to the working directory)."""

DESCRIPTION = (
    "Analyse benchmark traces with PySpark: percentiles, throughput, cost per hop, "
    "comparisons and plots, written as report.md, report.html, CSVs and PNGs."
)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``analyze`` arguments (TRACES, -o, --master, --baseline) to ``parser``; return it."""
    parser.add_argument(
        "traces",
        nargs="+",
        metavar="TRACES",
        help="run directories, directories of run directories, or trace Parquet files",
    )
    parser.add_argument(
        "-o", "--output", default=DEFAULT_REPORT_DIR, metavar="REPORT_DIR",
        help=f"report directory (default: ./{DEFAULT_REPORT_DIR})",
    )  # fmt: skip
    parser.add_argument(
        "--master", default=None, metavar="URL",
        help="Spark master (default: $MULTIHOP_SPARK_MASTER or local[*]; spark-submit's wins)",
    )  # fmt: skip
    parser.add_argument(
        "--baseline", default=None, metavar="CASE",
        help="compare the cases of each run and suite with this case, or each case with the case of "
        "the same run, suite, kind, size and fan-out selected by COLUMN=VALUE (e.g. transport=ump); "
        "default: each case's own baseline column, else transport=pipe",
    )  # fmt: skip
    return parser


def build_parser(prog: str = "multihop analyze") -> argparse.ArgumentParser:
    """Return the stand-alone argument parser of ``multihop analyze``."""
    return add_arguments(argparse.ArgumentParser(prog=prog, description=DESCRIPTION))


def run_args(args: argparse.Namespace) -> int:
    """Run the analysis for parsed arguments; print where the report is; return 0.

    Stdout gets the report's paths only; progress (one line per stage) goes to
    stderr, and the Spark JVM's own output to a log file (see
    :mod:`multihop.analysis.spark`).

    Raises:
        MultihopError: bad traces or baseline (TraceError), a missing analysis
            extra, Java or Spark (AnalysisUnavailable); the caller reports it.
    """
    from multihop.analysis.deps import require_extras

    require_extras()  # before the job's modules import pyarrow
    from multihop.analysis.job import run

    report = run(
        args.traces,
        args.output,
        master=args.master,
        baseline=args.baseline,
        progress=lambda line: print(f"analyze: {line}", file=sys.stderr, flush=True),
    )
    print(f"report: {report}")
    print(f"        {report.with_name('report.html')}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``multihop analyze`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    0 on success; 1 with a one-line error on stderr when the traces, the
    baseline, the analysis extra, Java or Spark are not right (as every
    ``multihop`` subcommand).
    """
    args = build_parser().parse_args(argv)
    try:
        return run_args(args)
    except MultihopError as exc:
        print(f"multihop analyze: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
