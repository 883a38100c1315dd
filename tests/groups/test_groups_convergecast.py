"""Convergecast over a tree: replies gathered up to the root in any order; deaths end the wait."""

from __future__ import annotations

import random

import pytest

from multihop.groups import GroupError, numa
from multihop.groups.convergecast import Convergecast, Partial
from multihop.topology import Topology


def run(seed: int, dead_members: set[int], dead_cores: set[int]) -> Partial:
    """Members 0..23 on cores 0..23 (one each) of a numa tree; replies, deaths and reports in random order."""
    topo = Topology.chunked(range(24), 8)
    tree = numa(0, range(24), topo)
    machines = {c: Convergecast([c], tree.children_of(c)) for c in tree.cores}
    rng = random.Random(seed)
    pending = [("reply", c) for c in tree.cores if c not in dead_members and not (set(tree.path_to(c)) & dead_cores)]
    pending += [("member_gone", c) for c in dead_members]
    pending += [("child_gone", c) for c in dead_cores]
    rng.shuffle(pending)
    result = None
    steps = 0
    while pending:
        steps += 1
        assert steps < 10_000
        kind, c = pending.pop()
        parent = tree.parent_of(c)
        if kind == "reply":
            machines[c].reply(c, f"r{c}")
        elif kind == "member_gone":
            machines[c].member_gone(c)
        elif kind == "child_gone":
            below = [x for x in tree.cores if c in tree.path_to(x)]
            machines[parent].child_gone(c, below)  # type: ignore[index]
            continue
        # deliver every report that is ready, bottom up
        for core in reversed(list(tree.breadth_first())):
            if core in dead_cores or any(a in dead_cores for a in tree.path_to(core)[:-1]):
                continue
            out = machines[core].poll()
            if out is None:
                continue
            p = tree.parent_of(core)
            if p is None:
                assert result is None, "the root produced two results"
                result = out
            else:
                machines[p].report(core, out)
    for core in reversed(list(tree.breadth_first())):  # reports freed by the last child_gone
        if core in dead_cores or any(a in dead_cores for a in tree.path_to(core)[:-1]):
            continue
        out = machines[core].poll()
        if out is not None:
            p = tree.parent_of(core)
            if p is None:
                result = out
            else:
                machines[p].report(core, out)
    assert result is not None, "the convergecast never completed"
    return result


@pytest.mark.parametrize("seed", range(20))
def test_survivors_replies_arrive_and_the_missing_are_named(seed: int) -> None:
    rng = random.Random(seed)
    dead_members = set(rng.sample(range(1, 24), rng.randint(0, 3)))
    dead_cores = {rng.choice([8, 16, 9])} if seed % 3 == 0 else set()
    r = run(seed, dead_members, dead_cores)
    topo = Topology.chunked(range(24), 8)
    tree = numa(0, range(24), topo)
    below = {x for x in tree.cores for d in dead_cores if d in tree.path_to(x)}
    assert r.missing == frozenset(dead_members | below)
    assert set(r.replies) == set(range(24)) - dead_members - below
    assert all(v == f"r{k}" for k, v in r.replies.items())


def test_bad_input_is_refused() -> None:
    c = Convergecast([1, 2], [5])
    c.reply(1, "a")
    with pytest.raises(GroupError, match="does not wait for"):
        c.reply(1, "again")
    with pytest.raises(GroupError, match="does not wait for"):
        c.reply(9, "stranger")
    with pytest.raises(GroupError, match="core 6"):
        c.report(6, Partial())
    c.member_gone(2)
    assert c.poll() is None and not c.done
    c.report(5, Partial({7: "x"}, frozenset({8})))
    assert c.done and c.poll() == Partial({1: "a", 7: "x"}, frozenset({2, 8})) and c.poll() is None
    assert Convergecast([], []).poll() == Partial()  # nothing to wait for: done at once
