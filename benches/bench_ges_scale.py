"""Content-based routing at scale, simulated: protocol messages per published event against flooding.

Usage::

    .venv/bin/python benches/bench_ges_scale.py [--brokers 10000] [--subscriptions 100000] [--events 200] [--seed 1]

A random hierarchy of ``--brokers`` brokers (``ges.random_topology``), clients with
``--subscriptions`` subscriptions in all (10 per client, on random brokers, random
profiles over a signature of 4 attributes with domains of 2000, 50, 10 and 5 values:
each constrains the topic and 1-3 more attributes, 30 % of those to ``*``),
then ``--events`` events from 20 publishers on random brokers.  Simulation (virtual
time, in-memory links): every figure is counted, none is timed live.

Ours: event copies sent between brokers per published event (hop by hop; a copy
carries one event to one neighbour), and the deliveries it served.  Baseline,
on the same topology: flooding each event to every broker, the least a
flood-to-all scheme sends (a copy over each gateway of a spanning tree, B - 1 per
event) and what plain flooding sends (every gateway both ways but back, 2L - B + 1).
Also: the profile propagation messages the subscriptions cost, and the
wall time of each phase.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from multihop import ges

ATTRS = {"topic": 2000, "region": 50, "kind": 10, "level": 5}


def profile(rng: random.Random) -> list[tuple[str, object]]:
    names = list(ATTRS)[: rng.randint(2, len(ATTRS))]
    return [(n, "*" if i and rng.random() < 0.3 else rng.randrange(ATTRS[n])) for i, n in enumerate(names)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", type=int, default=10_000)
    ap.add_argument("--subscriptions", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    t0 = time.perf_counter()
    topo = ges.random_topology(a.brokers, a.seed)
    B, L = len(topo.brokers), len(topo.gateways)
    sim = ges.Simulator(topo, seed=a.seed)
    m_gpp = sim.run_until_quiet()
    print(f"{B} brokers, {L} gateways: the hierarchy converged with {m_gpp} messages in {time.perf_counter() - t0:.1f} s")
    addrs = sim.addresses()
    t0 = time.perf_counter()
    before = sim.delivered
    clients = []
    for i in range(max(1, a.subscriptions // 10)):
        c = sim.client(rng.choice(addrs), f"s{i}")
        for _ in range(10):
            c.subscribe(profile(rng))
        clients.append(c)
    sim.run_until_quiet()
    m_ppp = sim.delivered - before
    print(
        f"{10 * len(clients)} subscriptions on {len({c.broker for c in clients})} brokers: profile propagation "
        f"{m_ppp} messages ({m_ppp / (10 * len(clients)):.1f} per subscription) in {time.perf_counter() - t0:.1f} s"
    )
    pubs = [sim.client(rng.choice(addrs), f"p{i}") for i in range(20)]
    sim.run_until_quiet()
    copies0 = sum(c.erp.counters["copies_out"] for c in sim.brokers.values())
    deliv0 = sum(c.erp.counters["delivered"] for c in sim.brokers.values())
    t0 = time.perf_counter()
    for k in range(a.events):
        content = {n: rng.randrange(d) for n, d in ATTRS.items()}
        rng.choice(pubs).publish(content)
        if k % 20 == 19:
            sim.run_until_quiet()
    sim.run_until_quiet()
    copies = sum(c.erp.counters["copies_out"] for c in sim.brokers.values()) - copies0
    deliv = sum(c.erp.counters["delivered"] for c in sim.brokers.values()) - deliv0
    per = copies / a.events
    print(
        f"{a.events} events: {per:.1f} broker-to-broker copies per event, {deliv / a.events:.1f} deliveries to clients "
        f"per event ({time.perf_counter() - t0:.1f} s)"
    )
    tree, flood = B - 1, 2 * L - B + 1
    print(
        f"baseline flood-to-all on the same topology: {tree} copies per event over a spanning tree, {flood} by plain "
        f"flooding -> ours / spanning tree = {per / tree:.3f}, ours / flooding = {per / flood:.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
