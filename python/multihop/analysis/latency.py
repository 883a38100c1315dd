"""Per-case latency: the one pass over the message rows, the cases' parameters, percentiles and CDF.

``latency = recv_ns - send_ns`` of the sampled messages (the round trip for
``kind = "rtt"``).  Percentiles come from Spark's ``percentile_approx`` with
accuracy :data:`PERCENTILE_ACCURACY` (10 000): the value returned for quantile
``q`` has a rank within ``q +- 1/10000`` of the case's sampled messages; min,
max and mean are exact.

A percentile says something only when the case has enough samples to resolve
it: the p99.9 of 125 samples is the maximum.  So the ``latency`` table shows
p90, p99 and p99.9 only for cases with at least 10, 100 and 1000 samples
(:data:`RESOLUTION`) and leaves them empty otherwise; the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from multihop.analysis.frames import CASE_COLS, KEYS
from multihop.analysis.table import Table

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = [
    "LATENCY_COLS",
    "PERCENTILE_ACCURACY",
    "QUANTILES",
    "RESOLUTION",
    "CaseStats",
    "case_stats",
    "latency_tables",
]

PERCENTILE_ACCURACY = 10_000
"""``percentile_approx`` accuracy: a returned quantile's rank is within 1/10000 of the one asked."""

QUANTILES: tuple[float, ...] = tuple(i / 100 for i in range(100)) + (0.999, 1.0)
"""The quantiles computed per case (the CDF points; p50, p90, p99 and p99.9 among them)."""

RESOLUTION: dict[str, tuple[float, int]] = {
    "p50_ns": (0.5, 1),
    "p90_ns": (0.9, 10),
    "p99_ns": (0.99, 100),
    "p999_ns": (0.999, 1000),
}
"""Per percentile column: its quantile and the samples a case needs for it to be shown."""

_Q_INDEX = {q: i for i, q in enumerate(QUANTILES)}

LATENCY_COLS = [
    "run_id", "suite", "case", "kind", "transport", "routing", "size", "hops", "window",
    "src_core", "dst_core", "fanout", "repeats",
    "samples", "mean_ns", "min_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns",
]  # fmt: skip
"""Columns of the ``latency`` table."""


@dataclass
class CaseStats:
    """The per-case statistics: ``frame`` stays in Spark (cached) for the later tables.

    ``cached`` lists every DataFrame cached on the way (``frame`` included),
    for the caller to unpersist when the analysis is over.
    """

    frame: DataFrame
    notes: list[str] = field(default_factory=list)
    cached: list[DataFrame] = field(default_factory=list)


def _raw_stats(messages: DataFrame) -> DataFrame:
    """The one pass over the messages: per (run, case), counts, sums, min, max and quantiles.

    Grouped by (run_id, case) alone: ``percentile_approx`` runs in an object
    hash aggregation that copies the grouping key of every row, and carrying
    the ten parameter columns through it costs more than half again as much
    CPU.  The parameters are joined in afterwards (see :func:`_params`).
    """
    from pyspark.sql import functions as F

    lat = (F.col("recv_ns") - F.col("send_ns")).alias("lat")
    latd = F.col("lat").cast("double")
    return (
        messages.select(*KEYS, "repeat", lat)
        .groupBy(*KEYS)
        .agg(
            F.count(F.lit(1)).alias("samples"),
            (F.max("repeat") + 1).alias("repeats"),
            F.sum(latd).alias("sum_lat"),
            F.sum(latd * latd).alias("sumsq_lat"),
            F.min("lat").alias("min_ns"),
            F.max("lat").alias("max_ns"),
            F.sum(F.when(F.col("lat") < 0, 1).otherwise(0)).alias("negative"),
            F.percentile_approx("lat", list(QUANTILES), PERCENTILE_ACCURACY).alias("q"),
        )
    )


def _params(raw: DataFrame, messages: DataFrame, cases: DataFrame | None, notes: list[str], cached: list[DataFrame]) -> DataFrame:
    """The parameters (suite, kind, typed columns) of every case in ``raw``.

    From the case's cases row when it has one (the writer gives a case name
    one parameter set, in both tables); for cases with messages but no cases
    row, from a pass over just their messages.
    """
    from pyspark.sql import functions as F

    parts = []
    keys_with_params = None
    if cases is not None:
        from_cases = cases.select(*KEYS, *CASE_COLS).dropDuplicates(KEYS)
        parts.append(from_cases)
        keys_with_params = from_cases.select(*KEYS)
    missing = raw.select(*KEYS)
    if keys_with_params is not None:
        missing = missing.join(F.broadcast(keys_with_params), KEYS, "left_anti")
    if keys_with_params is None or missing.limit(1).count() > 0:
        found = (
            messages.join(F.broadcast(missing), KEYS, "left_semi")
            .groupBy(*KEYS)
            .agg(
                *[F.first(c).alias(c) for c in CASE_COLS],
                F.size(F.collect_set(F.struct(*CASE_COLS))).alias("_variants"),
            )
            .cache()
        )
        cached.append(found)
        clash = sorted((r["run_id"], r["case"]) for r in found.where(F.col("_variants") > 1).select(*KEYS).collect())
        if clash:
            notes.append(
                f"{len(clash)} case(s) have messages with several parameter sets under one name; "
                f"one is shown: {', '.join(f'{k[0]}/{k[1]}' for k in clash[:5])}"
            )
        parts.append(found.drop("_variants"))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def case_stats(messages: DataFrame, cases: DataFrame | None) -> CaseStats:
    """Per (run, case): parameters, samples, sums, mean, min, max, the percentiles and the quantile array.

    The percentile columns are empty where the case has too few samples (see
    :data:`RESOLUTION`); ``q`` keeps every quantile of :data:`QUANTILES` (the CDF).
    The result is cached (see :attr:`CaseStats.cached`): every later table starts from it.
    """
    from pyspark.sql import functions as F

    notes: list[str] = []
    raw = _raw_stats(messages).cache()
    cached = [raw]
    params = _params(raw, messages, cases, notes, cached)
    n = F.col("samples")
    percentiles = [F.when(n >= need, F.col("q")[_Q_INDEX[q]]).alias(name) for name, (q, need) in RESOLUTION.items()]
    frame = (
        raw.join(F.broadcast(params), KEYS, "left")
        .select(
            *KEYS,
            *CASE_COLS,
            "repeats",
            "samples",
            "sum_lat",
            "sumsq_lat",
            (F.col("sum_lat") / n).alias("mean_ns"),
            "min_ns",
            "max_ns",
            *percentiles,
            "negative",
            "q",
        )  # fmt: skip
        .cache()
    )
    cached.append(frame)
    return CaseStats(frame, notes, cached)


def latency_tables(stats: DataFrame) -> tuple[Table, Table, list[str]]:
    """The ``latency`` and ``latency_cdf`` tables (one collect of the per-case rows) and notes."""
    from multihop.analysis.collect import sort_rows

    rows = sort_rows(stats.select(*LATENCY_COLS, "negative", "q").collect(), "run_id", "case")
    latency = Table.from_records(
        "latency",
        "Latency per case (ns)",
        LATENCY_COLS,
        rows,
        doc=(
            "latency = recv_ns - send_ns of the sampled messages of every repeat of the case (the round trip for "
            "kind rtt), every suite; the spread between repeats is in spread.csv. "
            f"Percentiles: percentile_approx, accuracy {PERCENTILE_ACCURACY} "
            f"(rank error at most 1/{PERCENTILE_ACCURACY}); mean, min and max are exact. "
            "p90, p99 and p99.9 are left empty for cases with fewer than 10, 100 and 1000 samples."
        ),
    )
    cdf = Table(
        "latency_cdf",
        "Latency CDF points (ns)",
        ["run_id", "suite", "case", "quantile", "latency_ns"],
        [(r["run_id"], r["suite"], r["case"], q, r["q"][i]) for r in rows for i, q in enumerate(QUANTILES)],
        doc="The latency at each quantile 0, 0.01, ..., 0.99, 0.999, 1 of each case.",
        in_report=False,
    )
    notes = []
    negative = sum(r["negative"] for r in rows)
    if negative:
        notes.append(f"{negative} sampled messages have recv_ns < send_ns (negative latency).")
    hidden = [
        f"{name[:-3].replace('p999', 'p99.9')} for {k} case(s) (fewer than {need} samples)"
        for name, (_, need) in RESOLUTION.items()
        if need > 1 and (k := sum(1 for r in rows if r["samples"] < need))
    ]
    if hidden:
        notes.append(
            "Percentiles beyond a case's sample resolution are not shown (a p99.9 needs 1000 samples, a p99 "
            f"100, a p90 10): left empty are {'; '.join(hidden)}. Trace more round trips "
            "(multihop bench without --quick, or a smaller --trace-every) to see them."
        )
    return latency, cdf, notes
