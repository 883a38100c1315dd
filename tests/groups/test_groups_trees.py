"""Tree shapes for every mode on topologies of 1-64 cores, against a brute-force walk.

The walk is independent of :class:`Tree`'s own checks: it follows every
``children`` list from the root with a visit counter and a step bound, so a
cycle, a core reached twice, or a missing member fails here even if the
constructor let it through.
"""

from __future__ import annotations

import math
import random

import pytest

from multihop.groups import GroupError, Tree, build_tree, flat, numa, parse_tree, radix
from multihop.topology import Topology


def walk(tree: Tree) -> dict[int, int]:
    """core -> how many times a walk of every child list from the root reaches it (bounded)."""
    seen: dict[int, int] = {tree.root: 1}
    stack = [tree.root]
    steps = 0
    while stack:
        steps += 1
        assert steps <= 10_000, "the walk does not end: a cycle"
        core = stack.pop()
        for child in tree.children.get(core, ()):
            seen[child] = seen.get(child, 0) + 1
            if seen[child] == 1:
                stack.append(child)
    return seen


def layouts(n: int) -> list[Topology]:
    """Socket layouts of n cores: one socket, sockets of 2, 4 and 8, and an uneven split."""
    out = [Topology.flat(range(n))]
    for size in (2, 4, 8):
        if size < n:
            out.append(Topology.chunked(range(n), size))
    if n >= 3:
        out.append(Topology([list(range(0, n // 3)), list(range(n // 3, n))]))
    return out


def subsets(topology: Topology, rng: random.Random) -> list[list[int]]:
    """The whole machine and a random subset of its cores (members of a group)."""
    cores = list(topology.cores)
    return [cores, sorted(rng.sample(cores, rng.randint(1, len(cores))))]


def roots(cores: list[int]) -> list[int]:
    """Every root for small sets, a spread of roots for large ones."""
    return cores if len(cores) <= 16 else cores[:: max(1, len(cores) // 7)] + [cores[-1]]


def check_spanning(tree: Tree, root: int, members: list[int]) -> None:
    seen = walk(tree)
    assert set(seen) == {root, *members}, f"tree cores {sorted(seen)} != root {root} + members {members}"
    twice = {c: k for c, k in seen.items() if k != 1}
    assert not twice, f"cores reached more than once: {twice}"
    assert tree.root == root


def fake_rtt(topology: Topology):
    """A round trip that grows with socket distance and differs per socket (so the order is checkable)."""

    def rtt(a: int, b: int) -> float:
        sa, sb = topology.socket_of(a), topology.socket_of(b)
        return 0.1 if sa == sb else 1.0 + ((sa * 7 + sb * 3) % 5)

    return rtt


@pytest.mark.parametrize("n", range(1, 65))
def test_every_mode_reaches_every_member_exactly_once(n: int) -> None:
    rng = random.Random(n)
    for topology in layouts(n):
        for members in subsets(topology, rng):
            for root in roots(members):
                check_spanning(flat(root, members), root, members)
                assert flat(root, members).depth() <= 1
                for k in (1, 2, 3, 4, 8):
                    tree = radix(root, members, k)
                    check_spanning(tree, root, members)
                    assert all(len(cs) <= k for cs in tree.children.values())
                    count = len(set(members) | {root})
                    # a complete k-ary heap of `count` nodes: its height is known
                    want = count - 1 if k == 1 else (math.ceil(math.log(count * (k - 1) + 1, k)) - 1 if count > 1 else 0)
                    assert tree.depth() == want, (k, count, tree.depth())
                rtt = fake_rtt(topology)
                tree = numa(root, members, topology, rtt)
                check_spanning(tree, root, members)
                check_numa_shape(tree, root, members, topology, rtt)
            # a sender outside the destination set (a multicast from a non-member): the root is added
            outside = sorted(set(topology.cores) - set(members))
            if outside:
                root = outside[rng.randrange(len(outside))]
                check_spanning(flat(root, members), root, members)
                check_spanning(radix(root, members, 3), root, members)
                tree = numa(root, members, topology, fake_rtt(topology))
                check_spanning(tree, root, members)
                check_numa_shape(tree, root, members, topology, fake_rtt(topology))


def check_numa_shape(tree: Tree, root: int, members: list[int], topology: Topology, rtt) -> None:
    """Other sockets' leaders first, farthest first; then the root's socket; leaders fan out in their socket."""
    home = topology.socket_of(root)
    by_socket: dict[int, list[int]] = {}
    for c in sorted(set(members) - {root}):
        by_socket.setdefault(topology.socket_of(c), []).append(c)
    leaders = {s: cs[0] for s, cs in by_socket.items() if s != home}
    first = list(tree.children_of(root))[: len(leaders)]
    assert set(first) == set(leaders.values()), f"root {root} sends first to {first}, leaders are {leaders}"
    distances = [rtt(root, c) for c in first]
    assert distances == sorted(distances, reverse=True), f"leaders not farthest first: {list(zip(first, distances, strict=True))}"
    assert set(tree.children_of(root)[len(leaders) :]) == set(by_socket.get(home, []))
    for s, leader in leaders.items():
        assert sorted(tree.children_of(leader)) == by_socket[s][1:]
    for parent, child in tree.edges():
        if topology.socket_of(parent) != topology.socket_of(child):
            assert parent == root and child in leaders.values(), f"cross-socket edge {parent}->{child}"


def test_numa_without_round_trips_goes_in_socket_order_after_the_root() -> None:
    topo = Topology.chunked(range(16), 4)
    tree = numa(5, topo.cores, topo)
    assert tree.children_of(5)[:3] == (8, 12, 0)
    assert tree.children_of(5)[3:] == (4, 6, 7)
    assert tree.children_of(8) == (9, 10, 11)


def test_build_tree_dispatches_and_rejects_bad_modes() -> None:
    topo = Topology.chunked(range(8), 4)
    assert build_tree("flat", 0, range(8)).mode == "flat"
    assert build_tree("radix:3", 0, range(8)).mode == "radix:3"
    assert build_tree("radix", 0, range(8)).mode == "radix:2"
    assert build_tree("numa", 0, range(8), topology=topo).mode == "numa"
    for bad in ("star", "radix:0", "radix:x", "numa:2", "", 3):
        with pytest.raises(GroupError, match="tree mode|radix|fan-out"):
            parse_tree(bad)  # type: ignore[arg-type]
    with pytest.raises(GroupError, match="topology or a machine model"):
        build_tree("numa", 0, range(8))
    with pytest.raises(GroupError, match="machine model"):
        build_tree("machine", 0, range(8))
    with pytest.raises(GroupError, match="not in the topology"):
        numa(0, [0, 1, 99], topo)
    with pytest.raises(GroupError, match="twice"):
        flat(0, [1, 1])


def test_tree_rejects_cycles_two_parents_and_detached_parts() -> None:
    with pytest.raises(GroupError, match="two parents"):
        Tree(0, {0: (1, 2), 1: (2,)})
    with pytest.raises(GroupError, match="root"):
        Tree(0, {0: (1,), 1: (0,)})
    with pytest.raises(GroupError, match="never reaches"):
        Tree(0, {0: (1,), 5: (6,)})
    t = Tree.from_parents(0, [(0, 2), (0, 1), (2, 3)])
    assert t.children_of(0) == (2, 1) and t.path_to(3) == [0, 2, 3] and t.parent_of(0) is None
    assert t.render().splitlines() == ["0", "  2", "    3", "  1"]
