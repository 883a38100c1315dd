"""GES durability and mobility in the simulator: storage brokers, disconnects, roams, crashes, refusals, the checker."""

from __future__ import annotations

from pathlib import Path

import pytest

from multihop import ges
from multihop.ges.client import QUEUE_MAX
from multihop.ges.delivery import History, check_delivery
from multihop.ges.durable_scenarios import run_durable_scenario
from multihop.ges.errors import GesStateError, ResumeRefused
from multihop.ges.event import EventId

FIG5 = Path(ges.__file__).parent / "examples" / "paper_fig5.toml"
SPORT = [("sport", "football")]


def _sim(seed: int = 3) -> ges.Simulator:
    s = ges.Simulator(ges.Topology.load(FIG5), seed=seed, durable=True)
    s.run_until_quiet()
    return s


def _ready(sim: ges.Simulator, *subs: tuple[ges.SimClient, int]) -> None:
    sim.run_until_quiet()
    for c, sid in subs:
        assert c.active_level(sid) == sim.levels + 1


def _numbers(client: ges.SimClient) -> list[int]:
    return [e.content["n"] for e in client.received]


def _stored(sim: ges.Simulator) -> int:
    return sum(st.stored_events for st in sim.stores.values())


def test_storage_brokers_are_the_lowest_address_of_each_cluster() -> None:
    sim = _sim()
    got = sorted(str(ges.Address.from_code(c, sim.levels)) for c in sim.storage_brokers.values())  # type: ignore[union-attr]
    assert got == ["1.1.1.1", "1.1.2.7", "1.1.3.4", "1.2.1.9", "1.3.1.11", "1.4.1.58", "2.1.1.1", "3.1.1.1", "4.1.1.1"]


def test_disconnected_subscriber_gets_what_it_missed_then_live_after_a_roam() -> None:
    sim = _sim()
    sub = sim.client("2.1.1.3", "sub")
    sid = sub.subscribe(SPORT)
    pub = sim.client("1.1.1.2", "pub")
    _ready(sim, (sub, sid))
    for n in range(10):
        pub.publish({"sport": "football", "n": n})
    sim.run_until_quiet()
    assert _numbers(sub) == list(range(10))
    sub.disconnect()
    for n in range(10, 30):
        pub.publish({"sport": "football", "n": n})
        pub.publish({"sport": "chess", "n": n})
    sim.run_until_quiet()
    home = sim.broker("2.1.1.1").durability.status()["store"]
    assert home["events"] == 20 and home["oldest"]["waiting_for"] == ["sub"]
    assert home["clients"]["sub"]["pending"] == 20 and not home["clients"]["sub"]["connected"]
    # roam to another top-level unit: it presents its last event per publisher
    sub2 = sim.client("4.1.1.2", "sub", resume=True)
    assert sub2.incarnation == sub.incarnation + 1
    for n in range(30, 40):
        pub.publish({"sport": "football", "n": n})
    sim.run_until_quiet()
    assert _numbers(sub2) == list(range(10, 40))
    assert sub2.replay_progress == (20, 20)
    assert _stored(sim) == 0  # everyone acknowledged: garbage collected
    assert sim.broker("2.1.1.1").durability.status()["store"]["events"] == 0


def test_events_published_while_disconnected_wait_in_the_local_queue() -> None:
    sim = _sim()
    sub = sim.client("3.1.1.1", "sub")
    sid = sub.subscribe(SPORT)
    pub = sim.client("1.3.1.12", "pub")
    _ready(sim, (sub, sid))
    pub.publish({"sport": "football", "n": 0})
    sim.run_until_quiet()
    assert pub.queued == 0  # stored: released
    pub.disconnect()
    ids = [pub.publish({"sport": "football", "n": n}) for n in range(1, 6)]
    sim.run_until_quiet()
    assert pub.queued == 5 and _numbers(sub) == [0]
    pub2 = sim.client("1.2.1.10", "pub", resume=True)
    after = pub2.publish({"sport": "football", "n": 6})
    sim.run_until_quiet()
    assert pub2.queued == 0
    assert _numbers(sub) == [0, 1, 2, 3, 4, 5, 6]
    assert [e.id for e in sub.received][1:6] == ids  # released with the ids they got while disconnected
    assert after.incarnation == ids[0].incarnation + 1


def test_the_local_queue_is_bounded() -> None:
    sim = _sim()
    pub = sim.client("1.1.1.2", "pub")
    sim.run_until_quiet()
    pub.disconnect()
    for n in range(QUEUE_MAX):
        pub.publish({"n": n})
    with pytest.raises(GesStateError, match="local queue is full"):
        pub.publish({"n": -1})
    assert pub.queued == QUEUE_MAX


@pytest.mark.parametrize("victim", ["1.1.3.5", "1.1.3.4"], ids=["attach-broker", "storage-broker"])
def test_a_crashed_broker_loses_nothing_its_clients_roam(victim: str) -> None:
    """The subscriber's broker crashes mid-stream and the subscriber roams to the fallback broker;
    or its cluster's storage broker (its home) crashes and restarts on what it committed, and sends
    again from there.  Either way the subscriber's sequence is exactly 0..n-1."""
    sim = _sim(seed=5)
    sub = sim.client("1.1.3.5", "sub")
    sid = sub.subscribe(SPORT)
    pub = sim.client("4.1.1.2", "pub")
    _ready(sim, (sub, sid))
    n = 120
    for i in range(n):
        pub.publish({"sport": "football", "n": i})
        sim.run_for(0.0004)  # events keep flowing while the broker dies
        if i == 50:
            assert 0 < len(sub.received) < 50
            sim.crash_broker(victim)
            if victim == "1.1.3.5":
                assert sub.closed and sim.fallback_broker(victim) == "1.1.3.6"
                sub = sim.client(sim.fallback_broker(victim), "sub", resume=True)
        if i == 90 and victim == "1.1.3.4":
            assert not sub.closed  # attached to 1.1.3.5, waiting for its home
            sim.restart_broker(victim)
    sim.run_until_quiet()
    got = [e.content["n"] for c in sim._clients.values() if c.client_id == "sub" for e in c.received]
    assert got == list(range(n))
    assert _stored(sim) == 0


def test_publishers_storage_broker_crash_keeps_its_unstored_events() -> None:
    sim = _sim(seed=7)
    sub = sim.client("2.1.1.2", "sub")
    sid = sub.subscribe(SPORT)
    pub = sim.client("1.1.1.3", "pub")  # home: 1.1.1.1
    _ready(sim, (sub, sid))
    for i in range(40):
        pub.publish({"sport": "football", "n": i})
        sim.run_for(0.0003)
        if i == 20:
            sim.crash_broker("1.1.1.1")
    sim.run_for(0.5)
    assert pub.queued > 0  # what the dead store never confirmed stays in the publisher's queue
    sim.restart_broker("1.1.1.1")
    sim.run_until_quiet()
    assert pub.queued == 0
    assert _numbers(sub) == list(range(40))
    assert _stored(sim) == 0


def test_a_gateway_lost_mid_stream_and_healed_loses_nothing() -> None:
    sim = _sim(seed=11)
    sub = sim.client("4.1.1.1", "sub")
    sid = sub.subscribe(SPORT)
    pub = sim.client("1.1.1.1", "pub")
    _ready(sim, (sub, sid))
    gws = [g for g in sim.topology.gateways.values() if {str(g.a), str(g.b)} & {"4.1.1.1", "4.1.1.2"} and g.level > 0]
    assert gws
    for i in range(60):
        pub.publish({"sport": "football", "n": i})
        sim.run_for(0.0003)
        if i == 20:
            for g in gws:  # unit 4 is cut off: the events wait (parked) at the gateways' near ends
                sim.remove_gateway(g.a, g.b)
        if i == 40:
            for g in gws:
                sim.add_gateway(g.a, g.b, g.cost)
    sim.run_until_quiet()
    assert _numbers(sub) == list(range(60))
    assert sum(c.erp.counters["parked"] for c in sim.brokers.values()) > 0
    assert _stored(sim) == 0


def test_bad_resumes_are_refused_and_the_rest_goes_on() -> None:
    sim = _sim()
    sub = sim.client("1.1.2.8", "sub")
    sid = sub.subscribe(SPORT)
    other = sim.client("1.1.2.8", "other")
    oid = other.subscribe(SPORT)
    pub = sim.client("1.1.1.2", "pub")
    _ready(sim, (sub, sid), (other, oid))
    last = pub.publish({"sport": "football", "n": 0})
    sim.run_until_quiet()
    sub.disconnect()
    with pytest.raises(ResumeRefused, match="unknown client id 'nobody'"):
        sim.client("1.1.2.8", "nobody", resume=True)
    forged = EventId(last.publisher, last.timestamp, last.sequence + 1000, last.incarnation)
    with pytest.raises(ResumeRefused, match="never gave it"):
        sim.client("1.1.2.8", "sub", resume=True, last_received={"pub": forged})
    with pytest.raises(ResumeRefused, match="never gave it"):
        sim.client("1.1.2.8", "sub", resume=True, last_received={"ghost": EventId("ghost", 1, 1, 0)})
    pub.publish({"sport": "football", "n": 1})
    sim.run_until_quiet()
    assert _numbers(other) == [0, 1]
    ok = sim.client("1.1.2.8", "sub", resume=True, last_received={"pub": last})
    sim.run_until_quiet()
    assert _numbers(ok) == [1]


def test_durable_calls_need_a_durable_simulator() -> None:
    sim = ges.Simulator(ges.Topology.load(FIG5))
    with pytest.raises(GesStateError, match="durable"):
        sim.client("1.1.1.1", "a", resume=True)
    with pytest.raises(GesStateError, match="durable"):
        sim.crash_broker("1.1.1.1")
    c = sim.client("1.1.1.1", "a")
    with pytest.raises(GesStateError, match="durable"):
        c.disconnect()


def test_checker_counts_replayed_and_lost_while_disconnected() -> None:
    h = History(across_incarnations=True)
    h.subscribe("s", 1, SPORT, 0.0)
    h.active("s", 1, 0.0)
    ids = [EventId("p", 1, i, 0) for i in range(4)] + [EventId("p", 9, 0, 1)]
    for t, i in enumerate(ids):
        h.publish(i, {"sport": "football"}, float(t + 1))
    h.disconnected("s", 1.5, 3.5)  # away while ids[1] and ids[2] were published
    for i in (ids[0], ids[1], ids[4]):
        h.deliver("s", i)
    r = check_delivery(h)
    assert r.replayed == 1 and r.lost_while_disconnected == [(ids[2], "s")] and r.lost == [(ids[3], "s")]
    assert not r.ok
    h2 = History(across_incarnations=True)
    h2.subscribe("s", 1, SPORT, 0.0)
    h2.active("s", 1, 0.0)
    for t, i in enumerate(ids):
        h2.publish(i, {"sport": "football"}, float(t + 1))
    for i in (ids[0], ids[4], ids[1], ids[2], ids[3]):  # a new incarnation's event before older ones
        h2.deliver("s", i)
    assert len(check_delivery(h2).out_of_order) == 3


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_random_fault_scenarios_exactly_once_in_order_and_storage_empties(native: bool) -> None:
    """200 seeded scenarios (benches/bench_ges_durability.py --scenarios 1000 runs 1,000): random disconnects,
    roams, broker crashes and restarts, gateway losses that heal, lossy links; every subscriber gets every
    matching event exactly once, in each publisher's order across incarnations; storage ends empty. With the
    Python event path and with the native engine."""
    totals: dict[str, int] = {}
    replayed = delivered = 0
    bad = []
    for seed in range(200):
        r = run_durable_scenario(seed, native=native)
        for k, v in r.faults.items():
            totals[k] = totals.get(k, 0) + v
        replayed += r.report.replayed
        delivered += r.report.delivered
        if not r.ok:
            bad.append((seed, r.left_in_storage, r.left_in_queues, r.inactive, r.report.summary()))
    assert not bad, bad[:3]
    # the scenarios did exercise every fault
    assert min(totals.values()) > 50, totals
    assert replayed > 300
    assert delivered > 5000  # judged deliveries, not vacuous
