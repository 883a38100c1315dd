"""GES stable storage: the store contract on the in-memory and the SQLite store, crash and reopen, refusals."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

import pytest

from multihop.ges.errors import StorageError
from multihop.ges.event import EventId, make_event
from multihop.ges.profile import make_chain
from multihop.ges.storage import MemoryStorage, Storage
from multihop.ges.storage_sqlite import SqliteStorage


def _ev(pub: str, seq: int, payload: bytes = b"x" * 100):
    return make_event(EventId(pub, 1000, seq, 2), {"sport": "football", "n": seq}, payload)


def _stores(tmp_path: Path) -> dict[str, Callable[[], Storage]]:
    mem = MemoryStorage()
    return {"memory": lambda: mem, "sqlite": lambda: SqliteStorage(tmp_path / "s.db", "1.1.1.1")}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_store_contract_roundtrip(tmp_path: Path, kind: str) -> None:
    make = _stores(tmp_path)[kind]
    st = make()
    chain = make_chain([("sport", "football"), ("team", "*")])
    for i in range(5):
        st.put(i + 1, _ev("p", i), 0b101)
    st.put_client("alice", 2, {1: chain}, 77, 3, "c0ffee")
    st.put_progress("alice", "p", EventId("p", 1000, 1, 2))
    st.put_stream("p", 2, (1000, 4))
    st.commit()
    st.set_bits(1, 0)  # garbage collected
    st.set_bits(2, 0b100)
    st.commit()
    st.put(6, _ev("p", 5), 1)  # never committed
    if kind == "sqlite":
        st.db.close()  # type: ignore[attr-defined]  # as a crash would: the open batch is not written
    else:
        st.crash()  # type: ignore[attr-defined]
    st2 = make()
    got = st2.load()
    assert sorted(got.entries) == [2, 3, 4, 5]
    assert got.entries[2] == (_ev("p", 1), 0b100)
    assert got.entries[5][0].payload == b"x" * 100
    c = got.clients["alice"]
    assert (c.slot, c.subs, c.broker, c.incarnation, c.credential) == (2, {1: chain}, 77, 3, "c0ffee")
    assert c.progress == {"p": EventId("p", 1000, 1, 2)}
    assert got.streams == {("p", 2): (1000, 4)}


def test_sqlite_is_wal_with_the_documented_synchronous_level(tmp_path: Path) -> None:
    st = SqliteStorage(tmp_path / "a.db", "1.1.1.1")
    assert st.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert st.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    st.close()
    st = SqliteStorage(tmp_path / "a.db", "1.1.1.1", synchronous="NORMAL")
    assert st.db.execute("PRAGMA synchronous").fetchone()[0] == 1
    st.close()
    with pytest.raises(ValueError, match="synchronous"):
        SqliteStorage(tmp_path / "b.db", "1.1.1.1", synchronous="OFF")


def test_sqlite_survives_sigkill_of_its_process_mid_batch(tmp_path: Path) -> None:
    """A writer process commits 1000 entries in 10 batches, then puts more without committing and
    SIGKILLs itself: the file opens cleanly and holds exactly the committed entries."""
    path = tmp_path / "k.db"
    code = textwrap.dedent(f"""
        import os, signal
        from multihop.ges.event import EventId, make_event
        from multihop.ges.storage_sqlite import SqliteStorage
        st = SqliteStorage({str(path)!r}, "2.1.1.1")
        n = 0
        for b in range(10):
            for i in range(100):
                n += 1
                st.put(n, make_event(EventId("p", 1, n, 0), {{"n": n}}, b"y" * 100), 1)
            st.commit()
        for i in range(50):
            st.put(n + 1 + i, make_event(EventId("p", 1, n + 1 + i, 0), {{"n": i}}), 1)
        st.db.execute("BEGIN")
        st.db.execute("INSERT INTO events VALUES (99999, 'p', 1, 1, 0, 'n:int', 'i1', x'00', x'01')")
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert p.returncode == -signal.SIGKILL
    st = SqliteStorage(path, "2.1.1.1")
    got = st.load()
    assert sorted(got.entries) == list(range(1, 1001))
    assert st.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    st.close()


def test_corrupt_file_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.db"
    bad.write_bytes(os.urandom(8192))
    with pytest.raises(StorageError, match=str(bad)):
        SqliteStorage(bad, "1.1.1.1")
    assert bad.stat().st_size == 8192


def test_truncated_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    st = SqliteStorage(path, "1.1.1.1")
    for i in range(2000):
        st.put(i + 1, _ev("p", i), 1)
    st.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + os.urandom(len(data) // 2))
    with pytest.raises(StorageError, match=str(path)):
        s2 = SqliteStorage(path, "1.1.1.1")
        s2.load()


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (x TEXT)")
    db.commit()
    db.close()
    with pytest.raises(StorageError, match=f"{path}.*foreign"):
        SqliteStorage(path, "1.1.1.1")


def test_another_brokers_store_and_another_schema_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "mine.db"
    SqliteStorage(path, "1.1.1.1").close()
    with pytest.raises(StorageError, match="belongs to broker 1.1.1.1, not 2.1.1.1"):
        SqliteStorage(path, "2.1.1.1")
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    db.commit()
    db.close()
    with pytest.raises(StorageError, match="schema version 99"):
        SqliteStorage(path, "1.1.1.1")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_collection_deletes_exactly_the_zero_vectors(tmp_path: Path, kind: str) -> None:
    st = _stores(tmp_path)[kind]()
    for i in range(1, 21):
        st.put(i, _ev("p", i), 0b10)
    st.commit()
    gone = [2, 3, 4, 7, 9, 10, 11, 20]  # runs and singles around entries that stay
    for e in gone:
        st.set_bits(e, 0)
    st.set_bits(5, 0b110)
    st.put(21, _ev("p", 21), 1)
    st.set_bits(21, 0)  # stored and collected within one batch: never written
    st.commit()
    got = st.load().entries
    assert sorted(got) == sorted(set(range(1, 21)) - set(gone))
    assert got[5][1] == 0b110
