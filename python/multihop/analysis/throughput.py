"""Throughput, computed in Spark from the cases' totals, and its tables.

``throughput_msgs = messages / duration`` and ``throughput_bytes = bytes /
duration`` (per second; null when the duration is not positive) are derived
here, not stored in the trace.  Tables:

``throughput``
    per (run, case, repeat), every suite but resources (whose totals are not a
    throughput: see the ``resources`` table).
``throughput_by_size``
    per (run, suite, transport, kind, window, size), suites channels and
    peers: the median throughput of its cases' rows (a case's repeats, or
    several cases) and their range, ``throughput_min`` to ``throughput_max``.
``throughput_by_window``
    the same per (run, suite, transport, kind, size, window), suite window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multihop.analysis.collect import to_table
from multihop.analysis.scope import in_scope, scope_text
from multihop.analysis.table import Table

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame

__all__ = ["THROUGHPUT_COLS", "throughput_tables", "with_throughput"]

THROUGHPUT_COLS = [
    "run_id", "suite", "case", "repeat", "kind", "transport", "routing", "size", "hops", "window",
    "src_core", "dst_core", "fanout", "messages", "bytes", "duration_ns", "throughput_msgs", "throughput_bytes",
]  # fmt: skip
"""Columns of the ``throughput`` table."""


def with_throughput(cases: DataFrame) -> DataFrame:
    """``cases`` with ``throughput_msgs`` and ``throughput_bytes`` (per second) added."""
    from pyspark.sql import functions as F

    seconds = F.col("duration_ns").cast("double") / 1e9
    positive = F.col("duration_ns") > 0
    return cases.select(
        "*",
        F.when(positive, F.col("messages").cast("double") / seconds).alias("throughput_msgs"),
        F.when(positive, F.col("bytes").cast("double") / seconds).alias("throughput_bytes"),
    )


def throughput_tables(cases: DataFrame) -> list[Table]:
    """The three throughput tables from the cases (with throughput, see :func:`with_throughput`)."""
    from pyspark.sql import functions as F

    has_t = F.col("throughput_msgs").isNotNull()
    by_size_keys = ["run_id", "suite", "transport", "kind", "window", "size"]
    by_window_keys = ["run_id", "suite", "transport", "kind", "size", "window"]

    def median(keys: list[str], where: Column) -> DataFrame:
        return (
            cases.where(where)
            .groupBy(*keys)
            .agg(
                F.count(F.lit(1)).alias("cases"),
                F.median("throughput_msgs").alias("throughput_msgs"),
                F.min("throughput_msgs").alias("throughput_min"),
                F.max("throughput_msgs").alias("throughput_max"),
                F.median("throughput_bytes").alias("throughput_bytes"),
            )
        )

    per_case = cases.where(in_scope("throughput")).select(*THROUGHPUT_COLS)
    by_size = median(by_size_keys, in_scope("throughput_by_size") & has_t & (F.col("size") >= 0))
    by_window = median(by_window_keys, in_scope("throughput_by_window") & has_t & (F.col("window") >= 0))
    what = "the median msg/s and B/s of its rows (cases, or repeats of one case: column cases counts them) and the range of msg/s"
    return [
        to_table(
            per_case, "throughput", "Throughput per case and repeat", ["run_id", "case", "repeat"],
            doc=f"messages / duration (msg/s) and bytes / duration (B/s) of each repeat of each case; {scope_text('throughput')}.",
        ),
        to_table(
            by_size, "throughput_by_size", "Throughput against message size", by_size_keys,
            doc=f"Per (run, suite, transport, kind, window, size): {what}; {scope_text('throughput_by_size')}.",
        ),
        to_table(
            by_window, "throughput_by_window", "Throughput against window", by_window_keys,
            doc=f"Per (run, suite, transport, kind, size, window): {what}; {scope_text('throughput_by_window')}.",
        ),
    ]  # fmt: skip
