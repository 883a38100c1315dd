"""The worked examples of the GES papers, on topology files reconstructed from their text.

The figures are not in the text; ``examples/paper_fig3.toml`` and
``examples/paper_fig5.toml`` say, line by line, how each was read.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from multihop import ges

EXAMPLES = Path(ges.__file__).parent / "examples"
NODE6 = "1.1.3.6"  # SSC-A.SC-1.c.6
NODE99 = "1.4.1.59"  # node "99" of SC-4 (99 is beyond the block limit)
SSC_B, SSC_D, SC_3, CLUSTER_A, CLUSTER_B = "2", "4", "1.3", "1.1.1", "1.1.2"


@pytest.fixture(scope="module")
def fig5() -> ges.Topology:
    return ges.Topology.load(EXAMPLES / "paper_fig5.toml")


def converged(topo: ges.Topology, seed: int = 0) -> ges.Simulator:
    sim = ges.Simulator(topo, seed=seed)
    sim.run_until_quiet()
    return sim


def test_figure3_gatekeeper_counts() -> None:
    """78 nodes; 12 super-super-cluster gatekeepers; 18 super-cluster gatekeepers (6, 4, 6, 2); 4 cluster gatekeepers in SC-1."""
    topo = ges.Topology.load(EXAMPLES / "paper_fig3.toml")
    sim = converged(topo)
    gk = sim.gatekeepers()
    assert len(sim.brokers) == 78
    assert len({a.unit(2) for a in topo.brokers}) == 11 and len({a.unit(1) for a in topo.brokers}) == 26
    assert len(gk[3]) == 12
    assert len(gk[2]) == 18
    assert {s: sum(1 for a in gk[2] if a.startswith(f"{s}.")) for s in "1234"} == {"1": 6, "2": 4, "3": 6, "4": 2}
    assert sum(1 for a in gk[1] if a.startswith("1.1.")) == 4
    assert gk == topo.gatekeepers()  # the brokers' own view agrees with the file


def test_figure6_graph_at_node6(fig5: ges.Topology) -> None:
    g = converged(fig5).graph(NODE6)
    assert g.rows() == {0: ["1.1.3.4", "1.1.3.5", "1.1.3.6"], 1: ["1.1.1", "1.1.2"], 2: ["1.2", "1.3", "1.4"], 3: ["2", "3", "4"]}
    # "The set L_UL at the node SC-3 comprises of node SC-2 at level-2 and node b at level-1; L_D at SC-3 comprises SSC-B"
    assert g.l_ul(SC_3) == {"1.2", CLUSTER_B} and g.l_d(SC_3) == {SSC_B}
    edges = {(a, b): (lvl, w, n) for a, b, lvl, w, n in g.edges()}
    assert edges[(CLUSTER_B, SC_3)] == (2, 3.0, 1)  # "the cost of traversal between b and SC-3 ... is 3"
    assert edges[(SSC_B, SSC_D)] == (3, 6.0, 2)  # "two connections between SSC-B and SSC-D": link count 2
    assert edges[("1.1.3.5", "1.2")] == (2, 2.0, 1)  # "disseminated as one between node 5 and SC-2"


def test_shortest_path_example_costs_4_5_6(fig5: ges.Topology) -> None:
    """From SSC-B the valid links go to a, SC-3 and SSC-D at costs 4, 5 and 6; the shortest path costs 5, via node 4."""
    g = converged(fig5).graph(NODE6)
    assert g.l_ul(SSC_B) == {CLUSTER_A, SC_3, SSC_D}
    edges = {frozenset((a, b)): w for a, b, _, w, _ in g.edges()}
    assert [edges[frozenset((SSC_B, u))] for u in (CLUSTER_A, SC_3, SSC_D)] == [4.0, 5.0, 6.0]
    assert g.cost(SSC_B) == 5.0
    assert g.best_hop(SSC_B) == "1.1.3.4"  # node 4, the cluster gateway
    assert paper_recursion(g, SSC_B) == 5.0  # the paper's recursive search with visited sets agrees


def paper_recursion(g: ges.ConnectivityGraph, unit: str) -> float:
    """Section 3.2.7 literally: recurse along L_UL links from the node, carrying the nodes visited."""
    vertex = str(g.name(g.vertex))

    def walk(node: str, visited: frozenset[str]) -> float:
        if node == vertex:
            return 0.0
        best = math.inf
        for nxt in g.l_ul(node):
            if nxt in visited:
                continue
            w = {frozenset((a, b)): w for a, b, _, w, _ in g.edges()}[frozenset((node, nxt))]
            best = min(best, w + walk(nxt, visited | {nxt}))
        return best

    return walk(unit, frozenset({unit}))


def test_every_cost_matches_the_papers_recursion(fig5: ges.Topology) -> None:
    sim = converged(fig5)
    for addr in (NODE6, NODE99, "2.1.1.2", "1.3.1.12"):
        g = sim.graph(addr)
        for row in g.rows().values():
            for unit in row:
                assert g.cost(unit) == paper_recursion(g, unit), (addr, unit)


def test_no_partition_when_everything_is_up(fig5: ges.Topology) -> None:
    sim = converged(fig5)
    for addr in sim.addresses():
        g = sim.graph(addr)
        assert g.unit_partitioned() == set() and g.system_partitioned() == set(), addr


def test_partition_loss_of_a_b(fig5: ges.Topology) -> None:
    """Loss of a-b: b is unit partitioned within SC-1, though still connected to SC-3."""
    sim = converged(fig5)
    sim.remove_gateway("1.1.1.2", "1.1.2.7")
    sim.run_until_quiet()
    g = sim.graph(NODE6)
    assert g.unit_partitioned() == {CLUSTER_B}
    assert g.system_partitioned() == set()
    assert g.l_ul(CLUSTER_B) == set() and g.l_d(CLUSTER_B) == {SC_3}
    assert math.isinf(g.cost(CLUSTER_B)) and g.best_hop(CLUSTER_B) is None


def test_partition_loss_of_sc1_sc3_only(fig5: ges.Topology) -> None:
    """Loss of the only SC-1 / SC-3 link: no unit is partitioned (SC-3 is reached through SC-2)."""
    sim = converged(fig5)
    sim.remove_gateway("1.1.2.8", "1.3.1.11")
    sim.run_until_quiet()
    g = sim.graph(NODE6)
    assert g.unit_partitioned() == set() and g.system_partitioned() == set()
    assert g.cost(SC_3) == 6.0 and g.best_hop(SC_3) == "1.1.3.5"  # 5 -> SC-2 (2) -> SC-3 (4)


def test_partition_loss_of_sc1_sc4_at_node6(fig5: ges.Topology) -> None:
    """Loss of the SC-1 / SC-4 link at node 6: node 6 and node 99 both conclude SC-4 is system partitioned."""
    sim = converged(fig5)
    assert math.isfinite(sim.graph(NODE6).cost("1.4"))
    sim.remove_gateway(NODE6, NODE99)
    sim.run_until_quiet()
    g6, g99 = sim.graph(NODE6), sim.graph(NODE99)
    assert g6.system_partitioned() == {"1.4"} == g99.system_partitioned()
    assert g6.unit_partitioned() == {"1.4"}
    assert "1.4" in g99.unit_partitioned() and math.isinf(g99.cost("1.1"))
    # the other brokers of SSC-A learnt it too
    assert sim.graph("1.3.1.12").system_partitioned() == {"1.4"}


def test_killing_a_broker_is_a_lost_gateway(fig5: ges.Topology) -> None:
    sim = converged(fig5)
    sim.kill_broker("1.1.1.1")  # cluster a's SSC gatekeeper
    sim.run_until_quiet()
    g = sim.graph(NODE6)
    assert g.l_ul(SSC_B) == {SC_3, SSC_D}  # the a - SSC-B link is gone
    assert g.best_hop(SSC_B) == "1.1.3.5"  # now through SC-2 / SC-3
    weight = {}
    for a, b, _level, w, _links in g.edges():
        weight[a, b] = weight[b, a] = w
    # the cost is the recursion over what is left, through SC-3 (cost 6, link 2 + 3), dearer than the lost 5
    assert g.cost(SSC_B) == min(g.cost(n) + weight[n, SSC_B] for n in g.l_ul(SSC_B)) == 6.0 + 5.0


def test_unit_addition_exchanges_connections_figure7(fig5: ges.Topology) -> None:
    """3.2.9: SC-4 joined through node 6 learns SSC-A's level-2 and level-3 connections, and SSC-A learns SC-4."""
    sim = converged(fig5)
    g99 = sim.graph(NODE99)
    assert g99.rows()[2] == ["1.1", "1.2", "1.3"] and g99.rows()[3] == ["2", "3", "4"]
    assert g99.best_hop("2") == "1.1.3.6" and g99.cost("1.1") == 2.0
    assert ("1.1", "2", 3, 5.0, 1) in g99.edges()  # a - SSC-B, seen from SC-4 as SC-1 - SSC-B


def test_a_level_l_change_recomputes_rows_l_to_n_only(fig5: ges.Topology) -> None:
    """3.2.8: "connectivities pertaining to units at level l, l+1, ..., N are affected": a lost level-l gateway
    recomputes the cache's rows l..N and keeps the rows below, and what it keeps equals a fresh computation."""
    from multihop.ges.routing_cache import RoutingCache

    sim = converged(fig5)
    g = sim.graph(NODE6)
    g.cache.table()
    assert g.cache.computations == g.levels + 1  # rows 0..3, once each
    for (a, b), level in ((("1.1.1.2", "1.1.2.7"), 1), (("1.1.3.5", "1.2.1.9"), 2)):
        assert ges.gateway_level(ges.Address(a), ges.Address(b)) == level
        before = g.cache.computations
        sim.remove_gateway(a, b)
        sim.run_until_quiet()
        g = sim.graph(NODE6)
        kept = g.cache.table()
        assert g.cache.computations - before == g.levels + 1 - level, (a, b)
        assert kept == RoutingCache(g).table()
