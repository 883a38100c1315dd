"""Attacks on GES durability (issue 26 §1): taking a durable client's id, and a storage broker's lost store.

Every attacker is another process of the machine's user (it can attach to the runtime like any
client): it resumes a durable id with no credential or a guessed one, connects plainly as an id
in use, or speaks the client interface directly as the victim, with the victim's incarnation
(``ges status`` shows it), sending requests before its attach is answered. The victims lose
nothing: the attacker is refused and gets nothing, the victims' state at their home is what it
was, a connected victim keeps receiving, and each victim gets every event once, in order. Then
the store itself: while its broker is down its file is truncated, or replaced by a fresh store
of the same broker; the broker refuses to start on it, naming the file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from multihop import ges
from multihop.ges.errors import GesStateError
from multihop.ges.live import LiveSystem
from multihop.ges.storage_sqlite import SqliteStorage
from session import unique_name

ALL = [("n", "*")]


def _topology() -> ges.Topology:
    """Two clusters: 1.1 (storage broker 1.1.1) and 1.2 (storage broker 1.2.1)."""
    t = ges.Topology(levels=2)
    for a in ("1.1.1", "1.1.2", "1.1.3", "1.2.1", "1.2.2"):
        t.add_broker(a)
    for a, b in (("1.1.1", "1.1.2"), ("1.1.2", "1.1.3"), ("1.1.1", "1.1.3"), ("1.2.1", "1.2.2"), ("1.1.3", "1.2.1")):
        t.add_gateway(a, b)
    return t


@pytest.fixture(scope="module")
def system() -> Iterator[LiveSystem]:
    s = LiveSystem.up(_topology(), unique_name("gesattack"), durable=True, timeout=60)
    try:
        yield s
    finally:
        s.down()


def _attacker(code: str) -> dict[str, Any]:
    """Run ``code`` in another process (its last line of output is JSON); it must end by itself."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def _connect_as(name: str, broker: str, client: str, **kw: Any) -> dict[str, Any]:
    """Another process's ges.connect; what it raised (or that it got in)."""
    return _attacker(f"""
        import json
        from multihop import ges
        try:
            c = ges.connect({name!r}, {broker!r}, {client!r}, **{kw!r})
        except Exception as e:
            print(json.dumps({{"error": type(e).__name__, "message": str(e)}}))
        else:
            got = [e.content for e in c.next_many(4096, timeout=1.0)]
            print(json.dumps({{"error": None, "got": len(got)}}))
    """)


def _active(c: ges.LiveClient, sid: int, level: int = 3, limit: float = 15.0) -> None:
    deadline = time.monotonic() + limit
    while c.active_level(sid) != level:  # bounded by the deadline
        assert time.monotonic() < deadline, "subscription not active in time"
        time.sleep(0.02)  # the test waits for the system; brokers never poll


def _receive(c: ges.LiveClient, n: int, limit: float = 30.0) -> list[int]:
    got: list[int] = []
    deadline = time.monotonic() + limit
    while len(got) < n and time.monotonic() < deadline:
        got += [e.content["n"] for e in c.next_many(4096, timeout=0.2)]
    return got


def _stored_client(system: LiveSystem, store: str, client: str) -> dict[str, Any]:
    return dict(system.status(store)["durability"]["store"]["clients"][client])


def _leave(c: ges.LiveClient) -> None:
    try:
        if not c._closed:
            for sid in list(c.core.subs):
                c.unsubscribe(sid)
            c.wait_stored()
    finally:
        c.close()


def test_an_away_clients_id_cannot_be_taken_by_a_resume_without_its_credential(system: LiveSystem) -> None:
    name = system.name
    carol = ges.connect(name, "1.1.2", "carol")
    sid = carol.subscribe(ALL)
    pub = ges.connect(name, "1.2.2", "pub-carol")
    try:
        _active(carol, sid)
        carol.disconnect()
        for i in range(1, 21):
            pub.publish({"n": i})
        pub.wait_stored()
        deadline = time.monotonic() + 30
        while _stored_client(system, "1.1.1", "carol")["pending"] < 20:
            assert time.monotonic() < deadline  # bounded
            time.sleep(0.05)  # the test waits for the routing
        before = _stored_client(system, "1.1.1", "carol")
        out = _connect_as(name, "1.1.3", "carol", resume=True)
        assert out["error"] == "ResumeRefused" and "presents no credential" in out["message"], out
        guessed = _connect_as(name, "1.1.2", "carol", resume=True, credential="A" * 43, last_received={})
        assert guessed["error"] == "ResumeRefused" and "not this id's" in guessed["message"], guessed
        assert _stored_client(system, "1.1.1", "carol") == before  # nothing taken, nothing acknowledged
        carol = ges.connect(name, "1.1.2", "carol", resume=True)
        assert _receive(carol, 20) == list(range(1, 21))
    finally:
        _leave(carol)
        pub.close()


def test_a_plain_connect_of_an_id_in_use_is_refused_and_drops_nothing(system: LiveSystem) -> None:
    name = system.name
    dave = ges.connect(name, "1.2.2", "dave")
    sid = dave.subscribe(ALL)
    pub = ges.connect(name, "1.1.3", "pub-dave")
    try:
        _active(dave, sid)
        dave.disconnect()
        for i in range(1, 11):
            pub.publish({"n": i})
        pub.wait_stored()
        deadline = time.monotonic() + 30
        while _stored_client(system, "1.2.1", "dave")["pending"] < 10:
            assert time.monotonic() < deadline  # bounded
            time.sleep(0.05)  # the test waits for the routing
        for broker in ("1.2.2", "1.2.1"):
            out = _connect_as(name, broker, "dave")
            assert out["error"] == "ClientIdInUse" and "client id 'dave' is in use" in out["message"], out
        assert _stored_client(system, "1.2.1", "dave")["pending"] == 10
        dave = ges.connect(name, "1.2.2", "dave", resume=True)
        assert _receive(dave, 10) == list(range(1, 11))
        out = _connect_as(name, "1.2.2", "dave")  # connected: in use too
        assert out["error"] == "ClientIdInUse", out
    finally:
        _leave(dave)
        pub.close()


def test_a_forged_attach_with_the_victims_incarnation_changes_nothing_of_a_connected_victim(system: LiveSystem) -> None:
    """The attacker speaks ges_client.if itself at the victim's broker, as the victim, with the victim's
    incarnation, no credential, and sends an unsubscribe and a publication before the answer."""
    name = system.name
    vic = ges.connect(name, "1.1.2", "victim")
    sid = vic.subscribe(ALL)
    watcher = ges.connect(name, "1.2.2", "watcher")
    wid = watcher.subscribe(ALL)
    pub = ges.connect(name, "1.1.3", "pub-victim")
    try:
        _active(vic, sid)
        _active(watcher, wid)
        pub.publish({"n": 1})
        assert _receive(vic, 1) == [1] and _receive(watcher, 1) == [1]
        inc = system.status("1.1.2")["durability"]["attached"]["victim"]["incarnation"]
        assert inc == vic.incarnation  # what anyone can read
        out = _attacker(f"""
            import json, time
            import multihop as mh
            from multihop.ges.event import EventId, make_event
            from multihop.ges.live import wire
            from multihop.ges.live import ges_client_if as cs
            rt = mh.Runtime.attach({name!r})
            system = json.loads((rt.dir / "ges.json").read_text())["system"]
            d = rt.dispatcher(0)
            ch = d.bind(wire.service_name(system, "1.1.2"), transport="multihop", window=64, max_message=wire.MAX_MESSAGE, timeout=10)
            ch.send(wire.stub.encode("hello", kind=wire.KIND_CLIENT, address=0, incarnation=0, cost=0, system=system), 10)
            ev = make_event(EventId("victim", 1, 0, {inc}), {{"n": 999}}, b"forged")
            ch.send_batch([
                cs.encode("durable_attach", client="victim", incarnation={inc}, home=-1, previous=-1, resume=True, last=[], text=b"", credential=""),
                cs.encode("unsubscribe", sub={sid}),
                cs.encode("publish_durable", timestamp=1, sequence=0, incarnation={inc}, has_prev=False, prev_timestamp=0,
                          prev_sequence=0, prev_incarnation=0, signature=ev.signature, values=ev.values, payload=ev.payload),
            ], 10)
            answers = []
            deadline = time.monotonic() + 15
            while not any(a[0] == "attach_refused" for a in answers) and time.monotonic() < deadline:
                try:
                    batch = ch.recv_batch(64, timeout=0.5)
                except mh.ChannelClosed:
                    break
                for data in batch:
                    rec = cs.decode(data)
                    answers.append([rec.name, getattr(rec, "kind", None), getattr(rec, "reason", "")])
            ch.close()
            d.detach()
            print(json.dumps({{"answers": answers}}))
        """)
        answers = out["answers"]
        assert [a[0] for a in answers] == ["attach_refused"] and answers[0][1] == 1 and "no credential" in answers[0][2], answers
        for i in range(2, 12):  # the victim still has its subscription and its session; nothing was published as it
            pub.publish({"n": i})
        assert _receive(vic, 10) == list(range(2, 12))
        assert _receive(watcher, 10) == list(range(2, 12))
        assert watcher.next_many(4096, timeout=0.5) == []  # (no forged n=999)
        st = _stored_client(system, "1.1.1", "victim")
        assert st["connected"] and st["incarnation"] == inc
        assert system.status("1.1.2")["durability"]["attached"]["victim"]["incarnation"] == inc
    finally:
        _leave(vic)
        _leave(watcher)
        pub.close()


@pytest.mark.parametrize("attack", ["truncate", "fresh-store"])
def test_a_store_emptied_while_its_broker_is_down_is_refused_at_restart(attack: str, tmp_path: Path) -> None:
    """The attacker empties the storage broker's file while the broker is down: truncates it, or puts a
    fresh, valid store of the same broker in its place. The broker refuses to start, naming the file."""
    name = unique_name("gesattack-store")
    system = LiveSystem.up(_topology(), name, durable=True, timeout=60)
    try:
        c = ges.connect(name, "1.1.2", "held")
        sid = c.subscribe(ALL)
        pub = ges.connect(name, "1.1.3", "pub-held")
        _active(c, sid)
        c.disconnect()
        for i in range(1, 101):
            pub.publish({"n": i})
        pub.wait_stored()
        pub.close()
        system.crash("1.1.1")
        path = system.storage_file("1.1.1")
        if attack == "truncate":
            os.truncate(path, 0)
        else:
            fresh = tmp_path / "ges-1.1.1.db"
            st = SqliteStorage(fresh, "1.1.1")
            st.close()
            for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                p.unlink(missing_ok=True)
            fresh.rename(path)
        want = "is empty" if attack == "truncate" else "is store .*not store"
        with pytest.raises(GesStateError, match=f"(?s)broker 1.1.1 exited with 2.*GES storage file {path} {want}"):
            system.restart("1.1.1")
    finally:
        system.down()
