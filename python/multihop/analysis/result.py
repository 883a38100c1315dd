"""The result of an analysis: its tables, the notes for the report, the runs and the inputs.

:func:`multihop.analysis.job.analyze` makes it; the report (:mod:`~multihop.analysis.report`) and the
outputs read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from multihop.analysis.inputs import TraceFiles
from multihop.analysis.table import Table

__all__ = ["Analysis"]


@dataclass
class Analysis:
    """The result of :func:`~multihop.analysis.job.analyze`: the tables, notes for the report, and the inputs."""

    tables: dict[str, Table]
    notes: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    inputs: TraceFiles | None = None
