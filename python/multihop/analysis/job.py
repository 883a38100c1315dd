"""The analysis job: every table of the report, computed in Spark, and :func:`run`, which writes it.

Everything runs in Spark; only small final results (the report's tables: a
few rows per case, group or run) are collected.  The message rows are read
once, in one aggregation per ``(run_id, case)`` (:mod:`~multihop.analysis.latency`),
cached with the cases' parameters joined in; the cases table gets its
throughput columns in Spark (:mod:`~multihop.analysis.throughput`) and is
cached too.  Every later table starts from those two DataFrames.  The
messages are read again only for cases without a cases row (to find their
parameters) and, when several cases share a core pair, for the core-pair
medians.

Tables (each also written as ``<name>.csv``; which suites each covers is in
:mod:`multihop.analysis.scope`): ``latency`` and ``latency_cdf``
(:mod:`~multihop.analysis.latency`), ``throughput``, ``throughput_by_size`` and
``throughput_by_window`` (:mod:`~multihop.analysis.throughput`),
``cost_per_hop`` (:mod:`~multihop.analysis.cost`), ``baseline_ratios``
(:mod:`~multihop.analysis.baseline`), ``run_comparison``
(:mod:`~multihop.analysis.compare`), ``core_pairs``
(:mod:`~multihop.analysis.pairs`), ``resources``
(:mod:`~multihop.analysis.resources`), ``ges_latency`` (:mod:`~multihop.analysis.ges`, the GES
testbed), ``machines`` (the runs' machine rows), ``repeats`` and ``spread``
(:mod:`~multihop.analysis.repeats`: every repeat of every case with its load,
and per case the spread over the repeats), ``findings``
(:mod:`~multihop.analysis.findings`: the headline figures of each suite with
their spread, baseline and verdict, read off ``repeats``) and
``consistency`` (:mod:`~multihop.analysis.consistency`: figures measured by
two suites of one run, side by side).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from multihop.analysis.baseline import baseline_ratios
from multihop.analysis.collect import to_table
from multihop.analysis.compare import run_comparison
from multihop.analysis.consistency import consistency_table
from multihop.analysis.cost import cost_per_hop
from multihop.analysis.findings import findings_table
from multihop.analysis.frames import read_table
from multihop.analysis.ges import ges_table
from multihop.analysis.inputs import TraceFiles, find_traces
from multihop.analysis.latency import PERCENTILE_ACCURACY, QUANTILES, case_stats, latency_tables
from multihop.analysis.pairs import core_pairs
from multihop.analysis.repeats import repeat_frame, repeats_table, spread_frame, spread_table
from multihop.analysis.resources import resources_table
from multihop.analysis.result import Analysis
from multihop.analysis.summary import summary
from multihop.analysis.table import Table
from multihop.analysis.throughput import throughput_tables, with_throughput
from multihop.bench.trace import table_schema

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["PERCENTILE_ACCURACY", "QUANTILES", "Analysis", "analyze", "run"]


def _run_ids(frames: list[DataFrame]) -> list[str]:
    """Every run id in ``frames`` (one small distinct aggregate)."""
    union = frames[0].select("run_id")
    for f in frames[1:]:
        union = union.unionByName(f.select("run_id"))
    return sorted(r["run_id"] for r in union.distinct().collect())


def analyze(spark: SparkSession, files: TraceFiles, baseline: str | None = None) -> Analysis:
    """Compute every table of the report from checked trace files in ``spark``.

    Cached DataFrames are released before returning, so a borrowed session
    is left as it was.

    Raises:
        TraceError: ``baseline`` is neither a case name nor a valid ``column=value`` selector.
    """
    notes: list[str] = []
    tables: dict[str, Table] = {}
    messages = read_table(spark, files, "messages")
    cases_src = read_table(spark, files, "cases")
    machine = read_table(spark, files, "machine")
    cached: list[DataFrame] = []
    try:
        cases = None
        if cases_src is not None:
            cases = with_throughput(cases_src).cache()
            cached.append(cases)
            for t in throughput_tables(cases):
                tables[t.name] = t
            resources = resources_table(cases)
            if resources is not None:
                tables[resources.name] = resources
        else:
            notes.append("No cases rows: throughput tables skipped.")

        stats = None
        if messages is not None:
            cs = case_stats(messages, cases)
            stats = cs.frame
            cached += cs.cached
            notes += cs.notes
            tables["latency"], tables["latency_cdf"], more = latency_tables(stats)
            notes += more
            tables["cost_per_hop"] = cost_per_hop(stats)
            if not tables["cost_per_hop"].rows:
                notes.append(
                    "Cost per hop skipped: no (run, suite, transport, routing, kind, size, window, fanout) "
                    "group of the hops or routing suites has two or more hop counts."
                )
            pairs = core_pairs(stats, messages)
            if pairs is not None and pairs.rows:
                tables["core_pairs"] = pairs
        else:
            notes.append("No message rows: latency, CDF, cost per hop and core-pair tables skipped.")

        if machine is not None:
            cols = [f.name for f in table_schema("machine")]
            tables["machines"] = to_table(machine.select(*cols), "machines", "Machines", ["started_at", "run_id"])

        ges = ges_table(stats, cases)
        if ges is not None:
            tables[ges.name] = ges

        per_repeat = repeat_frame(messages, cases, stats)
        if per_repeat is not None:
            per_repeat = per_repeat.cache()
            cached.append(per_repeat)
            tables["repeats"] = repeats_table(per_repeat)
            tables["spread"] = spread_table(spread_frame(per_repeat, machine))

        runs = _run_ids([f for f in (stats, cases, machine) if f is not None])
        per_case = summary(stats, cases)
        cached.append(per_case)
        ratios = baseline_ratios(per_case, baseline, notes)
        if ratios is not None:
            tables["baseline_ratios"] = ratios
        if len(runs) > 1:
            comparison = run_comparison(per_case, machine)
            if comparison.rows:
                tables["run_comparison"] = comparison
        if "run_comparison" not in tables:
            notes.append("Comparison across runs skipped: no case appears in more than one run.")
    finally:
        for df in cached:
            df.unpersist()
    found = findings_table(tables)
    if found.rows:
        tables["findings"] = found
    else:
        notes.append("Findings skipped: none of the suites of multihop bench is in the traces (see the tables).")
    agree = consistency_table(tables)
    if agree is not None:
        tables["consistency"] = agree
    notes.insert(0, f"Percentiles are approximate: percentile_approx, accuracy {PERCENTILE_ACCURACY}.")
    return Analysis(tables=tables, notes=notes, runs=runs, inputs=files)


def run(
    trace_paths: Sequence[str | os.PathLike[str]],
    report_dir: str | os.PathLike[str],
    master: str | None = None,
    baseline: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Analyse traces with PySpark and write the report; return the path of ``report.md``.

    ``report_dir`` receives ``report.md``, ``report.html`` (self-contained),
    one CSV per table and the PNG plots; the files an earlier analysis wrote
    there are removed first (other files are left alone).  The inputs are
    checked, and the analysis extras and Java looked for, before Spark starts.

    Args:
        trace_paths: run directories, directories of run directories, or trace Parquet files.
        report_dir: where the report goes (created if needed).
        master: Spark master URL (see :mod:`multihop.analysis.spark` for precedence).
        baseline: a case name or a ``column=value`` selector (see :mod:`multihop.analysis.baseline`).
        progress: called with a short line as each stage starts (``multihop analyze`` prints them on stderr).

    Raises:
        TraceError: the inputs are not valid traces, or ``baseline`` is invalid.
        AnalysisUnavailable: PySpark or matplotlib is missing (``pip install multihop[analysis]``).
        SparkUnavailable: no Java (or one too old), or Spark failed to start.
    """
    from multihop.analysis.deps import require_extras

    require_extras()
    from multihop.analysis.outputs import clear_previous, write_manifest
    from multihop.analysis.plots import make_plots
    from multihop.analysis.report import write_report
    from multihop.analysis.spark import get_session, stop_if_created

    say = progress or (lambda _line: None)
    files = find_traces(trace_paths)  # checked before a JVM is started
    n_files = sum(len(files.files(t)) for t in files.rows)
    say(f"traces: {n_files} file(s), {files.rows.get('messages', 0):,} message rows, {files.rows.get('cases', 0):,} cases")
    say("starting Spark" + (f" (master {master})" if master else ""))
    spark, created = get_session(master)
    try:
        say(f"computing the tables in Spark (master {spark.sparkContext.master})")
        result = analyze(spark, files, baseline)
        spark_master = spark.sparkContext.master
    finally:
        stop_if_created(spark, created)
    out = Path(report_dir)
    out.mkdir(parents=True, exist_ok=True)
    clear_previous(out)
    say(f"drawing the plots ({len(result.tables)} tables)")
    plots = make_plots(result.tables, out)
    say(f"writing the report: {len(result.tables.get('findings', ()))} finding(s), {len(plots.plots)} plot(s)")
    report = write_report(out, result, plots, spark_master=spark_master or "")
    write_manifest(out, result.tables, plots)
    return report
