"""A gateway's incarnation is never used twice (docs/ges.md, Connections): a gateway brought up again with one its
pair had before is dead from birth (dead is final), and its brokers route around a live link for good.

Found as a flake of the durability tests: a storage broker restarted twice within one second took the same
incarnation (the seconds since 2023) both times, its new gateways were born dead in every table, and its store's
entries waited forever for the acknowledgements of next hops it could not route to.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import multihop as mh
from multihop import ges
from multihop.ges.address import Address
from multihop.ges.errors import GesStateError, StorageError
from multihop.ges.gpp import GatewayPropagation
from multihop.ges.live import LiveSystem
from multihop.ges.live.incarnation import EPOCH_2023, IncarnationSource
from session import unique_name
from test_ges_durability_live import ALL, _active, _leave, _quiet_stores, _receive, topology


class _Clock:
    """An injected clock: the Unix time the test sets."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_incarnations_grow_within_one_second_and_across_lives(tmp_path: Path) -> None:
    clock = _Clock(EPOCH_2023 + 1000.25)
    path = tmp_path / "ges-1.1.1.incarnation"
    src = IncarnationSource(path, clock)
    assert [src.next() for _ in range(3)] == [1000, 1001, 1002]  # the same second: still new ones
    again = IncarnationSource(path, clock)  # the next life, within the same second
    assert again.next() == 1003
    clock.t += 5000  # the clock went past them: the clock's seconds
    assert again.next() == 6000
    assert int(path.read_text()) == 6000  # saved before it was given
    assert not list(tmp_path.glob("*.tmp"))


def test_a_clock_that_went_back_still_gives_new_incarnations(tmp_path: Path) -> None:
    clock = _Clock(EPOCH_2023 + 500)
    src = IncarnationSource(tmp_path / "inc", clock)
    assert src.next() == 500
    clock.t -= 300  # the machine's clock was set back
    assert IncarnationSource(tmp_path / "inc", clock).next() == 501


@pytest.mark.parametrize("text", ["", "twelve\n", "-4\n", "\x00\x01", "4294967296\n"])
def test_a_corrupt_incarnation_file_is_refused_naming_it(tmp_path: Path, text: str) -> None:
    path = tmp_path / "ges-1.1.2.incarnation"
    path.write_text(text)
    with pytest.raises(StorageError, match=f"GES incarnation file {path} is corrupt"):
        IncarnationSource(path)
    assert path.read_text() == text  # left as it was


def test_an_unwritable_file_keeps_incarnations_new_in_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clock = _Clock(EPOCH_2023 + 10)
    src = IncarnationSource(tmp_path / "gone" / "inc", clock)  # its directory does not exist
    assert [src.next(), src.next()] == [10, 11]
    assert "could not be written" in capsys.readouterr().err


def test_a_lost_incarnation_is_refused_by_gpp() -> None:
    levels = 2
    a, b = Address("1.1.1", levels).code, Address("1.1.2", levels).code
    gpp = GatewayPropagation(a, levels)
    gpp.link_up(b, 7)
    assert not gpp.was_lost(b, 7)
    gpp.link_down(b)
    assert gpp.was_lost(b, 7) and not gpp.was_lost(b, 8)
    with pytest.raises(ValueError, match="incarnation 7 of the gateway to that peer was lost before"):
        gpp.link_up(b, 7)
    assert b not in gpp.links  # nothing changed
    gpp.link_up(b, 8)
    assert gpp.graph().cache.table()[b][0] == 0  # the new one is alive: the peer is reachable


def _link_incarnations(system: LiveSystem, address: str, peers: int, limit: float = 30.0) -> dict[str, int]:
    """The incarnations of ``address``'s gateways once all ``peers`` of them are up (bounded)."""
    deadline = time.monotonic() + limit
    while True:  # bounded by the deadline
        links = {link["peer"]: link["incarnation"] for link in system.status(address)["links"]}
        if len(links) == peers:
            return links
        assert time.monotonic() < deadline, f"{address}'s gateways not up in time: {links}"
        time.sleep(0.02)  # the test waits for the brokers' dials


def _dead_records_of(system: LiveSystem, incarnations: dict[str, int], at: str) -> list[list[object]]:
    levels = system.topology.levels
    me = Address("1.1.1", levels).code
    codes = {Address(p, levels).code: inc for p, inc in incarnations.items()}
    return [
        r
        for r in system.status(at)["records"]
        if r[6] and (r[0] == me and codes.get(r[1]) == r[3] or r[1] == me and codes.get(r[0]) == r[3])  # type: ignore[call-overload]
    ]


def _await_alive(system: LiveSystem, incarnations: dict[str, int], limit: float = 15.0) -> None:
    """Wait (bounded) until no broker of cluster 1.1 holds 1.1.1's gateways of these incarnations as dead (dead is
    final: a reused incarnation would be dead from birth)."""
    brokers = ("1.1.1", "1.1.2", "1.1.3")
    deadline = time.monotonic() + limit
    while any(_dead_records_of(system, incarnations, at) for at in brokers):  # bounded by the deadline
        assert time.monotonic() < deadline, {at: _dead_records_of(system, incarnations, at) for at in brokers}
        time.sleep(0.05)  # the test waits for the records to flood


def _events_flow(system: LiveSystem, sub: ges.LiveClient, pub: ges.LiveClient, n: int) -> None:
    """``n`` events from ``pub`` reach ``sub`` in order, are stored, and every store settles empty."""
    for i in range(1, n + 1):
        pub.publish({"n": i})
    assert _receive(sub, n, []) == list(range(1, n + 1))
    pub.wait_stored()
    assert _quiet_stores(system) == {"1.1.1": 0, "1.2.1": 0}


def test_a_storage_broker_restarted_twice_within_a_second_gets_its_gateways_back() -> None:
    s = LiveSystem.up(topology(), unique_name("gesinc"), durable=True, timeout=60)
    sub = pub = None
    try:
        sub = ges.connect(s.name, "1.1.2", "inc-sub")  # homed at 1.1.1, the broker restarted
        sid = sub.subscribe(ALL)
        pub = ges.connect(s.name, "1.1.3", "inc-pub")
        _active(sub, sid)
        deadline = time.monotonic() + 2
        while time.time() % 1 > 0.05 and time.monotonic() < deadline:  # (a second starts: both restarts in it, usually)
            time.sleep(0.005)
        lives = []
        for _ in range(2):
            s.crash("1.1.1")
            s.restart("1.1.1")
            lives.append(_link_incarnations(s, "1.1.1", 2))
        assert all(lives[1][p] > lives[0][p] for p in lives[0]), lives  # new incarnations, however fast the restarts
        # every broker of the cluster holds the new gateways alive (dead is final: a reused one is dead from birth)
        _await_alive(s, lives[1])
        _events_flow(s, sub, pub, 200)  # (the next hops acknowledged every entry)
        assert s.status("1.1.2")["routing_cache"]["1.1.1"][0] == 0  # and route to it over the gateway
    finally:
        try:
            if sub is not None:
                _leave(sub)
            if pub is not None:
                pub.close()
        finally:
            s.down()


def test_a_reused_incarnation_is_refused_and_the_gateway_comes_back_with_a_new_one() -> None:
    """A broker whose incarnation file went back (lost, or restored from an old copy) dials with an incarnation its
    gateways had and lost: its neighbours refuse it (naming it in their logs) instead of taking a gateway that is
    dead from birth, and it dials again with the next one. Deterministic: the file is set so that the restart
    takes the incarnation of the life before (one ahead of the clock)."""
    s = LiveSystem.up(topology(), unique_name("gesreuse"), durable=True, timeout=60)
    sub = pub = None
    try:
        file = Path(s.config["storage_dir"]) / "ges-1.1.1.incarnation"
        ahead = int(time.time()) - EPOCH_2023 + 1000  # (the clock cannot reach it during the test)
        s.crash("1.1.1")
        file.write_text(f"{ahead}\n")
        s.restart("1.1.1")
        first = _link_incarnations(s, "1.1.1", 2)
        assert set(first.values()) == {ahead + 1}
        s.crash("1.1.1")
        file.write_text(f"{ahead}\n")  # went back: the restart takes ahead + 1 again, lost with the life before
        s.restart("1.1.1")
        deadline = time.monotonic() + 30
        while True:  # bounded by the deadline
            links = {link["peer"]: link["incarnation"] for link in s.status("1.1.1")["links"]}
            if len(links) == 2 and all(inc > ahead + 1 for inc in links.values()):
                break
            assert time.monotonic() < deadline, f"gateways not back with new incarnations: {links}"
            time.sleep(0.05)  # the test waits for the dials
        for at in ("1.1.2", "1.1.3"):
            log = Path(s.config["brokers"][at]["log"]).read_text(errors="replace")
            assert f"broker {at}: gateway to 1.1.1 refused: its incarnation {ahead + 1} was lost before" in log
        _await_alive(s, links)
        sub = ges.connect(s.name, "1.1.2", "reuse-sub")
        sid = sub.subscribe(ALL)
        pub = ges.connect(s.name, "1.1.3", "reuse-pub")
        _active(sub, sid)
        _events_flow(s, sub, pub, 100)
    finally:
        try:
            if sub is not None:
                _leave(sub)
            if pub is not None:
                pub.close()
        finally:
            s.down()


def test_a_corrupt_incarnation_file_is_refused_at_start_naming_it() -> None:
    name = unique_name("gesincbad")
    rt = mh.Runtime.start(name, cores=[0, 1])
    try:
        bad = rt.dir / "ges-1.1.2.incarnation"
        bad.write_text("not a number\n")
        with pytest.raises(GesStateError, match=f"(?s)broker 1.1.2 exited.*GES incarnation file {bad} is corrupt"):
            LiveSystem.up(topology(), name, durable=True, timeout=30)
        assert bad.read_text() == "not a number\n"  # left as it was
    finally:
        rt.stop()
