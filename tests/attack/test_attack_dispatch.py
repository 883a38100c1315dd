"""What a dispatch client may send, against live peers (issue 26 §1): no frame kills a peer or fools it.

Three live peer processes on a real runtime; the attacker is a client of this test process that
writes frames of its own (built with the generated stubs) on real channels to every peer:

* a news with sequence number 2**64-1 (it used to kill all three peers, and the domain with what
  it held): every peer survives, counts it, refuses it, and the news queued before and sent after
  still reach the sink;
* a ``client_hello`` carrying another source's id, then a news with that source's next sequence
  number (it used to be delivered as that source's, and the genuine news dropped as a duplicate):
  refused, while the source is connected and after it left;
* a priority-0 source's news claiming priority 255 (it used to be delivered at 255): never
  delivered at a priority its source did not register;
* a relay (a client of kind relay) speaking for a source of this domain, or bringing news of this
  domain: refused.

Every wait is bounded; the runtime and peers are stopped whatever happens.
"""

from __future__ import annotations

import time
from contextlib import ExitStack, contextmanager
from typing import Callable, Iterator

import pytest

import multihop as mh
from multihop import news
from multihop.news.ids import Nid, domain_id, hex_id, new_identity
from multihop.news.naming import peer_service
from multihop.news.source_machine import SourceMachine
from multihop.news.wire import DecodeError, M, Record, decode, encode
from session import unique_name

FAST = news.PeerConfig(heartbeat=0.05, dead_after=0.4)


@contextmanager
def domain(peers: int) -> Iterator[tuple[mh.Runtime, news.System]]:
    """A runtime and its dispatch peers, all stopped at the end whatever happens."""
    rt = mh.Runtime.start(unique_name("dspatk"), cores=[0, 1])
    system = None
    try:
        system = news.start(rt.name, peers, config=FAST)
        yield rt, system
    finally:
        if system is not None:
            system.stop()
        rt.stop()


class Rogue:
    """Raw channels from this process to every peer of a domain: frames as the attacker writes them."""

    def __init__(self, rt: mh.Runtime, system: news.System) -> None:
        self.d = rt.dispatcher(0)
        self.domain = domain_id(rt.name, "main")
        self.chans: dict[Nid, mh.Channel] = {p.id: self.d.bind(peer_service("main", p.id), timeout=5) for p in system.live}
        self.got: dict[Nid, list[Record]] = {p: [] for p in self.chans}
        self.closed: set[Nid] = set()  # peers whose channel we read to its end (closed by the peer)
        self.unwritable: set[Nid] = set()  # peers a write found closed (what they sent may still be read)

    def send(self, rec: Record) -> None:
        """Write ``rec`` to every peer (a peer that closed our channel is skipped)."""
        for peer in self.chans:
            self.send_to(peer, rec)

    def send_to(self, peer: Nid, rec: Record) -> None:
        """Write ``rec`` to ``peer`` unless it closed our channel (it may, as soon as it read our hello)."""
        if peer not in self.unwritable:
            try:
                self.chans[peer].send(encode(rec), 5.0)
            except mh.ChannelClosed:
                self.unwritable.add(peer)

    def read(self) -> None:
        """Take what the peers answered (and note the channels they closed)."""
        for peer, ch in self.chans.items():
            if peer in self.closed:
                continue
            try:
                while (data := ch.try_recv()) is not None:
                    try:
                        self.got[peer].append(decode(data))
                    except DecodeError:
                        pass
            except mh.ChannelClosed:
                self.closed.add(peer)

    def refusals(self, peer: Nid) -> list[str]:
        """The reasons ``peer`` gave for refusing what we sent."""
        return [r.reason for r in self.got[peer] if isinstance(r, M.messages.refused)]

    def wait(self, done: Callable[[], bool], seconds: float = 10.0) -> bool:
        """Read until ``done()`` or ``seconds`` pass; return ``done()``."""
        deadline = time.monotonic() + seconds
        while not done() and time.monotonic() < deadline:
            self.read()
            time.sleep(0.01)
        self.read()
        return done()

    def close(self) -> None:
        """Close every channel and the dispatcher."""
        for ch in self.chans.values():
            ch.close()
        self.d.detach()


def _read_all(snk: news.Sink, want: int, seconds: float = 20.0) -> list[news.News]:
    """What the sink gets until it has ``want`` news or ``seconds`` pass."""
    got: list[news.News] = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        try:
            got.append(snk.next(timeout=0.2))
        except mh.Timeout:
            pass
    return got


def _counter(status: dict[str, dict], name: str) -> list[int]:
    return [st.get("counters", {}).get(name, 0) for st in status.values()]


def test_a_news_with_sequence_number_2_64_minus_1_kills_no_peer_and_the_queued_news_still_arrive() -> None:
    """Issue 26 §1: the frame that killed every peer (next_seq 2**64 out of range for uint64)."""
    with domain(3) as (rt, system), ExitStack() as stack:
        snk = stack.enter_context(news.sink(rt.name, ["n"]))  # reliable; does not read until the end
        good = stack.enter_context(news.source(rt.name))
        evil = stack.enter_context(news.source(rt.name))
        for i in range(100):
            good.send(["n"], b"%d" % i)
        good.flush()
        forged = M.messages.news(evil.id, 2**64 - 1, 0, time.monotonic_ns(), evil.domain, "n", b"evil")
        for peer in sorted(evil.machine.linked):
            evil.table.queue(peer, forged)
        evil.table.flush()
        deadline = time.monotonic() + 10
        while len(evil.stats()["refusals"]) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        for i in range(100, 200):
            good.send(["n"], b"%d" % i)
        good.flush()
        assert all(p.alive for p in system.peers), [p.log_tail() for p in system.peers if not p.alive]
        refusals = evil.stats()["refusals"]
        assert len(refusals) == 3 and all("sequence number" in r for r in refusals), refusals
        st = system.status()
        assert len(st) == 3 and all("error" not in s for s in st.values()), st
        assert _counter(st, "bad_frames") == [1, 1, 1]
        assert all(s["counters"].get("bad_news", 0) == 1 for s in st.values())
        got = _read_all(snk, 200)
        assert [(x.source, x.seq, x.payload) for x in got] == [(good.id, i, b"%d" % i) for i in range(200)]
        evil.send(["n"], b"after")  # the attacker's channels still work for honest news
        assert _read_all(snk, 1)[0].payload == b"after"


def test_a_source_id_cannot_be_taken_over_while_it_is_connected_or_after_it_left() -> None:
    """Issue 26 §1: a hello with another source's id and its next sequence number was delivered as its news."""
    with domain(3) as (rt, system), ExitStack() as stack:
        snk = stack.enter_context(news.sink(rt.name, ["n"]))
        victim = news.source(rt.name)
        stack.callback(victim.close)
        for i in range(5):
            victim.send(["n"], b"genuine %d" % i)
        victim.flush()
        rogue = Rogue(rt, system)
        stack.callback(rogue.close)
        fake = SourceMachine(victim.id, rogue.domain, news.SourceQoS(priority=9), time.monotonic_ns())
        fake.seq = 5
        for peer in rogue.chans:
            fake.handle_connected(peer, time.monotonic_ns())
        while (out := fake.poll_transmit()) is not None:
            rogue.send_to(out[0], out[1])
        rogue.send(fake.make_news(["n"], b"forged 5", time.monotonic_ns()))
        assert rogue.wait(lambda: all(rogue.refusals(p) for p in rogue.chans)), rogue.got
        for i in range(5, 10):
            victim.send(["n"], b"genuine %d" % i)
        victim.flush()
        got = _read_all(snk, 10)
        assert [(x.source, x.seq, x.payload, x.priority) for x in got] == [(victim.id, i, b"genuine %d" % i, 0) for i in range(10)]
        assert rogue.wait(lambda: len(rogue.closed) == 3), "every peer closes the impostor's channel"
        # the source leaves: its id is still its own
        victim.close()
        rogue2 = Rogue(rt, system)
        stack.callback(rogue2.close)
        fake.seq = 10
        for peer in rogue2.chans:
            fake.handle_connected(peer, time.monotonic_ns())
        while (out := fake.poll_transmit()) is not None:
            rogue2.send_to(out[0], out[1])
        rogue2.send(fake.make_news(["n"], b"forged 10", time.monotonic_ns()))
        assert rogue2.wait(lambda: all(rogue2.refusals(p) for p in rogue2.chans)), rogue2.got
        marker = stack.enter_context(news.source(rt.name))
        marker.send(["n"], b"marker")
        marker.flush()
        after = _read_all(snk, 1)
        assert [x.payload for x in after] == [b"marker"]
        st = system.status()
        assert all(p.alive for p in system.peers)
        assert all(n >= 2 for n in _counter(st, "refused")), st


def test_a_news_claiming_a_higher_priority_than_its_source_registered_is_not_delivered_at_it() -> None:
    """Issue 26 §1: a priority-0 source's news claiming 255 was delivered at 255."""
    with domain(3) as (rt, system), ExitStack() as stack:
        snk = stack.enter_context(news.sink(rt.name, ["n"]))
        low = stack.enter_context(news.source(rt.name, qos=news.SourceQoS(priority=0)))
        low.send(["n"], b"honest 0")
        claim = M.messages.news(low.id, 1, 255, time.monotonic_ns(), low.domain, "n", b"claims 255")
        low.machine.seq = 2
        for peer in sorted(low.machine.linked):
            low.table.queue(peer, claim)
        low.table.flush()
        low.send(["n"], b"honest 2")
        low.flush()
        got = _read_all(snk, 3, seconds=5.0)
        assert all(x.priority == 0 for x in got), [(x.seq, x.priority, x.payload) for x in got]
        assert [x.payload for x in got] == [b"honest 0", b"honest 2"]
        refusals = low.stats()["refusals"]
        assert len(refusals) == 3 and all("priority 255" in r for r in refusals), refusals
        st = system.status()
        assert _counter(st, "bad_news") == [1, 1, 1]
        assert all(p.alive for p in system.peers)


def test_a_relay_cannot_speak_for_a_source_of_this_domain_nor_bring_this_domains_news() -> None:
    """Relays carry foreign ids and priorities legitimately; what they may claim is bounded."""
    with domain(2) as (rt, system), ExitStack() as stack:
        snk = stack.enter_context(news.sink(rt.name, ["n"]))
        local = stack.enter_context(news.source(rt.name))
        local.send(["n"], b"local 0")
        rogue = Rogue(rt, system)
        stack.callback(rogue.close)
        me, secret = new_identity("relay")  # a relay of its own: it may bring foreign news, within bounds
        rogue.send(M.messages.client_hello(M.client_kind.CLIENT_RELAY, me, rogue.domain, secret))
        elsewhere = domain_id("elsewhere", "main")
        now = time.monotonic_ns()
        rogue.send(M.messages.news(local.id, 1, 255, now, elsewhere, "n", b"speaks for a local source"))
        rogue.send(M.messages.news(local.id, 1, 255, now, rogue.domain, "n", b"brings our own domain's news"))
        foreign = new_identity("source")[0]
        rogue.send(M.messages.news(foreign, 0, 7, now, elsewhere, "n", b"foreign 0"))
        rogue.send(M.messages.news(foreign, 1, 200, now, elsewhere, "n", b"foreign 1 at another priority"))
        rogue.send(M.messages.news(foreign, 2, 7, now, domain_id("third", "main"), "n", b"foreign 2 from another origin"))
        rogue.send(M.messages.news(foreign, 3, 7, now, elsewhere, "n", b"foreign 3"))
        assert rogue.wait(lambda: all(len(rogue.refusals(p)) == 4 for p in rogue.chans)), rogue.got
        local.send(["n"], b"local 1")
        local.flush()
        got = _read_all(snk, 4, seconds=5.0)
        assert sorted((x.payload, x.priority) for x in got) == [(b"foreign 0", 7), (b"foreign 3", 7), (b"local 0", 0), (b"local 1", 0)]
        reasons = rogue.refusals(next(iter(rogue.chans)))
        assert any("source of this domain" in r for r in reasons) and any("this domain's own" in r for r in reasons), reasons
        assert any("priority 200" in r for r in reasons) and any("origin" in r for r in reasons), reasons
        assert all(p.alive for p in system.peers)
        assert _counter(system.status(), "bad_news") == [4, 4]


@pytest.mark.parametrize("kind", ["source", "sink"])
def test_a_client_cannot_send_what_only_peers_or_administrators_send(kind: str) -> None:
    """A source or sink that sends ``shutdown``, ``sink_left`` or ``stored_news`` is refused and cut off; the domain serves on."""
    with domain(2) as (rt, system), ExitStack() as stack:
        snk = stack.enter_context(news.sink(rt.name, ["n"]))
        src = stack.enter_context(news.source(rt.name))
        client: news.Source | news.Sink = (
            stack.enter_context(news.source(rt.name)) if kind == "source" else stack.enter_context(news.sink(rt.name, ["x"]))
        )
        forged = [
            M.messages.sink_left(system.peers[0].id, snk.id),
            M.messages.stored_news(src.id, 0, 255, time.monotonic_ns(), 0, client.domain, "n", b"injected", [snk.id]),
            M.messages.shutdown(0),
        ]
        for peer in sorted(client.machine.linked):
            for rec in forged:
                client.table.queue(peer, rec)
        client.table.flush()
        deadline = time.monotonic() + 10
        while client.machine.linked and time.monotonic() < deadline:
            client.stats() if kind == "source" else client.try_next()
            time.sleep(0.01)
        assert not client.machine.linked, "every peer closed the channel of a client that sent a peer's message"
        src.send(["n"], b"still served")
        src.flush()
        got = _read_all(snk, 1, seconds=5.0)
        assert [x.payload for x in got] == [b"still served"]
        assert all(p.alive for p in system.peers)
        st = system.status()
        assert len(st) == 2 and all(s["active"] and not s["leaving"] for s in st.values()), st
        assert all(hex_id(snk.id) in s["sinks"] for s in st.values())
        assert all(n >= 1 for n in _counter(st, "bad_frames"))
