"""Tests for multihop.bench.trace: the trace schema and TraceWriter (no Spark needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import multihop.bench.trace as trace_mod
from multihop.bench.trace import (
    KINDS,
    LOAD_COLUMNS,
    META_SCHEMA_VERSION,
    META_TABLE,
    PARAM_COLUMNS,
    SCHEMA_VERSION,
    TABLES,
    TraceError,
    TraceWriter,
    case_name,
    describe_schema,
    machine_info,
    sample_every,
    table_schema,
)
from multihop.errors import MultihopError


def _meta(path: Path) -> dict[str, str]:
    raw = pq.read_metadata(path).metadata or {}
    return {k.decode(): v.decode() for k, v in raw.items()}


def test_schema_is_versioned_and_documented() -> None:
    assert SCHEMA_VERSION == 3
    text = describe_schema()
    doc = trace_mod.__doc__ or ""
    assert '``"channels"``' in doc and "(version 3)" in doc
    for table in TABLES:
        schema = table_schema(table)
        assert schema.metadata == {
            META_SCHEMA_VERSION.encode(): b"3",
            META_TABLE.encode(): table.encode(),
        }
        assert f"## {table}" in text
        for f in schema:
            assert f"| {f.name} | {f.type} |" in text
            assert f.name in doc, f"column {f.name} of {table} is not in the module docstring"


def test_schema_document_next_to_the_code_is_describe_schema() -> None:
    """TRACE_SCHEMA.md is generated: `python -m multihop.bench.trace > TRACE_SCHEMA.md`."""
    doc = Path(trace_mod.__file__).with_name("TRACE_SCHEMA.md")
    assert doc.read_text(encoding="utf-8") == describe_schema(), "regenerate TRACE_SCHEMA.md"
    out = subprocess.run([sys.executable, "-m", "multihop.bench.trace"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == describe_schema()
    text = describe_schema()
    assert (
        "## Rules" in text and "strictly between cases" in text and "2: `cases` lost" in text and "3: `messages` and `cases` gained `repeat`" in text
    )


def test_schema_columns_and_types() -> None:
    messages = table_schema("messages")
    assert messages.names == [
        "run_id", "suite", "case", "params", "transport", "routing", "size", "hops", "window",
        "src_core", "dst_core", "fanout", "kind", "repeat", "send_ns", "recv_ns", "seq",
    ]  # fmt: skip
    assert messages.field("size").type == pa.int64()
    assert messages.field("hops").type == pa.int32()
    assert messages.field("send_ns").type == pa.int64()
    cases = table_schema("cases")
    for name in ("messages", "bytes", "duration_ns", "baseline", "rss_bytes", "cpu_s", *PARAM_COLUMNS):
        assert name in cases.names
    assert "throughput_msgs" not in cases.names  # derived: the analysis computes it
    assert cases.field("rss_bytes").nullable and cases.field("cpu_s").nullable
    assert cases.names[cases.names.index("kind") + 1] == "repeat" and not cases.field("repeat").nullable
    assert cases.names[-len(LOAD_COLUMNS) :] == list(LOAD_COLUMNS) == [
        "load1", "busy_cpu", "own_cpu", "foreign_cpu", "load_window_s", "monitor_forwarded", "monitor_parks", "monitor_weight",
    ]  # fmt: skip
    assert all(cases.field(c).nullable for c in LOAD_COLUMNS)
    assert table_schema("machine").names == [
        "run_id", "cpu_model", "cores", "sockets", "kernel", "kernel_version", "python", "multihop",
        "numpy", "pyarrow", "pyspark", "started_at",
    ]  # fmt: skip
    assert table_schema("machine").field("pyspark").nullable
    with pytest.raises(TraceError, match="unknown trace table 'nope'"):
        table_schema("nope")


def test_trace_error_is_in_the_hierarchy() -> None:
    assert issubclass(TraceError, MultihopError)
    assert issubclass(TraceError, ValueError)


def test_writer_round_trip(tmp_path: Path) -> None:
    send = np.arange(10, dtype=np.int64) * 100
    recv = send + 40
    params = {"transport": "multihop", "routing": "ring", "size": 64, "hops": 2,
              "src_core": 0, "dst_core": 3, "extra": [1, 2]}  # fmt: skip
    with TraceWriter(tmp_path, run_id="r1", suite="latency") as w:
        kept = w.add_messages("mh", params, send, recv)
        send[:] = 0  # the writer copied the arrays: reusing them must not change the trace
        recv[:] = 0
        w.add_messages(
            "pipe",
            {"transport": "pipe", "size": 8},
            np.array([5, 6]),
            np.array([9, 10]),
            kind="oneway",
        )
        row = w.add_case("mh", params, messages=1000, duration_ns=2_000_000_000, rss_bytes=123, cpu_s=1.5)
        w.add_case(
            "pipe",
            {"transport": "pipe", "size": 8},
            messages=2,
            duration_ns=0,
            kind="oneway",
            baseline="mh",
        )
    assert kept == 10
    assert row["bytes"] == 64_000 and row["duration_ns"] == 2_000_000_000 and "throughput_msgs" not in row
    run_dir = tmp_path / "r1"
    assert w.run_dir == run_dir and w.run_id == "r1"
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "cases.parquet",
        "machine.parquet",
        "messages.parquet",
    ]
    for table in TABLES:
        assert _meta(run_dir / f"{table}.parquet")[META_SCHEMA_VERSION] == "3"
        assert _meta(run_dir / f"{table}.parquet")[META_TABLE] == table
        assert pq.read_schema(run_dir / f"{table}.parquet").remove_metadata() == table_schema(table).remove_metadata()

    m = pq.read_table(run_dir / "messages.parquet").to_pylist()
    assert len(m) == 12
    first = m[0]
    assert first["run_id"] == "r1" and first["suite"] == "latency" and first["case"] == "mh"
    assert json.loads(first["params"]) == params
    assert (first["transport"], first["routing"], first["size"], first["hops"]) == (
        "multihop",
        "ring",
        64,
        2,
    )
    assert (first["window"], first["fanout"], first["src_core"], first["dst_core"]) == (
        -1,
        -1,
        0,
        3,
    )
    assert [r["recv_ns"] - r["send_ns"] for r in m[:10]] == [40] * 10
    assert [r["seq"] for r in m[:10]] == list(range(10))
    assert m[10]["routing"] is None and m[10]["hops"] == -1 and m[10]["kind"] == "oneway"

    assert {r["repeat"] for r in m} == {0}  # one repeat unless told
    c = pq.read_table(run_dir / "cases.parquet").to_pylist()
    assert c[0]["rss_bytes"] == 123 and c[0]["cpu_s"] == 1.5 and c[0]["baseline"] is None
    assert c[0]["repeat"] == 0 and all(c[0][k] is None for k in LOAD_COLUMNS)  # load not measured: null
    assert c[1]["duration_ns"] == 0 and c[1]["baseline"] == "mh"

    mach = pq.read_table(run_dir / "machine.parquet").to_pylist()
    assert len(mach) == 1 and mach[0]["run_id"] == "r1" and mach[0]["cores"] >= 1


def test_sampling_keeps_message_numbers(tmp_path: Path) -> None:
    send = np.arange(100, dtype=np.int64)
    with TraceWriter(tmp_path, run_id="s", sample_every=10) as w:
        assert w.add_messages("a", {}, send, send + 1) == 10
        assert w.add_messages("b", {}, send, send + 1, every=25) == 4
        assert w.message_rows == 14
    seqs = pq.read_table(tmp_path / "s" / "messages.parquet").column("seq").to_pylist()
    assert seqs == list(range(0, 100, 10)) + [0, 25, 50, 75]
    assert list(sample_every(np.arange(7), 3)) == [0, 3, 6]
    with pytest.raises(TraceError, match="positive integer"):
        sample_every(np.arange(3), 0)


def test_row_groups_are_written_between_cases_only(tmp_path: Path) -> None:
    send = np.arange(1000, dtype=np.int64)
    with TraceWriter(tmp_path, run_id="f", flush_rows=1500) as w:
        partial = w.run_dir / ".messages.parquet.partial"
        for i in range(3):  # a case may hand its messages over in several calls: nothing is written
            w.add_messages("c0", {"size": 1}, send, send + i)
        assert not partial.exists() and w.message_rows == 3000
        w.add_case("c0", {"size": 1}, messages=3000, duration_ns=10)  # the case is over: now it may write
        assert partial.exists()
        size = partial.stat().st_size
        w.add_messages("c1", {"size": 1}, send, send + 1)
        w.add_messages("c2", {"size": 1}, send, send + 1)
        assert partial.stat().st_size == size  # 2000 rows buffered, still nothing written mid-case
        w.add_case("c1", {"size": 1}, messages=1000, duration_ns=10)
        w.add_case("c2", {"size": 1}, messages=1000, duration_ns=10)
    files = sorted(p.name for p in (tmp_path / "f").iterdir())
    assert files == ["cases.parquet", "machine.parquet", "messages.parquet"]
    meta = pq.read_metadata(tmp_path / "f" / "messages.parquet")
    assert meta.num_rows == 5000 and meta.num_row_groups == 2


def test_empty_run_writes_empty_tables(tmp_path: Path) -> None:
    run_dir = TraceWriter(tmp_path, run_id="e").close()
    assert pq.read_metadata(run_dir / "messages.parquet").num_rows == 0
    assert pq.read_metadata(run_dir / "cases.parquet").num_rows == 0
    assert pq.read_metadata(run_dir / "machine.parquet").num_rows == 1


def test_writer_rejects_bad_input(tmp_path: Path) -> None:
    a = np.arange(3, dtype=np.int64)
    with pytest.raises(TraceError, match="bad run id"):
        TraceWriter(tmp_path, run_id="../x")
    with pytest.raises(TraceError, match="flush_rows"):
        TraceWriter(tmp_path, run_id="x", flush_rows=0)
    w = TraceWriter(tmp_path, run_id="bad")
    with pytest.raises(TraceError, match="kind must be one of"):
        w.add_messages("c", {}, a, a, kind="both")
    with pytest.raises(TraceError, match="equal length"):
        w.add_messages("c", {}, a, a[:2])
    with pytest.raises(TraceError, match="must hold integers"):
        w.add_messages("c", {}, a.astype(float), a)
    with pytest.raises(TraceError, match="not JSON-serialisable"):
        w.add_messages("c", {"x": object()}, a, a)
    with pytest.raises(TraceError, match="'hops' must be an integer"):
        w.add_messages("c", {"hops": "2"}, a, a)
    with pytest.raises(TraceError, match="'transport' must be a string"):
        w.add_messages("c", {"transport": 3}, a, a)
    with pytest.raises(TraceError, match="out of range"):
        w.add_messages("c", {"hops": 2**40}, a, a)
    with pytest.raises(TraceError, match="case must be a non-empty string"):
        w.add_messages("", {}, a, a)
    w.add_messages("c", {"size": 1}, a, a)
    with pytest.raises(TraceError, match="case names must be unique per parameter set"):
        w.add_messages("c", {"size": 2}, a, a)
    with pytest.raises(TraceError, match="case names must be unique"):
        w.add_case("c", {"size": 1}, messages=1, duration_ns=1, kind="oneway")
    w.add_case("c", {"size": 1}, messages=3, duration_ns=10)
    with pytest.raises(TraceError, match="already has a cases row for repeat 0"):
        w.add_case("c", {"size": 1}, messages=3, duration_ns=10)
    w.add_case("c", {"size": 1}, messages=3, duration_ns=10, repeat=1)  # another repeat: another row
    for bad in (-1, 1.5, True, 2**31):
        with pytest.raises(TraceError, match="repeat must be a non-negative integer"):
            w.add_case("c", {"size": 1}, messages=3, duration_ns=10, repeat=bad)  # type: ignore[arg-type]
    with pytest.raises(TraceError, match="repeat must be a non-negative integer"):
        w.add_messages("c", {"size": 1}, a, a, repeat=-2)
    with pytest.raises(TraceError, match="unknown load fields: gpu"):
        w.add_case("c", {"size": 1}, messages=3, duration_ns=10, repeat=2, load={"gpu": 1.0})
    with pytest.raises(TraceError, match="'foreign_cpu' must be a finite number >= 0"):
        w.add_case("c", {"size": 1}, messages=3, duration_ns=10, repeat=2, load={"foreign_cpu": float("nan")})
    with pytest.raises(TraceError, match="'monitor_parks' must be a non-negative integer"):
        w.add_case("c", {"size": 1}, messages=3, duration_ns=10, repeat=2, load={"monitor_parks": 1.5})
    with pytest.raises(TraceError, match="'monitor_weight' must be a string"):
        w.add_case("c", {"size": 1}, messages=3, duration_ns=10, repeat=2, load={"monitor_weight": 19})
    with pytest.raises(TraceError, match="messages must be a non-negative integer"):
        w.add_case("d", {}, messages=-1, duration_ns=10)
    w.close()
    with pytest.raises(TraceError, match="closed"):
        w.add_messages("c", {"size": 1}, a, a)
    with pytest.raises(TraceError, match="already exists and is not empty"):
        TraceWriter(tmp_path, run_id="bad")
    with pytest.raises(TraceError, match="unknown machine fields"):
        TraceWriter(tmp_path, run_id="m", machine={"gpu": "none"})


def test_case_name_and_machine_info() -> None:
    assert case_name({"transport": "ump", "size": 64}) == "size=64,transport=ump"
    assert case_name({"size": 64, "transport": "ump"}) == case_name({"transport": "ump", "size": 64})
    info = machine_info("r", started_at="2026-01-01T00:00:00+00:00")
    assert set(info) == set(table_schema("machine").names)
    assert info["started_at"] == "2026-01-01T00:00:00+00:00"
    import pyspark

    assert (info["numpy"], info["pyarrow"], info["pyspark"]) == (np.__version__, pa.__version__, pyspark.__version__)
    assert info["kernel"] == os.uname().release and info["kernel_version"] == os.uname().version
    assert set(KINDS) == {"rtt", "oneway"}


@settings(max_examples=25, deadline=None)
@given(
    lat=st.lists(st.integers(min_value=0, max_value=10**9), min_size=0, max_size=200),
    every=st.integers(min_value=1, max_value=7),
)
def test_any_sampling_round_trips(tmp_path_factory: pytest.TempPathFactory, lat: list[int], every: int) -> None:
    out = tmp_path_factory.mktemp("prop")
    send = np.arange(len(lat), dtype=np.int64) * 1000
    recv = send + np.array(lat, dtype=np.int64)
    with TraceWriter(out, run_id="p", sample_every=every) as w:
        w.add_messages("c", {"size": 1}, send, recv)
    t = pq.read_table(out / "p" / "messages.parquet")
    got = (np.array(t.column("recv_ns")) - np.array(t.column("send_ns"))).tolist()
    assert got == lat[::every]
    assert t.column("seq").to_pylist() == list(range(0, len(lat), every))


def test_pyarrow_comes_with_the_bench_and_analysis_extras() -> None:
    """`multihop bench` writes Parquet and the analysis reads it: pyarrow is in both extras, not in the lean base
    install (tests/package/test_extras.py checks the commands name the extra when it is missing)."""
    import tomllib

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("pyarrow") for d in meta["dependencies"])
    extras = meta["optional-dependencies"]
    assert any(d.startswith("pyarrow") for d in extras["bench"]) and any(d.startswith("pyarrow") for d in extras["analysis"])
    assert {d.split(">")[0] for d in extras["analysis"]} == {"pyarrow", "pyspark", "matplotlib"}


def test_repeats_and_load_round_trip(tmp_path: Path) -> None:
    """A case measured three times: three cases rows and messages tagged by repeat, each with its load."""
    send = np.arange(4, dtype=np.int64) * 1000
    with TraceWriter(tmp_path, run_id="rep") as w:
        for r in range(3):
            w.add_messages("c", {"size": 8}, send, send + 100 * (r + 1), repeat=r)
            load = {"load1": 1.5 + r, "busy_cpu": 1.2, "own_cpu": 0.9, "foreign_cpu": 0.3 * r, "monitor_forwarded": 8 * r,
                    "monitor_parks": r, "monitor_weight": "light" if r else "fair"}  # fmt: skip
            w.add_case("c", {"size": 8}, messages=4, duration_ns=4000, repeat=r, load=load)
    m = pq.read_table(tmp_path / "rep" / "messages.parquet").to_pylist()
    assert [(x["repeat"], x["seq"], x["recv_ns"] - x["send_ns"]) for x in m] == [(r, i, 100 * (r + 1)) for r in range(3) for i in range(4)]
    c = pq.read_table(tmp_path / "rep" / "cases.parquet").to_pylist()
    assert [x["repeat"] for x in c] == [0, 1, 2]
    assert [(x["foreign_cpu"], x["monitor_parks"], x["monitor_weight"], x["load1"]) for x in c] == [
        (0.0, 0, "fair", 1.5), (0.3, 1, "light", 2.5), (0.6, 2, "light", 3.5),
    ]  # fmt: skip


def _burn(seconds: float) -> None:
    import time

    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_load_probe_tells_own_cpu_from_foreign_cpu() -> None:
    """A process of ours that burns CPU and exits inside the window counts as own; one started elsewhere as foreign.

    Only relations that hold whatever else runs on the machine are asserted: the
    work of our own child shows in own_cpu (it was reaped inside the window, so
    it is found through os.times), the stranger's CPU is not in own_cpu, and
    busy = own + foreign whenever busy exceeds own.
    """
    import multiprocessing as mp
    import time

    from multihop.bench.load import sampling

    ctx = mp.get_context("spawn")
    with sampling() as mine:
        child = ctx.Process(target=_burn, args=(0.4,))
        child.start()
        child.join()
    s = mine.sample
    assert s is not None and child.exitcode == 0
    assert s.own_cpu * s.wall_s >= 0.35  # the child's 0.4 s of CPU, found after it was reaped
    stranger = subprocess.Popen(  # not our descendant once it detached: a double fork, as a daemon does
        [sys.executable, "-c", "import os, time\nif os.fork(): os._exit(0)\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"]
    )
    stranger.wait()  # the parent is gone (reaped here before the window); its child burns on, reparented
    with sampling() as theirs:
        time.sleep(0.5)
    t = theirs.sample
    assert t is not None
    assert t.own_cpu * t.wall_s < 0.15  # our sleeping process; the stranger's work is not ours
    assert t.busy_cpu * t.wall_s >= 0.3  # ... but the machine was busy with it
    assert t.foreign_cpu == pytest.approx(max(t.busy_cpu - t.own_cpu, 0.0))
    assert set(t.columns()) == set(LOAD_COLUMNS) and t.columns()["monitor_weight"] is None  # no runtime given


def test_monitor_state_of_a_runtime() -> None:
    """With a runtime, the probe reads its monitors: frames forwarded, parks and the scheduling weight."""
    import multihop as mh
    from multihop.bench.load import sampling
    from session import unique_name

    with mh.Runtime.start(unique_name("load"), cores=[0, 1]) as rt:
        with rt.dispatcher(1) as d1, rt.dispatcher(0) as d0:
            svc = d1.export("probe")
            ch = d0.bind("probe", transport="multihop", timeout=30)
            peer = svc.accept(timeout=30)
            with sampling(rt) as s:
                for _ in range(50):
                    ch.send(b"x" * 64, timeout=10)
                    peer.send(peer.recv(timeout=10), timeout=10)
                    ch.recv(timeout=10)
            ch.close()
            peer.close()
    got = s.sample
    assert got is not None
    assert got.monitor_forwarded is not None and got.monitor_forwarded >= 2 * 50 * 2  # 2 monitors each way
    assert got.monitor_parks is not None and 0 <= got.monitor_parks
    assert got.monitor_weight in ("light", "fair", "mixed")
    assert set(rt.monitor_pids.values())  # the monitors count as own (the runtime was started here)


def test_a_short_repeat_reaches_back_for_its_cpu_figures() -> None:
    """/proc counts in 1/100 s ticks: a 2 ms window would read one tick as 5 CPUs. A repeat shorter than
    MIN_WINDOW_S takes its CPU figures over the last MIN_WINDOW_S, from an earlier snapshot."""
    import time

    from multihop.bench.load import MIN_WINDOW_S, sampling

    with sampling() as first:
        time.sleep(MIN_WINDOW_S + 0.1)
    with sampling() as short:
        pass  # a few milliseconds: three binds, say
    a, b = first.sample, short.sample
    assert a is not None and b is not None
    assert a.window_s == pytest.approx(a.wall_s) and a.window_s >= MIN_WINDOW_S  # long enough on its own
    assert b.wall_s < 0.1 and b.window_s >= MIN_WINDOW_S  # reached back past its start
    cpus = os.cpu_count() or 1
    assert 0 <= b.busy_cpu <= cpus and 0 <= b.foreign_cpu <= cpus
    assert b.columns()["load_window_s"] == b.window_s
