"""Remembered routing decisions (``erp.py``, "Remembered decisions"): a broker that replays the plan of an
earlier copy does exactly what the full handling does: the same deliveries, copies and duplicate drops,
across profile changes, duplicates and a gateway lost mid-stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from multihop import ges
from multihop.ges import erp
from multihop.ges.pubsub_scenarios import run_scenario

FIG5 = Path(ges.__file__).parent / "examples" / "paper_fig5.toml"


def _run() -> dict[str, Any]:
    """A stream of events with repeating content over the figure-5 system, with changes in the middle."""
    sim = ges.Simulator(ges.Topology.load(FIG5), seed=3, trace_events=True)
    sim.run_until_quiet()
    subs = {a: sim.client(a, f"sub-{a}") for a in ("1.1.3.6", "2.1.1.3", "4.1.1.1", "1.3.1.12", "1.1.1.2")}
    for c in subs.values():
        c.subscribe([("sport", "football"), ("team", "*")])
    subs["2.1.1.3"].subscribe([("sport", "*"), ("team", "red")])
    pub = sim.client("1.1.1.1", "pub")
    pub2 = sim.client("1.2.1.10", "pub2")
    sim.run_until_quiet()
    late = None
    for i in range(300):
        pub.publish({"sport": ("football", "tennis")[i % 2], "team": ("red", "blue", "green")[i % 3]})
        if i % 7 == 0:
            pub2.publish({"sport": "football", "team": "red"})
        sim.run_for(0.0002)
        if i == 100:  # a new subscription mid-stream: remembered decisions must not hide it
            late = sim.client("1.2.1.10", "late")
            late.subscribe([("sport", "tennis")])
        if i == 150:  # an unsubscription
            subs["1.3.1.12"].unsubscribe(1)
        if i == 200:  # a gateway in use goes: copies in flight go again, duplicates are dropped
            sim.remove_gateway("1.1.1.1", "2.1.1.1")
    sim.run_until_quiet()
    assert late is not None
    counters: dict[str, int] = {}
    for core in sim.brokers.values():
        for k, v in core.erp.counters.items():
            counters[k] = counters.get(k, 0) + v
    received = {a: [e.id for e in c.received] for a, c in subs.items()} | {"late": [e.id for e in late.received]}
    return {"digest": sim.digest, "received": received, "counters": counters}


def test_replayed_decisions_do_what_the_full_handling_does(monkeypatch: pytest.MonkeyPatch) -> None:
    with_plans = _run()
    monkeypatch.setattr(erp, "PLANS", 0)  # every copy handled in full
    without = _run()
    assert with_plans["counters"]["replayed"] > 1000  # the plans were used ...
    assert without["counters"]["replayed"] == 0
    assert with_plans["digest"] == without["digest"]  # ... and every delivery of the run is the same
    assert with_plans["received"] == without["received"]
    a = {k: v for k, v in with_plans["counters"].items() if k != "replayed"}
    b = {k: v for k, v in without["counters"].items() if k != "replayed"}
    assert a == b and a["duplicates"] > 0 and a["rerouted"] > 0
    got = with_plans["received"]
    assert len(got["late"]) > 0 and len(got["2.1.1.3"]) > len(got["4.1.1.1"]) > len(got["1.3.1.12"]) > 0


@pytest.mark.parametrize("seed", [1, 4, 9, 17])
def test_random_scenarios_agree_with_and_without_plans(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random systems, lossy links, lost gateways, unsubscriptions: the checker passes both ways, same counts."""
    r1 = run_scenario(seed, max_brokers=150)
    monkeypatch.setattr(erp, "PLANS", 0)
    r2 = run_scenario(seed, max_brokers=150)
    assert r1.ok and r2.ok
    assert r2.stats["replayed"] == 0
    assert {k: v for k, v in r1.stats.items() if k != "replayed"} == {k: v for k, v in r2.stats.items() if k != "replayed"}
    assert r1.messages == r2.messages
