"""GES durability live: broker processes with SQLite stores, SIGKILL and restart, roaming clients, refusals."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Iterator

import psutil
import pytest

import multihop as mh
from multihop import ges
from multihop.ges.errors import GesStateError, ResumeRefused
from multihop.ges.event import EventId
from multihop.ges.live import LiveSystem
from multihop.ges.storage_sqlite import SqliteStorage
from session import unique_name

ALL = [("n", "*")]


def topology() -> ges.Topology:
    """Two clusters: 1.1 (a triangle; storage broker 1.1.1) and 1.2 (storage broker 1.2.1), two level-1 gateways."""
    t = ges.Topology(levels=2)
    for a in ("1.1.1", "1.1.2", "1.1.3", "1.2.1", "1.2.2"):
        t.add_broker(a)
    for a, b in (("1.1.1", "1.1.2"), ("1.1.2", "1.1.3"), ("1.1.1", "1.1.3"), ("1.2.1", "1.2.2"), ("1.1.3", "1.2.1"), ("1.1.2", "1.2.2")):
        t.add_gateway(a, b)
    return t


@pytest.fixture(scope="module")
def system() -> Iterator[LiveSystem]:
    s = LiveSystem.up(topology(), unique_name("gesdur"), durable=True, timeout=60)
    try:
        yield s
    finally:
        s.down()


def _active(c: ges.LiveClient, sid: int, level: int = 3, limit: float = 15.0) -> None:
    deadline = time.monotonic() + limit
    while c.active_level(sid) != level:  # bounded by the deadline
        assert time.monotonic() < deadline, "subscription not active in time"
        time.sleep(0.02)  # the test waits for the system; brokers never poll


def _receive(c: ges.LiveClient, n: int, got: list[int], limit: float = 30.0) -> list[int]:
    deadline = time.monotonic() + limit
    while len(got) < n and time.monotonic() < deadline:
        got += [e.content["n"] for e in c.next_many(4096, timeout=0.2)]
    return got


def _leave(c: ges.LiveClient) -> None:
    """A durable client that closes is away, not gone (its home keeps storing for it): drop its subscriptions first."""
    try:
        if not c._closed:
            for sid in list(c.core.subs):
                c.unsubscribe(sid)
            c.wait_stored()
    finally:
        c.close()


def _quiet_stores(system: LiveSystem, limit: float = 15.0) -> dict[str, int]:
    """Stored events per storage broker once garbage collection settled (empty stores come first)."""
    deadline = time.monotonic() + limit
    while True:  # bounded by the deadline
        left = {a: system.status(a)["durability"]["store"]["events"] for a in system.storage_brokers()}
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.05)  # the test waits for acknowledgements to come back


@pytest.mark.parametrize(
    "victim,roam", [("1.1.2", False), ("1.1.2", True), ("1.1.1", False)], ids=["subscribers-broker", "subscribers-broker-roam", "its-storage-broker"]
)
def test_kill_the_broker_the_subscriber_gets_exactly_1_to_n(system: LiveSystem, victim: str, roam: bool) -> None:
    name = system.name
    cid = f"kill-{victim}-{roam}"
    sub = ges.connect(name, "1.1.2", cid)
    sid = sub.subscribe(ALL)
    pub = ges.connect(name, "1.2.2", f"pub-{victim}-{roam}")
    try:
        _active(sub, sid)
        n, got = 3000, []
        for i in range(1, n + 1):
            pub.publish({"n": i})
            if i % 100 == 0:
                got += [e.content["n"] for e in sub.next_many(4096, timeout=0)]
            if i == 1500:
                pid = system.pid(victim)
                system.crash(victim)  # SIGKILL, mid-stream
                assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
                if victim == "1.1.2":
                    sub.disconnect()  # its broker is gone
                if roam:  # to the fallback broker of its cluster while its own is down
                    assert system.fallback_broker(victim) == "1.1.3"
                    sub = ges.connect(name, system.fallback_broker(victim), cid, resume=True)
                system.restart(victim)
                if victim == "1.1.2" and not roam:
                    sub = ges.connect(name, "1.1.2", cid, resume=True)  # back at the restarted broker
        assert _receive(sub, n, got) == list(range(1, n + 1))
        pub.wait_stored()
        assert _quiet_stores(system) == {"1.1.1": 0, "1.2.1": 0}
    finally:
        _leave(sub)
        pub.close()


def test_a_subscriber_away_for_10000_events_gets_them_all_in_order(system: LiveSystem) -> None:
    name = system.name
    sub = ges.connect(name, "1.2.2", "away")
    sid = sub.subscribe(ALL)
    pub = ges.connect(name, "1.1.3", "pub-away")
    try:
        _active(sub, sid)
        pub.publish({"n": 0})
        assert _receive(sub, 1, []) == [0]
        inc = sub.incarnation
        sub.disconnect()
        for i in range(1, 10_001):
            pub.publish({"n": i})
        pub.wait_stored(30.0)  # in its home store (1.1.1); then routed to the subscriber's (1.2.1)
        deadline = time.monotonic() + 30
        while (st := system.status("1.2.1")["durability"]["store"])["clients"]["away"]["pending"] < 10_000:
            assert time.monotonic() < deadline  # bounded
            time.sleep(0.05)  # the test waits for the routing
        assert st["events"] >= 10_000 and st["clients"]["away"]["pending"] == 10_000 and not st["clients"]["away"]["connected"]
        assert "away" in st["oldest"]["waiting_for"]
        sub = ges.connect(name, "1.2.1", "away", resume=True)  # another broker of its cluster
        assert sub.incarnation > inc
        assert _receive(sub, 10_000, []) == list(range(1, 10_001))
        assert sub.replay_progress == (10_000, 10_000)
        assert _quiet_stores(system) == {"1.1.1": 0, "1.2.1": 0}
    finally:
        _leave(sub)
        pub.close()


def test_roam_between_clusters_mid_stream(system: LiveSystem) -> None:
    name = system.name
    sub = ges.connect(name, "1.1.3", "roamer")
    sid = sub.subscribe(ALL)
    pub = ges.connect(name, "1.2.1", "pub-roam")
    try:
        _active(sub, sid)
        n, got = 2000, []
        for i in range(1, n + 1):
            pub.publish({"n": i})
            if i % 100 == 0:
                got += [e.content["n"] for e in sub.next_many(4096, timeout=0)]
            if i == 1000:
                sub.disconnect()
                sub = ges.connect(name, "1.2.2", "roamer", resume=True)  # the other cluster
        assert _receive(sub, n, got) == list(range(1, n + 1))
    finally:
        _leave(sub)
        pub.close()


def test_sigkill_of_a_storage_broker_during_a_write_burst_loses_no_stored_event(system: LiveSystem) -> None:
    """The subscriber (homed at 1.1.1) is away, so everything stays stored; 1.1.1 is SIGKILLed while
    the publisher (homed there too) writes; every event it had confirmed stored is in the file,
    which opens cleanly; after the restart the subscriber gets exactly everything."""
    name = system.name
    sub = ges.connect(name, "1.1.2", "burst-sub")
    sid = sub.subscribe(ALL)
    pub = ges.connect(name, "1.1.3", "burst-pub")
    try:
        _active(sub, sid)
        sub.disconnect()
        ids = []
        for i in range(1, 4001):
            ids.append(pub.publish({"n": i}, b"x" * 100))
            if i == 3000:
                # mid-burst, once the store confirmed a good part (on a loaded machine it may lag far behind)
                deadline = time.monotonic() + 60
                while len(ids) - pub.queued <= 1000 and time.monotonic() < deadline:
                    os.sched_yield()  # pub.queued reads the confirmations that arrived
                confirmed = ids[: len(ids) - pub.queued]
                system.crash("1.1.1")
        assert len(confirmed) > 1000
        store = SqliteStorage(system.storage_file("1.1.1"), "1.1.1")  # opens cleanly (integrity checked)
        on_disk = {ev.id for ev, _ in store.load().entries.values()}
        store.close()
        assert not set(confirmed) - on_disk
        system.restart("1.1.1")
        pub.wait_stored(30.0)  # the queue goes out again to the restarted store
        sub = ges.connect(name, "1.1.3", "burst-sub", resume=True)
        assert _receive(sub, 4000, []) == list(range(1, 4001))
        assert _quiet_stores(system) == {"1.1.1": 0, "1.2.1": 0}
    finally:
        _leave(sub)
        pub.close()


def test_bad_resumes_are_refused_and_status_shows_the_stores(system: LiveSystem) -> None:
    name = system.name
    with pytest.raises(ResumeRefused, match="unknown client id 'stranger'"):
        ges.connect(name, "1.1.2", "stranger", resume=True)
    sub = ges.connect(name, "1.1.2", "honest")
    sid = sub.subscribe(ALL)
    pub = ges.connect(name, "1.1.3", "pub-honest")
    try:
        _active(sub, sid)
        last = pub.publish({"n": 1})
        assert _receive(sub, 1, []) == [1]
        sub.disconnect()
        pub.publish({"n": 2})
        pub.wait_stored()
        forged = EventId(last.publisher, last.timestamp, last.sequence + 500, last.incarnation)
        with pytest.raises(ResumeRefused, match="never gave it"):
            ges.connect(name, "1.1.2", "honest", resume=True, last_received={"pub-honest": forged})
        out = subprocess.run(
            [sys.executable, "-m", "multihop.cli", "ges", "status", name, "--at", "1.1.1"], capture_output=True, text=True, timeout=60
        ).stdout
        assert "storage broker" in out and "stored events" in out
        # durable brokers run the native engine (the default), the storage brokers' too, and it routes the events
        statuses = {at: system.status(at) for at in ("1.1.1", "1.1.2", "1.1.3", "1.2.1", "1.2.2")}
        assert {at: st["engine"] for at, st in statuses.items()} == dict.fromkeys(statuses, "native")
        assert sum(st["counters"]["native_in"] for st in statuses.values()) > 0
        assert "oldest unacknowledged" in out and "waiting for honest" in out
        assert "client honest: incarnation" in out and "away" in out
        sub = ges.connect(name, "1.1.2", "honest", resume=True, last_received={"pub-honest": last})  # the true position
        assert _receive(sub, 1, []) == [2]
    finally:
        _leave(sub)
        pub.close()


def test_a_corrupt_storage_file_is_refused_at_start_naming_it() -> None:
    name = unique_name("gesbad")
    rt = mh.Runtime.start(name, cores=[0, 1])
    try:
        bad = rt.dir / "ges-1.1.1.db"
        bad.write_bytes(b"this is not an SQLite database, " * 400)
        with pytest.raises(GesStateError, match=f"(?s)broker 1.1.1 exited.*GES storage file {bad} is corrupt"):
            LiveSystem.up(topology(), name, durable=True, timeout=30)
        assert bad.read_bytes().startswith(b"this is not")  # left as it was
    finally:
        rt.stop()


def test_cli_crash_and_restart(system: LiveSystem) -> None:
    name = system.name

    def cli(*args: str) -> str:
        p = subprocess.run([sys.executable, "-m", "multihop.cli", "ges", *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout

    old = system.pid("1.2.2")
    assert "killed" in cli("crash", name, "1.2.2")
    assert not psutil.pid_exists(old) or psutil.Process(old).status() == psutil.STATUS_ZOMBIE
    assert "restarted on its storage file" in cli("restart", name, "1.2.2")
    fresh = LiveSystem.attach(name)
    assert fresh.pid("1.2.2") != old and psutil.pid_exists(fresh.pid("1.2.2"))
    sub = ges.connect(name, "1.2.2", "after-cli")  # the restarted broker serves clients again
    sid = sub.subscribe(ALL)
    pub = ges.connect(name, "1.1.1", "pub-after-cli")
    try:
        _active(sub, sid)
        pub.publish({"n": 7})
        assert _receive(sub, 1, []) == [7]
    finally:
        _leave(sub)
        pub.close()


def test_events_published_while_disconnected_go_out_on_resume(system: LiveSystem) -> None:
    name = system.name
    sub = ges.connect(name, "1.2.1", "queue-sub")
    sid = sub.subscribe(ALL)
    pub = ges.connect(name, "1.1.2", "queue-pub")
    try:
        _active(sub, sid)
        pub.publish({"n": 1})
        pub.wait_stored()
        pub.disconnect()
        queued = [pub.publish({"n": i}) for i in range(2, 52)]  # into the local queue only
        assert pub.queued == 50
        assert _receive(sub, 2, [], limit=1.0) == [1]  # nothing of the queue went out
        pub = ges.connect(name, "1.1.3", "queue-pub", resume=True)  # another broker of its cluster
        after = pub.publish({"n": 52})
        pub.wait_stored()
        assert after.incarnation > queued[0].incarnation
        got = _receive(sub, 52, [1])
        assert got == list(range(1, 53))
    finally:
        _leave(sub)
        pub.close()
