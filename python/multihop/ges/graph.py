"""The connectivity graph of one broker (routing paper 3.2.6, gateways paper 2.3 and 4).

Built by a broker from the connections it received, never from a global view.
Its nodes are the *vertex* (the broker itself, level 0) and units at levels
0..N: at level ``l`` the siblings of the vertex's level-``l`` unit inside its
level-``l + 1`` unit (row 0: other brokers of its cluster; row 1: other
clusters of its super-cluster; ...).  A connection ``<n^x, n^y, l>`` is one
edge; parallel gateways between the same two nodes raise the edge's link
count.  Each node has two sets of links: ``L_UL`` (neighbours at its level or
below) and ``L_D`` (neighbours above).  Edge weights come from the
:class:`~multihop.ges.costs.CostMatrix` plus the gateways' extra costs.

A connection that names a unit *containing* the vertex (it reached this
broker from outside its own unit: the far side of a gateway of one of its own
units) is no edge of the graph, but it tells which outside units the vertex's
own units are joined to; those "own units" get ``L_UL`` / ``L_D`` sets too,
so both ends of a lost gateway see the unit it isolated (gateways paper 4:
"both node 6 and node 99 conclude that SC-4 has been system partitioned").

A broker's graph is a live view: it catches up with the broker's records
whenever it is queried after a change (its routing cache keeps the rows the
change did not touch).

Shortest paths run from every node to the vertex over ``L_UL`` links only (a
path may step from a node down or across to a node of its level, never up),
and the best hop to a unit is the neighbour of the vertex on that path:
:mod:`multihop.ges.routing_cache`.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Iterator

from multihop.ges.address import ancestor, contains, parse_unit, unit_id, unit_level, unit_str
from multihop.ges.connection import Connection
from multihop.ges.costs import CostMatrix
from multihop.ges.edge import Edge
from multihop.ges.errors import AddressError
from multihop.ges.routing_cache import RoutingCache

__all__ = ["ConnectivityGraph", "Edge"]

_CODE_MASK = (1 << 60) - 1


class ConnectivityGraph:
    """The connectivity graph of broker ``vertex`` (a broker code), built from ``records``.

    ``records`` are ``(connection, x)`` pairs of live connections as the
    broker holds them.  Query with unit names (address prefixes, the vertex
    by its full address): :meth:`cost`, :meth:`best_hop`, :meth:`edges`,
    :meth:`unit_partitioned`, :meth:`system_partitioned`, :meth:`l_ul`,
    :meth:`l_d`, :meth:`rows`.
    """

    def __init__(self, vertex: int, levels: int, costs: CostMatrix, records: Iterable[tuple[Connection, int]], *, source: Any = None) -> None:
        self.vertex = vertex
        self.levels = levels
        self.costs = costs
        #: a broker's GPP state this graph follows (None: a fixed graph of ``records``)
        self._source = source
        self._cache: RoutingCache | None = None
        self._build(records)

    def _build(self, records: Iterable[tuple[Connection, int]]) -> None:
        vertex = self.vertex
        #: node id -> its level (the vertex is level 0)
        self.node_level: dict[int, int] = {vertex: 0}
        #: (lower node, upper node) -> Edge
        self.edge_map: dict[tuple[int, int], Edge] = {}
        #: node -> {neighbour: Edge} for neighbours at its level or below (L_UL)
        self.ul: dict[int, dict[int, Edge]] = {vertex: {}}
        #: node -> {neighbour: Edge} for neighbours above its level (L_D)
        self.d: dict[int, dict[int, Edge]] = {vertex: {}}
        #: own unit (contains the vertex) -> (L_UL neighbours, L_D neighbours) as sets of unit ids
        self.own: dict[int, tuple[set[int], set[int]]] = {}
        for conn, x in records:
            self._add(conn, x)

    def refresh(self) -> None:
        """Catch up with the broker's records if they changed (queries do this themselves)."""
        src = self._source
        if src is not None and src.graph_dirty:
            src.graph_dirty = False
            self._build(src.table.values())
            if self._cache is not None:
                self._cache.rebind(self)

    # ---- construction ---------------------------------------------------

    def _node(self, uid: int, level: int) -> None:
        if uid not in self.node_level:
            self.node_level[uid] = level
            self.ul[uid] = {}
            self.d[uid] = {}

    def _add(self, conn: Connection, x: int) -> None:
        if x < 0:
            return  # a tombstone of a connection this broker never knew alive
        v, n = self.vertex, self.levels
        near = unit_id(conn.origin, x, n)
        far = unit_id(conn.peer, conn.level, n)
        lvl = conn.level
        if (lvl > 0 and contains(far, v)) or (x > 0 and contains(near, v)):
            own, other, other_level = (far, near, x) if contains(far, v) else (near, far, lvl)
            own_level = unit_level(own)
            ul, dd = self.own.setdefault(own, (set(), set()))
            if not conn.dead:
                (ul if other_level <= own_level else dd).add(other)
            return
        self._node(near, x)
        self._node(far, lvl)
        if conn.dead:
            return  # a lost gateway: its units stay known (maybe partitioned), without the edge
        a, b = (near, far) if (x, near) <= (lvl, far) else (far, near)
        la, lb = self.node_level[a], self.node_level[b]
        e = self.edge_map.get((a, b))
        if e is None:
            e = self.edge_map[(a, b)] = Edge(a, b, lvl)
            # b is at level lb >= la: a is in L_UL(b); b is in L_D(a), or in L_UL(a) at equal levels
            self.ul[b][a] = e
            (self.ul if lb == la else self.d)[a][b] = e
        old = e.gateways.get(conn.gateway)
        e.gateways[conn.gateway] = conn.cost if old is None else min(old, conn.cost)
        if conn.origin == v and x == 0:
            e.hops[conn.peer] = min(conn.cost, e.hops.get(conn.peer, conn.cost))
        elif near == v and lvl == 0:
            pass  # the peer's record of a level-0 link: the hop is the peer itself (a level-0 node)

    def weight(self, e: Edge) -> float:
        """The weight of an edge: the cost matrix element of its two levels plus its smallest extra cost."""
        return self.costs(self.node_level[e.a], self.node_level[e.b]) + e.extra()

    # ---- names --------------------------------------------------------------

    def name(self, uid: int) -> str:
        """The unit name of a node id (an address prefix; the vertex and level-0 nodes are full addresses)."""
        return unit_str(uid, self.levels)

    def node_of(self, unit: str) -> int | None:
        """The graph node standing for ``unit``: the unit itself, or its ancestor that is a sibling of the vertex's.

        None if ``unit`` contains the vertex (the vertex is already there).
        """
        uid = parse_unit(unit, self.levels)
        self.refresh()
        return self.node_for(uid)

    def node_for(self, uid: int) -> int | None:
        """:meth:`node_of` for a unit id."""
        level = unit_level(uid)
        n = self.levels
        if level > n or contains(uid, self.vertex):
            return None
        # the level at which the unit and the vertex part: the unit's ancestor there is a row node
        diff = (((uid & _CODE_MASK) ^ self.vertex).bit_length() - 1) // 6
        return ancestor(uid, diff, n)

    # ---- queries ----------------------------------------------------------

    @property
    def cache(self) -> RoutingCache:
        """The routing cache over this graph (computed on first use)."""
        self.refresh()
        if self._cache is None:
            self._cache = RoutingCache(self)
        return self._cache

    def cost(self, unit: str) -> float:
        """Cost of the shortest path from ``unit`` to the vertex over L_UL links (0 for units containing the vertex).

        ``math.inf`` when there is none (the unit is unknown or partitioned).
        """
        node = self.node_of(unit)
        if node is None:
            return 0.0
        return self.cache.cost(node)

    def best_hop(self, unit: str) -> str | None:
        """The neighbour broker (address) to send to for ``unit``; None if unreachable or ``unit`` contains the vertex."""
        node = self.node_of(unit)
        if node is None:
            return None
        hop = self.cache.hop(node)
        return None if hop is None else unit_str(hop, self.levels)

    def edges(self) -> list[tuple[str, str, int, float, int]]:
        """Every edge as ``(unit_a, unit_b, level, weight, link_count)``, ``unit_a`` the lower-level node; sorted."""
        self.refresh()
        out = [(self.name(e.a), self.name(e.b), e.level, self.weight(e), len(e.gateways)) for e in self.edge_map.values()]
        return sorted(out, key=lambda t: (t[2], t[0], t[1]))

    def rows(self) -> dict[int, list[str]]:
        """Level -> the names of the graph's nodes at that level (the vertex in row 0)."""
        self.refresh()
        out: dict[int, list[str]] = {lvl: [] for lvl in range(self.levels + 1)}
        for uid, lvl in self.node_level.items():
            out[lvl].append(self.name(uid))
        return {k: sorted(v) for k, v in out.items()}

    def _sets(self, unit: str) -> tuple[set[int], set[int]]:
        uid = parse_unit(unit, self.levels)
        self.refresh()
        if uid in self.node_level:
            return set(self.ul[uid]), set(self.d[uid])
        if uid in self.own:
            return self.own[uid]
        raise AddressError(f"unit {unit!r} is not a node of the connectivity graph at {self.name(self.vertex)}")

    def l_ul(self, unit: str) -> set[str]:
        """L_UL of a node: the names of its neighbours at its level or below."""
        return {self.name(u) for u in self._sets(unit)[0]}

    def l_d(self, unit: str) -> set[str]:
        """L_D of a node: the names of its neighbours above its level."""
        return {self.name(u) for u in self._sets(unit)[1]}

    def _all_sets(self) -> Iterator[tuple[int, int, int]]:
        self.refresh()
        for uid in self.node_level:
            if uid != self.vertex:
                yield uid, len(self.ul[uid]), len(self.d[uid])
        for uid, (ul, dd) in self.own.items():
            yield uid, len(ul), len(dd)

    def unit_partitioned(self) -> set[str]:
        """Units that cannot reach the vertex inside their context: ``#L_UL = 0`` or no path (cost infinite)."""
        out = {self.name(u) for u, nul, _ in self._all_sets() if nul == 0}
        cache = self.cache
        for uid in self.node_level:
            if uid != self.vertex and math.isinf(cache.cost(uid)):
                out.add(self.name(uid))
        return out

    def system_partitioned(self) -> set[str]:
        """Units cut off from the whole system in this broker's view: ``#L_UL = 0`` and ``#L_D = 0``."""
        return {self.name(u) for u, nul, nd in self._all_sets() if nul == 0 and nd == 0}

    def __repr__(self) -> str:
        self.refresh()
        return f"<ConnectivityGraph at {self.name(self.vertex)}: {len(self.node_level)} nodes, {len(self.edge_map)} edges>"
