"""Tests for multihop.rts: the three routing modes of TN-006 2.9, paths, links, validation.

Routes are checked with a path walk written here, independent of ``rts.path``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from itertools import pairwise

import pytest

from multihop import rts
from multihop.errors import RoutingError
from multihop.rts import MODES, links, path, routing_table, row, validate_table
from multihop.topology import Topology


def _shuffled(cores: list[int], seed: int) -> list[int]:
    shuffled = list(cores)
    random.Random(seed).shuffle(shuffled)
    return shuffled


def _case(sockets: list[list[int]], cores: list[int] | None, name: str) -> object:
    return pytest.param(Topology(sockets), cores, id=name)


def _chunks(n: int, per_socket: int) -> list[list[int]]:
    return [list(range(i, min(i + per_socket, n))) for i in range(0, n, per_socket)]


_ODD_64 = [core for core in range(64) if core % 2 == 1]

CASES = [
    *[_case([list(range(n))], None, f"flat-{n}") for n in (1, 2, 3, 4, 5, 8, 16, 31, 64)],
    *[_case(_chunks(16, per), None, f"16-cores-{16 // per}-sockets") for per in (8, 4, 2)],
    *[_case(_chunks(64, per), None, f"64-cores-{64 // per}-sockets") for per in (32, 16, 8)],
    _case([[0], [1, 2, 3, 4, 5], [6, 7]], None, "uneven-8"),
    _case(_chunks(21, 10) + [[21]], None, "uneven-22"),
    _case([[10, 3, 7], [100, 42], [5]], None, "non-contiguous-ids"),
    _case([[10, 3, 7], [100, 42], [5]], [42, 5, 10, 100, 3, 7], "non-contiguous-shuffled"),
    _case(_chunks(64, 16), _shuffled(list(range(64)), seed=1), "64-cores-4-sockets-shuffled"),
    _case(_chunks(17, 5), _shuffled(list(range(17)), seed=2), "uneven-17-shuffled"),
    _case(_chunks(64, 8), _shuffled(_ODD_64, seed=3), "subset-of-64-shuffled"),
    _case([[0, 1, 2], [3, 4, 5]], [4, 0], "subset-one-core-per-socket"),
]


def walk(table: Mapping[int, Mapping[int, int]], src: int, dst: int) -> list[int]:
    """Follow next hops from src to dst; fail the test on a loop (more hops than cores)."""
    route = [src]
    for _ in range(len(table)):
        if route[-1] == dst:
            return route
        route.append(table[route[-1]][dst])
    assert route[-1] == dst, f"no route from {src} to {dst}: {route}"
    return route


def runtime_cores(topology: Topology, cores: list[int] | None) -> list[int]:
    return list(topology.cores) if cores is None else cores


def socket_index(topology: Topology) -> dict[int, int]:
    return {core: i for i, socket in enumerate(topology.sockets) for core in socket}


def runtime_leaders(topology: Topology, cores: list[int]) -> set[int]:
    """The lowest runtime core of every socket that holds runtime cores."""
    on_socket: dict[int, list[int]] = {}
    sockets = socket_index(topology)
    for core in cores:
        on_socket.setdefault(sockets[core], []).append(core)
    return {min(members) for members in on_socket.values()}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("topology", "cores"), CASES)
def test_table_covers_every_pair_and_every_pair_arrives(topology: Topology, cores: list[int] | None, mode: str) -> None:
    order = runtime_cores(topology, cores)
    table = routing_table(topology, mode, cores)
    assert set(table) == set(order)
    for src in order:
        assert set(table[src]) == set(order)
        assert table[src][src] == src
        for dst in order:
            route = walk(table, src, dst)
            assert route[0] == src and route[-1] == dst
            assert path(table, src, dst) == route
    validate_table(table)


@pytest.mark.parametrize(("topology", "cores"), CASES)
def test_direct_is_one_hop(topology: Topology, cores: list[int] | None) -> None:
    order = runtime_cores(topology, cores)
    table = routing_table(topology, "direct", cores)
    for src in order:
        for dst in order:
            assert walk(table, src, dst) == ([src] if src == dst else [src, dst])


@pytest.mark.parametrize(("topology", "cores"), CASES)
def test_ring_follows_the_runtime_order(topology: Topology, cores: list[int] | None) -> None:
    order = runtime_cores(topology, cores)
    n = len(order)
    table = routing_table(topology, "ring", cores)
    for i, src in enumerate(order):
        for j, dst in enumerate(order):
            route = walk(table, src, dst)
            assert len(route) - 1 == (j - i) % n
            assert route == [order[(i + k) % n] for k in range(len(route))]


@pytest.mark.parametrize(("topology", "cores"), CASES)
def test_fat_tree_crosses_sockets_only_between_leaders(topology: Topology, cores: list[int] | None) -> None:
    order = runtime_cores(topology, cores)
    sockets = socket_index(topology)
    leaders = runtime_leaders(topology, order)
    table = routing_table(topology, "fat-tree", cores)
    for src in order:
        for dst in order:
            route = walk(table, src, dst)
            hops = list(pairwise(route))
            assert len(hops) <= 3
            for a, b in hops:
                if sockets[a] != sockets[b]:
                    assert a in leaders and b in leaders, f"{src}->{dst} crosses at {a}->{b}"
            if src == dst:
                assert hops == []
            elif sockets[src] == sockets[dst]:
                assert hops == [(src, dst)]
            else:
                assert len(hops) == 1 + (src not in leaders) + (dst not in leaders)


def test_fat_tree_leader_is_lowest_runtime_core_of_its_socket() -> None:
    topology = Topology([[0, 1, 2, 3], [4, 5, 6, 7]])
    table = routing_table(topology, "fat-tree", [3, 2, 7, 5])
    assert walk(table, 3, 7) == [3, 2, 5, 7]
    assert walk(table, 7, 2) == [7, 5, 2]


def _clique(k: int) -> int:
    return k * (k - 1) // 2


LINK_CASES = [
    pytest.param(Topology(_chunks(n, per)), id=f"{n}-cores-{len(_chunks(n, per))}-sockets")
    for n, per in [(4, 4), (4, 2), (4, 3), (16, 16), (16, 4), (16, 5), (64, 64), (64, 8), (64, 20)]
]


@pytest.mark.parametrize("topology", LINK_CASES)
def test_link_counts_per_mode(topology: Topology) -> None:
    n = len(topology)
    expected = {
        "direct": _clique(n),
        "ring": n,
        "fat-tree": sum(_clique(len(s)) for s in topology.sockets) + _clique(len(topology.sockets)),
    }
    for mode in MODES:
        table = routing_table(topology, mode)
        counted = set()
        for src, next_hops in table.items():
            for hop in next_hops.values():
                if hop != src:
                    counted.add(frozenset((src, hop)))
        assert len(counted) == expected[mode], mode
        assert links(table) == {tuple(sorted(pair)) for pair in counted}
        assert all(a < b for a, b in links(table))


@pytest.mark.parametrize(("n", "count"), [(1, 0), (2, 1), (3, 3)])
def test_ring_links_for_tiny_rings(n: int, count: int) -> None:
    assert len(links(routing_table(Topology.flat(range(n)), "ring"))) == count


def test_row_is_a_copy_of_one_row() -> None:
    table = routing_table(Topology.flat(range(4)), "ring")
    first = row(table, 2)
    assert first == {0: 3, 1: 3, 2: 2, 3: 3}
    first[0] = 0
    assert table[2][0] == 3
    with pytest.raises(RoutingError, match="core 9 has no row.*0-3"):
        row(table, 9)


@pytest.mark.parametrize("mode", ["tree", "Ring", "fat_tree", "", None])
def test_unknown_mode_names_it_and_the_valid_modes(mode: object) -> None:
    with pytest.raises(RoutingError) as info:
        routing_table(Topology.flat(range(4)), mode)  # type: ignore[arg-type]
    message = str(info.value)
    assert repr(mode) in message
    assert "direct, ring, fat-tree" in message


@pytest.mark.parametrize(
    ("cores", "named"),
    [
        ([0, 9], "core 9 is not in the topology; its cores are 0-3"),
        ([0, 1, 1], "core 1 is given twice"),
        ([0, -2], "-2"),
        ([0, "1"], "'1'"),
        ([], "no cores"),
    ],
)
@pytest.mark.parametrize("mode", MODES)
def test_bad_runtime_cores_are_named(cores: list[object], named: str, mode: str) -> None:
    with pytest.raises(RoutingError) as info:
        routing_table(Topology([[0, 1], [2, 3]]), mode, cores)  # type: ignore[arg-type]
    assert named in str(info.value)


def test_path_to_itself_is_the_core() -> None:
    assert path(routing_table(Topology.flat([4]), "ring"), 4, 4) == [4]


def test_path_reports_a_loop() -> None:
    table = {0: {0: 0, 1: 2, 2: 2}, 1: {0: 0, 1: 1, 2: 2}, 2: {0: 0, 1: 0, 2: 2}}
    with pytest.raises(RoutingError, match="routing loop from core 0 to core 1: 0 -> 2 -> 0"):
        path(table, 0, 1)


def test_path_reports_missing_entries() -> None:
    table = {0: {0: 0, 1: 5}, 1: {0: 0, 1: 1}}
    with pytest.raises(RoutingError, match="core 5 has no row"):
        path(table, 0, 1)
    with pytest.raises(RoutingError, match="core 1 has no entry for destination 7"):
        path(table, 1, 7)
    with pytest.raises(RoutingError, match="core 3 has no row"):
        path(table, 3, 0)


def _good_table() -> dict[int, dict[int, int]]:
    return routing_table(Topology([[0, 1], [2, 3]]), "fat-tree")


def _broken(change: Callable[[dict[int, dict[int, int]]], object]) -> dict[int, dict[int, int]]:
    table = _good_table()
    change(table)
    return table


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({}, "non-empty mapping"),
        ([[0]], "non-empty mapping"),
        ({"0": {"0": "0"}}, "non-negative ints, got '0'"),
        ({0: [0]}, "row of core 0 must be a mapping"),
        (_broken(lambda t: t[1].pop(3)), "row of core 1 has no entry for destinations 3"),
        (_broken(lambda t: t[1].update({8: 8})), "names destinations [8]"),
        (_broken(lambda t: t[2].update({0: 9})), "sends destination 0 to 9, which is not a core"),
        (_broken(lambda t: t[3].update({3: 2})), "a core's next hop to itself must be itself"),
        (_broken(lambda t: t[0].update({3: 1})), "routing loop from core 0 to core 3: 0 -> 1 -> 0"),
    ],
)
def test_validate_table_names_the_problem(table: object, named: str) -> None:
    with pytest.raises(RoutingError) as info:
        validate_table(table)  # type: ignore[arg-type]
    assert named in str(info.value)


def test_validate_table_accepts_a_hand_written_table() -> None:
    # A star through core 0 is none of the three modes but is sound.
    table = {c: {d: d if c == 0 or c == d else 0 for d in range(4)} for c in range(4)}
    validate_table(table)
    assert links(table) == {(0, 1), (0, 2), (0, 3)}


def test_module_exports_and_docstrings() -> None:
    for name in rts.__all__:
        obj = getattr(rts, name)
        if callable(obj) and name != "RoutingTable":
            assert obj.__doc__, name
            assert obj.__annotations__, name
