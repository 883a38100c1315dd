"""The dispatch parts one by one: QoS checks, topics, rate units, sink queues, partitions, ids, wire, checkers."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multihop.news import checkers
from multihop.news.config import PeerConfig
from multihop.news.errors import QosError, TopicError, UnknownTopic
from multihop.news.ids import ZERO, domain_id, hex_id, new_id, parse_hex
from multihop.news.membership import Membership
from multihop.news.news import News
from multihop.news.partition import choose_partition, owner_map
from multihop.news.qos import NO_BOUND, SinkQoS, SourceQoS
from multihop.news.queues import SinkQueue
from multihop.news.rates import RateMonitor, RateSchedule
from multihop.news.sim import Sent
from multihop.news.topics import TopicTable, check_declared, check_topics, decode_topics, encode_topics
from multihop.news.wire import M, decode, encode

ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000_000


# ---- QoS -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, text",
    [
        (dict(min_per_unit=5, max_per_unit=2), "min_per_unit=5 is above max_per_unit=2"),
        (dict(unit=-1.0), "SourceQoS.unit=-1.0: a time cannot be negative"),
        (dict(unit=0), "SourceQoS.unit=0: must be more than 0 seconds"),
        (dict(unit=float("nan")), "must be a finite number of seconds"),
        (dict(priority=256), "SourceQoS.priority=256: must be in 0..255"),
        (dict(priority=-1), "SourceQoS.priority=-1: must be in 0..255"),
        (dict(priority=1.5), "expected an integer"),
        (dict(max_per_unit=0), "SourceQoS.max_per_unit=0: must be in 1.."),
        (dict(reliable="yes"), "SourceQoS.reliable='yes': expected True or False"),
    ],
)
def test_contradictory_or_bad_source_qos_is_a_clear_error(kwargs: dict, text: str) -> None:
    with pytest.raises(QosError, match=text.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        SourceQoS(**kwargs)


@pytest.mark.parametrize(
    "kwargs, text",
    [
        (dict(min_delivery_time=3.0, max_delivery_time=1.0), "min_delivery_time=3.0 s is above max_delivery_time=1.0 s"),
        (dict(max_delivery_time=-2), "SinkQoS.max_delivery_time=-2: a time cannot be negative"),
        (dict(max_delivery_time=0), "SinkQoS.max_delivery_time=0: must be more than 0 seconds"),
        (dict(min_delivery_time=-0.5), "SinkQoS.min_delivery_time=-0.5: a time cannot be negative"),
        (dict(queue_limit=0), "SinkQoS.queue_limit=0: must be in 1..1000000"),
        (dict(overflow="drop-all"), "SinkQoS.overflow='drop-all': must be one of drop-oldest, drop-newest"),
        (dict(exclusive="sport"), "expected a list of booleans"),
        (dict(exclusive=[True, "sport"]), "mixes booleans and names"),
    ],
)
def test_contradictory_or_bad_sink_qos_is_a_clear_error(kwargs: dict, text: str) -> None:
    with pytest.raises(QosError, match=text.replace(".", r"\.")):
        SinkQoS(**kwargs)


def test_exclusive_flags_match_the_topics() -> None:
    assert SinkQoS(exclusive=[True, False]).exclusive_topics(("a", "b")) == ("a",)
    assert SinkQoS(exclusive={"b"}).exclusive_topics(("a", "b")) == ("b",)
    with pytest.raises(QosError, match="2 flag\\(s\\) for 3 topic\\(s\\)"):
        SinkQoS(exclusive=[True, False]).exclusive_topics(("a", "b", "c"))
    with pytest.raises(UnknownTopic, match="names \\['c'\\], which the sink does not subscribe to"):
        SinkQoS(exclusive=["c"]).exclusive_topics(("a", "b"))


def test_qos_times_become_nanoseconds() -> None:
    q = SinkQoS(max_delivery_time=0.25, min_delivery_time=0.1)
    assert (q.max_delivery_ns, q.min_delivery_ns) == (250_000_000, 100_000_000)
    assert SinkQoS().max_delivery_ns == NO_BOUND
    assert SourceQoS(unit=0.5).unit_ns == 500_000_000 and SourceQoS().max_wire == 0


def test_peer_config_checks() -> None:
    with pytest.raises(ValueError, match="dead_after=0.1 must be longer than heartbeat=0.2"):
        PeerConfig(heartbeat=0.2, dead_after=0.1)
    with pytest.raises(ValueError, match="PeerConfig.window=0"):
        PeerConfig(window=0)
    c = PeerConfig(topics=("a", "b"))
    assert PeerConfig.from_dict(c.to_dict()) == c


# ---- topics ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "topics, text",
    [
        ("sport", "must be a list of topic names, got the string 'sport'"),
        ([], "is empty"),
        (["a", "a"], "topic 'a' is listed twice"),
        (["has space"], "'has space' is not a topic name"),
        ([""], "'' is not a topic name"),
        (["x" * 129], "is not a topic name"),
        ([3], "3 is not a topic name"),
        ([f"t{i}" for i in range(65)], "lists 65 topics; at most 64"),
        (None, "must be a list of topic names, got NoneType"),
    ],
)
def test_bad_topic_lists_are_clear_errors(topics: object, text: str) -> None:
    with pytest.raises(TopicError, match=text.replace("(", r"\(").replace(")", r"\)")):
        check_topics(topics)


def test_declared_topics_reject_unknown_ones_by_name() -> None:
    check_declared(["a"], None)
    with pytest.raises(UnknownTopic, match=r"unknown topic\(s\) \['zz'\]; this domain declares only: a, b"):
        check_declared(["a", "zz"], frozenset({"a", "b"}))
    assert decode_topics(encode_topics(("a.b", "c/d"))) == ("a.b", "c/d")


def test_topic_table_applies_exclusivity_per_topic() -> None:
    t = TopicTable()
    a, b, c = new_id(), new_id(), new_id()
    t.add(a, ["sport", "tech"], ["sport"])
    t.add(b, ["sport"], [])
    t.add(c, ["tech"], [])
    assert t.recipients(("sport",)) == {a}
    assert t.recipients(("tech",)) == {a, c}
    assert t.recipients(("sport", "tech")) == {a, c}
    t.remove(a, ["sport", "tech"])
    assert t.recipients(("sport",)) == {b}


# ---- rate units ------------------------------------------------------------------------------------


def test_max_per_unit_holds_excess_into_the_next_units() -> None:
    r = RateSchedule(origin_ns=0, unit_ns=S, max_per_unit=3)
    rel = [r.release(int(0.1 * S)) for _ in range(7)]
    assert rel == [int(0.1 * S)] * 3 + [S] * 3 + [2 * S]
    assert r.held == 4
    assert r.release(int(2.5 * S)) == int(2.5 * S)  # unit 2 has room for one more
    assert r.release(int(2.6 * S)) == int(2.6 * S)
    assert r.release(int(2.7 * S)) == 3 * S


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5 * S), min_size=1, max_size=60), st.integers(1, 6))
def test_rate_schedule_never_exceeds_the_max_and_never_releases_early(entries: list[int], cap: int) -> None:
    entries.sort()
    r = RateSchedule(0, S, cap)
    rel = [r.release(e) for e in entries]
    assert all(x >= e for x, e in zip(rel, entries, strict=True))
    assert rel == sorted(rel)  # order kept
    per_unit: dict[int, int] = {}
    for x in rel:
        per_unit[x // S] = per_unit.get(x // S, 0) + 1
    assert max(per_unit.values()) <= cap


def test_min_per_unit_judges_each_unit_once_it_is_over() -> None:
    m = RateMonitor(origin_ns=0, unit_ns=S, min_per_unit=2)
    m.count(int(0.1 * S))
    m.count(int(0.2 * S))
    m.count(int(1.5 * S))
    assert m.due(S - 1) == [] and m.deadline() == S
    assert m.due(S) == []  # unit 0 had 2
    assert m.due(2 * S - 1) == []
    [a] = m.due(2 * S)
    assert (a.unit, a.units, a.count) == (1, 1, 1)
    alarms = m.due(6 * S)  # units 2..5 empty, judged at once: one alarm for the run
    assert [(x.unit, x.units, x.count) for x in alarms] == [(2, 4, 0)]
    assert m.below_units == 5
    m.count(int(0.5 * S))  # its unit was judged already
    assert m.late == 1


# ---- sink queues -----------------------------------------------------------------------------------


def _k(i: int) -> tuple:
    return (ZERO, i)


def test_queue_gives_the_highest_eligible_priority_first() -> None:
    q = SinkQueue(limit=10)
    q.push(_k(1), 1, 10, 10, None)
    q.push(_k(2), 9, 11, 50, None)  # higher priority, not eligible before 50
    q.push(_k(3), 5, 12, 12, None)
    assert q.next_eligible(20) == _k(3)
    assert q.next_eligible(50) == _k(2)
    q.remove(_k(2))
    assert q.next_eligible(50) == _k(3)
    assert q.next_time(20) is None  # everything due is due; nothing expires


def test_queue_expiry_is_exact() -> None:
    q = SinkQueue(limit=10)
    q.push(_k(1), 0, 0, 0, 100)
    q.push(_k(2), 0, 0, 0, 200)
    assert q.pop_expired(100) == []  # deliverable at its expiry instant
    assert q.next_time(100) == 101
    assert q.pop_expired(101) == [_k(1)]
    assert len(q) == 1 and _k(2) in q


def test_queue_overflow_policies() -> None:
    old = SinkQueue(limit=2, overflow="drop-oldest")
    assert old.push(_k(1), 5, 0, 0, None) is None
    assert old.push(_k(2), 1, 1, 1, None) is None
    assert old.push(_k(3), 5, 2, 2, None) == _k(2)  # the lowest priority goes
    assert old.push(_k(4), 0, 3, 3, None) == _k(4)  # an arriving lower one goes itself
    new = SinkQueue(limit=2, overflow="drop-newest")
    new.push(_k(1), 0, 0, 0, None)
    new.push(_k(2), 0, 1, 1, None)
    assert new.push(_k(3), 9, 2, 2, None) == _k(3)
    assert sorted(new.keys()) == [_k(1), _k(2)]


def test_queue_survives_many_removals() -> None:
    rng = random.Random(7)
    q = SinkQueue(limit=100_000)
    live = set()
    for i in range(5000):
        q.push(_k(i), rng.randrange(4), i, i, i + 1000)
        live.add(i)
        if rng.random() < 0.6:
            j = rng.choice(sorted(live))
            assert q.remove(_k(j))
            live.discard(j)
    assert len(q) == len(live)
    out = []
    while (k := q.next_eligible(10**9)) is not None:
        q.remove(k)
        out.append(k[1])
    assert sorted(out) == sorted(live)


# ---- partitions, membership, ids ---------------------------------------------------------------------


def test_rendezvous_moves_only_the_dead_peers_partitions() -> None:
    peers = sorted(new_id() for _ in range(4))
    before = owner_map(64, peers)
    assert set(before) == set(peers)
    after = owner_map(64, peers[:3])
    moved = [p for p in range(64) if before[p] != after[p]]
    assert moved == [p for p in range(64) if before[p] == peers[3]]
    assert owner_map(4, []) == [None] * 4


def test_load_sharing_picks_the_least_loaded_peer() -> None:
    peers = sorted(new_id() for _ in range(3))
    owners = owner_map(64, peers)
    counts: dict[int, int] = {}
    load = {p: 0 for p in peers}
    for _ in range(30):
        part = choose_partition(new_id(), owners, counts)
        counts[part] = counts.get(part, 0) + 1
        load[owners[part]] += 1
    assert sorted(load.values()) == [10, 10, 10]
    with pytest.raises(ValueError, match="no active peer"):
        choose_partition(new_id(), [None] * 4, {})


def test_membership_declares_silent_peers() -> None:
    me, other = new_id(), new_id()
    m = Membership(me, True, heartbeat_ns=10, dead_after_ns=50, now_ns=0)
    assert m.heard(other, 0, active=True)
    assert m.active_ids() == sorted([me, other])
    assert m.silent(49) == [] and m.silent(50) == [other]
    epoch = m.epoch
    assert m.remove(other) and m.epoch == epoch + 1
    with pytest.raises(ValueError, match="must be longer than the heartbeat"):
        Membership(me, True, 10, 10, 0)


def test_ids_are_128_bit_and_round_trip() -> None:
    ids = {new_id() for _ in range(1000)}
    assert len(ids) == 1000 and ZERO not in ids
    n = next(iter(ids))
    assert parse_hex(hex_id(n)) == n and len(hex_id(n)) == 32
    assert domain_id("rt", "main") == domain_id("rt", "main") != domain_id("rt", "other")
    with pytest.raises(ValueError):
        parse_hex("abc")


# ---- wire ------------------------------------------------------------------------------------------


def test_typed_stub_names_every_field_of_the_generated_records() -> None:
    """The stub declares each record class with the generated class's fields, in order, and each struct
    and enum with the generated one's fields and values: mypy checks the machines against the real records."""
    import ast

    tree = ast.parse((ROOT / "python/multihop/news/dispatch_if.pyi").read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    nested = {n.name: n for n in classes["messages"].body if isinstance(n, ast.ClassDef)}

    def annotated(cls: ast.ClassDef) -> list[str]:
        return [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]

    assert sorted(nested) == sorted(M.MESSAGE_NUMBERS)
    for name in M.MESSAGE_NUMBERS:
        assert annotated(nested[name]) == list(getattr(M.messages, name)._fields), name
    for struct in (M.nid, M.news_id, M.queue_update, M.member):
        assert annotated(classes[struct.__name__]) == list(struct._fields)
    for enum in (M.client_kind, M.notice_kind, M.overflow_policy):
        values = [(s.targets[0].id, s.value.value) for s in classes[enum.__name__].body if isinstance(s, ast.Assign)]
        assert values == [(e.name, e.value) for e in enum]


def test_every_message_round_trips_through_the_stubs() -> None:
    a, b = new_id(), new_id()
    recs = [
        M.messages.news(a, 7, 3, 123, b, "x y", b"\x00payload"),
        M.messages.queue_updates((M.queue_update(7, a, b, a),) * 3),
        M.messages.sink_info(a, 5, 1, NO_BOUND, 0, True, False, 10, 1, "t", ""),
        M.messages.sink_ack(a, (M.news_id(b, 1), M.news_id(b, 2))),
        M.messages.welcome(a, b, 3, 64, (M.member(a, True),), ""),
        M.messages.rate_alarm(a, b, 4, 2, 1, 5),
    ]
    for r in recs:
        assert decode(encode(r)) == r


def test_malformed_messages_are_decode_errors() -> None:
    from multihop.news.wire import DecodeError

    with pytest.raises(DecodeError):
        decode(b"\x00")
    with pytest.raises(DecodeError):
        decode(b"\xff\xff" + b"x" * 10)
    good = encode(M.messages.news(new_id(), 1, 1, 1, new_id(), "t", b"p"))
    with pytest.raises(DecodeError):
        decode(good[:-3])


# ---- checkers catch what they are about --------------------------------------------------------------


def _news(src: object, seq: int, entry: int, got: int, prio: int = 0) -> News:
    return News(src, seq, prio, ("t",), entry, ZERO, b"", got, ZERO)  # type: ignore[arg-type]


def test_checkers_find_loss_duplicates_disorder_and_lateness() -> None:
    src, sink = new_id(), new_id()
    sent = [Sent(src, i, 0, ("t",), 0) for i in range(4)]
    ok = checkers.no_loss_in_order(sent, {sink: [_news(src, i, 0, 1) for i in range(4)]}, topics={sink: ["t"]})
    assert ok.ok and ok.checked == 4
    bad = checkers.no_loss_in_order(sent, {sink: [_news(src, i, 0, 1) for i in (0, 2, 1, 2)]}, topics={sink: ["t"]})
    assert not bad.ok
    text = "\n".join(bad.violations)
    assert "twice" in text and "after #2" in text and "never got news" in text
    with pytest.raises(AssertionError, match="no loss, in order"):
        bad.assert_ok()
    late = checkers.none_later_than_the_bound({sink: [_news(src, 0, 0, 5), _news(src, 1, 0, 11)]}, {sink: 10}, {sink: 6})
    assert len(late.violations) == 2
    prio = checkers.priority_order([_news(src, 0, 0, 0, 9), _news(src, 1, 0, 0, 1), _news(src, 2, 0, 0, 5)])
    assert len(prio.violations) == 1


def test_exclusive_checker_names_wrong_and_missed_sinks() -> None:
    src, a, b = new_id(), new_id(), new_id()
    sent = [Sent(src, 0, 0, ("s",), 0)]
    topics = {a: ["s"], b: ["s"]}
    assert checkers.exactly_the_exclusive_sinks(sent, {a: [_news(src, 0, 0, 0)], b: []}, topics, {a: ["s"]}).ok
    v = checkers.exactly_the_exclusive_sinks(sent, {a: [], b: [_news(src, 0, 0, 0)]}, topics, {a: ["s"]})
    assert not v.ok and "wrong sink" in v.violations[0]
