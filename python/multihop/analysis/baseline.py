"""The ``baseline_ratios`` table: each case against its baseline case, computed in Spark.

``baseline`` may name a case: every other case of the same run and suite is
compared with it.  Or it is a selector ``column=value`` over a case column
(``transport=pipe``): each case is compared with the case of the same run,
suite, kind, size and fan-out whose column has that value (the first by name
if several).  Without ``baseline`` each case's own ``baseline`` column is
used, and ``transport=pipe`` for the cases that have none when pipe cases
exist (the peers suite).  Ratios are case / baseline: a latency ratio > 1 is
slower, a throughput ratio > 1 faster.  The resources suite is left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multihop.analysis.collect import to_table
from multihop.analysis.frames import CASE_COLS
from multihop.analysis.summary import METRICS
from multihop.analysis.table import Table
from multihop.bench.trace import TraceError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame

__all__ = ["MATCH", "baseline_ratios"]

MATCH = ["run_id", "suite", "kind", "size", "fanout"]
"""What a case shares with the baseline case a selector finds for it."""


def _selector(summary: DataFrame, selector: str) -> tuple[DataFrame | None, str]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    col, sep, value = selector.partition("=")
    col, value = col.strip(), value.strip()
    if not sep or col not in CASE_COLS:
        raise TraceError(
            f"baseline {selector!r} is neither a case name in the traces nor a selector COLUMN=VALUE over one of: {', '.join(CASE_COLS)}"
        )
    is_base = F.coalesce(F.col(col) == F.lit(value).cast(summary.schema[col].dataType), F.lit(False))
    if summary.where(is_base).limit(1).count() == 0:
        return None, f"no case has {col} = {value!r}"
    whole = (Window.unboundedPreceding, Window.unboundedFollowing)
    match = [c for c in MATCH if c != col]
    w = Window.partitionBy(*match).orderBy(F.when(is_base, 0).otherwise(1), F.col("case")).rowsBetween(*whole)
    out = summary.select(
        "*", F.first(is_base).over(w).alias("_has"), F.first("case").over(w).alias("baseline_case"),
        *[F.first(m).over(w).alias(f"b_{m}") for m in METRICS],
    ).where(F.col("_has") & ~is_base)  # fmt: skip
    how = f"each case against the case of the same run, suite, kind, size and fan-out with {col} = {value!r}"
    return out.drop("_has"), how


def _with_baseline(summary: DataFrame, baseline: str | None) -> tuple[DataFrame | None, str]:
    """Add ``baseline_case`` and ``b_<metric>`` columns to the cases that have a baseline.

    Returns (DataFrame, how) or (None, why not).  Window functions over the
    one-partition summary, no joins; which mode applies is decided by one
    small aggregate.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    whole = (Window.unboundedPreceding, Window.unboundedFollowing)
    flags = summary.agg(
        F.max(F.col("case") == F.lit(baseline or "")).alias("named"),
        F.max(F.col("baseline").isNotNull()).alias("own"),
        F.max(F.coalesce(F.col("transport") == "pipe", F.lit(False))).alias("pipe"),
    ).first()
    assert flags is not None  # an aggregate without grouping has exactly one row, even over no rows
    if baseline is not None and flags["named"]:
        is_base = F.col("case") == baseline
        w = Window.partitionBy("run_id", "suite").orderBy(F.when(is_base, 0).otherwise(1)).rowsBetween(*whole)
        out = summary.select(
            "*", F.first(is_base).over(w).alias("_has"), F.lit(baseline).alias("baseline_case"),
            *[F.first(m).over(w).alias(f"b_{m}") for m in METRICS],
        ).where(F.col("_has") & ~is_base)  # fmt: skip
        return out.drop("_has"), f"every case against case {baseline!r} of the same run and suite"
    if baseline is not None:
        return _selector(summary, baseline)
    if flags["own"]:
        w = Window.partitionBy("run_id").rowsBetween(*whole)
        entry = F.struct(*[F.col(m) for m in METRICS])
        table = F.map_from_entries(F.collect_list(F.struct(F.col("case"), entry)).over(w))
        b = F.try_element_at(table, F.col("baseline"))
        out = summary.select("*", F.col("baseline").alias("baseline_case"), b.alias("_b")).where(F.col("_b").isNotNull())
        out = out.select("*", *[F.col(f"_b.{m}").alias(f"b_{m}") for m in METRICS]).drop("_b")
        how = "each case against the baseline case named in its cases row"
        if flags["pipe"]:  # the cases that name none (the peers suite) still get their pipe baseline
            rest, _ = _selector(summary.where(F.col("baseline").isNull()), "transport=pipe")
            if rest is not None:
                out = out.unionByName(rest)
                how += "; the others against the case of the same run, suite, kind, size and fan-out with transport = 'pipe'"
        return out, how
    if not flags["pipe"]:
        return None, "no case names a baseline, no --baseline was given, and there are no pipe cases"
    return _selector(summary, "transport=pipe")


def baseline_ratios(summary: DataFrame, baseline: str | None, notes: list[str]) -> Table | None:
    """The ``baseline_ratios`` table, or ``None`` (with a note saying why).

    Raises:
        TraceError: ``baseline`` is neither a case name nor a valid ``column=value`` selector.
    """
    from pyspark.sql import functions as F

    with_base, how = _with_baseline(summary, baseline)
    if with_base is None:
        notes.append(f"Baseline ratios skipped: {how}.")
        return None

    def ratio(m: str) -> Column:
        return F.try_divide(F.col(m).cast("double"), F.col(f"b_{m}").cast("double"))

    out = with_base.select(
        "run_id", "suite", "case", "baseline_case",
        ratio("p50_ns").alias("p50_ratio"), ratio("p99_ns").alias("p99_ratio"),
        ratio("mean_ns").alias("mean_ratio"), ratio("throughput_msgs").alias("throughput_ratio"),
    )  # fmt: skip
    table = to_table(
        out, "baseline_ratios", "Ratios to the baseline", ["run_id", "case"],
        doc=f"Case / baseline, {how}: latency ratio > 1 is slower, throughput ratio > 1 is faster. "
        "Every suite but resources.",
    )  # fmt: skip
    if not table.rows:
        notes.append(f"Baseline ratios skipped: no case has a matching baseline ({how}).")
        return None
    return table
