"""Groups live, when members fail: a member killed mid-stream leaves the group and a convergecast
completes with the survivors naming the missing; a stopped member bounds the monitors' queues by the window."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from typing import Any, Iterator

import pytest

import multihop as mh
from group_procs import payload, sender, stoppable_receiver, wait_view
from multihop import groups
from multihop.groups.checkers import History, check_delivery, check_fifo
from procs import child
from session import unique_name
from test_groups_live import collect

CTX = mp.get_context("spawn")


@pytest.fixture
def rt4() -> Iterator[mh.Runtime]:
    runtime = mh.Runtime.start(unique_name("gf"), cores=[0, 1, 2, 3], topology=mh.Topology([[0, 1], [2, 3]]))
    try:
        yield runtime
    finally:
        runtime.stop()


def wait_for(what: str, cond: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.005)


def test_a_member_killed_mid_stream_leaves_and_convergecast_names_the_missing(rt4: mh.Runtime) -> None:
    groups.group(rt4, "k", order="fifo", tree="flat")
    # A queue and a finish event per process: a process killed while it writes a report, or while it looks
    # at its event (every delivery), holds that queue's or event's lock for good (multiprocessing's documented
    # hazard), and the survivor's "done" must not wait behind it, nor the clean-up on a killed one's event.
    qs, finish = {c: CTX.Queue() for c in (1, 2, 3)}, {c: CTX.Event() for c in (1, 2, 3)}
    n = 4000
    died: list[tuple[int, ...]] = []
    with contextlib.ExitStack() as stack:
        procs = {c: stack.enter_context(child(stoppable_receiver, rt4.name, c, "k", qs[c], finish[c])) for c in (1, 2, 3)}
        stack.callback(lambda: [finish[c].set() for c in (1, 2, 3) if procs[c].is_alive()])
        d = stack.enter_context(rt4.dispatcher(0))
        g = d.join("k", on_view=lambda e: died.append((e.view.view_id, e.joined, e.left, e.died)), reply=lambda dl: b"ok:" + dl.payload)
        nodes = {j[1]: j[2] for c in (1, 2, 3) for j in collect(qs[c], "joined", 1, 60)}
        wait_view(g, 4)
        victim = nodes[3]
        for i in range(1, n + 1):
            g.send(g.broadcast, payload(g.node, i), timeout=60)  # a stall fails the test instead of hanging it
            if i == n // 2:
                collect(qs[3], "progress", 1, 60)  # the receivers are mid-stream
                procs[3].kill()
        wait_for("the view change naming the killed member", lambda: any(v[3] == (victim,) for v in died))
        assert victim not in g.view.nodes
        # The survivors stay in the group: a convergecast reaches them all, nobody is missing.
        part = g.convergecast(b"ping", timeout=30)
        assert set(part.replies) == {g.node, nodes[1], nodes[2]} and part.missing == frozenset()
        assert part.replies[g.node] == b"ok:ping" and part.replies[nodes[1]] == b""  # own reply callback; empty acks
        # A member that stops before replying and then dies is named missing; the call does not hang.
        os.kill(procs[2].pid, signal.SIGSTOP)
        killer = threading.Thread(target=lambda: (wait_for("convergecast under way", lambda: g._ep._cc_results), procs[2].kill()))
        killer.start()
        part = g.convergecast(b"again", timeout=30)
        killer.join(30)
        assert set(part.replies) == {g.node, nodes[1]} and part.missing == frozenset({nodes[2]})
        finish[1].set()
        done = {r[2]: r[3] for r in collect(qs[1], "done", 1, 60)}
    # The survivor delivered the whole stream once, in order; the dead ones only a prefix of it.
    h = History()
    for i in range(1, n + 1):
        h.send(g.node, (g.node, i), "all", {g.node, nodes[1], nodes[2], victim})
        h.deliver(g.node, (g.node, i))
    for node, got in done.items():
        for m in got:
            h.deliver(node, m)
    assert check_delivery(h, dead={victim, nodes[2]}) == []
    assert check_fifo(h) == []
    assert done[nodes[1]] == [(g.node, i) for i in range(1, n + 1)]


def test_a_stopped_member_bounds_every_monitor_queue_by_the_window(rt4: mh.Runtime) -> None:
    window = 8
    groups.group(rt4, "s", order="fifo", tree="flat", window=window)
    q, go, finish = CTX.Queue(), CTX.Event(), CTX.Event()
    n = 3000
    with contextlib.ExitStack() as stack:
        stack.callback(finish.set)
        rx = {c: stack.enter_context(child(stoppable_receiver, rt4.name, c, "s", q, finish, n)) for c in (2, 3)}
        collect(q, "joined", 2, 60)
        stack.enter_context(child(sender, rt4.name, 0, "s", n, q, go, finish))
        collect(q, "joined", 1, 60)
        os.kill(rx[3].pid, signal.SIGSTOP)
        stack.callback(lambda: os.kill(rx[3].pid, signal.SIGCONT) if rx[3].is_alive() else None)
        go.set()

        def data(core: int) -> dict[str, Any]:
            return dict(rt4.status()["monitors"][rt4.cores.index(core)]["data"])

        # The stopped member's window fills at its monitor, then the sender's monitor's edge to it.
        wait_for("the stopped member's edge full", lambda: data(3)["group_queued"] >= window)
        time.sleep(1.0)  # the member stays stopped for a second (the stimulus, not a synchronisation)
        peaks = {c: data(c)["group_queue_peak"] for c in rt4.cores}
        queued = {c: data(c)["group_queued"] for c in rt4.cores}
        reports = []
        while not q.empty():
            reports.append(q.get())
        assert max(peaks.values()) == window and all(p <= window for p in peaks.values()), (
            f"queue peaks {peaks}: the stopped member's edges fill up to the window {window}, never beyond"
        )
        assert sum(queued.values()) <= 3 * window, queued
        assert not any(r[0] == "sent" for r in reports), "the sender is held back while a member is stopped"
        assert max([r[3] for r in reports if r[0] == "progress"], default=0) < n
        os.kill(rx[3].pid, signal.SIGCONT)
        collect(q, "sent", 1, 120)
        done = {r[1]: r[3] for r in collect(q, "done", 2, 60)}
    for core in (2, 3):
        assert done[core] == [(done[core][0][0], i) for i in range(1, n + 1)], f"member on core {core}"


def test_a_send_held_back_by_a_stopped_member_times_out_and_its_message_still_goes_in_order(rt4: mh.Runtime) -> None:
    # A group send's timeout bounds its wait for the tree's credit. The message that timed out is not
    # withdrawn (it has its place in the group's FIFO order): it goes first once the member resumes.
    window = 4
    groups.group(rt4, "t", order="fifo", tree="flat", window=window)
    q, finish = CTX.Queue(), CTX.Event()
    n = 200
    with contextlib.ExitStack() as stack:
        stack.callback(finish.set)
        rx = {c: stack.enter_context(child(stoppable_receiver, rt4.name, c, "t", q, finish, n)) for c in (2, 3)}
        collect(q, "joined", 2, 60)
        d = stack.enter_context(rt4.dispatcher(0))
        g = d.join("t", timeout=60)
        wait_view(g, 3)
        os.kill(rx[3].pid, signal.SIGSTOP)
        stack.callback(lambda: os.kill(rx[3].pid, signal.SIGCONT) if rx[3].is_alive() else None)
        sent, timed_out = 0, 0
        t0 = time.monotonic()
        for i in range(1, n + 1):  # bounded: the window runs out long before n
            sent = i
            try:
                g.send(g.broadcast, payload(g.node, i), timeout=0.2)
            except mh.Timeout as e:
                assert "queued here" in str(e)
                timed_out = i
                break
        took = time.monotonic() - t0
        assert timed_out, f"{sent} sends went with a member stopped and a window of {window}"
        assert took < 30, f"the send that timed out took {took:.1f} s in all"
        os.kill(rx[3].pid, signal.SIGCONT)
        for i in range(timed_out + 1, n + 1):
            g.send(g.broadcast, payload(g.node, i), timeout=60)
        done = {r[1]: r[3] for r in collect(q, "done", 2, 120)}
    for core in (2, 3):
        assert done[core] == [(g.node, i) for i in range(1, n + 1)], f"member on core {core}"
