"""The benchmark trace: its schema (version 1) and the writer that records it.

A benchmark run writes three Parquet files into ``<out>/<run_id>/``:

``messages.parquet`` -- one row per *sampled* message
    ============  ========  =================================================
    run_id        string    the run (one ``TraceWriter``)
    suite         string    the benchmark suite, e.g. ``"latency"``
    case          string    a stable case name (see :func:`case_name`)
    params        string    every case parameter as JSON (sorted keys)
    transport     string    ``"ump"``, ``"multihop"``, ``"pipe"``, ...; null if n/a
    routing       string    ``"direct"``, ``"ring"``, ``"fat-tree"``; null if n/a
    size          int64     payload bytes per message; -1 if n/a
    hops          int32     monitor hops on the path (0 for UMP); -1 if n/a
    window        int32     credit window / messages in flight; -1 if n/a
    src_core      int32     sending core; -1 if n/a
    dst_core      int32     receiving core; -1 if n/a
    fanout        int32     receivers per message (publish/subscribe); -1 if n/a
    kind          string    ``"rtt"`` (recv_ns is when the reply came back) or
                            ``"oneway"`` (recv_ns is when the peer received it)
    send_ns       int64     send time, ``CLOCK_MONOTONIC`` ns (``time.monotonic_ns``)
    recv_ns       int64     receive time, ``CLOCK_MONOTONIC`` ns
    seq           int64     the message's number within its case (0-based,
                            counted before sampling, so gaps show the sampling)
    ============  ========  =================================================

``cases.parquet`` -- one row per case
    run_id, suite, case, params and the typed parameter columns transport ..
    kind as above, then:

    ================  =======  ==============================================
    messages          int64    messages the case sent (all, not just sampled)
    bytes             int64    payload bytes the case sent
    duration_ns       int64    wall time of the case's measured part
    throughput_msgs   float64  messages / second; null if duration_ns <= 0
    throughput_bytes  float64  bytes / second; null if duration_ns <= 0
    baseline          string   name of the case (same run) this case should be
                               compared against; null if none
    rss_bytes         int64    peak resident set size of the benchmark; nullable
    cpu_s             float64  CPU seconds (user + system) used by the case; nullable
    ================  =======  ==============================================

``machine.parquet`` -- one row per run
    run_id, cpu_model, cores (int32), sockets (int32), kernel, python,
    multihop (the package version), started_at (ISO 8601, UTC): all strings
    unless noted.

Every file carries the Parquet key-value metadata ``multihop.schema_version``
(``"1"``) and ``multihop.table`` (``"messages"``, ``"cases"`` or
``"machine"``); readers refuse files whose version they do not know.

Tracing must not distort what it measures: a benchmark records timestamps into
preallocated numpy arrays and hands them over once per case with
:meth:`TraceWriter.add_messages`, which copies (and optionally samples) them in
bulk.  The writer keeps rows in memory and writes row groups when
``flush_rows`` rows are buffered (between cases, never during one) and at
:meth:`TraceWriter.close`.  Files are written under a temporary name and
renamed on close, so a run that dies leaves no half-written ``*.parquet``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from multihop.errors import MultihopError

__all__ = [
    "SCHEMA_VERSION",
    "META_SCHEMA_VERSION",
    "META_TABLE",
    "TABLES",
    "KINDS",
    "PARAM_COLUMNS",
    "TraceError",
    "TraceWriter",
    "case_name",
    "describe_schema",
    "machine_info",
    "sample_every",
    "table_schema",
]

SCHEMA_VERSION = 1
"""Version of the trace schema this module writes (and the analysis reads)."""

META_SCHEMA_VERSION = "multihop.schema_version"
"""Parquet key-value metadata key holding the schema version (decimal string)."""

META_TABLE = "multihop.table"
"""Parquet key-value metadata key holding the table name."""

KINDS = ("rtt", "oneway")
"""Allowed values of the ``kind`` column."""

TABLES = ("messages", "cases", "machine")
"""The tables of a trace, each one ``<table>.parquet`` file per run."""


class TraceError(MultihopError, ValueError):
    """A trace is malformed, of another schema or version, or used wrongly."""


@dataclass(frozen=True)
class _Column:
    name: str
    type: pa.DataType
    nullable: bool
    doc: str


_KEY_COLUMNS = (
    _Column("run_id", pa.string(), False, "the run (one TraceWriter)"),
    _Column("suite", pa.string(), False, "the benchmark suite"),
    _Column("case", pa.string(), False, "a stable case name"),
    _Column("params", pa.string(), False, "every case parameter as JSON (sorted keys)"),
)

_PARAM_COLUMNS = (
    _Column("transport", pa.string(), True, "'ump', 'multihop', 'pipe', ...; null if n/a"),
    _Column("routing", pa.string(), True, "'direct', 'ring', 'fat-tree'; null if n/a"),
    _Column("size", pa.int64(), False, "payload bytes per message; -1 if n/a"),
    _Column("hops", pa.int32(), False, "monitor hops on the path (0 for UMP); -1 if n/a"),
    _Column("window", pa.int32(), False, "credit window / messages in flight; -1 if n/a"),
    _Column("src_core", pa.int32(), False, "sending core; -1 if n/a"),
    _Column("dst_core", pa.int32(), False, "receiving core; -1 if n/a"),
    _Column("fanout", pa.int32(), False, "receivers per message; -1 if n/a"),
)

_KIND_COLUMN = _Column("kind", pa.string(), False, "'rtt' (round trip) or 'oneway'")

PARAM_COLUMNS = tuple(c.name for c in _PARAM_COLUMNS)
"""The typed parameter columns, in schema order (``kind`` is separate)."""

_COLUMNS: dict[str, tuple[_Column, ...]] = {
    "messages": _KEY_COLUMNS
    + _PARAM_COLUMNS
    + (
        _KIND_COLUMN,
        _Column("send_ns", pa.int64(), False, "send time, CLOCK_MONOTONIC ns"),
        _Column("recv_ns", pa.int64(), False, "receive (or reply) time, CLOCK_MONOTONIC ns"),
        _Column("seq", pa.int64(), False, "message number within the case, before sampling"),
    ),
    "cases": _KEY_COLUMNS
    + _PARAM_COLUMNS
    + (
        _KIND_COLUMN,
        _Column("messages", pa.int64(), False, "messages sent (all, not just sampled)"),
        _Column("bytes", pa.int64(), False, "payload bytes sent"),
        _Column("duration_ns", pa.int64(), False, "wall time of the measured part"),
        _Column("throughput_msgs", pa.float64(), True, "messages / s; null if duration <= 0"),
        _Column("throughput_bytes", pa.float64(), True, "bytes / s; null if duration <= 0"),
        _Column("baseline", pa.string(), True, "case (same run) to compare against; or null"),
        _Column("rss_bytes", pa.int64(), True, "peak resident set size; nullable"),
        _Column("cpu_s", pa.float64(), True, "CPU seconds (user + system); nullable"),
    ),
    "machine": (
        _Column("run_id", pa.string(), False, "the run"),
        _Column("cpu_model", pa.string(), False, "CPU model name"),
        _Column("cores", pa.int32(), False, "online CPUs"),
        _Column("sockets", pa.int32(), False, "CPU packages"),
        _Column("kernel", pa.string(), False, "kernel release"),
        _Column("python", pa.string(), False, "Python version"),
        _Column("multihop", pa.string(), False, "multihop package version"),
        _Column("started_at", pa.string(), False, "run start, ISO 8601 UTC"),
    ),
}


def table_schema(table: str) -> pa.Schema:
    """Return the Arrow schema of one trace table, with its key-value metadata.

    Raises:
        TraceError: ``table`` is not one of :data:`TABLES`.
    """
    if table not in _COLUMNS:
        raise TraceError(f"unknown trace table {table!r}; expected one of {', '.join(TABLES)}")
    fields = [pa.field(c.name, c.type, nullable=c.nullable) for c in _COLUMNS[table]]
    return pa.schema(fields, metadata={META_SCHEMA_VERSION: str(SCHEMA_VERSION), META_TABLE: table})


def describe_schema() -> str:
    """Describe the trace schema (every table, column, type and meaning) as Markdown."""
    lines = [f"# multihop trace schema, version {SCHEMA_VERSION}", ""]
    lines.append(
        "Files `<out>/<run_id>/<table>.parquet`, each with key-value metadata "
        f"`{META_SCHEMA_VERSION}` = `{SCHEMA_VERSION}` and `{META_TABLE}` = the table name."
    )
    for table in TABLES:
        lines += [
            "",
            f"## {table}",
            "",
            "| column | type | null | meaning |",
            "| --- | --- | --- | --- |",
        ]
        for c in _COLUMNS[table]:
            lines.append(f"| {c.name} | {c.type} | {'yes' if c.nullable else 'no'} | {c.doc} |")
    return "\n".join(lines) + "\n"


def sample_every(values: np.ndarray, n: int) -> np.ndarray:
    """Return every ``n``-th element of ``values`` (a strided view, no copy).

    Raises:
        TraceError: ``n`` is not a positive integer.
    """
    return values[:: _check_every(n)]


def _check_every(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise TraceError(f"sampling interval must be a positive integer, got {n!r}")
    return int(n)


def case_name(params: Mapping[str, Any]) -> str:
    """Return a stable case name for ``params``: sorted ``key=value`` pairs joined by ``,``.

    >>> case_name({"transport": "ump", "size": 64})
    'size=64,transport=ump'
    """
    return ",".join(f"{k}={params[k]}" for k in sorted(params))


_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


def _new_run_id() -> str:
    now = _dt.datetime.now(_dt.UTC)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _sockets() -> int:
    root = Path("/sys/devices/system/cpu")
    ids = set()
    for path in root.glob("cpu[0-9]*/topology/physical_package_id"):
        try:
            ids.add(path.read_text().strip())
        except OSError:
            continue
    return max(1, len(ids))


def _multihop_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("multihop")
        except PackageNotFoundError:
            pass
    except ImportError:  # pragma: no cover
        pass
    import multihop

    return str(getattr(multihop, "__version__", "unknown"))


def machine_info(run_id: str, started_at: str | None = None) -> dict[str, Any]:
    """Describe this machine as one ``machine`` row for run ``run_id``.

    ``started_at`` defaults to now (ISO 8601, UTC).
    """
    if started_at is None:
        started_at = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    return {
        "run_id": run_id,
        "cpu_model": _cpu_model(),
        "cores": int(os.cpu_count() or 1),
        "sockets": _sockets(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "multihop": _multihop_version(),
        "started_at": started_at,
    }


_INT_PARAMS = {c.name: c for c in _PARAM_COLUMNS if pa.types.is_integer(c.type)}
_STR_PARAMS = {c.name: c for c in _PARAM_COLUMNS if pa.types.is_string(c.type)}


def _typed_params(case: str, params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Validate ``params``; return (JSON text, typed parameter column values)."""
    if not isinstance(params, Mapping):
        raise TraceError(f"case {case!r}: params must be a mapping, got {type(params).__name__}")
    try:
        text = json.dumps(dict(params), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"case {case!r}: params are not JSON-serialisable: {exc}") from None
    typed: dict[str, Any] = {}
    for name in _STR_PARAMS:
        value = params.get(name)
        if value is not None and not isinstance(value, str):
            raise TraceError(f"case {case!r}: parameter {name!r} must be a string, got {value!r}")
        typed[name] = value
    for name, col in _INT_PARAMS.items():
        value = params.get(name, -1)
        if value is None:
            value = -1
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TraceError(f"case {case!r}: parameter {name!r} must be an integer, got {value!r}")
        limit = 2**31 if col.type == pa.int32() else 2**63
        if not -1 <= int(value) < limit:
            raise TraceError(f"case {case!r}: parameter {name!r} out of range: {value!r}")
        typed[name] = int(value)
    return text, typed


def _check_name(what: str, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise TraceError(f"{what} must be a non-empty string, got {value!r}")


@dataclass
class _Chunk:
    suite: str
    case: str
    params: str
    typed: dict[str, Any]
    kind: str
    send_ns: np.ndarray
    recv_ns: np.ndarray
    seq: np.ndarray


class TraceWriter:
    """Collect the trace of one benchmark run and write it as Parquet.

    ``TraceWriter(out_dir, run_id=None, suite="adhoc")`` makes a run (a fresh
    ``run_id`` unless given) whose files go to ``out_dir/run_id/``.  Hand it
    each case's timestamps with :meth:`add_messages` and its totals with
    :meth:`add_case`; :meth:`close` (or leaving a ``with`` block) writes the
    files and returns the run directory.

    Args:
        out_dir: parent directory of the run directory (created if needed).
        run_id: the run's id (letters, digits, ``._-``); default: UTC time + random suffix.
        suite: the suite name recorded on every row (``add_*`` may override it).
        sample_every: keep every n-th message of each case (1 keeps all).
        machine: override fields of the ``machine`` row (e.g. for tests).
        flush_rows: write a row group once this many message rows are buffered.

    Raises:
        TraceError: a bad argument, or ``out_dir/run_id`` already holds a trace.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        run_id: str | None = None,
        suite: str = "adhoc",
        *,
        sample_every: int = 1,
        machine: Mapping[str, Any] | None = None,
        flush_rows: int = 4_000_000,
    ) -> None:
        run_id = _new_run_id() if run_id is None else run_id
        if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
            raise TraceError(
                f"bad run id {run_id!r}: use 1-128 letters, digits, '.', '_' or '-', "
                "not starting with '.' or '-'"
            )
        _check_name("suite", suite)
        if flush_rows < 1:
            raise TraceError(f"flush_rows must be positive, got {flush_rows!r}")
        self._run_id = run_id
        self._suite = suite
        self._every = _check_every(sample_every)
        self._flush_rows = int(flush_rows)
        self._run_dir = Path(out_dir) / run_id
        if self._run_dir.exists() and any(self._run_dir.iterdir()):
            raise TraceError(f"run directory {self._run_dir} already exists and is not empty")
        self._machine = machine_info(run_id)
        if machine:
            unknown = set(machine) - {c.name for c in _COLUMNS["machine"]}
            if unknown:
                raise TraceError(f"unknown machine fields: {', '.join(sorted(unknown))}")
            self._machine.update(machine)
            self._machine["run_id"] = run_id
        self._chunks: list[_Chunk] = []
        self._buffered = 0
        self._written = 0
        self._cases: list[dict[str, Any]] = []
        self._case_keys: dict[str, tuple[str, str]] = {}
        self._case_rows: set[str] = set()
        self._msg_writer: pq.ParquetWriter | None = None
        self._closed = False

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._run_id

    @property
    def run_dir(self) -> Path:
        """The directory the run's files go to (``out_dir/run_id``)."""
        return self._run_dir

    @property
    def message_rows(self) -> int:
        """Message rows recorded so far (after sampling)."""
        return self._written + self._buffered

    def _check_open(self) -> None:
        if self._closed:
            raise TraceError(f"trace writer of run {self._run_id} is closed")

    def _register_case(self, case: str, params_json: str, kind: str) -> None:
        key = (params_json, kind)
        old = self._case_keys.setdefault(case, key)
        if old != key:
            raise TraceError(
                f"case {case!r} was recorded with params {old[0]} kind {old[1]!r}; "
                f"now with params {params_json} kind {kind!r}: "
                "case names must be unique per parameter set"
            )

    def add_messages(
        self,
        case: str,
        params: Mapping[str, Any],
        send_ns: np.ndarray,
        recv_ns: np.ndarray,
        *,
        kind: str = "rtt",
        seq: np.ndarray | None = None,
        every: int | None = None,
        suite: str | None = None,
    ) -> int:
        """Record the timestamps of one case's messages (copied, so the arrays may be reused).

        Args:
            case: the case name (stable across runs; see :func:`case_name`).
            params: the case parameters; the typed ones (``transport``,
                ``routing``, ``size``, ``hops``, ``window``, ``src_core``,
                ``dst_core``, ``fanout``) fill their columns, all go to ``params``.
            send_ns, recv_ns: 1-D integer arrays of equal length (CLOCK_MONOTONIC ns).
            kind: ``"rtt"`` or ``"oneway"``.
            seq: message numbers (default ``0 .. len-1``).
            every: sampling interval for this call (default: the writer's).
            suite: override the writer's suite name.

        Returns:
            The number of rows kept after sampling.

        Raises:
            TraceError: bad arguments, or the case was recorded with other params.
        """
        self._check_open()
        _check_name("case", case)
        suite = self._suite if suite is None else suite
        _check_name("suite", suite)
        if kind not in KINDS:
            raise TraceError(f"case {case!r}: kind must be one of {KINDS}, got {kind!r}")
        params_json, typed = _typed_params(case, params)
        send = np.asarray(send_ns)
        recv = np.asarray(recv_ns)
        if send.ndim != 1 or recv.ndim != 1 or send.shape != recv.shape:
            raise TraceError(
                f"case {case!r}: send_ns and recv_ns must be 1-D arrays of equal length, "
                f"got shapes {send.shape} and {recv.shape}"
            )
        for name, arr in (("send_ns", send), ("recv_ns", recv)):
            if arr.size and not np.issubdtype(arr.dtype, np.integer):
                raise TraceError(f"case {case!r}: {name} must hold integers, got {arr.dtype}")
        if seq is None:
            seqs = np.arange(send.size, dtype=np.int64)
        else:
            seqs = np.asarray(seq)
            if seqs.shape != send.shape or (
                seqs.size and not np.issubdtype(seqs.dtype, np.integer)
            ):
                raise TraceError(f"case {case!r}: seq must be an integer array like send_ns")
        n = self._every if every is None else every
        s = sample_every(send, n)
        self._register_case(case, params_json, kind)
        chunk = _Chunk(
            suite=suite,
            case=case,
            params=params_json,
            typed=typed,
            kind=kind,
            send_ns=np.array(s, dtype=np.int64, copy=True),
            recv_ns=np.array(sample_every(recv, n), dtype=np.int64, copy=True),
            seq=np.array(sample_every(seqs, n), dtype=np.int64, copy=True),
        )
        if chunk.send_ns.size:
            self._chunks.append(chunk)
            self._buffered += chunk.send_ns.size
            if self._buffered >= self._flush_rows:
                self._flush()
        return int(chunk.send_ns.size)

    def add_case(
        self,
        case: str,
        params: Mapping[str, Any],
        *,
        messages: int,
        duration_ns: int,
        nbytes: int | None = None,
        kind: str = "rtt",
        baseline: str | None = None,
        rss_bytes: int | None = None,
        cpu_s: float | None = None,
        suite: str | None = None,
    ) -> dict[str, Any]:
        """Record one case's totals; throughput is computed from them.

        Args:
            case, params, kind, suite: as for :meth:`add_messages`.
            messages: messages the case sent (all of them, not just sampled).
            duration_ns: wall time of the measured part of the case.
            nbytes: payload bytes sent (default ``messages * size`` when size is known, else 0).
            baseline: name of the case (same run) this one should be compared against.
            rss_bytes, cpu_s: optional resource use.

        Returns:
            The ``cases`` row as a dict.

        Raises:
            TraceError: bad arguments, or the case was recorded with other params.
        """
        self._check_open()
        _check_name("case", case)
        suite = self._suite if suite is None else suite
        _check_name("suite", suite)
        if kind not in KINDS:
            raise TraceError(f"case {case!r}: kind must be one of {KINDS}, got {kind!r}")
        params_json, typed = _typed_params(case, params)
        for name, value in (("messages", messages), ("duration_ns", duration_ns)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise TraceError(
                    f"case {case!r}: {name} must be a non-negative integer, got {value!r}"
                )
        if nbytes is None:
            nbytes = int(messages) * typed["size"] if typed["size"] >= 0 else 0
        if baseline is not None:
            _check_name("baseline", baseline)
        if case in self._case_rows:
            raise TraceError(f"case {case!r} already has a cases row in run {self._run_id}")
        self._register_case(case, params_json, kind)
        seconds = int(duration_ns) / 1e9
        row: dict[str, Any] = {
            "run_id": self._run_id,
            "suite": suite,
            "case": case,
            "params": params_json,
            **typed,
            "kind": kind,
            "messages": int(messages),
            "bytes": int(nbytes),
            "duration_ns": int(duration_ns),
            "throughput_msgs": int(messages) / seconds if seconds > 0 else None,
            "throughput_bytes": int(nbytes) / seconds if seconds > 0 else None,
            "baseline": baseline,
            "rss_bytes": None if rss_bytes is None else int(rss_bytes),
            "cpu_s": None if cpu_s is None else float(cpu_s),
        }
        self._cases.append(row)
        self._case_rows.add(case)
        return row

    def _messages_table(self, chunks: list[_Chunk]) -> pa.Table:
        schema = table_schema("messages")
        tables = []
        for ch in chunks:
            n = ch.send_ns.size
            cols: dict[str, pa.Array] = {
                "run_id": pa.repeat(pa.scalar(self._run_id, pa.string()), n),
                "suite": pa.repeat(pa.scalar(ch.suite, pa.string()), n),
                "case": pa.repeat(pa.scalar(ch.case, pa.string()), n),
                "params": pa.repeat(pa.scalar(ch.params, pa.string()), n),
            }
            for c in _PARAM_COLUMNS:
                cols[c.name] = pa.repeat(pa.scalar(ch.typed[c.name], c.type), n)
            cols["kind"] = pa.repeat(pa.scalar(ch.kind, pa.string()), n)
            cols["send_ns"] = pa.array(ch.send_ns, pa.int64())
            cols["recv_ns"] = pa.array(ch.recv_ns, pa.int64())
            cols["seq"] = pa.array(ch.seq, pa.int64())
            tables.append(pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema))
        if not tables:
            return schema.empty_table()
        return pa.concat_tables(tables)

    def _partial(self, table: str) -> Path:
        return self._run_dir / f".{table}.parquet.partial"

    def _flush(self) -> None:
        if not self._chunks:
            return
        table = self._messages_table(self._chunks)
        if self._msg_writer is None:
            self._run_dir.mkdir(parents=True, exist_ok=True)
            self._msg_writer = pq.ParquetWriter(
                self._partial("messages"), table_schema("messages"), compression="snappy"
            )
        self._msg_writer.write_table(table, row_group_size=1 << 20)
        self._written += self._buffered
        self._chunks = []
        self._buffered = 0

    def _write_small(self, table: str, rows: list[dict[str, Any]]) -> None:
        schema = table_schema(table)
        data = pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()
        partial = self._partial(table)
        pq.write_table(data, partial)
        os.replace(partial, self._run_dir / f"{table}.parquet")

    def close(self) -> Path:
        """Write ``messages``, ``cases`` and ``machine`` Parquet files; return the run directory.

        Closing twice is harmless (the second call only returns the directory).
        """
        if self._closed:
            return self._run_dir
        self._closed = True
        self._run_dir.mkdir(parents=True, exist_ok=True)
        self._flush()
        if self._msg_writer is None:
            self._msg_writer = pq.ParquetWriter(self._partial("messages"), table_schema("messages"))
        self._msg_writer.close()
        os.replace(self._partial("messages"), self._run_dir / "messages.parquet")
        self._write_small("cases", self._cases)
        self._write_small("machine", [self._machine])
        return self._run_dir

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the writer: the cases recorded so far are written even if the block raised."""
        self.close()
