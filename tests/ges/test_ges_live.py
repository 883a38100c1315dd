"""Live GES brokers: broker processes on a runtime, gateways as multi-hop channels.

One system (the paper's figure-5 topology, 21 broker processes on two cores)
serves the whole module; the tests that change it run last.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

import multihop as mh
from multihop import ges
from multihop.ges.live import LiveSystem, wire
from multihop.ges.live.system import signature
from session import unique_name

FIG5 = Path(ges.__file__).parent / "examples" / "paper_fig5.toml"


@pytest.fixture(scope="module")
def live() -> Iterator[LiveSystem]:
    system = LiveSystem.up(ges.Topology.load(FIG5), unique_name("ges"), timeout=90)
    try:
        yield system
    finally:
        system.down()


def test_live_graphs_equal_the_simulated_ones(live: LiveSystem) -> None:
    sim = ges.Simulator(ges.Topology.load(FIG5), seed=7)  # another seed than the shadow's: timing must not matter
    sim.run_until_quiet()
    assert live.addresses == sim.addresses()
    for a in live.addresses:
        assert signature(live.graph(a)) == signature(sim.graph(a)), a
    g = live.graph("1.1.3.6")
    assert g.cost("2") == 5.0 and g.best_hop("2") == "1.1.3.4"
    st = live.status("1.1.3.6")
    assert st["gatekeeper_levels"] == [0, 2]
    assert sorted(link["peer"] for link in st["links"]) == ["1.1.3.4", "1.1.3.5", "1.4.1.59"]
    assert st["routing_cache"]["2"] == [5.0, "1.1.3.4"]
    assert len({live.pid(a) for a in live.addresses}) == 21  # one process per broker


def test_bad_input_is_refused_and_brokers_keep_running(live: LiveSystem) -> None:
    target = "1.1.3.6"
    before = live.status(target)["counters"]["refused"]
    d = live.runtime.dispatcher(live.runtime.cores[0])
    name = wire.service_name(live.config["system"], target)
    try:
        cases = [
            b"\x00",  # not a Flounder message at all
            wire.stub.encode(
                "hello", kind=1, address=ges.Address("1.1.1.1").code, incarnation=0, cost=0, system=live.config["system"]
            ),  # a gateway nobody announced
            wire.stub.encode("hello", kind=3, address=0, incarnation=0, cost=0, system="another-system"),
            wire.stub.encode("hello", kind=9, address=0, incarnation=0, cost=0, system=live.config["system"]),
        ]
        for data in cases:
            ch = d.bind(name, transport="multihop", timeout=10)
            ch.send(data, timeout=5)
            with pytest.raises(mh.ChannelClosed):  # the broker closes the channel; it does not crash
                for _ in range(100):
                    ch.recv(timeout=5)
            ch.close()
    finally:
        d.detach()
    with pytest.raises(ValueError, match="not a broker of this system"):
        live.control(target).gateway("1.1.1.9", 1)
    with pytest.raises(ValueError, match="no gateway to 1.1.1.1"):
        live.control(target).gateway("1.1.1.1", 0)
    assert live.status(target)["counters"]["refused"] >= before + 3
    assert live.differences() == []  # every graph is as it was


def test_gateway_changes_live_match_the_simulator(live: LiveSystem) -> None:
    live.remove_gateway("1.1.1.2", "1.1.2.7")  # loss of a-b
    live.wait_converged(30)
    assert live.graph("1.1.3.6").unit_partitioned() == {"1.1.2"}
    live.add_gateway("1.1.1.2", "1.1.2.7")  # back, as a new incarnation
    live.wait_converged(30)
    assert live.graph("1.1.3.6").unit_partitioned() == set()
    live.set_cost("1.1.1.1", "2.1.1.1", 10)
    live.wait_converged(30)
    assert live.graph("1.1.3.6").best_hop("2") == "1.1.3.5"
    live.set_cost("1.1.1.1", "2.1.1.1", 0)
    live.wait_converged(30)


def test_killing_a_live_broker_is_seen_as_a_lost_gateway(live: LiveSystem) -> None:
    neighbours = ["1.1.1.2", "2.1.1.1"]
    live.kill("1.1.1.1")
    live.wait_converged(30)
    for n in neighbours:
        st = live.status(n)
        assert "1.1.1.1" not in [link["peer"] for link in st["links"]]
        assert st["counters"]["closed"] >= 1
    g = live.graph("1.1.3.6")
    assert g.l_ul("2") == {"1.3", "4"} and g.best_hop("2") == "1.1.3.5"
