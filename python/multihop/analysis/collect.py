"""Bringing a finished, small result from Spark into a :class:`~multihop.analysis.table.Table`.

Only final aggregates (a few rows per case, group or run) are collected; they
are sorted here, which is cheaper than an ``orderBy`` job on a few hundred rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from multihop.analysis.table import Table

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["sort_rows", "to_table"]


def _sort_key(row: Any, cols: Sequence[str]) -> tuple[Any, ...]:
    return tuple((row[c] is None, row[c] if row[c] is not None else 0) for c in cols)


def sort_rows(rows: list[Any], *cols: str) -> list[Any]:
    """Sort collected rows by ``cols`` (nulls last)."""
    return sorted(rows, key=lambda r: _sort_key(r, cols))


def to_table(
    df: DataFrame,
    name: str,
    title: str,
    order: Sequence[str],
    doc: str = "",
    in_report: bool = True,
) -> Table:
    """Collect the small final result ``df`` as a report table, rows sorted by ``order``."""
    rows = sort_rows(df.collect(), *order)
    return Table.from_records(name, title, df.columns, rows, doc=doc, in_report=in_report)
