"""The GES broker hierarchy at scale (simulated) and live (22 broker processes on this machine's 2 CPUs).

Usage::

    .venv/bin/python benches/bench_ges_hierarchy.py [--sizes 100,1000,10000] [--seed 1] [--no-live]

**Simulated** (``multihop.ges.Simulator``, virtual clock, link delays 0.5-1.5 ms): for random
hierarchies of about 100, 1,000 and 10,000 brokers (``ges.random_topology``, seeded), the protocol
messages and wall time until quiet after start-up, after one gateway is added and after one is
lost, and the memory of one broker's graph and routing cache.  Goal: 10,000 brokers converge in
under 60 s.

The baseline, computed on the same topology, is flat link-state flooding (every broker learns
every connection, as without the hierarchy): each of the 2L connection records of L gateways
crosses every link once each way except back to where it came from, 2L - B + 1 transmissions
per record for B brokers.  Ours is counted from the run (records carried by the messages sent;
one message carries a batch).  For one gateway change the GES rule is that the news stays in the
level-(l+1) context of a level-l gateway: the figure printed is the records sent per broker of
that context (flat flooding would need ~2(2L - B + 1) whatever the level).

**Live**: ``LiveSystem.up`` of the paper's 22-broker testbed (``examples/paper_fig14.toml``):
seconds until every broker process runs and every graph equals the simulated one (goal < 10 s),
real cores (2), one process per broker.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
import tracemalloc
from pathlib import Path

from multihop import ges
from multihop.ges.address import Address, unit_id
from multihop.ges.graph import ConnectivityGraph

ROOT = Path(__file__).resolve().parent.parent


def context_size(sim: ges.Simulator, a: str, b: str) -> int:
    """Brokers in the level-(l+1) context of a level-l gateway between a and b."""
    lvl = ges.gateway_level(a, b)
    ctx = Address(a).unit_id(lvl + 1)
    levels = sim.levels
    return sum(1 for code in sim.brokers if unit_id(code, lvl + 1, levels) == ctx)


def graph_memory(sim: ges.Simulator, addr: str) -> tuple[int, int, int]:
    """Bytes allocated to build one broker's graph and full routing cache; its nodes and edges."""
    core = sim.broker(addr)
    gc.collect()
    tracemalloc.start()
    g = ConnectivityGraph(core.code, core.levels, core.costs, core.gpp.table.values())
    g.cache.table()
    cur, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return cur, len(g.node_level), len(g.edge_map)


def simulated(n: int, seed: int) -> None:
    topo = ges.random_topology(n, seed)
    B, L = len(topo.brokers), len(topo.gateways)
    t0 = time.perf_counter()
    sim = ges.Simulator(topo, seed=seed)
    msgs = sim.run_until_quiet()
    t_start = time.perf_counter() - t0
    recs = sim.records_sent
    flat = 2 * L * (2 * L - B + 1)
    print(f"\n== {B} brokers, {L} gateways (target {n}; levels 3, seed {seed}) ==")
    print(f"start-up: {msgs} messages ({recs} records) in {t_start:.2f} s wall, {sim.now * 1e3:.1f} ms virtual")
    print(f"  baseline flat flooding: {flat} record transmissions; ours/flat = {recs / flat:.3f}")
    held = sum(len(c.gpp.table) for c in sim.brokers.values())
    print(f"  records held: {held / B:.1f} per broker on average (flat: {2 * L} each)")

    rng = random.Random(seed)
    addrs = sim.addresses()
    mid = addrs[len(addrs) // 2]
    mem, nodes, edges = graph_memory(sim, mid)
    table = len(sim.broker(mid).gpp.table)
    print(
        f"  memory of one broker's graph + routing cache ({mid}): {mem / 1024:.1f} KiB "
        f"({nodes} nodes, {edges} edges; its record table holds {table} records)"
    )

    for lvl_wanted in (0, 1, 2, 3):
        gws = [g for g in topo.gateways.values() if g.level == lvl_wanted]
        if not gws:
            continue
        gw = rng.choice(gws)
        a, b = str(gw.a), str(gw.b)
        ctx = context_size(sim, a, b)
        r0, t0 = sim.records_sent, time.perf_counter()
        sim.remove_gateway(a, b)
        m_rm = sim.run_until_quiet()
        dt_rm, r_rm = time.perf_counter() - t0, sim.records_sent - r0
        r0, t0 = sim.records_sent, time.perf_counter()
        sim.add_gateway(a, b)
        m_add = sim.run_until_quiet()
        dt_add, r_add = time.perf_counter() - t0, sim.records_sent - r0
        flat1 = 2 * (2 * L - B + 1)
        print(
            f"  level-{lvl_wanted} gateway {a} - {b}, context {ctx} brokers: "
            f"lost {m_rm} msgs / {r_rm} records ({r_rm / ctx:.2f} per context broker) in {dt_rm * 1e3:.1f} ms; "
            f"added {m_add} msgs / {r_add} records ({r_add / ctx:.2f} per context broker) in {dt_add * 1e3:.1f} ms; "
            f"flat flooding ~{flat1} per change, ours/flat = {r_rm / flat1:.3f}"
        )
    if B >= 10_000 or n >= 10_000:
        verdict = "met" if t_start < 60 else "MISSED"
        print(f"  goal: converge in under 60 s -> {t_start:.1f} s, {verdict}")


def live(seed: int) -> None:
    from multihop.ges.live import LiveSystem

    os.environ.setdefault("MULTIHOP_RUNTIME_ROOT", "/tmp/multihop-bench-ges")
    topo = ges.Topology.load(ROOT / "python/multihop/ges/examples/paper_fig14.toml")
    name = f"bench-ges-{os.getpid()}"
    t0 = time.perf_counter()
    system = LiveSystem.up(topo, name, cores=[0, 1], timeout=120, seed=seed)
    try:
        dt = time.perf_counter() - t0
        sim_t0 = time.perf_counter()
        sim = ges.Simulator(topo, seed=seed)
        sim.run_until_quiet()
        sim_dt = time.perf_counter() - sim_t0
        print(f"\n== live: {len(topo.brokers)} broker processes, 2 real CPUs (runtime cores 0-1) ==")
        print(f"start and converge (every graph equal to the simulated one): {dt:.2f} s; goal < 10 s -> {'met' if dt < 10 else 'MISSED'}")
        print(f"  baseline: the same topology simulated in this process: {sim_dt * 1e3:.1f} ms; live/simulated = {dt / sim_dt:.0f}x")
        t1 = time.perf_counter()
        system.kill("1.4.1.6")
        system.wait_converged(30)
        print(f"  a broker killed: its neighbours' loss seen and every graph converged again in {(time.perf_counter() - t1) * 1e3:.0f} ms")
    finally:
        system.down()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-live", action="store_true")
    a = ap.parse_args()
    for n in (int(x) for x in a.sizes.split(",")):
        simulated(n, a.seed)
    if not a.no_live:
        live(a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
