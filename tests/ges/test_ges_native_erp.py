"""One behaviour, two implementations: the native event engine (``multihop.ges.native``, crate ``core-rs/ges``)
against the Python event path (``multihop.ges.erp``, the reference), on the same random scenarios.

Each scenario is run twice in the simulator, once with every broker's event routing in Python and once
native (``Simulator(native=True)``), with the same seed: random hierarchies, profiles (with wildcards),
publishers and subscribers, lossy links, gateways lost between bursts and while events are in flight,
publications delivered twice to their broker (duplicates), clients that roam to another broker (a new
incarnation) and subscriptions removed. Both runs must make the same delivery decisions, event by event:
every copy every broker sent to every other (its routing information included), every event each client
got, in order, the simulator's digest of every delivery with its time, and the brokers' event counters.
The 1,000-seed checker of ``test_ges_pubsub.py`` runs with the native engine too (``test_ges_pubsub.py``).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from multihop.ges.errors import GesStateError
from multihop.ges.event import make_event
from multihop.ges.messages import Publish
from multihop.ges.pubsub_scenarios import ATTRIBUTES, keeps_units_connected, run_scenario
from multihop.ges.scenarios import random_topology
from multihop.ges.simulator import Simulator


def _profile(rng: random.Random) -> list[tuple[str, Any]]:
    names = list(ATTRIBUTES)
    k = rng.randint(1, len(names))
    return [(n, "*" if rng.random() < 0.35 else rng.choice(ATTRIBUTES[n])) for n in names[:k]]


def _content(rng: random.Random) -> dict[str, Any]:
    names = list(ATTRIBUTES)
    return {n: rng.choice(ATTRIBUTES[n]) for n in names[: rng.randint(1, len(names))]}


def _lose_a_gateway(sim: Simulator, rng: random.Random) -> bool:
    gws = list(sim.topology.gateways)
    rng.shuffle(gws)
    for key in gws[:20]:
        if keeps_units_connected(sim.topology, key):
            sim.remove_gateway(*key)
            return True
    return False


def _scenario(seed: int, native: bool) -> dict[str, Any]:
    """A scenario with roams, duplicates and losses mid-stream; what it observed, to compare."""
    rng = random.Random(seed)
    size = rng.randint(2, 40) if rng.random() < 0.7 else rng.randint(2, 120)
    levels = rng.choice([2, 3])
    topo = random_topology(size, seed, levels=levels, extra=rng.choice([0.3, 0.8, 1.5]))
    sim = Simulator(topo, seed=seed, loss=rng.choice([0.0, 0.0, 0.05]), trace_events=True, native=native)
    sim.run_until_quiet()
    addrs = sim.addresses()
    subs: list[tuple[Any, int]] = []
    clients: dict[str, Any] = {}
    for i in range(rng.randint(1, 10)):
        c = clients[f"s{i}"] = sim.client(rng.choice(addrs), f"s{i}")
        for _ in range(rng.randint(1, 2)):
            subs.append((c, c.subscribe(_profile(rng))))
    sim.run_until_quiet()
    pubs = [sim.client(rng.choice(addrs), f"p{i}") for i in range(rng.randint(1, 3))]
    received: dict[str, list[Any]] = {}
    for _ in range(rng.randint(1, 5)):
        for _ in range(rng.randint(1, 12)):
            k = rng.randrange(len(pubs))
            p = pubs[k]
            content = _content(rng)
            eid = p.publish(content)
            if rng.random() < 0.1:  # the broker gets the publication twice (a client that resent it): a duplicate
                sim._client_send(p, Publish(make_event(eid, content)))
            if rng.random() < 0.3:
                sim.run_for(rng.uniform(0, 0.002))
            if rng.random() < 0.15:  # a gateway lost while events are in flight
                _lose_a_gateway(sim, rng)
            if rng.random() < 0.1:  # a gateway added, or its cost changed, while events are in flight (new routes, deciders)
                a, b = rng.sample(addrs, 2) if len(addrs) > 1 else (addrs[0], addrs[0])
                try:
                    sim.add_gateway(a, b)
                except GesStateError:  # (there is one already, or the same broker)
                    if a != b and (sim.broker(a).code, sim.broker(b).code) in sim._links:
                        sim.set_cost(a, b, rng.randrange(5))
        sim.run_until_quiet()
        if rng.random() < 0.4:
            _lose_a_gateway(sim, rng)
            sim.run_until_quiet()
        if rng.random() < 0.3:  # a publisher roams: a new incarnation at another broker
            k = rng.randrange(len(pubs))
            pubs[k].close()
            pubs[k] = sim.client(rng.choice(addrs), pubs[k].client_id)
            sim.run_until_quiet()
        if rng.random() < 0.3 and clients:  # a subscriber roams: what it got so far is kept, it subscribes again
            name = rng.choice(sorted(clients))
            old = clients[name]
            received.setdefault(name, []).extend(e.id for e in old.received)
            old.close()
            c = clients[name] = sim.client(rng.choice(addrs), name)
            subs = [(x, s) for x, s in subs if x is not old]
            subs.append((c, c.subscribe(_profile(rng))))
            sim.run_until_quiet()
        if subs and rng.random() < 0.3:
            c, sid = subs.pop(rng.randrange(len(subs)))
            c.unsubscribe(sid)
            sim.run_until_quiet()
    sim.run_until_quiet()
    for name, c in clients.items():
        received.setdefault(name, []).extend(e.id for e in c.received)
    counters: dict[str, int] = {}
    for core in sim.brokers.values():
        assert core.native == native
        for key, v in core.erp.counters.items():
            if key != "replayed":  # (the Python path's remembered decisions; the native one has none)
                counters[key] = counters.get(key, 0) + v
    return {
        "brokers": len(sim.brokers),
        "copies": [(s, d, c) for s, d, c in sim.event_trace or []],
        "received": received,
        "digest": sim.digest,
        "counters": counters,
    }


def _compare(py: dict[str, Any], nat: dict[str, Any], seed: int) -> None:
    for i, (a, b) in enumerate(zip(py["copies"], nat["copies"], strict=False)):
        assert a == b, f"seed {seed}: copy {i} differs: python {a}, native {b}"
    assert len(py["copies"]) == len(nat["copies"]), f"seed {seed}: {len(py['copies'])} copies in Python, {len(nat['copies'])} native"
    assert py["received"] == nat["received"], f"seed {seed}: the clients got different events"
    assert py["counters"] == nat["counters"], f"seed {seed}: counters differ"
    assert py["digest"] == nat["digest"], f"seed {seed}: the traces differ"


@pytest.mark.parametrize("seed", range(60))
def test_roams_duplicates_and_losses_give_the_same_decisions(seed: int) -> None:
    py, nat = _scenario(seed, native=False), _scenario(seed, native=True)
    assert py["copies"], "the scenario routed nothing"
    _compare(py, nat, seed)


@pytest.mark.parametrize("seed", range(0, 400, 4))
def test_the_pubsub_scenarios_give_the_same_trace(seed: int) -> None:
    a, b = run_scenario(seed), run_scenario(seed, native=True)
    assert b.ok, f"seed {seed}: {b.report.summary() if hasattr(b.report, 'summary') else b.report}"
    assert (a.digest, {k: v for k, v in a.stats.items() if k != "replayed"}) == (b.digest, {k: v for k, v in b.stats.items() if k != "replayed"})
