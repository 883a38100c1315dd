"""Convergecast aggregated by the monitors, live (docs/groups.md §8): six members on six cores, real monitors.

The replies go up the request's tree: each monitor merges its members' replies and its child monitors'
reports and sends its parent one report; the root monitor sends the requester the result. The monitors'
``group_ccast_*`` counters show who received what; deaths and timeouts name the missing and free the state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import os
import signal
import threading
import time
from typing import Any, Iterator

import pytest

import multihop as mh
from group_procs import replier, reply_bytes, wait_view
from multihop import groups
from multihop.groups import BROADCAST, GroupError
from multihop.groups.endpoint import ConvergecastTimeout
from multihop.groups.gsd import view_entries
from procs import child
from session import unique_name
from test_groups_live import collect

CTX = mp.get_context("spawn")
SIZE = 1024


def counters(rt: mh.Runtime) -> dict[int, dict[str, int]]:
    """Each monitor's convergecast counters, by core."""
    out = {}
    for core, m in zip(rt.cores, rt.status()["monitors"], strict=True):
        out[core] = {k[len("group_ccast_") :]: int(v) for k, v in m["data"].items() if k.startswith("group_ccast_")}
    return out


def wait_for(what: str, cond: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.005)


@contextlib.contextmanager
def six_members(rt: mh.Runtime, tree: str) -> Iterator[tuple[Any, dict[int, int], dict[int, Any]]]:
    """A group of six (this process on core 0, a :func:`replier` on each of cores 1-5): (group, node by core, procs)."""
    groups.group(rt, "cc", order="fifo", tree=tree)
    q, finish = CTX.Queue(), CTX.Event()
    with contextlib.ExitStack() as stack:
        stack.callback(finish.set)
        procs = {c: stack.enter_context(child(replier, rt.name, c, "cc", q, finish, SIZE)) for c in range(1, 6)}
        d = stack.enter_context(rt.dispatcher(0))
        g = d.join("cc", reply=lambda dl: reply_bytes(g.node, SIZE), timeout=60)
        nodes = {j[1]: j[2] for j in collect(q, "joined", 5, 90)}
        nodes[0] = g.node
        wait_view(g, 6)
        yield g, nodes, procs


@pytest.mark.parametrize("tree", ["numa", "radix:2"])
def test_replies_are_merged_per_monitor_and_the_root_gets_one_report_per_child(rt6: mh.Runtime, tree: str) -> None:
    with six_members(rt6, tree) as (g, nodes, _):
        root = [e for e in view_entries(g.view, rt6.topology, rt6.routing_table)[0] if e["dest"] == BROADCAST and e["root_core"] == 0]
        children = root[0]["children"]
        on_tree = [
            c
            for c, es in view_entries(g.view, rt6.topology, rt6.routing_table).items()
            if any(e["dest"] == BROADCAST and e["root_core"] == 0 for e in es)
        ]
        assert 1 <= len(children) < 5, f"a {tree} tree over 6 cores: the root has fewer children than remote members"
        before = counters(rt6)
        for round_ in range(1, 4):
            part = g.convergecast(b"q", timeout=30)
            assert set(part.replies) == set(nodes.values()) and part.missing == frozenset()
            for node in nodes.values():
                assert part.replies[node] == reply_bytes(node, SIZE), f"node {node}'s 1 KiB reply arrived intact"
            after = counters(rt6)
            delta = {c: {k: after[c][k] - before[c][k] for k in after[c]} for c in rt6.cores}
            assert delta[0]["reports_in"] == round_ * len(children), f"root took one report per child monitor {children}: {delta[0]}"
            assert delta[0]["replies_in"] == round_, "and one member reply: its own"
            assert delta[0]["results"] == round_
            assert sum(d["replies_in"] for d in delta.values()) == round_ * 6, "each member's reply was taken by its own monitor"
            assert sum(d["reports_up"] for d in delta.values()) == round_ * (len(on_tree) - 1), "one report up per non-root monitor"
            assert all(after[c]["pending"] == 0 for c in rt6.cores), "every monitor freed the request's state"
            assert all(d["refused"] == 0 and d["late"] == 0 and d["expired"] == 0 for d in delta.values()), delta
        # The baselines answer directly (the flat unicast, and the tree without aggregation): the monitors merge nothing.
        for baseline in ({"unicast": True}, {"aggregate": False}):
            part = g.convergecast(b"u", timeout=30, **baseline)
            assert set(part.replies) == set(nodes.values()) and part.replies[nodes[4]] == reply_bytes(nodes[4], SIZE)
        assert sum(counters(rt6)[c]["started"] for c in rt6.cores) == sum(after[c]["started"] for c in rt6.cores)


def test_a_member_killed_while_a_convergecast_is_pending_is_named_missing(rt6: mh.Runtime) -> None:
    with six_members(rt6, "numa") as (g, nodes, procs):
        victim = procs[4]  # below core 3, the other socket's leader
        os.kill(victim.pid, signal.SIGSTOP)

        def kill_when_pending() -> None:
            wait_for("the request at the victim's monitor", lambda: counters(rt6)[4]["pending"] == 1)
            victim.kill()

        killer = threading.Thread(target=kill_when_pending)
        killer.start()
        try:
            part = g.convergecast(b"q", timeout=30)
        finally:
            killer.join(30)
        assert part.missing == frozenset({nodes[4]})
        assert set(part.replies) == set(nodes.values()) - {nodes[4]}
        assert all(part.replies[n] == reply_bytes(n, SIZE) for n in part.replies)
        wait_for("every monitor's state freed", lambda: all(c["pending"] == 0 for c in counters(rt6).values()))
        # The next request does not wait for the dead member (gone from the view, or known absent by its monitor).
        part = g.convergecast(b"again", timeout=30)
        assert set(part.replies) == set(nodes.values()) - {nodes[4]} and part.missing <= frozenset({nodes[4]})


def test_a_stopped_member_times_out_with_the_survivors_replies_and_the_state_is_freed(rt6: mh.Runtime) -> None:
    with six_members(rt6, "numa") as (g, nodes, procs):
        stopped = procs[5]
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with pytest.raises(ConvergecastTimeout) as e:
                g.convergecast(b"q", timeout=4.0)
            assert 2.0 <= time.monotonic() - t0 < 10
            part = e.value.partial
            assert part.missing == frozenset({nodes[5]}), "the monitors stopped waiting just before the timeout"
            assert set(part.replies) == set(nodes.values()) - {nodes[5]}
            st = counters(rt6)
            assert all(c["pending"] == 0 for c in st.values()), st
            assert st[5]["expired"] == 1
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        # Resumed, the member answers: its monitor has no state for that request any more and says so.
        wait_for("the late reply counted", lambda: counters(rt6)[5]["late"] == 1)
        assert all(c["pending"] == 0 for c in counters(rt6).values())
        part = g.convergecast(b"again", timeout=30)
        assert set(part.replies) == set(nodes.values()) and part.missing == frozenset()


def test_a_member_without_auto_ack_answers_when_it_is_ready() -> None:
    rt = mh.Runtime.start(unique_name("gcr"), cores=[0, 1, 2])
    try:
        groups.group(rt, "later", order="total", tree="radix:2")  # total order: the request is rooted at the sequencer
        with rt.dispatcher(0) as d0, rt.dispatcher(1) as d1, rt.dispatcher(2) as d2:
            a, b, c = d0.join("later"), d1.join("later", auto_ack=False), d2.join("later")
            c.sync()
            b.sync()
            answered: list[Any] = []

            def answer_later() -> None:
                dl = b.recv(timeout=30)
                with pytest.raises(GroupError, match="not a convergecast request"):
                    b.reply(dataclasses.replace(dl, request=0), b"x")  # a plain message is not answered
                b.reply(dl, b"took my time")
                answered.append(dl)
                with pytest.raises(GroupError, match="awaiting this member's reply"):
                    b.reply(dl, b"twice")

            t = threading.Thread(target=answer_later)
            t.start()
            try:
                part = c.convergecast(b"flush", timeout=30)
            finally:
                t.join(30)
            assert answered and part.replies == {a.node: b"", b.node: b"took my time", c.node: b""} and not part.missing
            # Unanswered, a request times out naming the member; the others' acks came back.
            with pytest.raises(ConvergecastTimeout) as e:
                a.convergecast(b"again", timeout=3)
            assert e.value.partial.missing == frozenset({b.node}) and set(e.value.partial.replies) == {a.node, c.node}
            with pytest.raises(GroupError, match="a reply is bytes"):
                b.reply(b.recv(timeout=10), "text")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="auto_ack must be a bool"):
                d0.join("other", auto_ack="no")  # type: ignore[arg-type]
    finally:
        rt.stop()
