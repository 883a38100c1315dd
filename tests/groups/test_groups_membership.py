"""Membership, views and the view rule, driven through the in-memory network (sans-IO machines).

Every run records its sends and deliveries; the independent checkers judge
them: each message reaches exactly the members of the view it was sent in
(a dead member may miss some), in the group's order.  Runs are seeded
(hypothesis draws the seeds), mixing sends from several members with joins,
leaves and deaths.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multihop.errors import ProtocolError
from multihop.groups import BROADCAST, GroupError
from multihop.groups.checkers import check_causal, check_delivery, check_fifo, check_total
from multihop.groups.events import Delivered, Failed, Joined, Left, MulticastCreated, SendFailed, ViewChanged
from multihop.groups.messages import CreateGroup, Flushed, Join, Leave
from multihop.groups.service import MembershipService
from multihop.groups.simnet import SimNet
from multihop.groups.view import Endpoint
from multihop.topology import Topology

TOPO = Topology.chunked(range(8), 4)
CHECKS = {"fifo": [check_fifo], "causal": [check_fifo, check_causal], "total": [check_fifo, check_total]}


def group_of(net: SimNet, n: int, order: str = "fifo", tree: str = "numa", seed_cores: int = 0) -> list[Endpoint]:
    """A group 'g' with n members spread over the 8 cores; the net is run until quiet."""
    creator = net.add(0)
    net.do(creator, "create_group", "g", order, tree)
    net.run()
    eps = [net.add((seed_cores + 3 * i) % 8) for i in range(n)]
    for ep in eps:
        net.do(ep, "join", "g")
    net.run()
    return eps


def judge(net: SimNet, order: str) -> None:
    lost = net.dead if order == "total" else ()
    assert check_delivery(net.history, dead=net.dead, lost=lost) == []
    for check in CHECKS[order]:
        assert check(net.history) == [], check.__name__


@pytest.mark.parametrize("tree", ["flat", "radix:2", "numa"])
@pytest.mark.parametrize("order", ["fifo", "causal", "total"])
def test_six_members_every_message_once_to_every_member(order: str, tree: str) -> None:
    net = SimNet(seed=6, topology=TOPO)
    eps = group_of(net, 6, order, tree)
    nodes = [net.of_kind(ep, Joined)[0].node for ep in eps]
    assert sorted(nodes) == [1, 2, 3, 4, 5, 6]  # ids count up, in the order the joins reached the service
    views = {net.members[ep].view("g") for ep in eps}
    assert len(views) == 1 and 1 <= next(iter(views)).view_id <= 6  # joins queued meanwhile share a view
    for i in range(200):
        ep = eps[i % 3]
        net.do(ep, "send", "g", BROADCAST, f"{ep}#{i}".encode())
        for _ in range(i % 4):
            net.step()
    net.run()
    judge(net, order)
    for ep in eps:
        assert len(net.of_kind(ep, Delivered)) == 200


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.sampled_from(["fifo", "causal", "total"]), tree=st.sampled_from(["flat", "radix:3", "numa"]), seed=st.integers(0, 2**32 - 1))
def test_churn_keeps_the_view_rule_and_the_order(order: str, tree: str, seed: int) -> None:
    """Sends from several members while others join, leave and die."""
    net = SimNet(seed=seed, topology=TOPO)
    rng = random.Random(seed)
    group_of(net, 4, order, tree, seed_cores=seed % 8)
    count = 0
    for _ in range(120):
        live = [e for e in net.members if e not in net.dead and "g" in net.members[e].groups()]
        senders = [e for e in live if not net.members[e].leaving("g")]
        r = rng.random()
        if r < 0.75 and senders:
            ep = rng.choice(senders)
            view = net.members[ep].view("g")
            dest = BROADCAST if rng.random() < 0.8 else rng.choice(view.nodes)
            net.do(ep, "send", "g", dest, f"{ep}#{count}".encode())
            count += 1
        elif r < 0.83:
            net.do(net.add(rng.randrange(8)), "join", "g")
        elif r < 0.91 and len(senders) > 1:
            net.do(rng.choice(senders), "leave", "g")
        elif len(live) > 2:
            net.kill(rng.choice(live))
        for _ in range(rng.randrange(6)):
            net.step()
    net.run()
    judge(net, order)
    for ep in net.members:  # a leaver loses none of its sends: they all went out before it left
        assert not [e for e in net.of_kind(ep, SendFailed) if "left group" in e.error]
        evs = [e for e in net.events[ep] if getattr(e, "group", None) == "g"]
        left = [i for i, e in enumerate(evs) if isinstance(e, Left)]
        if left:  # the leave callback comes after every delivery of the group
            assert left == [len(evs) - 1] or all(not isinstance(e, Delivered) for e in evs[left[0] :])
    # everyone alive and still in agrees on the final view
    finals = {net.members[e].view("g") for e in net.members if e not in net.dead and "g" in net.members[e].groups()}
    assert len(finals) <= 1 and (not finals or next(iter(finals)) == net.service.view("g"))


def test_a_member_killed_mid_stream_leaves_and_what_it_wrote_still_arrives() -> None:
    net = SimNet(seed=11, topology=TOPO)
    eps = group_of(net, 6, "causal", "numa")
    victim = eps[2]
    eps_alive = [e for e in eps if e != victim]
    for i in range(300):
        sender = eps[i % 3] if i <= 150 else eps_alive[i % 2]
        net.do(sender, "send", "g", BROADCAST, f"m{i}".encode())
        if i == 150:
            net.kill(victim)
        net.step()
    with pytest.raises(ValueError, match="dead"):
        net.do(victim, "send", "g", BROADCAST, b"from the grave")
    net.run()
    judge(net, "causal")
    victim_node = net.of_kind(victim, Joined)[0].node
    for ep in eps_alive:
        last = net.of_kind(ep, ViewChanged)[-1]
        assert last.died == (victim_node,) and victim_node not in last.view.nodes
    sent_by_victim = [m for m, info in net.history.messages.items() if info.sender == victim]
    assert sent_by_victim  # it did send before dying, and every survivor delivered all of it (judge)
    assert net.service.view("g").nodes == tuple(sorted(net.of_kind(e, Joined)[0].node for e in eps_alive))


def test_total_order_survives_the_sequencer_dying() -> None:
    net = SimNet(seed=5, topology=TOPO)
    eps = group_of(net, 5, "total", "flat")
    sequencer = next(e for e in eps if net.members[e].node("g") == 1)  # the lowest node id
    assert net.members[sequencer].view("g").sequencer(BROADCAST) == 1
    survivors = [e for e in eps if e != sequencer]
    for i in range(200):
        net.do(survivors[i % 4], "send", "g", BROADCAST, f"t{i}".encode())
        if i == 80:
            net.kill(sequencer)
        net.step()
    net.run()
    judge(net, "total")
    for ep in survivors:  # every message of a live sender is delivered, once, in the same order
        assert len(net.of_kind(ep, Delivered)) == 200
    orders = {tuple(e.payload for e in net.of_kind(ep, Delivered)) for ep in survivors}
    assert len(orders) == 1
    assert net.members[survivors[0]].view("g").sequencer(BROADCAST) == 2


def test_multicast_groups_and_unicast_reach_only_their_members() -> None:
    net = SimNet(seed=2, topology=TOPO)
    eps = group_of(net, 6, "fifo", "numa")
    net.do(eps[0], "create_multicast", "g")
    net.run()
    mcast = net.of_kind(eps[0], MulticastCreated)[0].mcast
    for ep in eps[2:5]:
        net.do(ep, "join_multicast", "g", mcast)
    net.run()
    net.do(eps[0], "send", "g", mcast, b"to-mcast")  # the sender is not in the multicast group
    node5 = net.members[eps[5]].node("g")
    net.do(eps[1], "send", "g", node5, b"to-node")
    net.run()
    judge(net, "fifo")
    got = {ep: [e.payload for e in net.of_kind(ep, Delivered)] for ep in eps}
    assert got == {eps[0]: [], eps[1]: [], eps[2]: [b"to-mcast"], eps[3]: [b"to-mcast"], eps[4]: [b"to-mcast"], eps[5]: [b"to-node"]}
    net.do(eps[3], "leave_multicast", "g", mcast)
    net.do(eps[4], "leave", "g")
    net.run()
    assert net.service.view("g").multicast_members(mcast) == {net.members[eps[2]].node("g")}


def test_sends_during_a_view_change_go_out_in_the_next_view() -> None:
    net = SimNet(seed=1, topology=TOPO)
    eps = group_of(net, 3, "fifo", "flat")
    newcomer = net.add(7)
    net.do(newcomer, "join", "g")
    while not net.members[eps[0]].streams("g").closed:  # bounded: the Prepare is a few steps away
        assert net.step()
    net.do(eps[0], "send", "g", BROADCAST, b"held")
    assert not net.of_kind(eps[0], Delivered)  # held, not sent in the closing view
    net.run()
    assert [e.payload for e in net.of_kind(newcomer, Delivered)] == [b"held"]  # it went out in the new view
    assert net.history.messages[b"held"].recipients == set(eps) | {newcomer}


def test_a_queued_send_to_a_member_that_left_fails_clearly() -> None:
    net = SimNet(seed=3, topology=TOPO)
    eps = group_of(net, 3, "fifo", "flat")
    node2 = net.members[eps[2]].node("g")
    net.do(eps[2], "leave", "g")
    while not net.members[eps[0]].streams("g").closed:
        assert net.step()
    net.do(eps[0], "send", "g", node2, b"late")
    net.run()
    failed = net.of_kind(eps[0], SendFailed)
    assert len(failed) == 1 and f"node id {node2} is not a member" in failed[0].error
    assert net.of_kind(eps[2], Left)


# ---- bad input: clear errors, nothing changed --------------------------------------------


def test_bad_requests_are_refused_and_change_nothing() -> None:
    net = SimNet(seed=4, topology=TOPO)
    eps = group_of(net, 3, "fifo", "numa")
    before = net.service.groups()
    stranger = net.add(1)
    net.do(stranger, "join", "nope")
    net.run()
    assert "unknown group 'nope'" in net.of_kind(stranger, Failed)[0].error
    assert net.members[stranger].groups() == []
    with pytest.raises(GroupError, match="is already a member of group 'g'"):
        net.do(eps[0], "join", "g")
    with pytest.raises(GroupError, match="not a member of group 'g'"):
        net.do(stranger, "send", "g", BROADCAST, b"x")
    with pytest.raises(GroupError, match="not a member of group 'other'"):
        net.do(eps[0], "send", "other", BROADCAST, b"x")
    with pytest.raises(GroupError, match="node id 99 is not a member"):
        net.do(eps[0], "send", "g", 99, b"x")
    with pytest.raises(GroupError, match="no destination id"):
        net.do(eps[0], "send", "g", 0, b"x")
    with pytest.raises(GroupError, match="multicast id"):
        net.do(eps[0], "join_multicast", "g", (1 << 30) + 7)
    with pytest.raises(GroupError, match="unknown tree mode 'star'"):
        net.do(eps[0], "create_group", "h", "fifo", "star")
    with pytest.raises(GroupError, match="unknown ordering 'random'"):
        net.do(eps[0], "create_group", "h", "random", "flat")
    with pytest.raises(GroupError, match="not a member"):
        net.do(stranger, "leave", "g")
    net.run()
    assert net.service.groups() == before
    # the service refuses the same things on its own, whoever sends them
    svc = net.service
    e = eps[0]
    assert "already a member" in svc.handle(Join(900, e, "g"))[0][1].error
    assert "already exists" in svc.handle(CreateGroup(901, e, "g"))[0][1].error
    assert "unknown tree mode" in svc.handle(CreateGroup(902, e, "h", "fifo", "star"))[0][1].error
    assert "unknown ordering" in svc.handle(CreateGroup(903, e, "h", "lifo", "flat"))[0][1].error
    assert "not a member" in svc.handle(Leave(904, stranger, "g"))[0][1].error
    with pytest.raises(ProtocolError, match="unexpected Flushed"):
        svc.handle(Flushed("g", 3, 1))
    with pytest.raises(ProtocolError, match="does not take"):
        svc.handle("hello")
    assert svc.groups() == before and not svc.changing("g")
    # and the group still works
    net.do(eps[1], "send", "g", BROADCAST, b"still fine")
    net.run()
    assert all(net.of_kind(ep, Delivered)[-1].payload == b"still fine" for ep in eps)


def test_service_reports_groups_and_ids() -> None:
    svc = MembershipService()
    a, b = Endpoint(0, 1), Endpoint(1, 2)
    assert svc.handle(CreateGroup(1, a, "x", "total", "radix"))[0][1].value == 1
    assert svc.handle(CreateGroup(2, a, "y"))[0][1].value == 2
    assert svc.view("x").tree == "radix:2" and svc.view("x").order == "total"
    out = svc.handle(Join(3, b, "x"))  # the first member: nothing to flush, installed at once
    assert [type(m).__name__ for _, m in out] == ["Install", "Reply"] and out[1][1].value == 1
    with pytest.raises(GroupError, match="unknown group 'z'"):
        svc.view("z")
