"""A computed result table: a name, a title, columns and (small, already aggregated) rows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Table"]


@dataclass
class Table:
    """One table of the report, written as ``<name>.csv`` and shown (unless ``in_report`` is false).

    Attributes:
        name: file stem of the CSV, e.g. ``"latency"``.
        title: heading in the report.
        columns: column names.
        rows: one tuple per row, in column order.
        doc: a sentence saying what the table holds (shown under the heading).
        in_report: whether the report shows the rows (long tables go to CSV only).
    """

    name: str
    title: str
    columns: list[str]
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    doc: str = ""
    in_report: bool = True

    def __len__(self) -> int:
        """Number of rows."""
        return len(self.rows)

    def records(self) -> Iterator[dict[str, Any]]:
        """Iterate over the rows as ``{column: value}`` dicts."""
        for row in self.rows:
            yield dict(zip(self.columns, row, strict=True))

    def column(self, name: str) -> list[Any]:
        """All values of one column."""
        i = self.columns.index(name)
        return [row[i] for row in self.rows]

    @classmethod
    def from_records(
        cls,
        name: str,
        title: str,
        columns: Sequence[str],
        records: Sequence[Any],
        doc: str = "",
        in_report: bool = True,
    ) -> Table:
        """Build a table from mappings or Spark ``Row`` objects (looked up by column name)."""
        rows = [tuple(r[c] for c in columns) for r in records]
        return cls(name, title, list(columns), rows, doc, in_report)
