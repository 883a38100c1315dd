"""Random publish/subscribe scenarios on the simulator, seeded, checked end to end.

:func:`run_scenario` builds a random hierarchy (up to ``max_brokers``), puts
subscribers with random profiles and publishers on random brokers, lets the
profiles become active in the whole system, then publishes in bursts; between
bursts it may lose gateways (never one that would cut a unit in two: every
unit stays connected inside, so no unit is partitioned) and remove
subscriptions.  Links may drop messages (the link layer retransmits).  The
result holds the :class:`~multihop.ges.delivery.DeliveryReport`, the
unit-entry violations and counts.  Same seed, same scenario.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from multihop.ges.address import Address, unit_id
from multihop.ges.delivery import DeliveryReport, History, check_delivery, check_unit_entries
from multihop.ges.profile import chain_matches
from multihop.ges.scenarios import random_topology
from multihop.ges.simulator import Simulator
from multihop.ges.topology import Topology

__all__ = ["ScenarioResult", "run_scenario", "keeps_units_connected", "ATTRIBUTES"]

#: the signature of every event in the scenarios, with the values each attribute takes
ATTRIBUTES: dict[str, list[Any]] = {
    "topic": ["news", "sport", "weather"],
    "region": [1, 2, 3, 4],
    "urgent": [True, False],
    "score": [0.5, 1.5],
}


@dataclass
class ScenarioResult:
    """What :func:`run_scenario` found."""

    seed: int
    brokers: int
    report: DeliveryReport
    violations: list[str]
    events: int
    subscribers: int
    lost_gateways: int
    messages: int
    stats: dict[str, int] = field(default_factory=dict)
    inactive: int = 0
    """Subscriptions that had not reached the top level once the system was quiet (none should: no partition)."""
    digest: str = ""
    """The simulator's digest of every delivery of the run (equal runs, equal digests)."""

    @property
    def ok(self) -> bool:
        """Every delivery right, every subscription active, and no event where it had no business."""
        return self.report.ok and not self.violations and self.inactive == 0


def keeps_units_connected(topo: Topology, without: tuple[Address, Address]) -> bool:
    """Whether every unit stays connected inside (over its own gateways) once gateway ``without`` is gone.

    Only units holding both ends can be cut, and if the smallest of them (the
    gateway's level-(l+1) context) stays connected, so do the larger ones.
    """
    levels = topo.levels
    a, b = without
    unit = unit_id(a.code, topo.gateways[without].level + 1, levels)
    inside = {x for x in topo.brokers if unit_id(x.code, topo.gateways[without].level + 1, levels) == unit}
    adj: dict[Address, list[Address]] = {x: [] for x in inside}
    for key, g in topo.gateways.items():
        if key != without and g.a in inside and g.b in inside:
            adj[g.a].append(g.b)
            adj[g.b].append(g.a)
    seen = {a}
    stack = [a]
    while stack:
        for y in adj[stack.pop()]:
            if y not in seen:
                seen.add(y)
                stack.append(y)
    return b in seen


def _profile(rng: random.Random) -> list[tuple[str, Any]]:
    names = list(ATTRIBUTES)
    k = rng.randint(1, len(names))
    return [(n, "*" if rng.random() < 0.35 else rng.choice(ATTRIBUTES[n])) for n in names[:k]]


def _content(rng: random.Random) -> dict[str, Any]:
    names = list(ATTRIBUTES)
    k = rng.randint(2, len(names))
    return {n: rng.choice(ATTRIBUTES[n]) for n in names[:k]}


def run_scenario(seed: int, max_brokers: int = 500, native: bool = False) -> ScenarioResult:
    """Run one random scenario (see the module docstring); ``native``: the brokers route events with the
    native engine (``Simulator(native=True)``), else the Python reference."""
    rng = random.Random(seed)
    r = rng.random()  # mostly small systems (fast), some large ones, up to max_brokers
    size = rng.randint(2, 60) if r < 0.6 else rng.randint(2, 150) if r < 0.9 else rng.randint(2, max_brokers)
    levels = rng.choice([2, 3, 3])
    topo = random_topology(size, seed, levels=levels, extra=rng.choice([0.3, 0.8, 1.5]))
    loss = rng.choice([0.0, 0.0, 0.05])
    sim = Simulator(topo, seed=seed, loss=loss, trace_events=True, native=native)
    sim.run_until_quiet()
    addrs = sim.addresses()
    hist = History()
    subs: list[tuple[Any, int, list[tuple[str, Any]]]] = []
    for i in range(rng.randint(1, 12)):
        c = sim.client(rng.choice(addrs), f"s{i}")
        for _ in range(rng.randint(1, 2)):
            prof = _profile(rng)
            sid = c.subscribe(prof)
            hist.subscribe(c.client_id, sid, prof, sim.now)
            subs.append((c, sid, prof))
    sim.run_until_quiet()
    inactive = 0
    for c, sid, _ in subs:
        if c.active_level(sid) == levels + 1:
            hist.active(c.client_id, sid, sim.now)
        else:
            inactive += 1
    pubs = [sim.client(rng.choice(addrs), f"p{i}") for i in range(rng.randint(1, 3))]
    lost = 0
    events = 0
    for _burst in range(rng.randint(1, 4)):
        for _ in range(rng.randint(1, 15)):
            p = rng.choice(pubs)
            content = _content(rng)
            eid = p.publish(content)
            hist.publish(eid, content, sim.now)
            events += 1
            if rng.random() < 0.3:
                sim.run_for(rng.uniform(0, 0.002))
        sim.run_until_quiet()
        if rng.random() < 0.5:  # lose a gateway that leaves every unit connected
            gws = list(sim.topology.gateways)
            rng.shuffle(gws)
            for key in gws[:20]:
                if keeps_units_connected(sim.topology, key):
                    sim.remove_gateway(*key)
                    lost += 1
                    break
            sim.run_until_quiet()
        if subs and rng.random() < 0.3:  # someone unsubscribes
            c, sid, _ = subs.pop(rng.randrange(len(subs)))
            t0 = sim.now
            c.unsubscribe(sid)
            sim.run_until_quiet()
            hist.unsubscribe(c.client_id, sid, t0, sim.now)
    sim.run_until_quiet()
    clients = {c.client_id: c for c, _, _ in subs} | {c.client_id: c for c in sim._clients.values() if c.client_id.startswith("s")}
    for cid, c in clients.items():
        for ev in c.received:
            hist.deliver(cid, ev.id)
    # who must get each event: brokers of subscribers with a matching active subscription
    interested: dict[Any, set[int]] = {}
    for eid, (t, names, values) in hist.published.items():
        want = set()
        for cid, ss in hist.subs.items():
            c = clients[cid]
            for s in ss.values():
                if s.subscribed <= t < s.removed and chain_matches(s.chain, names, values):
                    want.add(c.broker)
        interested[eid] = want
    report = check_delivery(hist)
    violations = check_unit_entries(sim.event_trace or [], interested, levels)
    stats: dict[str, int] = {}
    for core in sim.brokers.values():
        for k, v in core.erp.counters.items():
            stats[k] = stats.get(k, 0) + v
    return ScenarioResult(seed, len(sim.brokers), report, violations, events, len(clients), lost, sim.delivered, stats, inactive, sim.digest)
