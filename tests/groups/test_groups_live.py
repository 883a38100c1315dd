"""Groups live on a runtime (issue 14, phase 2): real monitors fan group frames out along the trees,
member processes order them; the phase-1 checkers judge the recorded histories."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import time
import weakref
from typing import Any, Iterator

import pytest

import multihop as mh
from group_procs import member
from multihop import groups
from multihop.groups.checkers import History, check_causal, check_delivery, check_fifo, check_total
from procs import child

CTX = mp.get_context("spawn")


_set_aside: "weakref.WeakKeyDictionary[Any, list[tuple[Any, ...]]]" = weakref.WeakKeyDictionary()


def collect(q: Any, kind: str, count: int, timeout: float) -> list[tuple[Any, ...]]:
    """``count`` reports of ``kind`` from ``q``, or fail after ``timeout`` s. Reports of other kinds read meanwhile
    are set aside for a later ``collect`` of their kind, never dropped: processes report in whatever order they
    run (a receiver's "done" can come before the sender's "sent" it follows)."""
    aside = _set_aside.setdefault(q, [])
    out = [r for r in aside if r[0] == kind][:count]
    for r in out:
        aside.remove(r)
    deadline = time.monotonic() + timeout
    while len(out) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(out)} of {count} {kind!r} reports within {timeout} s: {[o[:3] for o in out]}"
        try:
            item = q.get(timeout=min(left, 1.0))
        except queue.Empty:
            continue
        if item[0] == kind:
            out.append(item)
        else:
            aside.append(item)
    return out


def history(done: list[tuple[Any, ...]]) -> History:
    h = History()
    for _, _core, node, events, _views in done:
        for ev in events:
            if ev[0] == "send":
                h.send(node, ev[1], ev[2], ev[3])
            else:
                h.deliver(node, ev[1])
    return h


@contextlib.contextmanager
def members(rt: mh.Runtime, group: str, cores: list[int], n_send: list[int], expect: list[int], **kw: Any) -> Iterator[tuple[Any, Any, Any]]:
    q, go, finish = CTX.Queue(), CTX.Event(), CTX.Event()
    with contextlib.ExitStack() as stack:
        for core, n, e in zip(cores, n_send, expect, strict=True):
            stack.enter_context(child(member, rt.name, core, group, n, e, q, go, finish, *kw.get("extra", ())))
        yield q, go, finish
        finish.set()


@pytest.mark.parametrize("tree", ["flat", "numa"])
def test_six_fifo_members_deliver_every_message_once_through_the_monitors(rt6: mh.Runtime, tree: str) -> None:
    info = groups.group(rt6, "g", order="fifo", tree=tree)
    assert (info.order, info.tree, info.window, info.members) == ("fifo", tree, 16, {})
    n = 300  # each member: 300 sends, every 5th a unicast to the next node
    per = n - n // 5
    expect = [6 * per + n // 5] * 6  # every broadcast (its own too) and its neighbour's unicasts
    with members(rt6, "g", list(range(6)), [n] * 6, expect, extra=(5,)) as (q, go, finish):
        joined = collect(q, "joined", 6, 120)
        assert sorted(j[2] for j in joined) == [1, 2, 3, 4, 5, 6]
        go.set()
        done = collect(q, "done", 6, 180)
        h = history(done)
        assert check_delivery(h) == []
        assert check_fifo(h) == []
        for _, _core, _node, events, _ in done:
            assert sum(1 for e in events if e[0] == "deliver") == expect[0]
        st = rt6.status()
        data = [m["data"] for m in st["monitors"]]
        assert sum(d["group_forwarded"] for d in data) > 6 * n
        assert all(d["group_dropped"] == 0 and d["group_malformed"] == 0 for d in data)
        finish.set()
        collect(q, "left", 6, 120)
    assert groups.group(rt6, "g", create=False).members == {}


@pytest.mark.parametrize("order", ["fifo", "causal", "total"])
def test_three_senders_of_ten_thousand_keep_each_ordering(rt6: mh.Runtime, order: str) -> None:
    groups.group(rt6, "o", order=order, tree="numa")
    n = 10_000
    sends = [n, 0, n, 0, n, 0]  # senders on cores 0, 2, 4 (both sockets), receivers between them
    expect = [3 * n] * 6
    with members(rt6, "o", list(range(6)), sends, expect) as (q, go, finish):
        collect(q, "joined", 6, 120)
        go.set()
        done = collect(q, "done", 6, 240)
        h = history(done)
        assert check_delivery(h) == []
        assert check_fifo(h) == []
        if order == "causal":
            assert check_causal(h) == []
        if order == "total":
            assert check_total(h) == []
            orders = {tuple(h.deliveries(p)) for p in h.events}
            assert len(orders) == 1, "every member delivered the same sequence"
