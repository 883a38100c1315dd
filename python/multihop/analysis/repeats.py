"""Per repeat and per case over the repeats: the figures the findings judge, their spread, and the load.

A suite measures each case several times (``repeat`` 0, 1, ...: see
:mod:`multihop.bench.suites.common`).  Computed in Spark:

``repeats`` (:func:`repeat_frame`)
    one row per (run, case, repeat): the case's parameters (and its
    ``params`` JSON, for matching cases across suites), the repeat's sampled
    messages and median latency (``p50_ns``, ``percentile_approx`` over that
    repeat's messages), its throughput, memory and CPU, and the load columns
    of the trace (:data:`multihop.bench.trace.LOAD_COLUMNS`).  Findings
    (:mod:`~multihop.analysis.findings`) and the consistency section
    (:mod:`~multihop.analysis.consistency`) read it.  When no case of the
    traces has a second repeat, the per-repeat median is the case's own
    (already computed: no second pass over the messages).
``spread`` (:func:`spread_frame`)
    one row per (run, case): repeats, the median and range (min-max) over the
    repeats of the median latency and of the throughput, the foreign CPU
    (median and max over the repeats), the most busy CPUs and load average,
    the monitors' parks per forwarded frame and their weights, and
    ``heavy_load`` (:func:`multihop.analysis.spread.heavy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multihop.analysis.collect import to_table
from multihop.analysis.frames import CASE_COLS, KEYS
from multihop.analysis.latency import PERCENTILE_ACCURACY
from multihop.analysis.spread import HEAVY_SHARE
from multihop.analysis.table import Table
from multihop.bench.trace import LOAD_COLUMNS

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["REPEAT_COLS", "SPREAD_COLS", "has_repeats", "repeat_frame", "repeats_table", "spread_frame", "spread_table"]

REPEAT_COLS = [
    "run_id", "suite", "case", "repeat", "kind", "transport", "routing", "size", "hops", "window", "src_core",
    "dst_core", "fanout", "params", "component", "samples", "p50_ns", "messages", "duration_ns", "throughput_msgs",
    "rss_bytes", "cpu_s", *LOAD_COLUMNS,
]  # fmt: skip
"""Columns of the ``repeats`` table."""

SPREAD_COLS = [
    "run_id", "suite", "case", "kind", "transport", "routing", "size", "hops", "window", "fanout", "repeats",
    "p50_ns", "p50_min_ns", "p50_max_ns", "throughput_msgs", "throughput_min", "throughput_max",
    "foreign_cpu", "foreign_cpu_max", "busy_cpu_max", "own_cpu", "load1_max", "parks_per_frame",
    "monitor_weight", "cores", "heavy_load",
]  # fmt: skip
"""Columns of the ``spread`` table."""


def has_repeats(messages: DataFrame | None, cases: DataFrame | None) -> bool:
    """Whether any case of the traces has a second repeat (one small aggregate: the cases, else the messages)."""
    from pyspark.sql import functions as F

    source = cases if cases is not None else messages
    if source is None:
        return False
    top = source.agg(F.max("repeat")).first()
    return bool(top is not None and top[0] is not None and top[0] > 0)


def repeat_frame(messages: DataFrame | None, cases: DataFrame | None, stats: DataFrame | None) -> DataFrame | None:
    """Per (run, case, repeat): parameters, the repeat's median latency, throughput, resources and load.

    ``cases`` must have the throughput columns (:func:`multihop.analysis.throughput.with_throughput`);
    ``stats`` is the per-case statistics (:func:`multihop.analysis.latency.case_stats`).
    """
    from pyspark.sql import functions as F

    parts = []
    if messages is not None and stats is not None:
        if has_repeats(messages, cases):
            lat = (F.col("recv_ns") - F.col("send_ns")).alias("lat")
            per = (
                messages.select(*KEYS, "repeat", lat)
                .groupBy(*KEYS, "repeat")
                .agg(F.count(F.lit(1)).alias("samples"), F.percentile_approx("lat", 0.5, PERCENTILE_ACCURACY).alias("p50_ns"))
            )
        else:
            per = stats.select(*KEYS, F.lit(0).alias("repeat"), "samples", "p50_ns")
        params = None
        if cases is None:
            params = messages.groupBy(*KEYS).agg(F.first("params").alias("params"))
        per = per.join(F.broadcast(stats.select(*KEYS, *CASE_COLS)), KEYS, "left")
        if params is not None:
            per = per.join(params, KEYS, "left")
        parts.append(per)
    if cases is not None:
        cols = [*KEYS, "repeat", *CASE_COLS, "params", "messages", "duration_ns", "throughput_msgs", "rss_bytes", "cpu_s", *LOAD_COLUMNS]
        parts.append(cases.select(*cols))
    if not parts:
        return None
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part, allowMissingColumns=True)
    present = set(union.columns)
    rest = [c for c in REPEAT_COLS if c not in (*KEYS, "repeat", "component")]
    out = (
        union.groupBy(*KEYS, "repeat")
        .agg(*[(F.first(c, ignorenulls=True) if c in present else F.lit(None)).alias(c) for c in rest])
        .withColumn("component", F.get_json_object("params", "$.component"))
    )
    return out.select(*REPEAT_COLS)


def repeats_table(frame: DataFrame) -> Table:
    """The ``repeats`` table (CSV only: one row per repeat of every case)."""
    return to_table(
        frame,
        "repeats",
        "Every repeat of every case",
        ["run_id", "suite", "case", "repeat"],
        doc="One row per (run, case, repeat): the repeat's median latency (p50_ns, over its own sampled messages), "
        "throughput, memory and CPU, and what else ran meanwhile (load1, busy_cpu, own_cpu and foreign_cpu in CPUs; "
        "the monitors' forwarded frames, parks and scheduling weight). The findings are read off these rows.",
        in_report=False,
    )


def spread_frame(repeats: DataFrame, machine: DataFrame | None) -> DataFrame:
    """Per (run, case): the median and range over the repeats, and the load (see the module docstring)."""
    from pyspark.sql import functions as F

    first = ["suite", "kind", "transport", "routing", "size", "hops", "window", "fanout"]
    g = repeats.groupBy(*KEYS).agg(
        *[F.first(c, ignorenulls=True).alias(c) for c in first],
        F.count(F.lit(1)).alias("repeats"),
        F.median("p50_ns").alias("p50_ns"),
        F.min("p50_ns").alias("p50_min_ns"),
        F.max("p50_ns").alias("p50_max_ns"),
        F.median("throughput_msgs").alias("throughput_msgs"),
        F.min("throughput_msgs").alias("throughput_min"),
        F.max("throughput_msgs").alias("throughput_max"),
        F.median("foreign_cpu").alias("foreign_cpu"),
        F.max("foreign_cpu").alias("foreign_cpu_max"),
        F.max("busy_cpu").alias("busy_cpu_max"),
        F.median("own_cpu").alias("own_cpu"),
        F.max("load1").alias("load1_max"),
        F.try_divide(F.sum("monitor_parks").cast("double"), F.sum("monitor_forwarded").cast("double")).alias("parks_per_frame"),
        F.concat_ws("/", F.array_sort(F.collect_set("monitor_weight"))).alias("monitor_weight"),
    )
    if machine is not None:
        cores = machine.groupBy("run_id").agg(F.max("cores").alias("cores"))
        g = g.join(F.broadcast(cores), "run_id", "left")
    else:
        g = g.withColumn("cores", F.lit(None).cast("int"))
    heavy = F.when(F.col("foreign_cpu_max").isNull() | F.col("cores").isNull(), F.lit(None)).otherwise(
        F.col("foreign_cpu_max") >= F.lit(HEAVY_SHARE) * F.col("cores")
    )
    return g.withColumn("monitor_weight", F.when(F.col("monitor_weight") == "", None).otherwise(F.col("monitor_weight"))).select(
        *[c for c in SPREAD_COLS if c != "heavy_load"], heavy.alias("heavy_load")
    )


def spread_table(frame: DataFrame) -> Table:
    """The ``spread`` table (CSV; the report shows it per case in its load section)."""
    return to_table(
        frame,
        "spread",
        "Spread over the repeats and load, per case",
        ["run_id", "suite", "case"],
        doc="Per case: its repeats, the median and range (min-max) over them of the median latency and of the "
        "throughput; foreign CPU (median and max over the repeats, in CPUs), the busiest CPUs and load average; "
        "the monitors' parks per forwarded frame (near 1: every hop paid a wake-up) and weights; heavy_load: "
        f"foreign CPU reached {HEAVY_SHARE:.0%} of the machine's CPUs in a repeat.",
        in_report=False,
    )
