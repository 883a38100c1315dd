"""Random durability scenarios on the simulator (Jepsen style), seeded, checked end to end.

:func:`run_durable_scenario` builds a random hierarchy with stable storage
(``Simulator(..., durable=True)``), durable subscribers with random profiles
and durable publishers on random brokers, then runs a random sequence of
steps: publish bursts (also from disconnected publishers, into their local
queue), disconnects, resumes at a random broker of any cluster (roams),
broker crashes (the clients of a crashed broker roam to
:meth:`~multihop.ges.simulator.Simulator.fallback_broker`) and restarts on their
store, gateway losses that heal later (never one that cuts a unit in two), and
pauses of random length, so events are in flight during every fault.  At the
end everything is restarted, healed and resumed, and the run goes quiet.

The result holds the :class:`~multihop.ges.delivery.DeliveryReport` (ordered per
publisher across incarnations, with "replayed" and "lost while disconnected"),
what is left in the stores (must be nothing) and in the publishers' queues.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from multihop.defaults import DEFAULT_TIMEOUT
from multihop.errors import Timeout
from multihop.ges.address import Address, unit_id
from multihop.ges.delivery import DeliveryReport, History, check_delivery
from multihop.ges.pubsub_scenarios import ATTRIBUTES, keeps_units_connected
from multihop.ges.scenarios import random_topology
from multihop.ges.simulator import SimClient, Simulator

__all__ = ["DurableResult", "run_durable_scenario"]


@dataclass
class DurableResult:
    """What :func:`run_durable_scenario` found."""

    seed: int
    brokers: int
    report: DeliveryReport
    events: int
    left_in_storage: int
    left_in_queues: int
    faults: dict[str, int] = field(default_factory=dict)
    #: subscriptions that did not become active in the whole system before the faults began (must be 0)
    inactive: int = 0
    #: the simulator's digest of every delivery with its time, the brokers' event counters summed (``replayed``
    #: left out: an optimisation of the Python path), and with ``trace`` every copy between brokers
    digest: str = ""
    stats: dict[str, int] = field(default_factory=dict)
    copies: list[Any] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every subscriber got every matching event once, in order, and the stores are empty."""
        return self.report.ok and self.left_in_storage == 0 and self.left_in_queues == 0 and self.inactive == 0


def _profile(rng: random.Random) -> list[tuple[str, Any]]:
    names = list(ATTRIBUTES)
    k = rng.randint(1, 2)
    return [(n, "*" if rng.random() < 0.4 else rng.choice(ATTRIBUTES[n])) for n in names[:k]]


def _content(rng: random.Random) -> dict[str, Any]:
    names = list(ATTRIBUTES)
    k = rng.randint(2, len(names))
    return {n: rng.choice(ATTRIBUTES[n]) for n in names[:k]}


class _Driver:
    def __init__(self, sim: Simulator, rng: random.Random, hist: History) -> None:
        self.sim = sim
        self.rng = rng
        self.hist = hist
        self.current: dict[str, SimClient] = {}
        self.incarnations: dict[str, list[SimClient]] = {}
        self.away_since: dict[str, float] = {}

    def connect(self, cid: str, broker: str, resume: bool) -> SimClient:
        try:
            c = self.sim.client(broker, cid, resume=resume)
        except Timeout:  # its home is cut off now (a crashed broker between): it waits, attached
            c = self.sim._last_client[cid]
        self.current[cid] = c
        self.incarnations.setdefault(cid, []).append(c)
        if cid in self.away_since:
            self.hist.disconnected(cid, self.away_since.pop(cid), self.sim.now)
        return c

    def away(self, cid: str) -> None:
        self.away_since.setdefault(cid, self.sim.now)

    def home_up(self, cid: str) -> bool:
        st = self.current[cid].core.durable
        return st is not None and st.home in self.sim.brokers


def run_durable_scenario(seed: int, max_brokers: int = 40, steps: int | None = None, native: bool = False, trace: bool = False) -> DurableResult:
    """Run one random durability scenario (see the module docstring); ``native``: the brokers route events with
    the native engine (``Simulator(native=True)``), else the Python reference; ``trace``: keep every copy
    between brokers (:attr:`DurableResult.copies`)."""
    rng = random.Random(seed)
    size = rng.randint(2, max_brokers)
    levels = rng.choice([2, 3])
    topo = random_topology(size, seed, levels=levels, extra=rng.choice([0.5, 1.0, 1.5]))
    sim = Simulator(topo, seed=seed, loss=rng.choice([0.0, 0.0, 0.05]), durable=True, native=native, trace_events=trace)
    sim.run_until_quiet()
    hist = History(across_incarnations=True)
    d = _Driver(sim, rng, hist)
    addrs = sim.addresses()
    subs = [f"s{i}" for i in range(rng.randint(1, 5))]
    pubs = [f"p{i}" for i in range(rng.randint(1, 3))]
    for cid in subs:
        c = d.connect(cid, rng.choice(addrs), False)
        for _ in range(rng.randint(1, 2)):
            prof = _profile(rng)
            hist.subscribe(cid, c.subscribe(prof), prof, sim.now)
    for cid in pubs:
        d.connect(cid, rng.choice(addrs), False)
    sim.run_until_quiet()
    inactive = 0
    for cid in subs:
        c = d.current[cid]
        for sid in list(hist.subs[cid]):
            if c.active_level(sid, timeout=DEFAULT_TIMEOUT) == levels + 1:
                hist.active(cid, sid, sim.now)
            else:
                inactive += 1
    faults = {"disconnects": 0, "resumes": 0, "roams": 0, "crashes": 0, "restarts": 0, "gateways_lost": 0, "gateways_healed": 0}
    lost_gws: list[tuple[Address, Address, int]] = []
    events = 0
    n_steps = steps if steps is not None else rng.randint(10, 40)
    everyone = subs + pubs

    def cluster(a: Any) -> int:
        return unit_id(Address(a, levels).code, 1, levels)

    for _ in range(n_steps):
        r = rng.random()
        if r < 0.40:  # a burst from one publisher (queued if it is disconnected)
            cid = rng.choice(pubs)
            c = d.current[cid]
            for _ in range(rng.randint(1, 12)):
                content = _content(rng)
                eid = c.publish(content)
                hist.publish(eid, content, sim.now)
                events += 1
                if rng.random() < 0.3:
                    sim.run_for(rng.uniform(0, 0.003))
        elif r < 0.52:  # a client disconnects
            cid = rng.choice(everyone)
            c = d.current[cid]
            if not c.closed:
                c.disconnect()
                d.away(cid)
                faults["disconnects"] += 1
        elif r < 0.70:  # a disconnected client resumes, at any broker (a roam when it is another one)
            waiting = [cid for cid in everyone if d.current[cid].closed and d.home_up(cid)]
            if waiting:
                cid = rng.choice(waiting)
                old = d.current[cid].broker
                target = rng.choice(sim.addresses())
                d.connect(cid, target, True)
                faults["resumes"] += 1
                faults["roams"] += Address(target, levels).code != old
        elif r < 0.78:  # a broker crashes; its clients roam inside the cluster by the documented rule
            if len(sim.crashed) < 2 and len(sim.brokers) > 1:
                victim = rng.choice(sim.addresses())
                on_it = [cid for cid in everyone if not d.current[cid].closed and d.current[cid].broker == Address(victim, levels).code]
                sim.crash_broker(victim)
                faults["crashes"] += 1
                for cid in on_it:
                    d.away(cid)
                    try:
                        fb = sim.fallback_broker(victim)
                    except Exception:
                        continue  # the cluster has no other broker: the client waits for the restart
                    if d.home_up(cid):
                        d.connect(cid, fb, True)
                        faults["resumes"] += 1
        elif r < 0.86:  # a crashed broker restarts on its store
            if sim.crashed:
                code = rng.choice(sorted(sim.crashed))
                sim.restart_broker(Address.from_code(code, levels))
                faults["restarts"] += 1
        elif r < 0.93:  # a gateway is lost (one that keeps every unit connected) or a lost one heals
            if lost_gws and rng.random() < 0.5:
                a, b, cost = lost_gws.pop(rng.randrange(len(lost_gws)))
                if a.code in sim.brokers and b.code in sim.brokers:
                    sim.add_gateway(a, b, cost)
                    faults["gateways_healed"] += 1
                else:
                    lost_gws.append((a, b, cost))
            else:
                gws = [k for k in sim.topology.gateways if k[0].code in sim.brokers and k[1].code in sim.brokers]
                rng.shuffle(gws)
                for key in gws[:10]:
                    if keeps_units_connected(sim.topology, key):
                        cost = sim.topology.gateways[key].cost
                        sim.remove_gateway(*key)
                        lost_gws.append((key[0], key[1], cost))
                        faults["gateways_lost"] += 1
                        break
        sim.run_for(rng.uniform(0, 0.05))
    # the end: everything back, everyone resumed, quiet
    for code in sorted(sim.crashed):
        sim.restart_broker(Address.from_code(code, levels))
    for a, b, cost in lost_gws:
        sim.add_gateway(a, b, cost)
    sim.run_until_quiet()
    for cid in everyone:
        if d.current[cid].closed:
            d.connect(cid, rng.choice(sim.addresses()), True)
    sim.run_until_quiet()
    for cid in subs:
        for c in d.incarnations[cid]:
            for ev in c.received:
                hist.deliver(cid, ev.id)
    report = check_delivery(hist)
    left = sum(len(core.durability.store.entries) for core in sim.brokers.values() if core.durability.store is not None)
    left_committed = sum(st.stored_events for st in sim.stores.values())
    queued = sum(d.current[cid].queued for cid in pubs)
    stats: dict[str, int] = {}
    for core in sim.brokers.values():
        for k, v in core.erp.counters.items():
            if k != "replayed":
                stats[k] = stats.get(k, 0) + v
    copies = list(sim.event_trace or [])
    return DurableResult(seed, len(sim.brokers), report, events, max(left, left_committed), queued, faults, inactive, sim.digest, stats, copies)
