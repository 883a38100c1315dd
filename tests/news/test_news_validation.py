"""What the dispatch machines take from the wire (issue 26 §1), sans-IO: every message, every field, every sender.

A peer machine with a registered source, a joined sink, a relay, an administrator and another peer is fed
frames from each of them (and from a stranger): the frames a client might forge are refused with a
reason, counted, and a client that breaks the protocol is cut off; a property test feeds random frames of
every message, with every field drawn around its bounds, from every kind of node, and checks the machine
never raises and never queues a message that cannot be encoded.  The client machines (source, sink) and
the relay's rule are checked the same way against what a peer or another relay might send.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multihop.news import dispatch_if
from multihop.news.config import PeerConfig
from multihop.news.ids import ZERO, Nid, domain_id, hex_id, identity_of, new_identity, proves
from multihop.news.partition import NO_PARTITION
from multihop.news.peer import PeerMachine
from multihop.news.qos import NO_BOUND, SinkQoS, SourceQoS
from multihop.news.relay import RelayMachine
from multihop.news.sim import Sim
from multihop.news.sink_machine import MAX_NOTICE_KEPT, SinkMachine
from multihop.news.source_machine import MAX_ALARM_UNITS, SourceMachine
from multihop.news.validate import MAX_MEMBERS, MAX_SEQ, MAY_SEND, reason
from multihop.news.wire import M, Record, decode, encode

S = 1_000_000_000
T0 = 1_000 * S  # the machines' clock at the start (CLOCK_MONOTONIC-like: far from 0)
DOMAIN = domain_id("validation", "main")
CFG = PeerConfig(heartbeat=0.05, dead_after=0.2, rate_grace=0.0, topics=None)


class Harness:
    """A peer machine and the nodes linked to it, each with its identity; ``send`` feeds a frame and returns the outputs."""

    def __init__(self, now_ns: int = T0, config: PeerConfig = CFG) -> None:
        self.now = now_ns
        self.me, secret = new_identity("peer")
        self.p = PeerMachine(self.me, DOMAIN, config, now_ns, secret=secret)
        self.ids: dict[str, tuple[Nid, bytes]] = {k: new_identity(k) for k in ("source", "sink", "relay", "admin", "peer", "stranger")}
        self.closed: list[Nid] = []
        src, ssec = self.ids["source"]
        self.send(src, M.messages.client_hello(M.client_kind.CLIENT_SOURCE, src, DOMAIN, ssec))
        self.send(src, M.messages.source_info(src, 3, S, 0, 0, True, now_ns, 0))
        snk, ksec = self.ids["sink"]
        self.send(snk, M.messages.client_hello(M.client_kind.CLIENT_SINK, snk, DOMAIN, ksec))
        out = self.send(snk, M.messages.sink_info(snk, NO_PARTITION, now_ns, NO_BOUND, 0, True, False, 100, 0, "n", ""))
        self.partition = next(r.partition for _, r in out if r.name == "sink_info")
        self.send(snk, M.messages.sink_info(snk, self.partition, now_ns, NO_BOUND, 0, True, False, 100, 0, "n", ""))
        rel, rsec = self.ids["relay"]
        self.send(rel, M.messages.client_hello(M.client_kind.CLIENT_RELAY, rel, DOMAIN, rsec))
        adm, asec = self.ids["admin"]
        self.send(adm, M.messages.client_hello(M.client_kind.CLIENT_ADMIN, adm, DOMAIN, asec))
        q, qsec = self.ids["peer"]
        self.send(q, M.messages.peer_hello(q, DOMAIN, True, qsec))
        assert self.p.counters["bad_frames"] == 0, self.p.counters

    def id(self, kind: str) -> Nid:
        return self.ids[kind][0]

    def send(self, src: Nid, rec: Record, dt: int = 1000) -> list[tuple[Nid, Record]]:
        """Feed ``rec`` from ``src`` (through the wire: encoded and decoded) and return what the peer queued, encoded."""
        self.now += dt
        self.p.handle_message(src, decode(encode(rec)), self.now)
        return self.drain()

    def drain(self) -> list[tuple[Nid, Record]]:
        out = []
        while (o := self.p.poll_transmit()) is not None:
            encode(o[1])  # every message the peer queues can be sent
            out.append(o)
        while (node := self.p.poll_close()) is not None:
            self.closed.append(node)
            self.p.handle_closed(node, self.now)
            out.extend(self.drain())
        while self.p.poll_event() is not None:
            pass
        return out

    def refusals(self, out: list[tuple[Nid, Record]], to: Nid) -> list[str]:
        return [r.reason for d, r in out if d == to and r.name == "refused"]

    def news(self, seq: int, priority: int = 3, topics: str = "n", origin: Nid | None = None, entry: int | None = None) -> Record:
        return M.messages.news(self.id("source"), seq, priority, self.now if entry is None else entry, origin or DOMAIN, topics, b"x")


def _delivered(h: Harness) -> list[tuple[int, int, bytes]]:
    """(seq, priority, payload) of what the peer holds for its sink (queued or delivered)."""
    snk = h.p.sinks[h.id("sink")]
    keys = list(snk.inflight) + list(snk.queue.keys())
    return sorted((k[1], h.p.store.get(k).priority, h.p.store.get(k).payload) for k in keys)  # type: ignore[union-attr]


# ---- the identity of a node --------------------------------------------------------------------------


def test_an_id_is_the_md5_of_its_secret_and_nothing_else_proves_it() -> None:
    me, secret = new_identity("source")
    assert identity_of(secret) == me and proves(me, secret)
    assert not proves(me, secret + b"x") and not proves(me, b"") and not proves(new_identity()[0], secret)
    assert not proves(ZERO, secret) and not proves(me, b"x" * 257)
    with pytest.raises(ValueError, match="1..256 bytes"):
        identity_of(b"")


def test_a_hello_without_the_ids_secret_is_refused_and_cut_off() -> None:
    h = Harness()
    victim = h.id("source")
    thief, thief_secret = new_identity("thief")
    for rec in (
        M.messages.client_hello(M.client_kind.CLIENT_SOURCE, victim, DOMAIN, thief_secret),
        M.messages.client_hello(M.client_kind.CLIENT_SOURCE, victim, DOMAIN, b""),
        M.messages.peer_hello(victim, DOMAIN, True, thief_secret),
    ):
        refusal = h.p.admit(decode(encode(rec)))
        assert refusal is not None and "proof is not the secret" in refusal.reason
    # a second channel of a live node, even with the right secret, is refused: one channel per node
    refusal = h.p.admit(M.messages.client_hello(M.client_kind.CLIENT_SOURCE, victim, DOMAIN, h.ids["source"][1]))
    assert refusal is not None and "already has a channel" in refusal.reason
    # once the source's channel closed, only its secret lets a channel speak for it again
    h.p.handle_closed(victim, h.now)
    assert h.p.admit(M.messages.client_hello(M.client_kind.CLIENT_SOURCE, victim, DOMAIN, thief_secret)) is not None
    assert h.p.admit(M.messages.client_hello(M.client_kind.CLIENT_SOURCE, victim, DOMAIN, h.ids["source"][1])) is None
    assert h.p.admit(M.messages.client_hello(M.client_kind.CLIENT_SOURCE, thief, domain_id("other", "main"), thief_secret)) is not None
    assert h.p.admit(M.messages.client_hello(M.client_kind.CLIENT_SOURCE, thief, DOMAIN, thief_secret)) is None
    # the same checks where no driver asks admit (the simulator): refused, counted, cut off
    before = h.p.counters["bad_frames"]
    out = h.send(thief, M.messages.client_hello(M.client_kind.CLIENT_SINK, thief, DOMAIN, b"not it"))
    assert h.refusals(out, thief) and thief in h.closed and h.p.counters["bad_frames"] == before + 1


def test_a_channel_cannot_change_its_kind_nor_speak_for_another_node() -> None:
    h = Harness()
    src, snk = h.id("source"), h.id("sink")
    out = h.send(src, M.messages.client_hello(M.client_kind.CLIENT_RELAY, src, DOMAIN, h.ids["source"][1]))
    assert "cannot become a relay's" in h.refusals(out, src)[0] and src in h.closed
    h2 = Harness()
    out = h2.send(h2.id("sink"), M.messages.leave(h2.id("source")))
    assert "only its own leave" in h2.refusals(out, h2.id("sink"))[0] and h2.closed == [h2.id("sink")]
    assert h2.id("source") in h2.p.sources and h2.p.sources[h2.id("source")].connected  # the source was not made to leave
    h3 = Harness()
    out = h3.send(snk, M.messages.sink_ack(h3.id("stranger"), []))
    assert h3.closed == [snk]


@pytest.mark.parametrize("kind", ["source", "sink", "relay", "admin"])
def test_a_client_sending_what_its_kind_never_sends_is_refused_and_cut_off(kind: str) -> None:
    allowed = MAY_SEND[kind]
    for name in sorted(dispatch_if.MESSAGE_NUMBERS):
        if name in allowed:
            continue
        h = Harness()
        node = h.id(kind)
        rec = _sample(name, h)
        out = h.send(node, rec)
        assert h.closed == [node], (kind, name)
        assert any(f"a {kind} does not send {name}" in r for r in h.refusals(out, node)), (kind, name, out)
        assert h.p.counters[f"bad_{name}"] == 1 and h.p.active and not h.p.leaving
        assert (h.id("sink") in h.p.sinks) == (kind != "sink"), "a sink cut off is gone; any other client leaves it be"


def test_a_peer_sending_what_no_peer_sends_is_counted_not_answered_nor_cut_off() -> None:
    h = Harness()
    q = h.id("peer")
    for name in ("news", "shutdown", "deliver", "sink_ack", "status_request"):
        out = h.send(q, _sample(name, h))
        assert out == [] and h.closed == [] and h.p.counters[f"bad_{name}"] == 1, name
    out = h.send(q, M.messages.sink_left(h.id("stranger"), h.id("sink")))  # names another peer
    assert out == [] and h.id("sink") in h.p.sinks and h.p.counters["bad_sink_left"] == 1


# ---- news from a source ---------------------------------------------------------------------------


@pytest.mark.parametrize("seq", [2**64 - 1, 2**64 - 2, MAX_SEQ + 1])
def test_a_news_numbered_beyond_the_largest_sequence_number_is_refused_and_counted(seq: int) -> None:
    """Issue 26 §1: seq 2**64-1 made next_seq 2**64, out of range for the uint64 of news_ack: every peer exited."""
    h = Harness()
    src = h.id("source")
    out = h.send(src, h.news(seq))
    assert any("is above the largest one" in r for r in h.refusals(out, src)), out
    assert h.p.counters["bad_news"] == 1 and h.closed == []
    out = h.send(src, h.news(0), dt=S)
    h.p.handle_timeout(h.now + S)
    out += h.drain()
    assert [r.next_seq for d, r in out if r.name == "news_ack"] == [1]
    assert _delivered(h) == [(0, 3, b"x")]


def test_the_largest_sequence_number_is_taken_and_acknowledged() -> None:
    h = Harness()
    src = h.id("source")
    h.send(src, M.messages.source_info(src, 3, S, 0, 0, True, T0, MAX_SEQ))
    out = h.send(src, h.news(MAX_SEQ))
    h.p.handle_timeout(h.now + S)
    out += h.drain()
    assert [r.next_seq for d, r in out if r.name == "news_ack"] == [MAX_SEQ + 1]


def test_a_news_claiming_another_priority_origin_or_source_is_refused() -> None:
    h = Harness()
    src = h.id("source")
    cases = [
        (h.news(0, priority=255), "priority 255 is not the priority 3 its source registered"),
        (h.news(1, origin=domain_id("elsewhere", "main")), "is not this domain"),
        (h.news(2, entry=T0 - S), "is before its source registered"),
        (h.news(3, topics="bad topic!"), "is not a topic name"),
        (h.news(4, topics=""), "names no topic"),
        (h.news(5, topics="é" * 2000), "is not a topic name"),
    ]
    for rec, why in cases:
        out = h.send(src, rec)
        assert any(why in r for r in h.refusals(out, src)), (why, out)
    assert h.p.counters["bad_news"] == len(cases) and h.p.sources[src].rejected == len(cases)
    h.send(src, h.news(6))
    assert _delivered(h) == [(6, 3, b"x")], "refused news use their numbers up: no gap to recover"
    out = h.send(src, M.messages.news(h.id("stranger"), 7, 3, h.now, DOMAIN, "n", b"x"))
    assert any("only its own news" in r for r in h.refusals(out, src)) and h.closed == [src]


def test_a_refusal_reason_always_fits_its_message() -> None:
    text = "é" * 5000 + "\0"
    r = reason(text)
    assert len(r.encode()) <= 1000 and "\0" not in r
    encode(M.messages.refused(ZERO, ZERO, r))


def test_a_source_registration_is_checked_answered_and_fixed() -> None:
    h = Harness()
    src, sec = h.ids["source"]
    for rec, why in [
        (M.messages.source_info(src, 3, S, 0, 0, True, h.now + 10 * S, 0), "registration time"),
        (M.messages.source_info(src, 3, S, 0, 0, True, T0, 2**64 - 1), "next sequence number"),
        (M.messages.source_info(src, 3, 2**64 - 1, 0, 0, True, T0, 0), "above ten years"),
        (M.messages.source_info(src, 3, 999, 0, 0, True, T0, 0), "below 1 microsecond"),
        (M.messages.source_info(src, 9, S, 0, 0, True, T0, 0), "a source's QoS does not change"),
    ]:
        out = h.send(src, rec)
        assert any(why in r for r in h.refusals(out, src)), (why, out)
    assert h.p.sources[src].info.priority == 3  # type: ignore[union-attr]
    out = h.send(src, M.messages.source_info(src, 3, S, 0, 0, True, T0, 0))
    assert [r.name for _, r in out] == ["source_info"], "the same registration again: answered"
    out = h.send(src, M.messages.source_info(h.id("stranger"), 3, S, 0, 0, True, T0, 0))
    assert h.closed == [src]


# ---- relays -----------------------------------------------------------------------------------------


def test_what_a_relay_may_claim_is_bounded() -> None:
    h = Harness()
    rel = h.id("relay")
    elsewhere, third = domain_id("elsewhere", "main"), domain_id("third", "main")
    foreign = new_identity("source")[0]

    def relayed(source: Nid, seq: int, prio: int, origin: Nid, payload: bytes) -> Record:
        return M.messages.news(source, seq, prio, h.now, origin, "n", payload)

    for rec, why in [
        (relayed(h.id("source"), 9, 3, elsewhere, b"local id"), "is a source of this domain"),
        (relayed(foreign, 0, 7, DOMAIN, b"our origin"), "not this domain's own"),
        (relayed(foreign, 2**64 - 1, 7, elsewhere, b"seq"), "is above the largest one"),
    ]:
        out = h.send(rel, rec)
        assert any(why in r for r in h.refusals(out, rel)), (why, out)
    h.send(rel, relayed(foreign, 0, 7, elsewhere, b"f0"))
    for rec, why in [
        (relayed(foreign, 1, 200, elsewhere, b"prio"), "priority 200 is not the priority 7"),
        (relayed(foreign, 2, 7, third, b"origin"), "is not the origin"),
    ]:
        out = h.send(rel, rec)
        assert any(why in r for r in h.refusals(out, rel)), (why, out)
    h.send(rel, relayed(foreign, 3, 7, elsewhere, b"f3"))
    snk = h.p.sinks[h.id("sink")]
    got = sorted(k[1] for k in list(snk.inflight) + list(snk.queue.keys()) if k[0] == foreign)
    assert got == [0, 3] and h.closed == []
    # a foreign source no news came from for the history is forgotten (relays cannot grow a peer without bound)
    h.p.handle_timeout(h.now + h.p.cfg.ns("history") + S)
    assert foreign not in h.p.sources and h.p.counters["foreign_sources_forgotten"] == 1


def test_the_relay_drops_what_another_relay_sends_that_makes_no_sense() -> None:
    local, elsewhere = domain_id("here", "main"), domain_id("elsewhere", "main")
    r = RelayMachine(new_identity("relay")[0], local)
    src = new_identity("source")[0]
    for rec in (
        M.messages.news(ZERO, 0, 1, T0, elsewhere, "n", b""),
        M.messages.news(src, 2**64 - 1, 1, T0, elsewhere, "n", b""),
        M.messages.news(src, 0, 1, T0, elsewhere, "not a topic!", b""),
    ):
        assert r.incoming(rec) is None
    assert r.counters["bad"] == 3
    assert r.incoming(M.messages.news(src, 0, 1, T0, elsewhere, "n", b"")) is not None


# ---- sinks ------------------------------------------------------------------------------------------


def test_a_sink_registration_is_checked_and_a_sink_keeps_its_partition() -> None:
    h = Harness(config=PeerConfig(heartbeat=0.05, dead_after=0.2, partitions=8))
    k, ksec = new_identity("sink")
    h.send(k, M.messages.client_hello(M.client_kind.CLIENT_SINK, k, DOMAIN, ksec))
    base: dict[str, Any] = dict(
        sink=k,
        partition=NO_PARTITION,
        join_ns=h.now,
        max_delivery_ns=NO_BOUND,
        min_delivery_ns=0,
        reliable=True,
        history=False,
        queue_limit=10,
        overflow=0,
        topics="n",
        exclusive="",
    )
    for change, why in [
        (dict(partition=8), "partition 8 is not one of the domain's 8"),
        (dict(join_ns=h.now + 10 * S), "join time"),
        (dict(max_delivery_ns=2**63), "above ten years"),
        (dict(min_delivery_ns=2**63), "above ten years"),
        (dict(queue_limit=0), "queue_limit 0"),
        (dict(exclusive="not a topic!"), "exclusive topics"),
        (dict(topics="n " * 65), "topics on the wire"),
    ]:
        out = h.send(k, M.messages.sink_info(**{**base, **change}))
        assert any(why in r for r in h.refusals(out, k)), (why, out)
    out = h.send(k, M.messages.sink_info(**base))
    part = next(r.partition for _, r in out if r.name == "sink_info")
    out = h.send(k, M.messages.sink_info(**{**base, "partition": (part + 1) % 8}))
    assert any(f"has partition {part}" in r for r in h.refusals(out, k))
    assert h.p.sinks[k].partition == part and h.closed == []


# ---- the peer's own limits --------------------------------------------------------------------------


def test_a_domain_takes_at_most_64_peers() -> None:
    h = Harness()
    for _ in range(MAX_MEMBERS - 2):  # the harness' peer and this one are two
        q, sec = new_identity("peer")
        h.send(q, M.messages.peer_hello(q, DOMAIN, False, sec))
    assert len(h.p.members.listing()) == MAX_MEMBERS
    q, sec = new_identity("peer")
    refusal = h.p.admit(M.messages.peer_hello(q, DOMAIN, False, sec))
    assert refusal is not None and "has its 64 peers" in refusal.reason
    c, csec = new_identity("sink")
    out = h.send(c, M.messages.client_hello(M.client_kind.CLIENT_SINK, c, DOMAIN, csec))
    encode(out[0][1])  # the welcome lists 64 members: still fits


def test_peer_messages_are_checked_too() -> None:
    h = Harness()
    q, src = h.id("peer"), h.id("source")
    h.send(src, h.news(0))
    for rec, counter in [
        (M.messages.stored_news(src, 1, 255, h.now, h.now, DOMAIN, "n", b"prio", []), "bad_stored_news"),
        (M.messages.stored_news(src, 2**64 - 1, 3, h.now, h.now, DOMAIN, "n", b"seq", []), "bad_stored_news"),
        (M.messages.stored_news(src, 3, 3, h.now, h.now, DOMAIN, "bad topic!", b"topics", []), "bad_stored_news"),
        (M.messages.news_request(q, src, 5, 1), "bad_news_request"),
        (M.messages.request_data(h.id("stranger"), src), "bad_request_data"),
        (M.messages.snapshot_request(h.id("stranger")), "bad_snapshot_request"),
        (M.messages.heartbeat(h.id("stranger"), True, 0, 1), "bad_heartbeat"),
        (M.messages.source_info(new_identity()[0], 3, 10, 0, 0, True, T0, 0), "bad_source_info"),
    ]:
        out = h.send(q, rec)
        assert out == [] and h.p.counters[counter] >= 1, (rec.name, out)
    assert _delivered(h) == [(0, 3, b"x")] and h.closed == []


# ---- everything at once -----------------------------------------------------------------------------


_INTS = {
    "uint8": [0, 1, 3, 7, 254, 255],
    "uint32": [0, 1, 2, 8, 64, 4096, 0xFFFFFFFE, 0xFFFFFFFF],
    "uint64": [0, 1, 2, 5, 1000, S, T0, T0 + S, MAX_SEQ, MAX_SEQ + 1, 2**64 - 2, 2**64 - 1],
}
_TEXTS = ["", "n", "x", "n x", "n n", "bad topic!", "é" * 300, "n " * 70, "a" * 129, "\u2028"]


def _field(draw: st.DrawFn, desc: tuple[Any, ...], h: Harness, name: str = "", sender: Nid | None = None) -> Any:
    """A value for a field described by the generated stubs: around its bounds, or one a node of the harness would use."""
    kind = desc[0]
    if sender is not None and name in ("source", "sink", "client", "peer", "relay") and draw(st.booleans()):
        return sender  # the frame names its own sender, as a well-formed one would: the checks past the first are reached
    if kind == "int":
        bounds = st.sampled_from(_INTS[desc[1]])
        return draw(st.one_of(bounds, bounds, bounds, st.integers(desc[2], desc[3])))  # mostly around the bounds
    if kind == "bool":
        return draw(st.booleans())
    if kind == "enum":
        return draw(st.integers(0, desc[2] - 1))
    if kind == "str":
        return draw(st.one_of(st.sampled_from(_TEXTS), st.text(max_size=40)).filter(lambda t: len(t.encode()) <= desc[1] and "\0" not in t))
    if kind == "struct" and desc[1] == "nid":
        pool = [h.me, ZERO, *(i for i, _ in h.ids.values())]
        return draw(st.one_of(st.sampled_from(pool), st.builds(lambda a, b: Nid(a, b), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))))
    if kind == "struct":
        return tuple(_field(draw, d, h) for _, d in desc[2])
    if kind == "dyn":
        if desc[1][0] == "int" and desc[1][1] == "uint8":  # bytes: payloads and proofs
            secrets = [s for _, s in h.ids.values()]
            return draw(st.one_of(st.sampled_from(secrets), st.binary(max_size=64)))
        return [_field(draw, desc[1], h) for _ in range(draw(st.integers(0, 3)))]
    raise AssertionError(f"no strategy for {desc}")


@st.composite
def _frames(draw: st.DrawFn, h: Harness) -> list[tuple[str, Record, int]]:
    out = []
    for _ in range(draw(st.integers(1, 12))):
        sender = draw(st.sampled_from(sorted(h.ids)))
        kind = "peer" if sender == "peer" else sender
        mine = sorted(MAY_SEND.get(kind, ()))
        name = draw(st.sampled_from(mine) if mine and draw(st.booleans()) else st.sampled_from(sorted(dispatch_if.MESSAGE_NUMBERS)))
        desc = getattr(dispatch_if, f"_mhD_{dispatch_if.MESSAGE_NUMBERS[name]}")
        values = [_field(draw, d, h, fname, h.id(sender)) for fname, d in desc]
        rec = getattr(M.messages, name)(*values)
        out.append((sender, rec, draw(st.sampled_from([0, 1000, S // 10, 3 * S]))))
    return out


def _sample(name: str, h: Harness) -> Record:
    """One well-formed record of message ``name`` (values from the harness' nodes)."""
    desc = getattr(dispatch_if, f"_mhD_{dispatch_if.MESSAGE_NUMBERS[name]}")

    def value(d: tuple[Any, ...]) -> Any:
        if d[0] == "int":
            return 1
        if d[0] == "bool":
            return True
        if d[0] == "enum":
            return 0
        if d[0] == "str":
            return "n"
        if d[0] == "struct" and d[1] == "nid":
            return h.id("sink")
        if d[0] == "struct":
            return tuple(value(x) for _, x in d[2])
        if d[1][0] == "int" and d[1][1] == "uint8":
            return b"x"
        return [value(d[1])]

    return getattr(M.messages, name)(*[value(d) for _, d in desc])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_no_frame_from_any_node_makes_the_peer_raise_or_queue_what_it_cannot_send(data: st.DataObject) -> None:
    h = Harness()
    frames = data.draw(_frames(h))
    for sender, rec, dt in frames:
        try:
            wire = encode(rec)
        except (ValueError, TypeError):
            continue  # not representable on the wire: no peer can receive it
        node = h.id(sender)
        if node in h.closed:
            continue  # the driver closed that channel
        if rec.name in ("client_hello", "peer_hello") and node not in h.p.links:
            refusal = h.p.admit(decode(wire))
            if refusal is not None:
                encode(refusal)
                continue
        h.now += dt
        h.p.handle_message(node, decode(wire), h.now)
        h.drain()
        due = h.p.poll_timeout()
        if due is not None and due <= h.now + dt:
            h.p.handle_timeout(max(due, h.now))
            h.drain()
    h.p.handle_timeout(h.now + 5 * S)
    h.drain()
    h.p.status_json()


# ---- the clients ------------------------------------------------------------------------------------


def test_a_source_ignores_what_a_peer_sends_that_makes_no_sense() -> None:
    me, secret = new_identity("source")
    peer = new_identity("peer")[0]
    m = SourceMachine(me, DOMAIN, SourceQoS(), T0, secret)
    m.handle_connected(peer, T0)
    m.handle_message(peer, M.messages.source_info(me, 0, S, 0, 0, True, T0, 0), T0)
    m.make_news(["n"], b"", T0)
    m.handle_message(peer, M.messages.news_ack(peer, me, 2**64 - 1), T0)  # acks news never sent
    assert m.unacked() == 1
    m.handle_message(peer, M.messages.news_ack(peer, me, 1), T0)
    assert m.unacked() == 0
    m.handle_message(peer, M.messages.welcome(peer, DOMAIN, 1, 8, [], "not a topic!"), T0)
    m.handle_message(peer, M.messages.deliver(me, 0, 0, T0, DOMAIN, "n", b""), T0)
    for unit in range(MAX_ALARM_UNITS + 10):
        m.handle_message(peer, M.messages.rate_alarm(peer, me, unit, 2, 0, 1), T0)
    for _ in range(200):
        m.handle_message(peer, M.messages.refused(peer, me, "no"), T0)
    st_ = m.stats()
    assert st_["bad_frames"] == 3 and st_["below_min_units"] == 2 * (MAX_ALARM_UNITS + 10) and len(m.alarmed) == MAX_ALARM_UNITS
    assert len(st_["refusals"]) == 64 and st_["refused_total"] == 200


def test_a_source_refused_by_its_peers_says_why() -> None:
    sim = Sim(PeerConfig(heartbeat=0.05, dead_after=0.2, rate_grace=0.0))
    sim.add_peer()
    sim.add_peer()
    sim.run(0.2)
    qos = SourceQoS(min_per_unit=1, max_per_unit=2)
    object.__setattr__(qos, "min_per_unit", 5)
    bad = sim.add_source(qos)
    good = sim.add_source()
    sim.run(0.1)
    assert bad.machine.answered() and "min_per_unit 5 is above max_per_unit 2" in (bad.machine.refused or "")
    assert good.machine.answered() and good.machine.refused is None and len(good.machine.registered) == 2


def test_a_sink_ignores_what_a_peer_sends_that_makes_no_sense() -> None:
    me, secret = new_identity("sink")
    peer = new_identity("peer")[0]
    m = SinkMachine(me, DOMAIN, ["n"], SinkQoS(), False, T0, secret=secret)
    m.handle_connected(peer, T0)
    m.handle_message(peer, M.messages.deliver(new_identity()[0], 0, 1, T0, DOMAIN, "not a topic!", b""), T0)
    m.handle_message(peer, M.messages.deliver(new_identity()[0], 0, 1, 2**64 - 1, DOMAIN, "n", b""), T0)
    m.handle_message(peer, M.messages.welcome(peer, DOMAIN, 1, 8, [], "bad topic!"), T0)
    m.handle_message(peer, M.messages.sink_notice(new_identity()[0], 0, 1, []), T0)
    assert m.counters["bad_frames"] == 4 and m.take(T0) is None
    src = new_identity()[0]
    for chunk in range(MAX_NOTICE_KEPT // 512 + 2):
        ids = [M.news_id(src, chunk * 512 + i) for i in range(512)]
        m.handle_message(peer, M.messages.sink_notice(me, 1, (chunk + 1) * 512, ids), T0)
    assert len(m.notice_ids[1]) == MAX_NOTICE_KEPT and m.stats()["overflowed"] == (MAX_NOTICE_KEPT // 512 + 2) * 512


def test_random_bad_frames_in_the_simulator_never_cost_a_reliable_sink_a_news() -> None:
    """Honest traffic with a stream of forged frames from a client that claims other nodes: every news arrives once."""
    rng = random.Random(7)
    sim = Sim(PeerConfig(heartbeat=0.05, dead_after=0.2, rate_grace=0.0))
    for _ in range(3):
        sim.add_peer()
    sim.run(0.1)
    src = sim.add_source(SourceQoS(priority=2))
    snk = sim.add_sink(["n"])
    sim.run(0.1)
    for i in range(200):
        src.send(["n"], b"%d" % i)
        if i % 10 == 0:
            peer = rng.choice(sorted(sim.peers))
            m = sim.peers[peer]
            evil = M.messages.news(src.id, rng.choice([2**64 - 1, MAX_SEQ + 1]), 255, sim.now_ns, sim.domain, "n", b"evil")
            m.handle_message(src.id, evil, sim.now_ns)  # on the source's own channel: a forged frame
        sim.run(0.002)
    sim.run(1.0)
    assert [n.payload for n in snk.got] == [b"%d" % i for i in range(200)]
    assert all(n.priority == 2 for n in snk.got)
    assert sum(m.counters["bad_frames"] for m in sim.peers.values()) >= 1


def test_status_counts_bad_frames_by_message() -> None:
    h = Harness()
    h.send(h.id("source"), h.news(2**64 - 1))
    st_ = h.p.status()
    assert st_["counters"]["bad_frames"] == 1 and st_["counters"]["bad_news"] == 1
    assert hex_id(h.id("source")) in st_["sources"]


def test_a_client_flooding_bad_frames_is_answered_at_a_bounded_rate_and_every_frame_counted() -> None:
    h = Harness()
    src = h.id("source")
    answers = 0
    for _i in range(300):
        answers += len(h.refusals(h.send(src, h.news(2**64 - 1), dt=1000), src))
    assert answers == 100 and h.p.counters["bad_news"] == 300 and h.p.counters["refusals_not_sent"] == 200
    answers = len(h.refusals(h.send(src, h.news(2**64 - 1), dt=S), src))
    assert answers == 1, "a new second: answered again"
