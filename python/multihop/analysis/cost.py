"""Cost per hop: the least-squares line of latency against the monitors on the path.

Per (run, suite, transport, routing, kind, size, window, fanout) with at least
two distinct hop counts, over all sampled messages of the cases of the suites
about hops (``hops`` and ``routing``, see :mod:`multihop.analysis.scope`):
``latency = intercept + slope * hops`` and its r^2, from Spark sums of x, y,
xy, xx and yy per case (exact, because hops is constant within a case).
Grouping by suite and by every other parameter keeps, say, fanout's k
sequential round trips out of the hops suite's line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multihop.analysis.collect import to_table
from multihop.analysis.scope import in_scope, scope_text
from multihop.analysis.table import Table

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["GROUP", "cost_per_hop"]

GROUP = ["run_id", "suite", "transport", "routing", "kind", "size", "window", "fanout"]
"""What one fitted line is over (the latency-against-hops plot draws one series per group)."""


def cost_per_hop(stats: DataFrame) -> Table:
    """The ``cost_per_hop`` table from the per-case statistics."""
    from pyspark.sql import functions as F

    c = F.col
    h = c("hops").cast("double")
    n = c("samples").cast("double")
    g = (
        stats.where(in_scope("cost_per_hop") & (c("hops") >= 0))
        .groupBy(*GROUP)
        .agg(
            F.count(F.lit(1)).alias("cases"),
            F.countDistinct("hops").alias("hop_values"),
            F.min("hops").alias("hops_min"),
            F.max("hops").alias("hops_max"),
            F.sum(n).alias("n"),
            F.sum(n * h).alias("sx"),
            F.sum(n * h * h).alias("sxx"),
            F.sum("sum_lat").alias("sy"),
            F.sum(h * c("sum_lat")).alias("sxy"),
            F.sum("sumsq_lat").alias("syy"),
        )
        .where(c("hop_values") >= 2)
    )
    sxx_c = c("n") * c("sxx") - c("sx") * c("sx")
    sxy_c = c("n") * c("sxy") - c("sx") * c("sy")
    syy_c = c("n") * c("syy") - c("sy") * c("sy")
    slope = F.try_divide(sxy_c, sxx_c)
    out = g.select(
        *GROUP, "cases", "hops_min", "hops_max",
        c("n").cast("long").alias("samples"),
        slope.alias("slope_ns_per_hop"),
        F.try_divide(c("sy") - slope * c("sx"), c("n")).alias("intercept_ns"),
        F.try_divide(sxy_c * sxy_c, sxx_c * syy_c).alias("r2"),
    )  # fmt: skip
    return to_table(
        out,
        "cost_per_hop",
        "Cost per hop (least squares of latency against hops)",
        GROUP,
        doc=(
            "latency = intercept + slope * hops fitted over all sampled messages of the cases of each "
            "(run, suite, transport, routing, kind, size, window, fanout) with at least two distinct hop "
            f"counts; {scope_text('cost_per_hop')}. Size -1: timed binds."
        ),
    )
