"""GES stores on a full file system (issue 26 §1): a real tmpfs, filled, then freed.

A full disk is an error a storage broker reports and survives: the commit that failed says
why (SQLite's "database or disk is full", not the rollback that followed it), its batch stays
open and is committed again once space is back; meanwhile nothing that batch vouches for
leaves (no "stored", no hop acknowledgement), publishers are told "not stored" with the
reason, and the broker's status shows it. Storing resumes without a restart, and no event
confirmed stored is lost. The file systems are real (``mount -t tmpfs``, as root), unmounted
even when a test fails.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from multihop import ges
from multihop.ges.errors import StorageError
from multihop.ges.event import EventId, make_event
from multihop.ges.live import LiveSystem
from multihop.ges.storage_sqlite import SqliteStorage
from session import unique_name
from test_ges_durability_live import ALL, _active, _leave, _quiet_stores, _receive, topology


def _log(system: LiveSystem, address: str) -> str:
    return Path(system.config["brokers"][address]["log"]).read_text(errors="replace")[-3000:]


@contextmanager
def tiny_fs(size_kib: int) -> Iterator[Path]:
    """A tmpfs of ``size_kib`` KiB mounted on a new temporary directory; unmounted and removed afterwards."""
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs needs root (the test environment runs as root)")
    d = Path(tempfile.mkdtemp(prefix="mh-tinyfs-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0700", "tmpfs", str(d)], check=True, timeout=30)
    try:
        yield d
    finally:
        for _ in range(50):  # bounded: a broker being stopped may still hold a file open for a moment
            if subprocess.run(["umount", str(d)], capture_output=True, timeout=30).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(d)], check=True, timeout=30)
        d.rmdir()


def fill(fs: Path) -> Path:
    """Write a file until the file system is full; returns it (delete it to free the space)."""
    f = fs / "filler"
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        chunk = b"\0" * 4096
        for _ in range(1 << 20):  # bounded: 4 GiB at most
            try:
                os.write(fd, chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
        else:
            pytest.fail(f"{fs} never filled up")
    finally:
        os.close(fd)
    return f


def _ev(seq: int, payload: bytes = b"x" * 1000) -> object:
    return make_event(EventId("p", 1000, seq, 1), {"n": seq}, payload)


def test_a_commit_on_a_full_disk_names_the_cause_keeps_its_batch_and_goes_through_once_space_is_back() -> None:
    with tiny_fs(2048) as fs:
        st = SqliteStorage(fs / "s.db", "1.1.1")
        try:
            st.put(1, _ev(1), 1)  # type: ignore[arg-type]
            st.commit()
            filler = fill(fs)
            for i in range(2, 300):
                st.put(i, _ev(i), 1)  # type: ignore[arg-type]
            with pytest.raises(StorageError, match=f"{fs / 's.db'}.*database or disk is full") as err:
                st.commit()
            assert "cannot rollback" not in str(err.value)  # the failure inside the error handling hid the cause
            assert not st.db.in_transaction
            with pytest.raises(StorageError, match="database or disk is full"):
                st.commit()  # still full: the same error, the batch still kept
            filler.unlink()
            st.commit()  # space is back: the kept batch goes through, once
            assert sorted(st.load().entries) == list(range(1, 300))
        finally:
            st.close()
        again = SqliteStorage(fs / "s.db", "1.1.1")  # and the file opens cleanly
        try:
            assert len(again.load().entries) == 299
        finally:
            again.close()


def test_a_full_disk_is_reported_survived_and_storing_resumes_without_a_restart() -> None:
    """Both storage brokers keep their files on one small tmpfs. A subscriber homed at 1.1.1 is away, so
    every event stays stored there. The file system is filled mid-stream: the publisher is told
    "not stored" with the reason, status shows the error, both brokers keep running; once the filler
    is deleted every queued event is stored without a restart and the subscriber gets 1..n, once each."""
    name = unique_name("gesfull")
    with tiny_fs(4096) as fs:
        system = LiveSystem.up(topology(), name, durable=True, storage_dir=fs, timeout=60)
        sub = sub2 = pub = None
        try:
            pids = {a: system.pid(a) for a in system.storage_brokers()}
            sub = ges.connect(name, "1.1.2", "full-sub")
            sid = sub.subscribe(ALL)
            sub2 = ges.connect(name, "1.2.2", "full-sub2")
            sid2 = sub2.subscribe(ALL)
            _active(sub, sid)
            _active(sub2, sid2)
            sub.disconnect()  # away: everything for it stays in 1.1.1's store ...
            sub2.disconnect()  # ... and for this one in 1.2.1's
            pub = ges.connect(name, "1.1.3", "full-pub")
            n = 0
            for _ in range(50):
                n += 1
                pub.publish({"n": n}, b"x" * 200)
            pub.wait_stored(30.0)
            confirmed = n
            filler = fill(fs)
            deadline = time.monotonic() + 60
            while getattr(pub, "store_error", None) is None:  # bounded by the deadline
                assert time.monotonic() < deadline, f"no 'not stored' answer within 60 s ({pub.queued} queued)"
                for a, pid in pids.items():
                    alive = psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                    assert alive, f"storage broker {a} died on the full disk:\n{_log(system, a)}"
                n += 1
                pub.publish({"n": n}, b"x" * 2000)
                _ = pub.queued  # reads the broker's answers
                time.sleep(0.01)  # a publisher's pace; the brokers never poll
            assert "database or disk is full" in pub.store_error and "1.1.1" in pub.store_error
            for _ in range(200):  # more while the disk is full: queued at the publisher, answered "not stored"
                n += 1
                pub.publish({"n": n}, b"x" * 2000)
            assert pub.queued >= 200 and pub.store_error is not None
            with pytest.raises(StorageError, match="database or disk is full"):
                pub.wait_stored(0.5)  # what a publisher waiting for "stored" is told
            st = system.status("1.1.1")["durability"]["store"]
            assert "database or disk is full" in st["write_error"] and st["write_errors"] >= 1
            out = subprocess.run(
                [sys.executable, "-m", "multihop.cli", "ges", "status", name, "--at", "1.1.1"], capture_output=True, text=True, timeout=60
            ).stdout
            assert "cannot write" in out and "database or disk is full" in out
            for a, pid in pids.items():  # both storage brokers still run, the same processes
                assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE, a
            filler.unlink()
            pub.wait_stored(60.0)  # storing resumes without a restart
            assert pub.store_error is None
            assert {a: system.pid(a) for a in system.storage_brokers()} == pids
            assert system.status("1.1.1")["durability"]["store"]["write_error"] is None
            sub = ges.connect(name, "1.1.2", "full-sub", resume=True)
            assert _receive(sub, n, [], limit=60.0) == list(range(1, n + 1))
            sub2 = ges.connect(name, "1.2.2", "full-sub2", resume=True)
            assert _receive(sub2, n, [], limit=60.0) == list(range(1, n + 1))
            assert confirmed < n
            assert _quiet_stores(system) == {"1.1.1": 0, "1.2.1": 0}
        finally:
            for c in (sub, sub2, pub):
                if c is not None:
                    try:
                        _leave(c)
                    except Exception:
                        c.close()
            system.down()


def test_simulated_full_disk_holds_what_the_batch_vouches_for_and_loses_nothing_across_a_crash() -> None:
    """The protocol part, deterministic: the in-memory store of 2.1.1.1 cannot write (``fail_writes``, the
    simulator's full disk). Its homed publisher is told "not stored" with the reason; the copies it
    stores for its away subscriber are not acknowledged upstream (the origin keeps them); it is
    crashed while failing (its open batch is gone), space comes back, it restarts: the subscriber
    gets every event once, in order, and the stores empty."""
    from multihop.ges.address import Address
    from test_ges_durability import SPORT, _numbers, _ready, _sim

    sim = _sim()
    sub = sim.client("2.1.1.3", "sub")  # homed at 2.1.1.1
    sid = sub.subscribe(SPORT)
    pub = sim.client("1.1.1.2", "pub")  # homed at 1.1.1.1
    local = sim.client("2.1.1.2", "local")  # homed at 2.1.1.1 too
    _ready(sim, (sub, sid))
    sub.disconnect()
    for n in range(10):
        pub.publish({"sport": "football", "n": n})
    sim.run_until_quiet()
    assert pub.queued == 0
    store = sim.stores[Address("2.1.1.1").code]
    store.fail_writes = "database or disk is full (simulated)"
    for n in range(10, 20):
        pub.publish({"sport": "football", "n": n})
    local.publish({"sport": "chess", "n": 0})
    sim.run_for(3.0)
    assert pub.queued == 0  # its own home stored them
    assert local.queued == 1 and "database or disk is full" in (local.store_error or "")
    st = sim.broker("2.1.1.1").durability.status()["store"]
    assert "database or disk is full" in st["write_error"] and st["not_stored"] >= 1
    origin = sim.broker("1.1.1.1").durability.status()["store"]
    assert origin["events"] >= 10 and "gateways" in origin["oldest"]["waiting_for"]  # not acknowledged: kept
    sim.crash_broker("2.1.1.1")  # loses its open batch
    store.fail_writes = None  # space is back
    sim.restart_broker("2.1.1.1")
    sim.run_for(10.0)
    assert local.store_error is None and local.queued == 0
    sub2 = sim.client("2.1.1.3", "sub", resume=True)
    sim.run_for(5.0)
    assert _numbers(sub2) == list(range(20)) and _numbers(sub) == []
    sub2.unsubscribe(sid)
    sim.run_for(5.0)
    assert sum(s.stored_events for s in sim.stores.values()) == 0
