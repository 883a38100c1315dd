"""NAP on live brokers: a new broker process asks a member for an address over a channel of its own,
the member (or the one it forwards to, or a neighbouring cluster's through a level-1 gatekeeper)
assigns one, the new broker starts with it and its gateway comes up; the live graphs then equal the
shadow simulator's, which ran the same join and had to assign the same address."""

from __future__ import annotations

from typing import Iterator

import pytest

import multihop as mh
from multihop import ges
from multihop.ges.live import LiveSystem, wire
from multihop.ges.live.wire import KIND_JOINER
from session import unique_name


def two_clusters(thresholds: tuple[int, ...]) -> ges.Topology:
    """Cluster 1.1.1 (brokers 1 and 2) and cluster 1.1.2 (broker 1), joined by a level-1 gateway at 1.1.1.2."""
    topo = ges.Topology(levels=3)
    for a in ("1.1.1.1", "1.1.1.2", "1.1.2.1"):
        topo.add_broker(a)
    topo.add_gateway("1.1.1.1", "1.1.1.2")
    topo.add_gateway("1.1.1.2", "1.1.2.1")
    topo.thresholds = thresholds
    return topo


@pytest.fixture
def system(request: pytest.FixtureRequest) -> Iterator[LiveSystem]:
    s = LiveSystem.up(two_clusters(request.param), unique_name("gesjoin"), timeout=60)
    try:
        yield s
    finally:
        s.down()


@pytest.mark.parametrize("system", [(2, 4)], indirect=True)
def test_a_member_takes_the_node_then_forwards_when_full(system: LiveSystem) -> None:
    first = system.join_node("1.1.1.1")
    assert first == "1.1.1.0"  # 1.1.1.1 had one level-0 gateway of 2: it took the newcomer
    # now full: 1.1.1.1 forwards to the nearest member below its threshold, the first newcomer
    second = system.join_node("1.1.1.1")
    assert second == "1.1.1.3"
    system.wait_converged(30)  # every live graph equals the shadow simulation's
    assert set(system.addresses) == {"1.1.1.0", "1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.2.1"}
    links = {a: {link["peer"] for link in system.status(a)["links"]} for a in ("1.1.1.0", "1.1.1.3")}
    assert links == {"1.1.1.0": {"1.1.1.1", "1.1.1.3"}, "1.1.1.3": {"1.1.1.0"}}
    assert system.graph("1.1.1.3").best_hop("1.1.2") == "1.1.1.0"


@pytest.mark.parametrize("system", [(1, 4)], indirect=True)
def test_a_full_cluster_sends_the_newcomer_through_its_gatekeeper_then_refuses(system: LiveSystem) -> None:
    new = system.join_node("1.1.1.1")  # both members full: 1.1.1.2 passes the request into cluster 1.1.2
    assert new == "1.1.2.0"
    system.wait_converged(30)
    assert [link["peer"] for link in system.status(new)["links"]] == ["1.1.2.1"]
    with pytest.raises(ges.GesStateError, match="no member took the new node"):
        system.join_node("1.1.2.1")  # everyone is full and no gatekeeper is left to try
    assert len(system.addresses) == 4
    system.wait_converged(30)  # nothing else changed


@pytest.mark.parametrize("system", [(2, 4)], indirect=True)
def test_bad_joins_are_refused_and_the_brokers_keep_running(system: LiveSystem) -> None:
    with pytest.raises(ges.GesStateError, match="no broker 1.1.1.9"):
        system.join_node("1.1.1.9")
    d = system.runtime.dispatcher(system.runtime.cores[0])
    ch = d.bind(wire.service_name(system.name, "1.1.1.1"), transport="multihop", timeout=10)
    ch.send(wire.stub.encode("hello", kind=KIND_JOINER, address=0, incarnation=0, cost=0, system=system.name))
    ch.send(wire.stub.encode("shutdown"))  # a joiner may only ask to join
    with pytest.raises(mh.ChannelClosed):
        ch.recv(timeout=10)
    me, entry = 1 << 63, ges.Address("1.1.1.1")  # a newcomer's id as it travels (-2**63)
    bad_requests = [
        dict(level=2, unit=0, target=entry.code),  # a unit's join: not live
        dict(level=0, unit=entry.unit_id(1), target=ges.Address("7.7.7.7").code),  # a member nobody knows
        dict(level=0, unit=entry.unit_id(1), target=entry.code, path=[me, entry.code]),  # a path it did not start
    ]
    for bad in bad_requests:
        ch = d.bind(wire.service_name(system.name, "1.1.1.1"), transport="multihop", timeout=10)
        ch.send(wire.stub.encode("hello", kind=KIND_JOINER, address=0, incarnation=0, cost=0, system=system.name))
        ch.send(wire.stub.encode("join_request", request=1, **{"path": [me], "tried": [], **bad}))
        with pytest.raises(mh.ChannelClosed):
            ch.recv(timeout=10)
    assert system.status("1.1.1.1")["counters"]["refused"] >= 1 + len(bad_requests)
    assert system.join_node("1.1.1.1") == "1.1.1.0"  # and it still takes newcomers
    system.wait_converged(30)
