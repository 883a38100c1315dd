"""A GES storage broker refuses a store that lost what it held (issue 26 §1): empty, missing, another store's, older.

A missing or empty file looks like a new store; a storage broker that started on it dropped every
event and client it held (2,000 events, and the subscriber's resume got "unknown client id"). The
store's identity and generation (in its ``meta`` table) and a marker beside it, written once it holds
data, make the broker refuse, naming the file, unless the loss is accepted explicitly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import multihop as mh
from multihop import ges
from multihop.ges.errors import GesStateError, ResumeRefused, StorageError
from multihop.ges.event import EventId, make_event
from multihop.ges.live import LiveSystem
from multihop.ges.storage_sqlite import SqliteStorage, marker_path
from session import unique_name
from test_ges_durability_live import ALL, _active, _leave, _receive, topology


def _filled(path: Path, owner: str = "1.1.1", n: int = 50) -> None:
    st = SqliteStorage(path, owner)
    for i in range(1, n + 1):
        st.put(i, make_event(EventId("p", 1, i, 0), {"n": i}, b"x" * 100), 0b10)
    st.commit()
    st.close()


def _lose(path: Path, how: str) -> None:
    """What an operator (or an attacker) does to a store file while its broker is down."""
    if how == "truncate":
        os.truncate(path, 0)
    else:
        for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            p.unlink(missing_ok=True)


def test_the_marker_appears_once_the_store_holds_data(tmp_path: Path) -> None:
    path = tmp_path / "ges-1.1.1.db"
    st = SqliteStorage(path, "1.1.1")
    assert marker_path(path) == str(tmp_path / "ges-1.1.1.marker")
    assert not os.path.exists(st.marker)  # made, holding nothing yet
    st.commit()
    assert not os.path.exists(st.marker)
    st.put(1, make_event(EventId("p", 1, 1, 0), {"n": 1}), 1)
    st.commit()
    assert os.path.exists(st.marker)
    st.close()


@pytest.mark.parametrize("how", ["truncate", "delete"])
def test_a_store_that_lost_its_file_is_refused_naming_it_unless_the_loss_is_accepted(tmp_path: Path, how: str) -> None:
    path = tmp_path / "ges-1.1.1.db"
    _filled(path)
    _lose(path, how)
    with pytest.raises(StorageError, match=f"GES storage file {path} is (missing|empty).*--accept-empty-store"):
        SqliteStorage(path, "1.1.1")
    assert (path.exists() and path.stat().st_size == 0) if how == "truncate" else not path.exists()  # left as it was
    st = SqliteStorage(path, "1.1.1", accept_empty=True)
    assert st.accepted_loss and st.load().entries == {}
    st.close()
    SqliteStorage(path, "1.1.1").close()  # accepted once: the new store is the store now


def test_a_store_that_never_held_data_may_go(tmp_path: Path) -> None:
    path = tmp_path / "ges-1.1.1.db"
    SqliteStorage(path, "1.1.1").close()
    path.unlink()
    SqliteStorage(path, "1.1.1").close()


def test_another_stores_file_and_an_older_copy_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "ges-1.1.1.db"
    other = tmp_path / "elsewhere" / "ges-1.1.1.db"
    other.parent.mkdir()
    _filled(path)
    _filled(other)  # the same broker's file of another system
    shutil.copy(path, tmp_path / "backup.db")  # an older copy (closed cleanly: no WAL)
    SqliteStorage(path, "1.1.1").close()  # opened again: a newer generation
    shutil.copy(other, path)
    with pytest.raises(StorageError, match=f"GES storage file {path} is store .* not store .*another store's file"):
        SqliteStorage(path, "1.1.1")
    shutil.copy(tmp_path / "backup.db", path)
    with pytest.raises(StorageError, match=f"GES storage file {path} is generation 1 of store .*an older copy"):
        SqliteStorage(path, "1.1.1")
    st = SqliteStorage(path, "1.1.1", accept_empty=True)
    assert "older copy" in (st.accepted_loss or "")
    st.close()
    SqliteStorage(path, "1.1.1").close()


def test_a_bad_marker_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ges-1.1.1.db"
    _filled(path)
    Path(marker_path(path)).write_text("not json")
    with pytest.raises(StorageError, match="ges-1.1.1.marker .* is not a marker"):
        SqliteStorage(path, "1.1.1")


@pytest.mark.parametrize("how", ["truncate", "delete"])
def test_a_storage_broker_that_lost_its_store_does_not_restart_on_an_empty_one(how: str) -> None:
    """2,000 events stored for an away subscriber; the storage broker is crashed, its file truncated (or
    deleted): the restart is refused naming the file (the events are not silently gone), from the
    API and from the CLI; restoring the file brings everything back; accepting the loss starts it empty."""
    name = unique_name("gesempty")
    system = LiveSystem.up(topology(), name, durable=True, timeout=60)
    sub = pub = None
    try:
        sub = ges.connect(name, "1.1.2", "empty-sub")
        sid = sub.subscribe(ALL)
        _active(sub, sid)
        sub.disconnect()
        pub = ges.connect(name, "1.2.2", "empty-pub")
        for i in range(1, 2001):
            pub.publish({"n": i})
        pub.wait_stored(60.0)
        deadline = time.monotonic() + 60
        while system.status("1.1.1")["durability"]["store"]["clients"]["empty-sub"]["pending"] < 2000:
            assert time.monotonic() < deadline  # bounded
            time.sleep(0.05)  # the test waits for the routing
        system.crash("1.1.1")
        path = system.storage_file("1.1.1")
        saved = {p: p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists()}
        _lose(path, how)
        with pytest.raises(GesStateError, match=f"(?s)broker 1.1.1 exited with 2.*GES storage file {path} is (missing|empty)"):
            system.restart("1.1.1")
        p = subprocess.run([sys.executable, "-m", "multihop.cli", "ges", "restart", name, "1.1.1"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 1 and f"GES storage file {path}" in p.stderr and "--accept-empty-store" in p.stderr
        assert (not path.exists()) if how == "delete" else path.stat().st_size == 0  # left as it was
        for f, data in saved.items():  # the operator restores the file: everything is back
            f.write_bytes(data)
        system.restart("1.1.1")
        sub = ges.connect(name, "1.1.3", "empty-sub", resume=True)
        assert _receive(sub, 2000, [], limit=60.0) == list(range(1, 2001))
        sub.disconnect()
        system.crash("1.1.1")
        _lose(path, how)
        out = subprocess.run(
            [sys.executable, "-m", "multihop.cli", "ges", "restart", name, "1.1.1", "--accept-empty-store"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0 and "a lost store accepted" in out.stdout, out.stderr
        assert LiveSystem.attach(name).status("1.1.1")["durability"]["store"]["events"] == 0
        with pytest.raises(ResumeRefused, match="unknown client id 'empty-sub'"):  # the loss, accepted: her state is gone
            ges.connect(name, "1.1.3", "empty-sub", resume=True)
    finally:
        for c in (sub, pub):
            if c is not None:
                c.close()
        system.down()


def test_ges_up_refuses_a_lost_store_too() -> None:
    """A system stopped and started again on the same runtime reopens its stores: a lost one is refused at up."""
    name = unique_name("gesempty-up")
    rt = mh.Runtime.start(name, cores=[0, 1])
    try:
        system = LiveSystem.up(topology(), name, durable=True, timeout=60)
        c = ges.connect(name, "1.1.1", "someone")
        c.subscribe(ALL)
        c.wait_stored()
        deadline = time.monotonic() + 30
        while "someone" not in system.status("1.1.1")["durability"]["store"]["clients"]:
            assert time.monotonic() < deadline  # bounded
            time.sleep(0.05)
        _leave(c)
        system.down()
        path = rt.dir / "ges-1.1.1.db"
        path.unlink()
        with pytest.raises(GesStateError, match=f"(?s)broker 1.1.1 exited with 2.*GES storage file {path} is missing"):
            LiveSystem.up(topology(), name, durable=True, timeout=60)
        LiveSystem.up(topology(), name, durable=True, timeout=60, accept_empty_store=True).down()
    finally:
        rt.stop()
