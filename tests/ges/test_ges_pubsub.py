"""Content-based publish/subscribe on the simulator: profiles, propagation, routing, duplicates, the checker."""

from __future__ import annotations

from pathlib import Path

import pytest

import multihop as mh
from multihop import ges
from multihop.ges.delivery import check_unit_entries
from multihop.ges.pubsub_scenarios import run_scenario

FIG5 = Path(ges.__file__).parent / "examples" / "paper_fig5.toml"
FOOTBALL = [("sport", "football"), ("team", "*")]


@pytest.fixture
def sim() -> ges.Simulator:
    s = ges.Simulator(ges.Topology.load(FIG5), seed=2, trace_events=True)
    s.run_until_quiet()
    return s


def test_subscribers_get_exactly_their_events(sim: ges.Simulator) -> None:
    subs = {a: sim.client(a, f"sub-{a}") for a in ("1.1.3.6", "2.1.1.3", "4.1.1.1", "1.3.1.12")}
    ids = {a: c.subscribe(FOOTBALL) for a, c in subs.items()}
    tennis = sim.client("1.2.1.10", "tennis")
    tennis.subscribe([("sport", "tennis")])
    pub = sim.client("1.1.1.1", "pub")
    sim.run_until_quiet()
    for a, c in subs.items():
        assert c.active_level(ids[a]) == 4  # system active (N + 1)
    sent = [pub.publish({"sport": "football", "team": f"t{i}", "score": i}) for i in range(20)]
    pub.publish({"sport": "tennis", "team": "x"})
    pub.publish({"sport": "chess"})
    sim.run_until_quiet()
    for c in subs.values():
        assert [e.id for e in c.received] == sent
        assert c.received[3].content == {"sport": "football", "team": "t3", "score": 3}
    assert [e.content["sport"] for e in tennis.received] == ["tennis"]
    e = subs["4.1.1.1"].next(timeout=0.1)
    assert e.id == sent[0] and e.publisher == "pub" and e.payload == b""
    # no event went into a unit without an interested client (transit excepted)
    brokers = {a: ges.Address(a).code for a in subs}
    interested = {eid: set(brokers.values()) for eid in sent}
    interested.update({e.id: {ges.Address("1.2.1.10").code} for e in tennis.received})
    assert check_unit_entries(sim.event_trace, interested, sim.levels) == []
    chess = [(s, d) for s, d, c in sim.event_trace if c.event.values.startswith("schess")]
    assert chess == []  # nobody wants chess: it never left the publisher's broker


def test_active_levels_grow_as_the_profile_propagates(sim: ges.Simulator) -> None:
    """3.3.7: the broker's answer rises level by level (cluster, super-cluster, ...) to system active."""
    c = sim.client("2.1.1.3", "watcher")
    sub = c.subscribe(FOOTBALL)
    core = sim.broker("2.1.1.3")
    seen = []
    for _ in range(400):
        sim.run_for(0.0002)
        if (c.peer, sub) in core.ppp.subs:
            lvl = core.ppp.active_level(c.peer, sub)
            if not seen or seen[-1] != lvl:
                seen.append(lvl)
        if seen and seen[-1] == 4:
            break
    assert seen[0] == 0 and seen[-1] == 4 and seen == sorted(seen) and len(seen) >= 3
    assert c.active_level(sub) == 4  # and the client hears the same


def test_a_chain_subscribed_again_is_not_active_before_its_new_version_is_acknowledged(sim: ges.Simulator) -> None:
    """3.3.7 after a chain left the node profile: the version that once brought it is no proof now.

    (Found live: a subscriber reported system active at once, while the deciders had dropped the
    chain with its last subscriber; the first events went nowhere.)"""
    core = sim.broker("2.1.1.3")
    old = sim.client("2.1.1.3", "old")
    sid = old.subscribe(FOOTBALL)
    sim.run_until_quiet()
    assert old.active_level(sid) == 4
    old.unsubscribe(sid)
    sim.run_until_quiet()  # every decider dropped the chain
    c = sim.client("2.1.1.3", "new")
    sub = c.subscribe(FOOTBALL)
    for _ in range(400):  # the subscription reaches the broker before its new version goes out
        if (c.peer, sub) in core.ppp.subs:
            break
        sim.step()
    assert core.ppp.active_level(c.peer, sub) == 0
    pub = sim.client("1.1.1.1", "pub")
    sim.run_until_quiet()
    assert c.active_level(sub) == 4
    eids = pub.publish_many([({"sport": "football", "team": "x"}, b"1"), ({"sport": "tennis"}, b"2"), ({"sport": "football", "team": "y"}, b"3")])
    sim.run_until_quiet()
    assert [(e.id, e.payload) for e in c.received] == [(eids[0], b"1"), (eids[2], b"3")]


def test_unsubscribe_stops_the_events(sim: ges.Simulator) -> None:
    c = sim.client("4.1.1.2", "s")
    sub = c.subscribe(FOOTBALL)
    pub = sim.client("1.2.1.9", "p")
    sim.run_until_quiet()
    pub.publish({"sport": "football", "team": "a"})
    sim.run_until_quiet()
    c.unsubscribe(sub)
    sim.run_until_quiet()
    pub.publish({"sport": "football", "team": "b"})
    sim.run_until_quiet()
    assert [e.content["team"] for e in c.received] == ["a"]
    for core in sim.brokers.values():  # no profile of it left anywhere
        for g in core.ppp.graphs.values():
            assert g.profiles == 0


def test_bad_client_input_is_refused_and_nothing_else_changes(sim: ges.Simulator) -> None:
    c = sim.client("1.1.3.6", "bad")
    with pytest.raises(ValueError, match="attribute name"):
        c.subscribe([("", 1)])
    with pytest.raises(TypeError, match="int, str, bool or float"):
        c.publish({"a": object()})
    with pytest.raises(KeyError, match="no subscription 9"):
        c.unsubscribe(9)
    with pytest.raises(ValueError, match="client id"):
        sim.client("1.1.3.6", "")
    from multihop.ges.messages import Unsubscribe

    sim._client_send(c, Unsubscribe(77))  # a forged request: the broker refuses it, and says so
    sim.run_until_quiet()
    assert c.refusals == [("Unsubscribe", "no subscription 77")]
    c.close()
    with pytest.raises(mh.ChannelClosed):
        c.publish({"a": 1})


def test_gateway_loss_mid_stream_with_an_alternate_route() -> None:
    """Copies sent over the lost gateway and not acknowledged go again over the other one, before newer
    events: the subscriber gets every event once, in order (routing paper 3.7, figure 12b)."""
    t = ges.Topology(levels=3)
    for a in ("1.1.1.1", "1.1.1.2", "1.1.2.1", "1.1.2.2", "1.1.2.3"):
        t.add_broker(a)
    for a, b in (("1.1.1.1", "1.1.1.2"), ("1.1.1.2", "1.1.2.1"), ("1.1.1.2", "1.1.2.2"), ("1.1.2.1", "1.1.2.3"), ("1.1.2.2", "1.1.2.3")):
        t.add_gateway(a, b)
    sim = ges.Simulator(t, seed=5, delay=(0.001, 0.001), trace_events=True)
    sim.run_until_quiet()
    sub = sim.client("1.1.2.3", "s")
    sub.subscribe([("n", "*")])
    pub = sim.client("1.1.1.1", "p")
    sim.run_until_quiet()
    sent = []
    lost_gw = None
    cut = 0
    for i in range(200):
        sent.append(pub.publish({"n": i}))
        sim.run_for(0.0001)
        if i == 100:
            used = {sim._name(d) for s, d, c in sim.event_trace if sim._name(s) == "1.1.1.2"}
            assert len(used) == 1
            lost_gw = used.pop()
            cut = len(sim.event_trace)
            sim.remove_gateway("1.1.1.2", lost_gw)  # the gateway in use, mid-stream
    sim.run_until_quiet()
    got = [e.id for e in sub.received]
    assert got == sent
    rerouted = sim.broker("1.1.1.2").erp.counters["rerouted"]
    assert rerouted > 0  # copies in flight did go again
    after = {sim._name(d) for s, d, c in sim.event_trace[cut:] if sim._name(s) == "1.1.1.2"}
    assert after == {"1.1.2.1", "1.1.2.2"} - {lost_gw}  # the rest went over the other gateway only


def test_the_checker_classifies_every_pair() -> None:
    h = ges.History()
    h.subscribe("s", 1, [("a", 1)], t=0)
    h.active("s", 1, t=1)
    e = [ges.EventId("p", 0, i, 0) for i in range(7)]
    h.publish(e[0], {"a": 1}, t=0.5)  # before active: optional
    for i in (1, 2, 3, 4):
        h.publish(e[i], {"a": 1}, t=2)
    h.publish(e[5], {"a": 2}, t=2)  # does not match
    h.unsubscribe("s", 1, t=3, done=4)
    h.publish(e[6], {"a": 1}, t=5)
    for x in (e[0], e[1], e[3], e[3], e[2], e[5], e[6]):
        h.deliver("s", x)
    r = ges.check_delivery(h)
    assert r.optional == 1 and r.delivered == 2  # e1, e2
    assert r.lost == [(e[4], "s")]
    assert r.duplicated == [(e[3], "s")]
    assert r.out_of_order == [(e[2], "s")]
    assert sorted(r.unexpected) == [(e[5], "s"), (e[6], "s")]
    assert not r.ok and "lost 1" in r.summary()


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
@pytest.mark.parametrize("chunk", range(10))
def test_1000_random_scenarios(chunk: int, native: bool) -> None:
    """1,000 seeded scenarios (hierarchies up to 500+ brokers, random profiles, publishers, lossy links,
    gateway losses that cut no unit, unsubscriptions): every delivery right, no event where it has no business;
    with the Python event path and with the native engine (issue 28)."""
    bad = []
    checked = 0
    for seed in range(chunk * 100, chunk * 100 + 100):
        r = run_scenario(seed, native=native)
        if not r.ok:
            bad.append(f"seed {seed} ({r.brokers} brokers, {r.inactive} inactive): {r.report.summary()} {r.violations[:2]}")
        checked += r.report.delivered
    assert not bad, "\n".join(bad)
    assert checked > 0  # the chunk judged real deliveries, not only optional ones


def test_unit_addition_propagates_profiles_the_same_way(sim: ges.Simulator) -> None:
    """3.3.6: a unit joins; its new gatekeepers get the profiles (snapshots) and events flow both ways."""
    old_sub = sim.client("2.1.1.3", "old-sub")
    old_sub.subscribe([("topic", "*")])
    sim.run_until_quiet()
    unit = ges.Topology(levels=3)
    for a in ("9.9.1.1", "9.9.1.2"):
        unit.add_broker(a)
    unit.add_gateway("9.9.1.1", "9.9.1.2")
    prefix = sim.add_unit(unit, via="9.9.1.1", into="1.1.3.6")  # a new cluster of SC-1
    assert prefix == "1.1.0"
    sim.run_until_quiet()
    new_sub = sim.client(f"{prefix}.2", "new-sub")
    sid = new_sub.subscribe([("topic", "*")])
    new_pub = sim.client(f"{prefix}.1", "new-pub")
    old_pub = sim.client("4.1.1.2", "old-pub")
    sim.run_until_quiet()
    assert new_sub.active_level(sid) == 4
    a = new_pub.publish({"topic": "from the new unit"})
    b = old_pub.publish({"topic": "from SSC-D"})
    sim.run_until_quiet()
    assert {e.id for e in old_sub.received} == {a, b} and len(old_sub.received) == 2  # two publishers: any order
    assert {e.id for e in new_sub.received} == {a, b} and len(new_sub.received) == 2


def test_a_profile_change_delivered_twice_is_counted_once(sim: ges.Simulator) -> None:
    """3.3.5: every change has a unique id (origin, version): a decider that gets one change again (a resend, a
    second route) leaves its profile graph and counters as they were, and the event is still delivered once."""
    from multihop.ges.messages import ProfileUpdate

    c = sim.client("4.1.1.2", "s")
    c.subscribe(FOOTBALL)
    sim.run_until_quiet()
    origin = sim.broker("4.1.1.2").code
    deciders = [b for b in sim.brokers.values() if origin in b.ppp.origins and b.code != origin]
    assert deciders, "the change reached no decider"
    for d in deciders:
        version, chains = d.ppp.origins[origin]
        before = (d.ppp.origins[origin], dict(d.ppp.counters), {k: g.profiles for k, g in d.ppp.graphs.items()})
        again = ProfileUpdate(origin, version, False, tuple(chains), (), (d.code,))
        d.ppp.on_update(again)
        assert (d.ppp.origins[origin], dict(d.ppp.counters), {k: g.profiles for k, g in d.ppp.graphs.items()}) == before
    pub = sim.client("1.2.1.9", "p")
    sim.run_until_quiet()
    pub.publish({"sport": "football", "team": "a"})
    sim.run_until_quiet()
    assert [e.content["team"] for e in c.received] == ["a"]
