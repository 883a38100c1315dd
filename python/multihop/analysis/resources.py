"""The ``resources`` table: the cases that measured memory or CPU (one row per repeat), computed in Spark.

The cases with ``rss_bytes`` or ``cpu_s`` (the resources suite: per monitor,
per channel, idle monitor), with the ``component``, ``channels`` and
``links`` parameters read from their ``params`` JSON and the CPU time per
message (``cpu_s / messages``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multihop.analysis.collect import to_table
from multihop.analysis.scope import in_scope
from multihop.analysis.table import Table

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame

__all__ = ["RESOURCE_COLS", "resources_table"]

RESOURCE_COLS = [
    "run_id", "suite", "case", "repeat", "transport", "routing", "component", "channels", "links", "messages",
    "duration_ns", "rss_bytes", "cpu_s", "cpu_us_per_msg",
]  # fmt: skip
"""Columns of the ``resources`` table."""


def resources_table(cases: DataFrame) -> Table | None:
    """The ``resources`` table, or ``None`` if no case measured memory or CPU."""
    from pyspark.sql import functions as F

    def param(name: str) -> Column:
        return F.get_json_object("params", f"$.{name}")

    out = cases.where(in_scope("resources") & (F.col("rss_bytes").isNotNull() | F.col("cpu_s").isNotNull())).select(
        "run_id", "suite", "case", "repeat", "transport", "routing",
        param("component").alias("component"),
        param("channels").cast("long").alias("channels"),
        param("links").cast("long").alias("links"),
        "messages", "duration_ns", "rss_bytes", "cpu_s",
        F.when(F.col("messages") > 0, F.col("cpu_s") * 1e6 / F.col("messages")).alias("cpu_us_per_msg"),
    )  # fmt: skip
    table = to_table(
        out, "resources", "Memory and CPU", ["run_id", "case", "repeat"],
        doc="Each repeat of the cases with rss_bytes or cpu_s (the resources suite: per monitor, per channel, idle monitor); "
        "links: monitor-to-monitor links of the routing mode; cpu_us_per_msg = cpu_s / messages.",
    )  # fmt: skip
    return table if table.rows else None
