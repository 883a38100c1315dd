"""The ``core_pairs`` table: median round trip per core pair, for the heat maps.

Per (run, suite, routing, transport, size, src_core, dst_core), over the rtt
cases of the routing suite (and suites not from ``multihop bench``): the
channels and peers suites' 0 -> 1 cases on the machine's cores have no place
in a map of a virtual topology.  ``size = -1`` marks timed binds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multihop.analysis.collect import to_table
from multihop.analysis.latency import PERCENTILE_ACCURACY
from multihop.analysis.scope import in_scope, scope_text
from multihop.analysis.table import Table

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["PAIR_KEY", "core_pairs"]

PAIR_KEY = ["run_id", "suite", "routing", "transport", "size", "src_core", "dst_core"]
"""What one cell of a heat map is."""


def core_pairs(stats: DataFrame, messages: DataFrame) -> Table | None:
    """The ``core_pairs`` table, or ``None`` if no rtt case names both cores.

    When each core pair is one case its median is that case's p50, already
    computed; when several cases share a pair, the median of their union takes
    one more (filtered) pass over the messages.
    """
    from pyspark.sql import functions as F

    ok = in_scope("core_pairs") & (F.col("kind") == "rtt") & (F.col("src_core") >= 0) & (F.col("dst_core") >= 0)
    named = [
        F.coalesce(F.col("routing"), F.lit("(none)")).alias("routing"),
        F.coalesce(F.col("transport"), F.lit("(none)")).alias("transport"),
    ]
    cells = stats.where(ok).select("run_id", "suite", *named, "size", "src_core", "dst_core", "samples", "p50_ns")
    top = cells.groupBy(*PAIR_KEY).count().agg(F.max("count")).first()
    assert top is not None  # an aggregate without grouping has exactly one row, even over no rows
    widest = top[0]
    if widest is None:
        return None
    if widest > 1:
        lat = (F.col("recv_ns") - F.col("send_ns")).alias("lat")
        cells = (
            messages.where(ok)
            .select("run_id", "suite", *named, "size", "src_core", "dst_core", lat)
            .groupBy(*PAIR_KEY)
            .agg(
                F.count(F.lit(1)).alias("samples"),
                F.percentile_approx("lat", 0.5, PERCENTILE_ACCURACY).alias("p50_ns"),
            )
        )
    return to_table(
        cells, "core_pairs", "Median round trip per core pair (ns)", PAIR_KEY,
        doc="Median rtt of the messages from src_core to dst_core, per suite, routing mode, transport and size "
        f"(-1: timed binds); {scope_text('core_pairs')}.",
        in_report=False,
    )  # fmt: skip
