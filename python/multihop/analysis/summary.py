"""Per case, the figures the comparisons use: p50, p99 and mean latency, throughput and the baseline column.

The union of the per-case latency statistics (over every repeat's messages)
and the cases (with throughput: the median over the case's repeats),
grouped by (run, case) in one partition: a full outer join without the
shuffles of a join.  Computed in Spark and cached; only the comparison
tables built on it are collected.  The resources suite's cases are left out
(memory and CPU are not compared as latency or throughput).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multihop.analysis.frames import CASE_COLS, KEYS
from multihop.analysis.scope import in_scope

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["METRICS", "summary"]

METRICS = ("p50_ns", "p99_ns", "mean_ns", "throughput_msgs")
"""The figures a case is compared on (p99 is empty for cases with fewer than 100 samples; throughput is the median over the repeats)."""


def summary(stats: DataFrame | None, cases: DataFrame | None) -> DataFrame:
    """Per (run, case): parameters, samples, p50/p99/mean latency, throughput and baseline (cached)."""
    from pyspark.sql import functions as F

    parts = []
    if stats is not None:
        parts.append(stats.select(*KEYS, *CASE_COLS, "samples", "mean_ns", "p50_ns", "p99_ns"))
    if cases is not None:
        per_case = cases.groupBy(*KEYS).agg(
            *[F.first(c, ignorenulls=True).alias(c) for c in (*CASE_COLS, "baseline")],
            F.median("throughput_msgs").alias("throughput_msgs"),
        )
        parts.append(per_case.select(*KEYS, *CASE_COLS, "throughput_msgs", "baseline"))
    if not parts:
        raise ValueError("a summary needs the latency statistics or the cases")
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part, allowMissingColumns=True)
    cols = [*CASE_COLS, "samples", "mean_ns", "p50_ns", "p99_ns", "throughput_msgs", "baseline"]
    present = set(union.columns)
    return (
        union.where(in_scope("baseline_ratios"))
        .coalesce(1)
        .groupBy(*KEYS)
        .agg(*[(F.first(c, ignorenulls=True) if c in present else F.lit(None)).alias(c) for c in cols])
        .cache()
    )
