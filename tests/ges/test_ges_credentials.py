"""Durable GES client ids are owned by a credential (issue 26 §1): a resume needs it, a plain connect never takes an id.

A first connection makes a credential (a 256-bit random token the client keeps, as it keeps its
positions); its home store keeps only a hash of it. A resume must present it: none or a wrong one
is refused, naming why, and the client's state stays as it is. A plain connect of an id its home
holds state for is refused with ClientIdInUse, never a silent reset. In the simulator and live;
the attacks from other processes are in tests/attack/test_attack_ges.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Iterator

import pytest

from multihop import ges
from multihop.ges.durability import credential_hash
from multihop.ges.errors import ClientIdInUse, GesStateError, ResumeRefused
from multihop.ges.live import LiveSystem
from multihop.ges.storage_sqlite import SqliteStorage
from session import unique_name
from test_ges_durability import SPORT, _numbers, _ready, _sim
from test_ges_durability_live import ALL, _active, _leave, _receive, topology

WRONG = "A" * 43


def test_sim_a_resume_with_a_wrong_credential_is_refused_and_changes_nothing() -> None:
    sim = _sim()
    carol = sim.client("1.1.2.8", "carol")
    sid = carol.subscribe(SPORT)
    pub = sim.client("1.1.1.2", "pub")
    _ready(sim, (carol, sid))
    pub.publish({"sport": "football", "n": 0})
    sim.run_until_quiet()
    carol.disconnect()
    for n in range(1, 6):
        pub.publish({"sport": "football", "n": n})
    sim.run_until_quiet()
    home = sim.broker("1.1.2.7").durability.status()["store"]["clients"]["carol"]
    with pytest.raises(ResumeRefused, match="presents a credential that is not this id's.*left as it is"):
        sim.client("1.1.2.8", "carol", resume=True, credential=WRONG, last_received={})
    assert sim.broker("1.1.2.7").durability.status()["store"]["clients"]["carol"] == home  # untouched
    back = sim.client("1.1.2.8", "carol", resume=True)  # her own state: her credential and positions
    sim.run_until_quiet()
    assert _numbers(back) == [1, 2, 3, 4, 5]


def test_sim_a_plain_connect_of_an_id_in_use_is_refused_never_a_reset() -> None:
    sim = _sim()
    dave = sim.client("2.1.1.3", "dave")
    sid = dave.subscribe(SPORT)
    pub = sim.client("1.1.1.2", "pub")
    _ready(sim, (dave, sid))
    dave.disconnect()
    for n in range(10):
        pub.publish({"sport": "football", "n": n})
    sim.run_until_quiet()
    with pytest.raises(ClientIdInUse, match="client id 'dave' is in use.*away, 10 events pending.*resumes it"):
        sim.client("2.1.1.2", "dave")
    back = sim.client("2.1.1.3", "dave", resume=True)
    sim.run_until_quiet()
    assert _numbers(back) == list(range(10))  # his 10 pending events were not dropped
    with pytest.raises(ClientIdInUse, match="connected"):
        sim.client("2.1.1.2", "dave")  # connected: in use too


def test_the_store_keeps_a_hash_of_the_credential_only() -> None:
    assert credential_hash("carol", "x" * 43) != credential_hash("dave", "x" * 43)  # bound to the id
    assert len(credential_hash("carol", "x" * 43)) == 64


def test_bad_credentials_are_refused_before_anything_is_sent() -> None:
    sim = _sim()
    with pytest.raises(TypeError, match="credential must be a str"):
        sim.client("1.1.1.2", "x", credential=1234)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="16 to 128 printable ASCII characters.*got 5"):
        sim.client("1.1.1.2", "x", credential="short")
    with pytest.raises(ValueError, match="printable ASCII"):
        sim.client("1.1.1.2", "x", credential="with spaces in it, 32 chars long")


@pytest.fixture(scope="module")
def system() -> Iterator[LiveSystem]:
    s = LiveSystem.up(topology(), unique_name("gescred"), durable=True, timeout=60)
    try:
        yield s
    finally:
        s.down()


def _other_process(code: str, timeout: float = 120.0) -> dict[str, object]:
    """Run ``code`` in a new Python process (another program on the machine); it prints one JSON line."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def test_a_new_process_resumes_with_the_credential_and_positions(system: LiveSystem) -> None:
    """The way to resume from another process: the first one keeps its credential and positions."""
    name = system.name
    erin = ges.connect(name, "1.2.2", "erin")
    sid = erin.subscribe(ALL)
    pub = ges.connect(name, "1.1.3", "pub-erin")
    try:
        _active(erin, sid)
        assert erin.credential is not None and len(erin.credential) == 43
        for i in range(1, 6):
            pub.publish({"n": i})
        assert _receive(erin, 5, []) == [1, 2, 3, 4, 5]
        kept = {"credential": erin.credential, "last": {p: list(i) for p, i in erin.last_received.items()}}
        erin.disconnect()
        for i in range(6, 11):
            pub.publish({"n": i})
        pub.wait_stored()
        got = _other_process(f"""
            import json
            from multihop import ges
            from multihop.ges.event import EventId
            kept = {json.dumps(kept)}
            c = ges.connect({name!r}, "1.2.1", "erin", resume=True, credential=kept["credential"],
                            last_received={{p: EventId(*i) for p, i in kept["last"].items()}})
            got = []
            while len(got) < 5:
                got += [e.content["n"] for e in c.next_many(100, timeout=30)]
            for sid in list(c.core.subs):
                c.unsubscribe(sid)
            c.wait_stored()
            c.close()
            print(json.dumps({{"got": got}}))
        """)
        assert got == {"got": [6, 7, 8, 9, 10]}
    finally:
        erin.close()
        pub.close()


def test_a_refused_connect_leaves_this_processes_state_of_the_id_alone(system: LiveSystem) -> None:
    name = system.name
    fay = ges.connect(name, "1.1.2", "fay")
    sid = fay.subscribe(ALL)
    pub = ges.connect(name, "1.1.3", "pub-fay")
    try:
        _active(fay, sid)
        cred = fay.credential
        fay.disconnect()
        pub.publish({"n": 1})
        pub.wait_stored()
        with pytest.raises(ClientIdInUse):
            ges.connect(name, "1.1.2", "fay")  # a plain connect: refused, and it does not replace her state here
        with pytest.raises(ResumeRefused, match="not this id's"):
            ges.connect(name, "1.1.2", "fay", resume=True, credential=WRONG)
        fay = ges.connect(name, "1.1.2", "fay", resume=True)  # her own credential, kept in this process
        assert fay.credential == cred
        assert _receive(fay, 1, []) == [1]
    finally:
        _leave(fay)
        pub.close()


def test_the_storage_file_holds_no_credential(system: LiveSystem) -> None:
    name = system.name
    gil = ges.connect(name, "1.1.1", "gil")
    try:
        gil.subscribe(ALL)
        cred = gil.credential
        assert cred
    finally:
        _leave(gil)
    system.crash("1.1.1")
    try:
        f = system.storage_file("1.1.1")
        raw = b"".join(p.read_bytes() for p in (f, f.with_name(f.name + "-wal")) if p.exists())
        assert cred.encode() not in raw
        st = SqliteStorage(system.storage_file("1.1.1"), "1.1.1")
        try:
            assert st.load().clients["gil"].credential == credential_hash("gil", cred)
        finally:
            st.close()
    finally:
        system.restart("1.1.1")


def test_credential_needs_a_durable_system() -> None:
    with LiveSystem.up(topology(), unique_name("gesplain"), timeout=60) as plain:
        with pytest.raises(GesStateError, match="credential= is for a GES system with stable storage"):
            ges.connect(plain.name, "1.1.1", "x", credential="y" * 43)
