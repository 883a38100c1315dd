"""The live group API in one process (three dispatchers on three cores, real monitors): multicast
groups, convergecast, callbacks, and bad input (clear errors, the runtime unchanged)."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Iterator

import pytest

import multihop as mh
from multihop import groups
from multihop.groups import BROADCAST, GroupError
from multihop.groups.gsd import SERVICE
from session import unique_name


@pytest.fixture
def rt3() -> Iterator[mh.Runtime]:
    runtime = mh.Runtime.start(unique_name("ga"), cores=[0, 1, 2])
    try:
        yield runtime
    finally:
        runtime.stop()


def group_data(rt: mh.Runtime) -> list[dict[str, int]]:
    return [m["data"] for m in rt.status()["monitors"]]


def test_multicast_groups_convergecast_and_callbacks(rt3: mh.Runtime) -> None:
    groups.group(rt3, "m", order="causal", tree="radix:2")
    seen: list[tuple[str, int]] = []
    with rt3.dispatcher(0) as d0, rt3.dispatcher(1) as d1, rt3.dispatcher(2) as d2:
        g0 = d0.join("m", on_join=lambda n, v: seen.append(("join", n)), on_leave=lambda n, v: seen.append(("leave", n)))
        g1 = d1.join("m", reply=lambda dl: b"r1:" + dl.payload)
        g2 = d2.join("m")
        assert (g0.node, g1.node, g2.node) == (1, 2, 3)
        mc = g1.create_multicast()
        g1.join_multicast(mc)
        g2.join_multicast(mc)
        assert g2.view.multicast_members(mc) == frozenset({2, 3})
        g0.send(mc, b"to-mc")  # the sender need not be in it
        g0.send(g1.node, b"to-1")
        for g in (g1, g2):
            dl = g.recv(timeout=10)
            assert (dl.payload, dl.dest, dl.sender) == (b"to-mc", mc, 1)
        assert g1.recv(timeout=10).payload == b"to-1"
        with pytest.raises(mh.Timeout):
            g0.recv(timeout=0.2)  # node 1 is in neither destination
        part = g0.convergecast(b"ping", timeout=10)
        assert part.replies == {1: b"", 2: b"r1:ping", 3: b""} and part.missing == frozenset()
        g2.leave_multicast(mc)
        g2.leave()
        assert g0.recv(timeout=10).request != 0  # its own convergecast request, delivered in order
        g0.send(BROADCAST, b"after")
        assert g1.recv(timeout=10).request != 0 and g1.recv(timeout=10).payload == b"after"
        g0.sync()  # g2's leave is installed at g0 too (its callbacks ran)
        assert ("join", 3) in seen and ("leave", 3) in seen
        assert g0.view.nodes == (1, 2) and g0.view.multicast_members(mc) == frozenset({2})
    assert all(d["group_dropped"] == 0 and d["group_malformed"] == 0 for d in group_data(rt3))


def test_bad_input_gets_clear_errors_and_changes_nothing(rt3: mh.Runtime) -> None:
    with pytest.raises(GroupError, match="unknown tree mode|tree"):
        groups.group(rt3, "x", tree="spiral")
    with pytest.raises(GroupError, match="unknown ordering 'sorted'"):
        groups.group(rt3, "x", order="sorted")
    with pytest.raises(GroupError, match="window"):
        groups.group(rt3, "x", window=0)
    with pytest.raises(GroupError, match="unknown group 'x'"):
        groups.group(rt3, "x", create=False)
    groups.group(rt3, "g", order="fifo", tree="flat")
    with pytest.raises(GroupError, match="exists with order 'fifo'"):
        groups.group(rt3, "g", order="causal", tree="flat")
    with rt3.dispatcher(0) as d0, rt3.dispatcher(1) as d1:
        with pytest.raises(GroupError, match="unknown group 'nope'"):
            d0.join("nope")
        # the service answers an info request whose group is not a string with an error naming it
        ch = d1.bind(SERVICE, timeout=10)
        ch.send(json.dumps({"op": "info", "req": 7, "group": 5}).encode(), timeout=10)
        reply = json.loads(ch.recv(timeout=10))
        ch.close()
        assert reply == {"op": "info_reply", "req": 7, "group": 5, "error": "an info request names its group as a string, got 5"}
        g0 = d0.join("g")
        with pytest.raises(GroupError, match="already a member"):
            d0.join("g")
        with pytest.raises(GroupError, match="not a member of group 'g'"):
            d1.leave("g")
        with pytest.raises(GroupError, match="node id 9"):
            g0.send(9, b"x")
        with pytest.raises(GroupError, match="bytes"):
            g0.send(BROADCAST, "text")  # type: ignore[arg-type]
        g1 = d1.join("g")
        groups.group(rt3, "t", order="total")
        t0, t1 = d0.join("t"), d1.join("t")
        mc = t1.create_multicast()
        t1.join_multicast(mc)
        with pytest.raises(GroupError, match="must be among the recipients"):
            t0.send(mc, b"x")
        t1.send(mc, b"in")
        assert t1.recv(timeout=10).payload == b"in"
        g1.leave()
        with pytest.raises(GroupError, match="not a member of group 'g'"):
            g1.send(BROADCAST, b"x")
        with pytest.raises(GroupError, match="not a member of group 'g'"):
            g1.recv(timeout=0)
        # Nothing changed: the group works, the monitors are up, nothing was dropped.
        g0.send(BROADCAST, b"still")
        assert g0.recv(timeout=10).payload == b"still"
        assert g0.view.nodes == (1,)
    assert rt3.alive
    assert all(d["group_dropped"] == 0 and d["group_malformed"] == 0 for d in group_data(rt3))


def test_a_dispatcher_detached_without_leaving_drops_out_and_the_group_goes_on(rt3: mh.Runtime) -> None:
    groups.group(rt3, "d", order="total")
    with rt3.dispatcher(0) as d0:
        a = d0.join("d")
        with rt3.dispatcher(1) as d1:
            b = d1.join("d")
            a.sync()  # a installs the view with b on its own time
            assert a.view.nodes == (a.node, b.node)
        # d1 is gone (its channel to the group service rode its link): the others get a view without it.
        deadline = time.monotonic() + 30
        while b.node in a.view.nodes:
            assert time.monotonic() < deadline, "the detached member is still in the view"
            a.try_recv()
        with rt3.dispatcher(2) as d2:
            c = d2.join("d", timeout=30)  # a view change needs every member's answer: it completes
            c.send(BROADCAST, b"on")
            assert a.recv(timeout=10).payload == b"on" and c.recv(timeout=10).payload == b"on"


def test_the_service_survives_a_process_that_reattaches_on_the_same_core(rt3: mh.Runtime) -> None:
    for i in range(3):  # each round: a new dispatcher of this process on core 0, the old one gone
        groups.group(rt3, f"r{i}")
        with rt3.dispatcher(0) as d0, rt3.dispatcher(1) as d1:
            a, b = d0.join(f"r{i}"), d1.join(f"r{i}")
            a.sync()
            part = a.convergecast(b"x", timeout=10, unicast=True)
            assert set(part.replies) == {a.node, b.node}
    pid = int((rt3.dir / "gsd.pid").read_text())
    os.kill(pid, 0)  # still running
    assert "failed" not in (rt3.dir / "gsd.log").read_text()


def test_without_the_service_installed_views_keep_working_and_membership_calls_say_why(rt3: mh.Runtime) -> None:
    groups.group(rt3, "s", order="fifo")
    with rt3.dispatcher(0) as d0, rt3.dispatcher(1) as d1, rt3.dispatcher(2) as d2:
        a, b = d0.join("s"), d1.join("s")
        a.sync()
        pid = int((rt3.dir / "gsd.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not (a._ep.service_gone and b._ep.service_gone):  # each endpoint sees its channel close
            assert time.monotonic() < deadline, "the endpoints did not see the service go"
            a.try_recv()
            b.try_recv()
        for i in range(50):  # data of the installed view still flows through the monitors
            a.send(a.broadcast, b"%d" % i)
        assert [b.recv(timeout=10).payload for _ in range(50)] == [b"%d" % i for i in range(50)]
        for call in (lambda: b.leave(), lambda: a.create_multicast(), lambda: d2.join("s", timeout=10)):
            with pytest.raises(mh.MonitorError, match="group service .*is gone"):
                call()
        assert a.view.nodes == (a.node, b.node)


def test_a_dead_monitor_closes_the_groups_on_its_core_and_nothing_hangs(rt3: mh.Runtime) -> None:
    groups.group(rt3, "far", order="fifo", tree="flat")  # members on cores 1 and 2
    groups.group(rt3, "near", order="fifo", tree="flat")  # members on cores 0 and 1 only
    with rt3.dispatcher(0) as d0, rt3.dispatcher(1) as d1, rt3.dispatcher(2) as d2:
        a, _ = d1.join("far"), d2.join("far")
        n0, n1 = d0.join("near"), d1.join("near")
        a.sync()
        n0.sync()
        os.kill(rt3.monitor_pids[2], signal.SIGKILL)
        deadline = time.monotonic() + 30
        with pytest.raises(mh.ChannelClosed, match="group 'far' is closed: the monitor of core 2 died"):
            while time.monotonic() < deadline:  # a's next calls: each returns or raises, none hangs
                a.send(a.broadcast, b"x", timeout=5)
                a.recv(timeout=0.2)
        with pytest.raises(mh.ChannelClosed, match="monitor of core 2"):
            a.convergecast(b"", timeout=5)
        n0.send(n0.broadcast, b"still")  # a group away from core 2 goes on
        assert n1.recv(timeout=10).payload == b"still"
