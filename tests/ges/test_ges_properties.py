"""Property tests of the gateway propagation protocol on random hierarchies (hypothesis).

Every broker's graph, partition sets and routing cache are compared with an
independent brute-force model (``tests/ges_model.py``) after start-up and
after every random change (gateway added, gateway lost, broker killed); the
routing cache, kept across changes with its per-level invalidation, must also
equal a fresh computation; and the simulator must be deterministic.
"""

from __future__ import annotations

import math
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ges_model import Model, name
from multihop import ges
from multihop.ges.graph import ConnectivityGraph
from multihop.ges.routing_cache import RoutingCache

OPS = st.lists(st.tuples(st.sampled_from(["add", "remove", "kill"]), st.integers(0, 2**31)), max_size=4)


def cache_table(g: ConnectivityGraph) -> dict[str, tuple[float, str | None]]:
    return {g.name(u): (c, None if h is None else g.name(h)) for u, (c, h) in g.cache.table().items()}


def compare(sim: ges.Simulator, model: Model) -> None:
    assert sorted(sim.addresses()) == sorted(name(b) for b in model.brokers)
    for addr in sim.addresses():
        g = sim.graph(addr)
        mg = model.graph(addr)
        assert g.edges() == mg.edge_tuples(), addr
        rows = {lvl: sorted(name(u) for u, lv in mg.level.items() if lv == lvl) for lvl in range(model.n + 1)}
        assert g.rows() == rows, addr
        for lvl_nodes in rows.values():
            for u in lvl_nodes:
                p = tuple(int(x) for x in u.split("."))
                assert g.l_ul(u) == {name(x) for x in mg.l_ul(p)}, (addr, u)
                assert g.l_d(u) == {name(x) for x in mg.l_d(p)}, (addr, u)
        assert {g.name(u) for u in g.own} == {name(u) for u in mg.own}, addr
        assert g.unit_partitioned() == mg.unit_partitioned(), addr
        assert g.system_partitioned() == mg.system_partitioned(), addr
        expect = {name(u): (c, None if h is None else name(h)) for u, (c, h) in mg.paths().items()}
        assert cache_table(g) == expect, addr
        # the cache kept across changes equals one computed from scratch
        fresh = ConnectivityGraph(g.vertex, g.levels, g.costs, sim.broker(addr).gpp.table.values())
        fresh._cache = RoutingCache(fresh)
        assert cache_table(fresh) == expect, addr
        for row in rows.values():
            for u in row:
                c = g.cost(u)
                assert c == expect[u][0] if u in expect else math.isinf(c)


def apply(sim: ges.Simulator, model: Model, op: str, r: int) -> None:
    rng = random.Random(r)
    addrs = sim.addresses()
    gws = sorted((str(g.a), str(g.b)) for g in sim.topology.gateways.values())
    if op == "add":
        for _ in range(20):
            a, b = rng.sample(addrs, 2) if len(addrs) > 1 else (addrs[0], addrs[0])
            if a != b and (min(a, b), max(a, b)) not in gws and (a, b) not in gws and (b, a) not in gws:
                sim.add_gateway(a, b)
                model.add(a, b)
                return
    elif op == "remove" and gws:
        a, b = rng.choice(gws)
        sim.remove_gateway(a, b)
        model.remove(a, b)
    elif op == "kill" and len(addrs) > 2:
        a = rng.choice(addrs)
        sim.kill_broker(a)
        model.kill(a)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), size=st.integers(2, 70), levels=st.sampled_from([1, 2, 3]), ops=OPS)
def test_graphs_and_caches_match_the_brute_force_model(seed: int, size: int, levels: int, ops: list[tuple[str, int]]) -> None:
    topo = ges.random_topology(size, seed, levels=levels)
    sim = ges.Simulator(topo, seed=seed)
    sim.run_until_quiet()
    model = Model(topo)
    compare(sim, model)
    for op, r in ops:
        apply(sim, model, op, r)
        sim.run_until_quiet()
        compare(sim, model)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), size=st.integers(5, 40), ops=OPS)
def test_lossy_links_converge_to_the_same_graphs(seed: int, size: int, ops: list[tuple[str, int]]) -> None:
    """With 20 % of the messages dropped (and retransmitted by the link layer) every graph still matches the model."""
    topo = ges.random_topology(size, seed)
    sim = ges.Simulator(topo, seed=seed, loss=0.2)
    sim.run_until_quiet()
    assert sim.dropped > 0
    model = Model(topo)
    compare(sim, model)
    for op, r in ops:
        apply(sim, model, op, r)
        sim.run_until_quiet()
        compare(sim, model)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31), ops=OPS)
def test_the_simulator_is_deterministic(seed: int, ops: list[tuple[str, int]]) -> None:
    topo = ges.random_topology(60, seed)
    runs = []
    for _ in range(2):
        sim = ges.Simulator(topo, seed=seed, loss=0.05)
        counts = [sim.run_until_quiet()]
        model = Model(topo)
        for op, r in ops:
            apply(sim, model, op, r)
            counts.append(sim.run_until_quiet())
        runs.append((sim.digest, counts, {a: sim.graph(a).edges() for a in sim.addresses()}))
    assert runs[0] == runs[1]
    other = ges.Simulator(topo, seed=seed + 1, loss=0.05)
    other.run_until_quiet()
    assert other.digest != runs[0][0] or not ops  # another seed draws other delays: another trace


def test_a_run_time_cost_change_moves_the_route() -> None:
    topo = ges.Topology.load(__import__("pathlib").Path(ges.__file__).parent / "examples" / "paper_fig5.toml")
    sim = ges.Simulator(topo, seed=3)
    sim.run_until_quiet()
    g = sim.graph("1.1.3.6")
    assert g.cost("2") == 5.0 and g.best_hop("2") == "1.1.3.4"
    sim.set_cost("1.1.1.1", "2.1.1.1", 10)  # the a - SSC-B gateway is overloaded
    sim.run_until_quiet()
    g = sim.graph("1.1.3.6")
    assert ("1.1.1", "2", 3, 14.0, 1) in g.edges()
    assert g.cost("2") == 11.0 and g.best_hop("2") == "1.1.3.5"  # through SC-2 and SC-3 now
    sim.set_cost("1.1.1.1", "2.1.1.1", 0)
    sim.run_until_quiet()
    assert sim.graph("1.1.3.6").cost("2") == 5.0
