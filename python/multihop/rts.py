"""The routing-table set-up dispatcher's computation (TN-006 section 2.9).

A routing table maps every source core to its row, and a row maps every
destination core to the next-hop core a bind request goes to from there:
``{source: {destination: next_hop}}``.  A core's next hop to itself is
itself.  The tables are used only while a bind request travels; the
monitor-to-monitor links a runtime needs are exactly :func:`links` of its
table.  The three modes:

``direct``
    every request goes straight to the destination (all pairs linked);
``ring``
    the core at index i of the runtime's core list forwards to index i+1
    (mod n), so a request takes (idx(dst) - idx(src)) mod n hops over n links;
``fat-tree``
    direct within a socket; each socket's leader (its lowest runtime core)
    is linked to every other leader, and a request for another socket goes
    local leader -> that socket's leader -> destination: at most 3 hops.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence

from multihop import _core
from multihop.defaults import DEFAULT_TIMEOUT
from multihop.errors import RoutingError
from multihop.topology import Topology, format_cores

__all__ = ["MODES", "RoutingTable", "routing_table", "path", "links", "row", "validate_table", "hand_off"]

MODES: tuple[str, ...] = ("direct", "ring", "fat-tree")

RoutingTable = dict[int, dict[int, int]]
"""``{source_core: {destination_core: next_hop_core}}``."""

_NextHop = Callable[[int, int], int]


def routing_table(topology: Topology, mode: str, cores: Sequence[int] | None = None) -> RoutingTable:
    """Compute the routing table of every core for one routing mode.

    Args:
        topology: the machine's (or a virtual) topology.
        mode: one of :data:`MODES`.
        cores: the runtime's cores in the runtime's order (the order is the
            ring's order); default ``topology.cores``.  Every core must be in
            ``topology``, each once.

    Returns:
        ``{source: {destination: next_hop}}`` for every ordered pair of
        ``cores``, including each core to itself.

    Raises:
        RoutingError: an unknown mode, a core outside the topology, a
            duplicate core, or no cores.
    """
    if mode not in MODES:
        raise RoutingError(f"unknown routing mode {mode!r}; valid modes: {', '.join(MODES)}")
    order = list(topology.cores if cores is None else cores)
    runtime_topology = topology.restrict(order)
    next_hop: _NextHop
    if mode == "direct":
        next_hop = _direct_next_hop
    elif mode == "ring":
        next_hop = _ring_next_hop(order)
    else:
        next_hop = _fat_tree_next_hop(runtime_topology)
    return {src: {dst: src if src == dst else next_hop(src, dst) for dst in order} for src in order}


def _direct_next_hop(src: int, dst: int) -> int:
    """Direct routing: the destination is always the next hop."""
    return dst


def _ring_next_hop(order: list[int]) -> _NextHop:
    """Ring routing over ``order``: every core forwards to its successor."""
    successor = {core: order[(i + 1) % len(order)] for i, core in enumerate(order)}

    def next_hop(src: int, dst: int) -> int:
        return successor[src]

    return next_hop


def _fat_tree_next_hop(topology: Topology) -> _NextHop:
    """Fat-tree routing: direct in a socket, otherwise via the leaders."""

    def next_hop(src: int, dst: int) -> int:
        if topology.socket_of(src) == topology.socket_of(dst):
            return dst
        local_leader = topology.leader_of(src)
        return local_leader if src != local_leader else topology.leader_of(dst)

    return next_hop


def row(table: Mapping[int, Mapping[int, int]], core: int) -> dict[int, int]:
    """A copy of ``core``'s row of ``table``: ``{destination: next_hop}``.

    This is what the initial monitor hands a later monitor when it boots.

    Raises:
        RoutingError: ``table`` has no row for ``core``.
    """
    if core not in table:
        raise RoutingError(f"core {core!r} has no row in the routing table; its cores are {_spell(table)}")
    return dict(table[core])


def path(table: Mapping[int, Mapping[int, int]], src: int, dst: int) -> list[int]:
    """The cores a bind request from ``src`` to ``dst`` visits, ``src`` first, ``dst`` last.

    ``path(table, c, c)`` is ``[c]``.  The walk is bounded by the number of
    cores in the table.

    Raises:
        RoutingError: a core on the way has no row or no entry for ``dst``,
            or the walk comes back to a core it has visited (a loop).
    """
    visited = [src]
    here = src
    while here != dst:
        hop = row(table, here).get(dst)
        if hop is None:
            raise RoutingError(f"the row of core {here} has no entry for destination {dst!r}")
        if hop in visited:
            route = " -> ".join(map(str, visited + [hop]))
            raise RoutingError(f"routing loop from core {src} to core {dst}: {route}")
        visited.append(hop)
        here = hop
    return visited


def links(table: Mapping[int, Mapping[int, int]]) -> set[tuple[int, int]]:
    """The undirected monitor-to-monitor links the table needs.

    A pair ``(a, b)`` with ``a < b`` is in the set when some row names ``b``
    as the next hop of ``a`` or ``a`` as the next hop of ``b``.
    """
    return {(min(src, hop), max(src, hop)) for src, next_hops in table.items() for hop in next_hops.values() if hop != src}


def validate_table(table: Mapping[int, Mapping[int, int]]) -> None:
    """Check a routing table handed in from outside; return quietly if it is sound.

    Sound means: the sources are non-negative int core ids; every source has
    a row with an entry for every source (its destinations) and nothing else;
    every next hop is a core of the table; each core's next hop to itself is
    itself; and every request reaches its destination without a loop.

    Raises:
        RoutingError: naming the first problem found.
    """
    if not isinstance(table, Mapping) or not table:
        raise RoutingError(f"a routing table must be a non-empty mapping of rows, got {table!r}")
    cores = set(table)
    for core in table:
        if isinstance(core, bool) or not isinstance(core, int) or core < 0:
            raise RoutingError(f"routing table sources must be non-negative ints, got {core!r}")
    for src, next_hops in table.items():
        if not isinstance(next_hops, Mapping):
            raise RoutingError(f"the row of core {src} must be a mapping, got {next_hops!r}")
        missing = cores - set(next_hops)
        if missing:
            raise RoutingError(f"the row of core {src} has no entry for destinations {_spell(missing)}")
        extra = set(next_hops) - cores
        if extra:
            raise RoutingError(
                f"the row of core {src} names destinations {sorted(extra, key=repr)!r} that are not cores of the table ({_spell(cores)})"
            )
        for dst, hop in next_hops.items():
            if hop not in cores or isinstance(hop, bool):
                raise RoutingError(f"the row of core {src} sends destination {dst} to {hop!r}, which is not a core of the table ({_spell(cores)})")
        if next_hops[src] != src:
            raise RoutingError(f"the row of core {src} sends core {src} to {next_hops[src]}; a core's next hop to itself must be itself")
    for dst in table:
        _check_all_reach(table, dst)


def _check_all_reach(table: Mapping[int, Mapping[int, int]], dst: int) -> None:
    """Raise RoutingError unless every core's requests for ``dst`` arrive there.

    Each core is walked only until it meets a core already known to reach
    ``dst``, so checking one destination costs O(cores).
    """
    reaches = {dst}
    for src in table:
        walked: list[int] = []
        here = src
        while here not in reaches:
            if here in walked:
                route = " -> ".join(map(str, walked + [here]))
                raise RoutingError(f"routing loop from core {src} to core {dst}: {route}")
            walked.append(here)
            here = table[here][dst]
        reaches.update(walked)


def _spell(cores: Iterable[object]) -> str:
    """Cores as a sorted compact list for error messages, e.g. ``0-3,6``.

    Keys that are not ints (a table not yet validated) are listed by repr.
    """
    listed = list(cores)
    ints = [core for core in listed if isinstance(core, int)]
    if len(ints) == len(listed):
        return format_cores(sorted(ints))
    return ", ".join(sorted(map(repr, listed)))


def hand_off(initial_monitor_socket: str | os.PathLike[str], table: Mapping[int, Mapping[int, int]], timeout: float = DEFAULT_TIMEOUT) -> None:
    """Hand the whole routing table to the runtime's initial monitor (TN-006 2.9).

    The initial monitor keeps the table, takes its own row, and opens its
    links; every later monitor asks it for its own row when it boots.  The
    table is validated first, so a monitor never receives an unsound one.

    Raises:
        RoutingError: the table is not sound (see :func:`validate_table`).
        MonitorError: the initial monitor refused it or could not be reached.
    """
    validate_table(table)
    rows = {src: dict(next_hops) for src, next_hops in table.items()}
    _core.monitor_set_table(os.fspath(initial_monitor_socket), rows, timeout=timeout)
