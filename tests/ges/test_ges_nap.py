"""The node organization protocol: nodes and whole units joining, thresholds, forwarding, "everyone is full"."""

from __future__ import annotations

from pathlib import Path

import pytest

from ges_model import Model
from multihop import ges

FIG5 = Path(ges.__file__).parent / "examples" / "paper_fig5.toml"


def system(thresholds: tuple[int, ...]) -> ges.Simulator:
    topo = ges.Topology.load(FIG5)
    topo.thresholds = thresholds
    sim = ges.Simulator(topo, seed=4)
    sim.run_until_quiet()
    return sim


def test_a_member_below_its_threshold_takes_the_node() -> None:
    sim = system((8, 4))
    new = sim.join_node("1.1.3.6")
    assert new == "1.1.3.0"  # the lowest node id free in cluster c
    assert ("1.1.3.0", "1.1.3.6") in {(str(g.a), str(g.b)) for g in sim.topology.gateways.values()}
    sim.run_until_quiet()
    assert "1.1.3.0" in sim.graph("1.1.3.4").rows()[0]
    assert sim.graph(new).cost("2") == 5.0  # the newcomer routes like its cluster


def test_a_full_member_forwards_inside_the_cluster() -> None:
    sim = system((3, 4))  # node 6 has 2 level-0 links: it takes one newcomer, then forwards
    taken = [sim.join_node("1.1.3.6") for _ in range(3)]
    assert taken == ["1.1.3.0", "1.1.3.1", "1.1.3.2"]
    accepted = {str(c.address): c.nap.accepted for c in sim.brokers.values() if c.nap.accepted}
    # node 6 took the first; the nearest member below its threshold (the first newcomer) the next two
    assert accepted == {"1.1.3.6": 1, "1.1.3.0": 2}
    assert sim.brokers[ges.Address("1.1.3.6").code].nap.forwarded == 2
    assert all(
        len([g for g in sim.topology.gateways.values() if a in (str(g.a), str(g.b)) and g.level == 0]) <= 3
        for a in sim.addresses()
        if a.startswith("1.1.3.")
    )


def test_when_every_member_is_full_the_newcomer_goes_through_a_level1_gatekeeper() -> None:
    sim = system((2, 4))  # every node of cluster c already has 2 level-0 links
    new = sim.join_node("1.1.3.6")
    assert new.startswith("1.1.1.")  # node 4, c's level-1 gatekeeper, passed it into cluster a
    sim.run_until_quiet()
    assert ges.gateway_level(new, "1.1.1.3") == 0


def test_refused_when_there_is_nowhere_to_go() -> None:
    topo = ges.Topology(levels=3)
    topo.add_broker("1.1.1.1")
    topo.add_broker("1.1.1.2")
    topo.add_gateway("1.1.1.1", "1.1.1.2")
    topo.thresholds = (1,)
    sim = ges.Simulator(topo)
    sim.run_until_quiet()
    with pytest.raises(ges.GesStateError, match="no member took the new node"):
        sim.join_node("1.1.1.1")
    assert len(sim.brokers) == 2  # nothing else changed


def test_adding_a_unit_renames_its_prefix_keeps_inner_addresses_and_exchanges_connections() -> None:
    sim = system((8, 4))
    unit = ges.Topology(levels=3)
    for a in ("9.5.1.1", "9.5.1.2", "9.5.2.7"):
        unit.add_broker(a)
    unit.add_gateway("9.5.1.1", "9.5.1.2")
    unit.add_gateway("9.5.1.2", "9.5.2.7")
    prefix = sim.add_unit(unit, via="9.5.1.1", into="2.1.1.3")
    assert prefix == "2.0"  # the lowest super-cluster id free in SSC-B
    sim.run_until_quiet()
    assert {"2.0.1.1", "2.0.1.2", "2.0.2.7"} <= set(sim.addresses())
    # the unit learnt the system's level-2 and level-3 connections, the system learnt the unit's
    assert sim.graph("2.0.2.7").best_hop("1") == "2.0.1.2"
    assert "2.0" in sim.graph("2.1.1.2").rows()[2]
    # and every graph is what the dissemination rules give for the merged topology
    model = Model(sim.topology)
    for addr in sim.addresses():
        assert sim.graph(addr).edges() == model.graph(addr).edge_tuples(), addr
