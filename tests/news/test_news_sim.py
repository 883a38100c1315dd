"""Every time-based QoS rule and every replication path, exactly, on the simulator's virtual clock.

The simulator runs the very machines the live peers run (sans-IO), with every
message encoded and decoded by the generated Flounder stubs on its way.  The
recorded deliveries are judged by the checkers of ``multihop.news.checkers``.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multihop.news import checkers
from multihop.news.config import PeerConfig
from multihop.news.ids import new_id, new_identity
from multihop.news.qos import SinkQoS, SourceQoS
from multihop.news.sim import Sim
from multihop.news.wire import M

S = 1_000_000_000
CFG = PeerConfig(heartbeat=0.05, dead_after=0.2, rate_grace=0.0)


def _sim(peers: int = 1, seed: int | None = None, **cfg: object) -> Sim:
    sim = Sim(PeerConfig(**{**CFG.to_dict(), **cfg}), seed=seed)  # type: ignore[arg-type]
    for _ in range(peers):
        sim.add_peer()
    sim.run(0.1)
    return sim


def _owed(sim: Sim, sinks: list) -> checkers.Verdict:
    return checkers.no_loss_in_order(sim.sent, {s.id: s.got for s in sinks}, topics={s.id: s.machine.topics for s in sinks})


def test_priority_order_under_load() -> None:
    """A sink that stops reading: its news wait in the peers' per-priority queues and come out highest first."""
    sim = _sim(3, window=4)
    srcs = [sim.add_source(SourceQoS(priority=p)) for p in (1, 5, 9)]
    snk = sim.add_sink(["n"], reading=False)
    sim.run(0.1)
    for i in range(20):
        for s in srcs:
            s.send(["n"], b"%d" % i)
        sim.run(0.001)
    sim.run(0.1)
    assert snk.machine.stats()["waiting"] == 4  # the window: the rest waits at the peer
    sim.set_reading(snk.id, True)
    sim.run(0.2)
    early = [n.priority for n in snk.got[:4]]  # went out before the backlog formed
    left = {p: 20 - early.count(p) for p in (9, 5, 1)}
    assert [n.priority for n in snk.got[4:]] == [9] * left[9] + [5] * left[5] + [1] * left[1]
    checkers.priority_order(snk.got, waiting_from=4).assert_ok()
    _owed(sim, [snk]).assert_ok()


def test_max_per_unit_holds_excess_and_releases_it_next_unit() -> None:
    sim = _sim(2)
    src = sim.add_source(SourceQoS(unit=1.0, max_per_unit=4))
    snk = sim.add_sink(["n"])
    sim.run(0.1)
    t0 = src.machine.origin_ns
    for _ in range(10):
        src.send(["n"])
    sim.run(0.5)
    assert len(snk.got) == 4
    sim.run(0.49)  # t0 + 1.09 s
    assert len(snk.got) == 8
    sim.run(2)
    assert [round((n.received_ns - t0) / S, 2) for n in snk.got] == [0.1] * 4 + [1.0] * 4 + [2.0] * 2
    assert snk.machine.stats()["expired"] == 0
    _owed(sim, [snk]).assert_ok()  # nothing dropped
    assert all(p.sources[src.id].schedule.held == 6 for p in sim.peers.values())  # every replica agrees


def test_min_per_unit_signals_exactly_when_the_rate_falls_below() -> None:
    sim = _sim(2)
    src = sim.add_source(SourceQoS(unit=1.0, min_per_unit=3))
    sim.run(0.1)
    t0 = src.machine.origin_ns
    for _ in range(3):
        src.send(["n"])  # unit 0: 3, enough
    sim.run(1.0)
    for _ in range(2):
        src.send(["n"])  # unit 1: 2, below
    sim.run(1.0)  # t0 + 2.1: unit 1 judged at t0 + 2.0
    for _ in range(3):
        src.send(["n"])  # unit 2: 3, enough
    sim.run(2.5)  # unit 3 empty, judged at t0 + 4.0
    alarms = sim.events_named("rate_alarm")
    times = sorted({(t - t0) / S for t, _, _ in alarms})
    assert times == [2.0, 4.0]  # every peer judged at the unit's end, not before
    assert sorted({(f["unit"], f["count"]) for _, _, f in alarms}) == [(1, 2), (3, 0)]
    assert sorted(src.machine.alarmed) == [1, 3]  # the coordinator told the source, once per unit
    assert src.machine.stats()["below_min_units"] == 2


def test_max_delivery_time_drops_exactly_the_stale_news_and_counts_them() -> None:
    sim = _sim(2, window=2)
    src = sim.add_source()
    snk = sim.add_sink(["n"], SinkQoS(max_delivery_time=0.5), reading=False)
    fresh = sim.add_sink(["n"])  # reads all along: unaffected
    sim.run(0.1)
    stale = [src.send(["n"]) for _ in range(5)]
    sim.run(0.4)
    young = [src.send(["n"]) for _ in range(5)]
    sim.run(0.3)  # the first five are 0.7 s old, the last five 0.3 s
    sim.set_reading(snk.id, True)
    sim.run(0.1)
    assert [n.id for n in snk.got] == [s.id for s in young]
    stats = snk.machine.stats()
    assert stats["expired"] == 5 and stats["delivered"] == 5
    assert snk.machine.notice_ids[M.notice_kind.NOTICE_EXPIRED] == {s.id for s in stale}
    checkers.none_later_than_the_bound({snk.id: snk.got}, {snk.id: int(0.5 * S)}).assert_ok()
    assert len(fresh.got) == 10


def test_expiry_instant_is_the_bound() -> None:
    """A news is deliverable at exactly entry + max_delivery_time, not one nanosecond later."""
    sim = _sim(1, window=1)
    src = sim.add_source()
    snk = sim.add_sink(["n"], SinkQoS(max_delivery_time=1.0), reading=False)
    sim.run(0.1)
    a = src.send(["n"])  # goes into the window at once
    b = src.send(["n"])  # waits at the peer
    sim.run(0.5)
    peer = next(iter(sim.peers.values()))
    q = peer.sinks[snk.id].queue
    assert q.next_time(sim.now_ns) == b.entry_ns + S + 1
    sim.run((b.entry_ns + S - sim.now_ns) / S)  # exactly at the bound: still queued, not expired
    assert b.id in q
    sim.run(1e-9 * 2)
    assert b.id not in q and peer.sinks[snk.id].totals[M.notice_kind.NOTICE_EXPIRED] == 1
    assert a.id in peer.sinks[snk.id].inflight


def test_embargo_holds_news_until_min_delivery_time() -> None:
    sim = _sim(2)
    src = sim.add_source()
    snk = sim.add_sink(["n"], SinkQoS(min_delivery_time=0.3, max_delivery_time=1.0))
    now = sim.add_sink(["n"])
    sim.run(0.1)
    sent = [src.send(["n"]) for _ in range(3)]
    sim.run(0.2999)
    assert snk.got == [] and len(now.got) == 3
    sim.run(0.01)
    assert [n.id for n in snk.got] == [s.id for s in sent]
    checkers.none_later_than_the_bound({snk.id: snk.got}, {snk.id: S}, {snk.id: int(0.3 * S)}).assert_ok()


def test_exclusive_topics_go_only_to_the_exclusive_sinks() -> None:
    sim = _sim(3)
    src = sim.add_source()
    spec = {
        "a": (["sport", "tech"], ["sport"]),
        "b": (["sport"], []),
        "c": (["tech"], []),
        "d": (["tech", "weather"], ["tech"]),
        "e": (["weather"], []),
    }
    sinks = {k: sim.add_sink(t, SinkQoS(exclusive=e)) for k, (t, e) in spec.items()}
    sim.run(0.1)
    for topics in (["sport"], ["tech"], ["weather"], ["sport", "tech"], ["sport", "weather"]):
        for _ in range(3):
            src.send(topics)
    sim.run(0.2)
    ids = {k: s.id for k, s in sinks.items()}
    checkers.exactly_the_exclusive_sinks(
        sim.sent, {s.id: s.got for s in sinks.values()}, {ids[k]: t for k, (t, _) in spec.items()}, {ids[k]: e for k, (_, e) in spec.items()}
    ).assert_ok()
    assert len(sinks["b"].got) == 0 and len(sinks["c"].got) == 0  # both lost their topic to an exclusive sink
    assert len(sinks["e"].got) == 6 and len(sinks["a"].got) == 9


@pytest.mark.parametrize("policy", ["drop-oldest", "drop-newest"])
def test_a_sink_that_never_reads_is_bounded_and_others_are_unaffected(policy: str) -> None:
    sim = _sim(2, window=4)
    src = sim.add_source()
    stuck = sim.add_sink(["n"], SinkQoS(queue_limit=10, overflow=policy), reading=False)
    ok = sim.add_sink(["n"])
    sim.run(0.1)
    sent = [src.send(["n"]) for _ in range(100)]
    sim.run(0.2)
    for p in sim.peers.values():  # every replica holds at most the limit
        assert len(p.sinks[stuck.id].queue) <= 10
    assert len(ok.got) == 100
    sim.set_reading(stuck.id, True)
    sim.run(0.2)
    got = [n.id for n in stuck.got]
    assert got[:4] == [s.id for s in sent[:4]]  # the window it had before it stopped reading
    rest = [s.id for s in sent[4:]]
    assert got[4:] == (rest[-10:] if policy == "drop-oldest" else rest[:10])
    assert stuck.machine.stats()["overflowed"] == 86
    assert len(stuck.machine.notice_ids[M.notice_kind.NOTICE_OVERFLOW]) == 86


def test_history_gives_a_late_sink_the_kept_news() -> None:
    sim = _sim(2)
    src = sim.add_source()
    sim.run(0.1)
    old = [src.send(["n"]) for _ in range(5)]
    sim.run(0.1)
    with_h = sim.add_sink(["n"], history=True)
    without = sim.add_sink(["n"])
    sim.run(0.1)
    new = [src.send(["n"]) for _ in range(3)]
    sim.run(0.1)
    assert [n.id for n in with_h.got] == [s.id for s in old + new]
    assert [n.id for n in without.got] == [s.id for s in new]


@pytest.mark.parametrize("how", ["kill", "pause", "leave"])
def test_reliable_sinks_get_everything_once_when_their_peer_fails(how: str) -> None:
    """SIGKILL (channels close), SIGSTOP (only heartbeats tell) and a graceful leave of the serving peer."""
    sim = _sim(3, window=8)
    src = sim.add_source()
    sinks = [sim.add_sink(["n"]) for _ in range(6)]
    sim.run(0.1)
    victim = sim.owner_of(sinks[0].id)
    for i in range(300):
        src.send(["n"], b"%d" % i)
        sim.run(0.002)
        if i == 150:
            t_fail = sim.now_ns
            getattr(sim, how)(victim)
    sim.run(1.0)
    _owed(sim, sinks).assert_ok()
    took = [t for t, p, f in sim.events_named("took_over") if t >= t_fail and f["sinks"]]
    assert took, "nobody took the partitions over"
    limit = 0.01 if how != "pause" else 0.2 + 0.05 + 0.01  # dead_after + one heartbeat + slack
    assert (min(took) - t_fail) / S <= limit
    served_by = {p for s in sinks[:1] for p in s.machine.by_peer}
    assert len(served_by) == 2  # the victim before, a survivor after


def test_a_peer_joining_and_one_leaving_mid_stream_lose_nothing() -> None:
    sim = _sim(2, window=8)
    src = sim.add_source(SourceQoS(priority=3))
    sinks = [sim.add_sink(["n"]) for _ in range(8)]
    sim.run(0.1)
    first = list(sim.peers)[0]
    for i in range(400):
        src.send(["n"])
        sim.run(0.002)
        if i == 100:
            joined = sim.add_peer()
        if i == 250:
            sim.leave(first)
    sim.run(1.0)
    _owed(sim, sinks).assert_ok()
    assert joined.active and joined.counters["delivered"] > 0  # it took partitions over and served them


def test_a_peer_joining_while_the_source_does_not_know_it_yet_recovers_the_gap() -> None:
    """News sent before the source bound to the new peer reach it by a request for data."""
    sim = _sim(1)
    src = sim.add_source()
    snk = sim.add_sink(["n"])
    sim.run(0.1)
    for _ in range(20):
        src.send(["n"])
    newp = sim.add_peer()
    for _ in range(20):  # the source is told of the new peer only after these
        src.send(["n"])
    sim.run(0.5)
    assert newp.sources[src.id].next_seq == 40 and not newp.sources[src.id].missing
    assert {k[1] for k in (n.key for n in newp.store)} == set(range(40))
    _owed(sim, [snk]).assert_ok()


def test_a_joining_peer_that_hears_the_source_before_any_peer_still_recovers_the_gap() -> None:
    """The source registers at a joining peer before that peer has heard from any other peer (live: a loaded
    peer reads the channel it just accepted before its peers' answers): the news sent between the snapshot and
    the source's bind must still be asked for.  They were not (nobody to ask yet, so no gap was noted), and
    every sink the new peer served lost them for good."""
    sim = _sim(2, seed=7, window=8)
    a, b = list(sim.peers.values())
    src = sim.add_source()
    sinks = [sim.add_sink(["n"], reading=False) for _ in range(6)]  # their backlog waits at the peers
    sim.run(0.1)
    for _ in range(50):
        src.send(["n"])
        sim.run(0.0005)
    new = sim.add_peer()
    for old in (a, b):
        sim.slow_link(old.me, new.me, 0.01)  # their hellos and the snapshot come after the source's registration
    heard_before_source: list[object] | None = None
    for _ in range(100):
        src.send(["n"])
        sim.run(0.0002)
        if heard_before_source is None and src.id in new.sources:
            heard_before_source = list(new.members.others)
    for old in (a, b):
        sim.slow_link(old.me, new.me, 0)
    assert heard_before_source == [], "the interleaving: the source registered before any peer spoke to the new one"
    sim.run(0.05)
    for s in sinks:
        sim.set_reading(s.id, True)
    for _ in range(50):
        src.send(["n"])
        sim.run(0.002)
    sim.run(1.0)
    assert new.active and any(sim.owner_of(s.id) == new.me for s in sinks)  # seed 7: the new peer serves sinks
    st = new.sources[src.id]
    assert {k[1] for k in (n.key for n in new.store)} == set(range(200)) and not st.missing and not st.parked
    assert new.counters["news_requests"] >= 1 and new.counters["gap_given_up"] == 0
    _owed(sim, sinks).assert_ok()


def test_a_news_a_peer_missed_is_recovered_from_another_peer_in_order() -> None:
    """A best-effort source could not hand news 5 to the serving peer: it asks a random peer and keeps the order."""
    sim = _sim(2)
    src = sim.add_source(SourceQoS(reliable=False))
    snk = sim.add_sink(["n"], SinkQoS(reliable=False))
    sim.run(0.1)
    owner = sim.owner_of(snk.id)
    for i in range(10):
        src.send(["n"], b"%d" % i, skip=[owner] if i == 5 else [])
        sim.run(0.001)
    sim.run(0.3)
    assert [n.seq for n in snk.got] == list(range(10))
    p = sim.peers[owner]
    assert p.counters["news_requests"] >= 1 and p.counters["parked"] >= 1 and not p.sources[src.id].missing


def test_a_gap_nobody_can_fill_is_given_up_and_the_rest_flows() -> None:
    sim = _sim(2, gap_retry=0.05, gap_tries=3)
    src = sim.add_source(SourceQoS(reliable=False))
    snk = sim.add_sink(["n"])
    sim.run(0.1)
    for i in range(6):
        src.send(["n"], skip=list(sim.peers) if i == 2 else [])  # news 2 reached no peer at all
        sim.run(0.001)
    sim.run(0.5)
    assert [n.seq for n in snk.got] == [0, 1, 3, 4, 5]
    assert all(p.counters["gap_given_up"] == 1 for p in sim.peers.values())


def test_best_effort_sinks_lose_nothing_when_their_peer_is_killed() -> None:
    """Best effort: updates go at send time; a take-over may resend, the sink suppresses the duplicates."""
    sim = _sim(3, window=8)
    src = sim.add_source(SourceQoS(reliable=False))
    sinks = [sim.add_sink(["n"], SinkQoS(reliable=False)) for _ in range(4)]
    sim.run(0.1)
    victim = sim.owner_of(sinks[0].id)
    for i in range(200):
        src.send(["n"])
        sim.run(0.002)
        if i == 100:
            sim.kill(victim)
    sim.run(1.0)
    _owed(sim, sinks).assert_ok()


def test_updates_about_unknown_sinks_ask_a_peer_for_them() -> None:
    sim = _sim(2)
    a, b = list(sim.peers.values())
    ghost = new_id()
    a.handle_message(b.me, M.messages.queue_updates((M.queue_update(3, b.me, new_id(), ghost),)), sim.now_ns)
    out = []
    while (o := a.poll_transmit()) is not None:
        out.append(o)
    assert [(dst, r.name, r.node) for dst, r in out] == [(b.me, "request_data", ghost)]
    b.handle_message(a.me, out[0][1], sim.now_ns)
    assert b.poll_transmit()[1].name == "node_unknown"


def test_forged_and_bad_messages_are_refused_and_the_peer_runs_on() -> None:
    sim = _sim(1, topics=("sport", "tech"))
    p = next(iter(sim.peers.values()))
    dom = sim.domain
    stranger, stranger_secret = new_identity()
    rogue, secret = new_identity()

    def send(rec: object, src: object = rogue) -> list:
        p.handle_message(src, rec, sim.now_ns)  # type: ignore[arg-type]
        out = []
        while (o := p.poll_transmit()) is not None:
            out.append(o[1])
        return out

    [r] = send(M.messages.client_hello(M.client_kind.CLIENT_SOURCE, stranger, new_id(), stranger_secret), stranger)
    assert r.name == "refused" and "not" in r.reason and p.poll_close() == stranger  # another domain's hello: cut off
    assert send(M.messages.client_hello(M.client_kind.CLIENT_SOURCE, rogue, dom, secret))[0].name == "welcome"
    [r] = send(M.messages.news(rogue, 0, 1, sim.now_ns, dom, "sport", b""))
    assert "did not register" in r.reason
    [r] = send(M.messages.source_info(rogue, 1, S, 5, 2, True, sim.now_ns, 0))
    assert "min_per_unit 5 is above max_per_unit 2" in r.reason
    [r] = send(M.messages.source_info(rogue, 1, S, 0, 0, True, sim.now_ns, 0))
    assert r.name == "source_info" and r.source == rogue  # registered: the peer answers with its description
    [r] = send(M.messages.news(rogue, 0, 1, sim.now_ns, dom, "golf", b""))
    assert "unknown topic(s) ['golf']" in r.reason
    [r] = send(M.messages.news(rogue, 1, 1, sim.now_ns, dom, "bad topic!", b""))
    assert "is not a topic name" in r.reason
    sink, sink_secret = new_identity()
    p.handle_message(sink, M.messages.client_hello(M.client_kind.CLIENT_SINK, sink, dom, sink_secret), sim.now_ns)
    p.poll_transmit()
    for topics, excl, why in [("golf", "", "unknown topic"), ("sport", "tech", "not among the sink's topics"), ("", "", "at least one topic")]:
        p.handle_message(sink, M.messages.sink_info(sink, 0xFFFFFFFF, 0, 10, 20, True, False, 10, 0, topics, excl), sim.now_ns)
        r = p.poll_transmit()[1]
        assert r.name == "refused" and why in r.reason, (why, r.reason)
    assert p.counters["refused"] >= 6 and not p.sinks
    assert p.poll_close() is None  # values out of place are refused; nothing here broke the protocol
    # and it still serves a well-behaved pair
    src = sim.add_source()
    snk = sim.add_sink(["sport"])
    sim.run(0.1)
    src.send(["sport"], b"ok")
    sim.run(0.1)
    assert [n.payload for n in snk.got] == [b"ok"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_random_failures_never_lose_or_duplicate_for_reliable_sinks(seed: int) -> None:
    """Seeded random schedules of sends, kills, pauses, joins and leaves, with 3-4 peers and mixed priorities."""
    rng = random.Random(seed)
    sim = _sim(3, seed=seed, window=rng.choice([2, 8, 64]))  # the ids too: one seed, one run (a failure replays)
    srcs = [sim.add_source(SourceQoS(priority=rng.randrange(4))) for _ in range(2)]
    sinks = [sim.add_sink(rng.sample(["a", "b", "c"], rng.randint(1, 2))) for _ in range(5)]
    sim.run(0.1)
    failures = 0
    for step in range(200):
        rng.choice(srcs).send(rng.sample(["a", "b", "c"], rng.randint(1, 2)))
        sim.run(rng.choice([0.0005, 0.002, 0.01]))
        live = [p for p in sim.peers if p not in sim.dead and not sim.peers[p].stopped]
        if step % 50 == 25 and failures < 2 and len(live) >= 2:
            failures += 1
            victim = rng.choice(live)
            rng.choice([sim.kill, sim.leave, lambda v: (sim.pause(v), sim.kill(v))])(victim)
        if step == 120:
            sim.add_peer()
    sim.run(2.0)
    _owed(sim, sinks).assert_ok()
