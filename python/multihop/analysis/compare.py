"""The ``run_comparison`` table: each case found in several runs, against its first run.

Runs are ordered by ``machine.started_at`` (joined in Spark), then run id.
Ratios are run / first run for p50, p99 and throughput.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multihop.analysis.collect import to_table
from multihop.analysis.table import Table

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame

__all__ = ["run_comparison"]


def run_comparison(summary: DataFrame, machine: DataFrame | None) -> Table:
    """The ``run_comparison`` table (possibly empty) from the summary and the machine rows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if machine is not None:
        starts = machine.groupBy("run_id").agg(F.min("started_at").alias("started_at"))
        s = summary.join(F.broadcast(starts), "run_id", "left")
    else:
        s = summary.withColumn("started_at", F.lit(None).cast("string"))
    order = Window.partitionBy("suite", "case").orderBy(F.asc_nulls_last("started_at"), "run_id")
    whole = order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)

    def first(m: str) -> Column:
        return F.first(m).over(whole)

    def ratio(m: str) -> Column:
        return F.try_divide(F.col(m).cast("double"), first(m).cast("double"))

    out = (
        s.withColumn("runs", F.count(F.lit(1)).over(whole))
        .where(F.col("runs") >= 2)
        .select(
            "suite", "case", "run_id", first("run_id").alias("first_run"), "runs",
            "p50_ns", "p99_ns", "throughput_msgs",
            ratio("p50_ns").alias("p50_ratio"), ratio("p99_ns").alias("p99_ratio"),
            ratio("throughput_msgs").alias("throughput_ratio"), "started_at",
        )
    )  # fmt: skip
    table = to_table(
        out, "run_comparison", "Comparison across runs", ["suite", "case", "started_at", "run_id"],
        doc="Each case found in several runs, against its first run (by start time): run / first run. "
        "Every suite but resources.",
    )  # fmt: skip
    keep = [i for i, c in enumerate(table.columns) if c != "started_at"]
    table.columns = [table.columns[i] for i in keep]
    table.rows = [tuple(r[i] for i in keep) for r in table.rows]
    return table
