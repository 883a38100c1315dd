"""The analysis job: the Spark computations over traces, and :func:`run`, which writes the report.

Everything over message rows runs in Spark; only aggregated results (a few
rows per case) are collected.  The message rows are read once, in one
aggregation per ``(run_id, case)``; every later table is computed in Spark
from that small result (handed back as a one-partition DataFrame) or from the
small ``cases`` table.  The messages are read again only for cases without a
cases row (to find their parameters, which otherwise come from the cases
row) and, when several cases share a core pair, for the core-pair medians.

Tables (each also written as ``<name>.csv``):

``latency``
    per (run, case): samples, mean, min, p50, p90, p99, p99.9 and max of
    ``latency = recv_ns - send_ns`` (for ``kind = "rtt"`` the round trip).
    Percentiles come from Spark's ``percentile_approx`` with accuracy
    :data:`PERCENTILE_ACCURACY` (10 000): the value returned for quantile
    ``q`` has a rank within ``q +- 1/10000`` of the case's sampled messages
    (the relative *rank* error is at most 0.01 %); min, max and mean are exact.
``latency_cdf``
    per (run, case, quantile): the latency at each of :data:`QUANTILES`
    (0, 0.01, ..., 0.99, 0.999, 1), the points of the CDF plots.
``throughput``
    per (run, case) from the ``cases`` table: messages, bytes, duration,
    msg/s, bytes/s and resources.
``throughput_by_size`` / ``throughput_by_window``
    mean throughput per (run, transport, kind, window, size) and per (run,
    transport, size, window).
``cost_per_hop``
    per (run, transport, size, kind) with at least two distinct hop counts: the
    least-squares line ``latency = intercept + slope * hops`` over all sampled
    messages and its r^2, from Spark sums of x, y, xy, xx and yy (exact, because
    hops is constant within a case).
``baseline_ratios``
    each case against its baseline case in the same run: p50, p99, mean and
    throughput ratios (case / baseline; latency ratio > 1 means slower,
    throughput ratio > 1 means faster).
``run_comparison``
    each (suite, case) present in two or more runs, against the first of them
    (by ``machine.started_at``, then run id): p50, p99 and throughput ratios.
``core_pairs``
    per (run, routing, transport, size, src_core, dst_core): median round
    trip of ``rtt`` messages; the heat maps (one per run, routing, transport
    and size; ``size = -1`` marks timed binds, which carry no payload).
``resources``
    the cases that measured memory or CPU (``rss_bytes`` / ``cpu_s``), with
    their ``component`` parameter and the CPU time per message.
``machines``
    the ``machine`` rows of the runs.

Baselines: ``baseline`` may name a case (every other case of a run is compared
with that case of the same run), or be a selector ``column=value`` over a
typed parameter column (``transport=pipe``): each case is compared with the
case of the same run, size and kind whose column has that value (the first by
name if several).  Without ``baseline`` each case's own ``baseline`` column is
used; if no case has one, ``transport=pipe`` is used when pipe cases exist.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from multihop.analysis.inputs import TraceFiles, find_traces
from multihop.analysis.spark import get_session, stop_if_created
from multihop.analysis.table import Table
from multihop.bench.trace import PARAM_COLUMNS, TraceError, table_schema

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "PERCENTILE_ACCURACY",
    "QUANTILES",
    "Analysis",
    "analyze",
    "run",
]

PERCENTILE_ACCURACY = 10_000
"""``percentile_approx`` accuracy: a returned quantile's rank is within 1/10000 of the one asked."""

QUANTILES: tuple[float, ...] = tuple(i / 100 for i in range(100)) + (0.999, 1.0)
"""The quantiles computed per case (the CDF points; p50, p90, p99 and p99.9 among them)."""

_Q_INDEX = {q: i for i, q in enumerate(QUANTILES)}
_CASE_COLS = ["suite", "kind", *PARAM_COLUMNS]
_LATENCY_COLS = [
    "run_id", "suite", "case", "kind", *PARAM_COLUMNS,
    "samples", "mean_ns", "min_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns",
]  # fmt: skip


@dataclass
class Analysis:
    """The result of :func:`analyze`: the tables, notes for the report, and the inputs."""

    tables: dict[str, Table]
    notes: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    inputs: TraceFiles | None = None


def _spark_schema(table: str) -> Any:
    from pyspark.sql import types as T

    mapping = {
        pa.string(): T.StringType(),
        pa.int64(): T.LongType(),
        pa.int32(): T.IntegerType(),
        pa.float64(): T.DoubleType(),
        pa.bool_(): T.BooleanType(),
    }
    return T.StructType(
        [T.StructField(f.name, mapping[f.type], nullable=True) for f in table_schema(table)]
    )


def _read(spark: SparkSession, files: TraceFiles, table: str) -> DataFrame | None:
    paths = [str(p) for p in files.files(table)]
    if not paths or files.rows[table] == 0:
        return None
    return spark.read.schema(_spark_schema(table)).parquet(*paths)


def _latency_stats(messages: DataFrame) -> DataFrame:
    """The one pass over the messages: per (run, case), counts, sums, min, max and quantiles.

    Grouped by (run_id, case) alone: ``percentile_approx`` runs in an object
    hash aggregation that copies the grouping key of every row, and carrying
    the ten parameter columns through it costs more than half again as much
    CPU.  The parameters come from the cases table instead (see :func:`_case_params`).
    """
    from pyspark.sql import functions as F

    lat = (F.col("recv_ns") - F.col("send_ns")).alias("lat")
    latd = F.col("lat").cast("double")
    return (
        messages.select("run_id", "case", lat)
        .groupBy("run_id", "case")
        .agg(
            F.count(F.lit(1)).alias("samples"),
            F.sum(latd).alias("sum_lat"),
            F.sum(latd * latd).alias("sumsq_lat"),
            F.min("lat").alias("min_ns"),
            F.max("lat").alias("max_ns"),
            F.sum(F.when(F.col("lat") < 0, 1).otherwise(0)).alias("negative"),
            F.percentile_approx("lat", list(QUANTILES), PERCENTILE_ACCURACY).alias("q"),
        )
    )


def _case_params(
    spark: SparkSession,
    messages: DataFrame,
    wanted: set[tuple[str, str]],
    case_rows: list[dict[str, Any]],
    notes: list[str],
) -> dict[tuple[str, str], dict[str, Any]]:
    """The parameters (suite, kind, typed columns) of each wanted (run, case).

    From the case's cases row when it has one (the writer gives a case name
    one parameter set, in both tables); for cases with messages but no cases
    row, from a pass over just their messages.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    params: dict[tuple[str, str], dict[str, Any]] = {}
    for r in case_rows:
        params.setdefault((r["run_id"], r["case"]), {c: r[c] for c in _CASE_COLS})
    missing = sorted(wanted - params.keys())
    if missing:
        schema = T.StructType(
            [T.StructField("run_id", T.StringType()), T.StructField("case", T.StringType())]
        )
        want = F.broadcast(_small(spark, missing, schema))
        found = (
            messages.join(want, ["run_id", "case"], "left_semi")
            .select("run_id", "case", *_CASE_COLS)
            .distinct()
            .collect()
        )
        clash = set()
        for r in found:
            key = (r["run_id"], r["case"])
            if (
                key in params
                and key not in clash
                and any(params[key][c] != r[c] for c in _CASE_COLS)
            ):
                clash.add(key)
            params.setdefault(key, {c: r[c] for c in _CASE_COLS})
        if clash:
            notes.append(
                f"{len(clash)} case(s) have messages with several parameter sets under one name; "
                f"the first is shown: {', '.join(f'{k[0]}/{k[1]}' for k in sorted(clash)[:5])}"
            )
    return params


def _stat_record(r: Any, params: dict[str, Any]) -> dict[str, Any]:
    q = r["q"]
    rec = {
        c: r[c] for c in ("run_id", "case", "samples", "sum_lat", "sumsq_lat", "min_ns", "max_ns")
    }
    rec.update(params)
    rec["mean_ns"] = r["sum_lat"] / r["samples"]
    rec["negative"] = r["negative"]
    for name, quant in (("p50_ns", 0.5), ("p90_ns", 0.9), ("p99_ns", 0.99), ("p999_ns", 0.999)):
        rec[name] = q[_Q_INDEX[quant]]
    rec["q"] = list(q)
    return rec


def _latency_tables(stats: list[dict[str, Any]]) -> tuple[Table, Table]:
    rows = sorted(stats, key=lambda r: (r["run_id"], r["case"]))
    cdf = [
        (r["run_id"], r["case"], quant, r["q"][i])
        for r in rows
        for i, quant in enumerate(QUANTILES)
    ]
    latency = Table.from_records(
        "latency",
        "Latency per case (ns)",
        _LATENCY_COLS,
        rows,
        doc=(
            "latency = recv_ns - send_ns of the sampled messages (the round trip for kind rtt). "
            f"Percentiles: percentile_approx, accuracy {PERCENTILE_ACCURACY} "
            f"(rank error at most 1/{PERCENTILE_ACCURACY}); mean, min and max are exact."
        ),
    )
    cdf_table = Table(
        "latency_cdf",
        "Latency CDF points (ns)",
        ["run_id", "case", "quantile", "latency_ns"],
        cdf,
        doc="The latency at each quantile 0, 0.01, ..., 0.99, 0.999, 1 of each case.",
        in_report=False,
    )
    return latency, cdf_table


_LOCAL_STAT_COLS = [
    "run_id",
    "case",
    *_CASE_COLS,
    "samples",
    "sum_lat",
    "sumsq_lat",
    "mean_ns",
    "p50_ns",
    "p99_ns",
]


def _local_stats(spark: SparkSession, stats: list[dict[str, Any]]) -> DataFrame:
    """The collected per-case statistics as a small local DataFrame for the later steps."""
    from pyspark.sql import types as T

    base = {f.name: f.dataType for f in _spark_schema("messages").fields}
    extra = {
        "samples": T.LongType(), "sum_lat": T.DoubleType(), "sumsq_lat": T.DoubleType(),
        "mean_ns": T.DoubleType(), "p50_ns": T.LongType(), "p99_ns": T.LongType(),
    }  # fmt: skip
    schema = T.StructType(
        [T.StructField(c, base.get(c) or extra[c], True) for c in _LOCAL_STAT_COLS]
    )
    return _small(spark, [tuple(r[c] for c in _LOCAL_STAT_COLS) for r in stats], schema)


def _small(spark: SparkSession, rows: list[Any], schema: Any) -> DataFrame:
    """A small local DataFrame in one partition.

    One partition makes every later aggregation, window and (hinted) join run
    without a shuffle, in a single Spark job: on a few hundred rows the job
    and stage overheads, not the data, are the cost.
    """
    return spark.createDataFrame(rows, schema).coalesce(1)


def _sort_key(row: Any, cols: Sequence[str]) -> tuple[Any, ...]:
    return tuple((row[c] is None, row[c] if row[c] is not None else 0) for c in cols)


def _sorted(rows: list[Any], *cols: str) -> list[Any]:
    """Sort collected rows by ``cols`` (nulls last); cheaper than an ``orderBy`` job."""
    return sorted(rows, key=lambda r: _sort_key(r, cols))


def _cost_per_hop(stats: DataFrame) -> Table:
    from pyspark.sql import functions as F

    h = F.col("hops").cast("double")
    n = F.col("samples").cast("double")
    g = (
        stats.where(F.col("hops") >= 0)
        .groupBy("run_id", "transport", "size", "kind")
        .agg(
            F.count(F.lit(1)).alias("cases"),
            F.countDistinct("hops").alias("hop_values"),
            F.min("hops").alias("hops_min"),
            F.max("hops").alias("hops_max"),
            F.sum(n).alias("n"),
            F.sum(n * h).alias("sx"),
            F.sum(n * h * h).alias("sxx"),
            F.sum("sum_lat").alias("sy"),
            F.sum(h * F.col("sum_lat")).alias("sxy"),
            F.sum("sumsq_lat").alias("syy"),
        )
        .where(F.col("hop_values") >= 2)
    )
    c = F.col
    sxx_c = c("n") * c("sxx") - c("sx") * c("sx")
    sxy_c = c("n") * c("sxy") - c("sx") * c("sy")
    syy_c = c("n") * c("syy") - c("sy") * c("sy")
    slope = F.try_divide(sxy_c, sxx_c)
    out = g.select(
        "run_id", "transport", "size", "kind", "cases", "hops_min", "hops_max",
        c("n").cast("long").alias("samples"),
        slope.alias("slope_ns_per_hop"),
        F.try_divide(c("sy") - slope * c("sx"), c("n")).alias("intercept_ns"),
        F.try_divide(sxy_c * sxy_c, sxx_c * syy_c).alias("r2"),
    )  # fmt: skip
    return Table.from_records(
        "cost_per_hop",
        "Cost per hop (least squares of latency against hops)",
        out.columns,
        _sorted(out.collect(), "run_id", "transport", "size", "kind"),
        doc=(
            "latency = intercept + slope * hops fitted over all sampled messages of the cases "
            "of each (run, transport, size, kind) with at least two distinct hop counts."
        ),
    )


_METRICS = ("p50_ns", "p99_ns", "mean_ns", "throughput_msgs")


def _summary(stats: DataFrame | None, cases: DataFrame | None) -> DataFrame:
    """Per (run, case): parameters, p50/p99/mean latency, throughput and baseline, in one partition.

    The union of the latency statistics and the cases rows, grouped by (run,
    case): a full outer join without the shuffles of a join.
    """
    from pyspark.sql import functions as F

    keys = ["run_id", "case"]
    parts = []
    if stats is not None:
        parts.append(stats.select(*keys, *_CASE_COLS, "samples", "mean_ns", "p50_ns", "p99_ns"))
    if cases is not None:
        parts.append(cases.select(*keys, *_CASE_COLS, "throughput_msgs", "baseline"))
    assert parts
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part, allowMissingColumns=True)
    cols = [
        c
        for c in (
            *_CASE_COLS,
            "samples",
            "mean_ns",
            "p50_ns",
            "p99_ns",
            "throughput_msgs",
            "baseline",
        )
    ]
    present = set(union.columns)
    return (
        union.coalesce(1)
        .groupBy(*keys)
        .agg(
            *[
                (F.first(c, ignorenulls=True) if c in present else F.lit(None)).alias(c)
                for c in cols
            ]
        )
    )


def _with_baseline(
    summary: DataFrame, baseline: str | None, known: list[dict[str, Any]]
) -> tuple[DataFrame | None, str]:
    """Add ``baseline_case`` and ``b_<metric>`` columns to the cases that have a baseline.

    Returns (DataFrame, how) or (None, why not).  Window functions over the
    one-partition summary, no joins.  ``known`` holds the (small, already
    collected) per-case parameter rows, so choosing the mode costs no Spark job.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    whole = (Window.unboundedPreceding, Window.unboundedFollowing)
    if baseline is not None and any(r["case"] == baseline for r in known):
        is_base = F.col("case") == baseline
        w = (
            Window.partitionBy("run_id")
            .orderBy(F.when(is_base, 0).otherwise(1))
            .rowsBetween(*whole)
        )
        out = summary.select(
            "*", F.first(is_base).over(w).alias("_has"), F.lit(baseline).alias("baseline_case"),
            *[F.first(m).over(w).alias(f"b_{m}") for m in _METRICS],
        ).where(F.col("_has") & ~is_base)  # fmt: skip
        return out.drop("_has"), f"every case against case {baseline!r} of the same run"
    selector = baseline
    if baseline is None:
        if any(r.get("baseline") for r in known):
            w = Window.partitionBy("run_id").rowsBetween(*whole)
            entry = F.struct(*[F.col(m) for m in _METRICS])
            table = F.map_from_entries(F.collect_list(F.struct(F.col("case"), entry)).over(w))
            b = F.try_element_at(table, F.col("baseline"))
            out = summary.select(
                "*", F.col("baseline").alias("baseline_case"), b.alias("_b")
            ).where(F.col("_b").isNotNull())
            out = out.select("*", *[F.col(f"_b.{m}").alias(f"b_{m}") for m in _METRICS]).drop("_b")
            return out, "each case against the baseline case named in its cases row"
        if not any(r["transport"] == "pipe" for r in known):
            return (
                None,
                "no case names a baseline, no --baseline was given, and there are no pipe cases",
            )
        selector = "transport=pipe"
    assert selector is not None
    col, sep, value = selector.partition("=")
    col, value = col.strip(), value.strip()
    if not sep or col not in _CASE_COLS:
        raise TraceError(
            f"baseline {selector!r} is neither a case name in the traces nor a selector "
            f"COLUMN=VALUE over one of: {', '.join(_CASE_COLS)}"
        )
    if not any(str(r[col]) == value for r in known):
        return None, f"no case has {col} = {value!r}"
    is_base = F.coalesce(
        F.col(col) == F.lit(value).cast(summary.schema[col].dataType), F.lit(False)
    )
    order = [F.when(is_base, 0).otherwise(1), F.col("case")]
    w = Window.partitionBy("run_id", "size", "kind").orderBy(*order).rowsBetween(*whole)
    out = summary.select(
        "*", F.first(is_base).over(w).alias("_has"), F.first("case").over(w).alias("baseline_case"),
        *[F.first(m).over(w).alias(f"b_{m}") for m in _METRICS],
    ).where(F.col("_has") & ~is_base)  # fmt: skip
    how = f"each case against the case of the same run, size and kind with {col} = {value!r}"
    return out.drop("_has"), how


def _baseline_ratios(
    summary: DataFrame, baseline: str | None, known: list[dict[str, Any]], notes: list[str]
) -> Table | None:
    from pyspark.sql import functions as F

    with_base, how = _with_baseline(summary, baseline, known)
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
    rows = _sorted(out.collect(), "run_id", "case")
    if not rows:
        notes.append(f"Baseline ratios skipped: no case has a matching baseline ({how}).")
        return None
    return Table.from_records(
        "baseline_ratios",
        "Ratios to the baseline",
        out.columns,
        rows,
        doc=f"Case / baseline, {how}: latency ratio > 1 is slower, throughput ratio > 1 is faster.",
    )


def _run_comparison(summary: DataFrame, started: dict[str, str]) -> Table:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if started:
        starts = F.create_map(*[F.lit(x) for kv in sorted(started.items()) for x in kv])
        s = summary.withColumn("started_at", F.try_element_at(starts, F.col("run_id")))
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
    rows = _sorted(out.collect(), "suite", "case", "started_at", "run_id")
    cols = [c for c in out.columns if c != "started_at"]
    return Table.from_records(
        "run_comparison",
        "Comparison across runs",
        cols,
        rows,
        doc="Each case found in several runs, against its first run (by start time): "
        "run / first run.",
    )


_THROUGHPUT_COLS = [
    "run_id", "suite", "case", "kind", *PARAM_COLUMNS, "messages", "bytes", "duration_ns",
    "throughput_msgs", "throughput_bytes", "rss_bytes", "cpu_s",
]  # fmt: skip


def _throughput_tables(cases: DataFrame, case_rows: list[Any]) -> list[Table]:
    from pyspark.sql import functions as F

    per_case = Table.from_records(
        "throughput",
        "Throughput per case",
        _THROUGHPUT_COLS,
        sorted(case_rows, key=lambda r: (r["run_id"], r["case"])),
        doc="From the cases table: messages / duration (msg/s) and bytes / duration (B/s).",
    )
    has_t = F.col("throughput_msgs").isNotNull()
    by_size = (
        cases.where(has_t & (F.col("size") >= 0))
        .groupBy("run_id", "transport", "kind", "window", "size")
        .agg(
            F.count(F.lit(1)).alias("cases"),
            F.avg("throughput_msgs").alias("throughput_msgs"),
            F.avg("throughput_bytes").alias("throughput_bytes"),
        )
    )
    by_window = (
        cases.where(has_t & (F.col("window") >= 0))
        .groupBy("run_id", "transport", "size", "window")
        .agg(F.count(F.lit(1)).alias("cases"), F.avg("throughput_msgs").alias("throughput_msgs"))
    )
    return [
        per_case,
        Table.from_records(
            "throughput_by_size", "Throughput against message size", by_size.columns,
            _sorted(by_size.collect(), "run_id", "transport", "kind", "window", "size"),
            doc="Mean msg/s and B/s of the cases of each (run, transport, kind, window, size).",
        ),
        Table.from_records(
            "throughput_by_window", "Throughput against window", by_window.columns,
            _sorted(by_window.collect(), "run_id", "transport", "size", "window"),
            doc="Mean msg/s of the cases of each (run, transport, size, window).",
        ),
    ]  # fmt: skip


_RESOURCE_COLS = [
    "run_id", "suite", "case", "transport", "routing", "component", "channels", "links", "messages",
    "duration_ns", "rss_bytes", "cpu_s", "cpu_us_per_msg",
]  # fmt: skip


def _resources(case_rows: list[dict[str, Any]]) -> Table:
    """The cases that measured memory or CPU, with their ``component`` and ``channels`` parameters."""
    rows = []
    for r in sorted(case_rows, key=lambda r: (r["run_id"], r["case"])):
        if r["rss_bytes"] is None and r["cpu_s"] is None:
            continue
        try:
            params = json.loads(r["params"])
        except ValueError:
            params = {}
        per_msg = r["cpu_s"] * 1e6 / r["messages"] if r["cpu_s"] is not None and r["messages"] else None
        rows.append((r["run_id"], r["suite"], r["case"], r["transport"], r["routing"], params.get("component"),
                     params.get("channels"), params.get("links"), r["messages"], r["duration_ns"], r["rss_bytes"], r["cpu_s"], per_msg))
    return Table(
        "resources",
        "Memory and CPU",
        list(_RESOURCE_COLS),
        rows,
        doc="Cases with rss_bytes or cpu_s (the resources suite: per monitor, per channel, idle monitor); "
        "links: monitor-to-monitor links of the routing mode; cpu_us_per_msg = cpu_s / messages.",
    )


_PAIR_COLS = ["run_id", "routing", "transport", "size", "src_core", "dst_core", "samples", "p50_ns"]


def _core_pairs(stats: list[dict[str, Any]], messages: DataFrame) -> Table:
    """Median rtt per (run, routing, transport, size, src, dst).

    When each core pair is one case its median is that case's p50, already
    computed; when several cases share a pair, the median of their union takes
    one more (filtered) pass over the messages.
    """
    from pyspark.sql import functions as F

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["run_id"], r["routing"] or "(none)", r["transport"] or "(none)", r["size"], r["src_core"], r["dst_core"])

    chosen = [r for r in stats if r["kind"] == "rtt" and r["src_core"] >= 0 and r["dst_core"] >= 0]
    keys = [key(r) for r in chosen]
    if len(set(keys)) == len(keys):
        rows = sorted((*key(r), r["samples"], r["p50_ns"]) for r in chosen)
    else:
        ok = (F.col("kind") == "rtt") & (F.col("src_core") >= 0) & (F.col("dst_core") >= 0)
        routing = F.coalesce(F.col("routing"), F.lit("(none)")).alias("routing")
        transport = F.coalesce(F.col("transport"), F.lit("(none)")).alias("transport")
        lat = (F.col("recv_ns") - F.col("send_ns")).alias("lat")
        out = (
            messages.where(ok)
            .select("run_id", routing, transport, "size", "src_core", "dst_core", lat)
            .groupBy("run_id", "routing", "transport", "size", "src_core", "dst_core")
            .agg(
                F.count(F.lit(1)).alias("samples"),
                F.percentile_approx("lat", 0.5, PERCENTILE_ACCURACY).alias("p50_ns"),
            )
        )
        rows = sorted(tuple(r[c] for c in _PAIR_COLS) for r in out.collect())
    return Table(
        "core_pairs",
        "Median round trip per core pair (ns)",
        list(_PAIR_COLS),
        rows,
        doc="Median rtt of the messages from src_core to dst_core, per routing mode, transport and size.",
        in_report=False,
    )


def analyze(spark: SparkSession, files: TraceFiles, baseline: str | None = None) -> Analysis:
    """Compute every table of the report from checked trace files in ``spark``.

    Spark jobs over the messages: one aggregation per (run, case); a pass over
    the messages of cases that have no cases row, to find their parameters;
    and, when cases share a core pair, a pass for the core-pair medians.  The
    rest run on the collected per-case rows, handed back to Spark as small
    one-partition DataFrames.

    Raises:
        TraceError: ``baseline`` is neither a case name nor a valid ``column=value`` selector.
    """
    notes: list[str] = []
    tables: dict[str, Table] = {}
    messages = _read(spark, files, "messages")
    cases_src = _read(spark, files, "cases")
    machine_src = _read(spark, files, "machine")
    known: list[dict[str, Any]] = []

    stats_df = cases_df = None
    started: dict[str, str] = {}
    case_rows: list[dict[str, Any]] = []
    if cases_src is not None:
        case_rows = [r.asDict() for r in cases_src.collect()]
        known += case_rows
        cases_df = _small(
            spark, [tuple(r[c] for c in cases_src.columns) for r in case_rows], cases_src.schema
        )
        for t in _throughput_tables(cases_df, case_rows):
            tables[t.name] = t
        resources = _resources(case_rows)
        if resources.rows:
            tables[resources.name] = resources
    else:
        notes.append("No cases rows: throughput tables skipped.")

    if messages is not None:
        raw = _latency_stats(messages).collect()
        params = _case_params(
            spark, messages, {(r["run_id"], r["case"]) for r in raw}, case_rows, notes
        )
        stats = [_stat_record(r, params[(r["run_id"], r["case"])]) for r in raw]
        known += stats
        tables["latency"], tables["latency_cdf"] = _latency_tables(stats)
        negative = sum(r["negative"] for r in stats)
        if negative:
            notes.append(f"{negative} sampled messages have recv_ns < send_ns (negative latency).")
        stats_df = _local_stats(spark, stats)
        tables["cost_per_hop"] = _cost_per_hop(stats_df)
        if not tables["cost_per_hop"].rows:
            notes.append(
                "Cost per hop skipped: no (run, transport, size, kind) group has two or more "
                "hop counts."
            )
        tables["core_pairs"] = _core_pairs(stats, messages)
        if not tables["core_pairs"].rows:
            del tables["core_pairs"]
    else:
        notes.append("No message rows: latency, CDF, cost per hop and core-pair tables skipped.")

    runs = {r["run_id"] for r in known}
    if machine_src is not None:
        cols = [f.name for f in table_schema("machine")]
        machine_rows = sorted(
            machine_src.select(*cols).collect(), key=lambda r: (r["started_at"], r["run_id"])
        )
        tables["machines"] = Table.from_records("machines", "Machines", cols, machine_rows)
        started = {r["run_id"]: r["started_at"] for r in machine_rows}
        runs |= {r["run_id"] for r in machine_rows}

    summary = _summary(stats_df, cases_df)
    ratios = _baseline_ratios(summary, baseline, known, notes)
    if ratios is not None:
        tables["baseline_ratios"] = ratios
    if len(runs) > 1:
        comparison = _run_comparison(summary, started)
        if comparison.rows:
            tables["run_comparison"] = comparison
    if "run_comparison" not in tables:
        notes.append("Comparison across runs skipped: no case appears in more than one run.")
    notes.insert(
        0, f"Percentiles are approximate: percentile_approx, accuracy {PERCENTILE_ACCURACY}."
    )
    return Analysis(tables=tables, notes=notes, runs=sorted(runs), inputs=files)


def run(
    trace_paths: Sequence[str | os.PathLike[str]],
    report_dir: str | os.PathLike[str],
    master: str | None = None,
    baseline: str | None = None,
) -> Path:
    """Analyse traces with PySpark and write the report; return the path of ``report.md``.

    ``report_dir`` receives ``report.md``, ``report.html`` (self-contained),
    one CSV per table and the PNG plots.

    Args:
        trace_paths: run directories, directories of run directories, or trace Parquet files.
        report_dir: where the report goes (created if needed).
        master: Spark master URL (see :mod:`multihop.analysis.spark` for precedence).
        baseline: a case name or a ``column=value`` selector (see the module docs).

    Raises:
        TraceError: the inputs are not valid traces, or ``baseline`` is invalid.
        SparkUnavailable: PySpark or Java is missing.
    """
    from multihop.analysis.plots import make_plots
    from multihop.analysis.report import write_report

    files = find_traces(trace_paths)  # checked before a JVM is started
    spark, created = get_session(master)
    try:
        result = analyze(spark, files, baseline)
        spark_master = spark.sparkContext.master
    finally:
        stop_if_created(spark, created)
    out = Path(report_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = make_plots(result.tables, out)
    return write_report(out, result, plots, spark_master=spark_master)
