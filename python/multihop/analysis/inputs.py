"""Finding and checking the trace files an analysis reads.

A path given to the analysis may be

* a run directory (holding ``messages.parquet``, ``cases.parquet`` and
  ``machine.parquet``, as :class:`multihop.bench.trace.TraceWriter` writes them),
* a directory whose subdirectories are run directories, or
* one trace Parquet file (its table is read from its metadata).

Every file is checked from its Parquet footer alone (no data is read): it must
be Parquet, carry ``multihop.table`` and ``multihop.schema_version`` metadata,
have the version this multihop reads, and have every column of its table with
the right type.  Anything else raises :class:`TraceError` naming the file and
what was wrong.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from multihop.bench.trace import (
    META_SCHEMA_VERSION,
    META_TABLE,
    SCHEMA_VERSION,
    TABLES,
    TraceError,
    table_schema,
)

__all__ = ["TraceError", "TraceFiles", "check_file", "find_traces"]


@dataclass
class TraceFiles:
    """The checked trace files of an analysis, by table, plus their row counts."""

    messages: list[Path] = field(default_factory=list)
    cases: list[Path] = field(default_factory=list)
    machine: list[Path] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))

    def files(self, table: str) -> list[Path]:
        """The files of one table."""
        return list(getattr(self, table))

    def add(self, table: str, path: Path, rows: int) -> None:
        """Add a checked file of ``table`` with ``rows`` rows (a file already added is ignored)."""
        files: list[Path] = getattr(self, table)
        if path not in files:
            files.append(path)
            self.rows[table] += rows


def _same_type(actual: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_dictionary(actual):
        actual = actual.value_type
    if pa.types.is_large_string(actual):
        actual = pa.string()
    return bool(actual == expected)  # pyarrow has no type information: its == is Any to mypy


def check_file(path: str | os.PathLike[str], table: str | None = None) -> tuple[str, int]:
    """Check one trace Parquet file; return ``(table, rows)``.

    Args:
        path: the file.
        table: the table it must be (``None``: whatever its metadata says).

    Raises:
        TraceError: not Parquet, not a multihop trace, another schema version,
            another table than ``table``, or a missing or mistyped column.
    """
    p = Path(path)
    try:
        meta = pq.read_metadata(p)
        schema = meta.schema.to_arrow_schema()
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(f"{p}: not a readable Parquet file ({exc})") from None
    kv = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in (meta.metadata or {}).items()}
    found_table = kv.get(META_TABLE)
    if found_table is None:
        columns = ", ".join(schema.names[:8]) + (", ..." if len(schema.names) > 8 else "")
        raise TraceError(f"{p}: not a multihop trace: no '{META_TABLE}' metadata (its columns: {columns})")
    version = kv.get(META_SCHEMA_VERSION)
    if version is None:
        raise TraceError(f"{p}: multihop trace without '{META_SCHEMA_VERSION}' metadata")
    if version != str(SCHEMA_VERSION):
        try:
            newer = int(version) > SCHEMA_VERSION
            what = "newer" if newer else "older"
            advice = "upgrade multihop" if newer else "re-run the benchmark to record it anew"
        except ValueError:
            what, advice = "unknown", "re-run the benchmark to record it anew"
        raise TraceError(f"{p}: trace schema version {version} ({what}); this multihop reads version {SCHEMA_VERSION}: {advice}")
    if found_table not in TABLES:
        raise TraceError(f"{p}: unknown trace table {found_table!r}; expected one of {', '.join(TABLES)}")
    if table is not None and found_table != table:
        raise TraceError(f"{p}: holds the {found_table!r} table, expected {table!r}")
    for expected in table_schema(found_table):
        idx = schema.get_field_index(expected.name)
        if idx < 0:
            raise TraceError(f"{p}: {found_table} table lacks column {expected.name!r}")
        actual = schema.field(idx).type
        if not _same_type(actual, expected.type):
            raise TraceError(f"{p}: column {expected.name!r} has type {actual}, expected {expected.type}")
    return found_table, int(meta.num_rows)


def _is_run_dir(d: Path) -> bool:
    return any((d / f"{t}.parquet").is_file() for t in TABLES)


def _add_run_dir(d: Path, out: TraceFiles) -> None:
    missing = [f"{t}.parquet" for t in TABLES if not (d / f"{t}.parquet").is_file()]
    if missing:
        raise TraceError(f"{d}: incomplete run directory: missing {', '.join(missing)}")
    for t in TABLES:
        f = d / f"{t}.parquet"
        _, rows = check_file(f, t)
        out.add(t, f.resolve(), rows)


def _check_run_ids(files: TraceFiles) -> None:
    seen: dict[str, Path] = {}
    for f in files.machine:
        try:
            ids = pq.read_table(f, columns=["run_id"]).column("run_id").to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(f"{f}: cannot read the machine table ({exc})") from None
        for run_id in ids:
            if run_id in seen:
                raise TraceError(f"run {run_id!r} is given twice: in {seen[run_id]} and in {f}")
            seen[run_id] = f


def find_traces(paths: Sequence[str | os.PathLike[str]]) -> TraceFiles:
    """Resolve run directories, parents of run directories and trace files into checked files.

    Raises:
        TraceError: no paths; a path that does not exist; a directory with no
            trace in it or in its subdirectories; an incomplete run directory;
            any file :func:`check_file` refuses; or no message or case rows at all.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise TraceError("no trace paths given")
    out = TraceFiles()
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise TraceError(f"{p}: no such file or directory")
        if p.is_file():
            table, rows = check_file(p)
            out.add(table, p.resolve(), rows)
        elif _is_run_dir(p):
            _add_run_dir(p, out)
        else:
            subdirs = sorted(d for d in p.iterdir() if d.is_dir() and _is_run_dir(d))
            if not subdirs:
                what = "empty directory" if not any(p.iterdir()) else "no trace found"
                raise TraceError(
                    f"{p}: {what}: expected a run directory (messages.parquet, cases.parquet, machine.parquet) or a directory of run directories"
                )
            for d in subdirs:
                _add_run_dir(d, out)
    _check_run_ids(out)
    given = ", ".join(str(Path(x)) for x in paths)
    if not out.messages and not out.cases:
        raise TraceError(f"no messages or cases table among the inputs: {given}")
    if out.rows["messages"] == 0 and out.rows["cases"] == 0:
        raise TraceError(f"the traces hold no message and no case rows: {given}")
    return out
