"""The files a report consists of: removing an earlier analysis's before writing anew.

An analysis writes ``report.md``, ``report.html``, one CSV per table and
PNG plots whose names depend on the runs, and lists them all in
:data:`MANIFEST`.  Before writing, the files listed in an earlier manifest
and the report's fixed names are removed, so no plot or table of an earlier
analysis is left behind; any other file in the directory is left alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from multihop.analysis.plots import PlotSet
from multihop.analysis.report import TABLE_ORDER
from multihop.analysis.table import Table

__all__ = ["FIXED_NAMES", "MANIFEST", "clear_previous", "write_manifest"]

MANIFEST = ".multihop-report.json"
"""The list of files the last analysis wrote into a report directory."""

FIXED_NAMES = ("report.md", "report.html", *(f"{name}.csv" for name in TABLE_ORDER))
"""Files an analysis may write whatever the traces (plots are named after the runs)."""


def _listed(out: Path) -> list[str]:
    try:
        names = json.loads((out / MANIFEST).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [n for n in names if isinstance(n, str) and n and "/" not in n and n not in (".", "..")]


def clear_previous(out: str | Path) -> list[str]:
    """Remove the files an earlier analysis wrote into ``out``; return their names."""
    d = Path(out)
    removed = []
    for name in sorted({*FIXED_NAMES, *_listed(d), MANIFEST}):
        path = d / name
        if path.is_file() and not path.is_symlink():
            path.unlink()
            removed.append(name)
    return removed


def write_manifest(out: str | Path, tables: Mapping[str, Table], plots: PlotSet) -> Path:
    """Record the files of this report (report, CSVs, plots) in ``out``; return the manifest's path."""
    files = ["report.md", "report.html", *(f"{name}.csv" for name in tables), *(p.file for p in plots.plots)]
    path = Path(out) / MANIFEST
    path.write_text(json.dumps({"files": sorted(files)}, indent=1) + "\n", encoding="utf-8")
    return path
