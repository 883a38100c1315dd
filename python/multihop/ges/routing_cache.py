"""Shortest paths to the vertex and the routing cache (routing paper 3.2.7-3.2.8, gateways paper 2.4-2.5).

The paper finds the shortest path from a node to the vertex by a recursive
search along ``L_UL`` links that carries the nodes visited and the cost so
far.  Read from the vertex outwards, an ``L_UL`` link goes from a node to a
neighbour at the same level or above, so the costs of level-``l`` nodes
depend only on levels ``0..l``.  The cache therefore computes one row at a
time, bottom up: a row's nodes are seeded from the finished rows below
(and the vertex), then a Dijkstra over the row's own links finishes them
(the visited set is Dijkstra's).  Each row is a small graph (the siblings of
one unit, fewer than 64), so the whole computation is a few small
Dijkstras, and a change at level ``l`` invalidates rows ``l..N`` only, as the
paper says: "when a level-l node is added to the connectivity graph,
connectivities pertaining to units at level l, l+1, ..., N are affected".

The best hop to a unit is the vertex's neighbour on the shortest path: a
broker of the vertex's cluster (a level-0 node) or, when the vertex is
itself the gatekeeper of the first gateway on the path, the broker at the
other end of that gateway.  Equal costs are common (links inside a cluster
cost 0), so ties go to the path of fewer links, then to the lower hop
address: the cache is a function of the graph alone.
"""

from __future__ import annotations

import heapq
import math
from typing import Protocol

from multihop.ges.address import unit_level
from multihop.ges.edge import Edge

__all__ = ["GraphView", "RoutingCache", "constrained_hop"]

_NO_HOP = -1  # the vertex's own label: no hop needed


class GraphView(Protocol):
    """What the routing cache reads of a connectivity graph (:class:`~multihop.ges.graph.ConnectivityGraph` is one)."""

    @property
    def vertex(self) -> int:
        """The broker the graph is seen from."""
        ...

    @property
    def levels(self) -> int:
        """Levels of the hierarchy."""
        ...

    @property
    def node_level(self) -> dict[int, int]:
        """Node id -> its level (the vertex is level 0)."""
        ...

    @property
    def ul(self) -> dict[int, dict[int, Edge]]:
        """Node -> {neighbour: Edge} for neighbours at its level or below (L_UL)."""
        ...

    @property
    def d(self) -> dict[int, dict[int, Edge]]:
        """Node -> {neighbour: Edge} for neighbours above its level (L_D)."""
        ...

    @property
    def cache(self) -> RoutingCache:
        """The routing cache over the graph."""
        ...

    def weight(self, e: Edge) -> float:
        """The weight of an edge."""
        ...

    def refresh(self) -> None:
        """Catch up with the records the graph follows."""
        ...


class RoutingCache:
    """Cost and best hop per graph node, computed row by row on demand and invalidated from a level up."""

    __slots__ = ("graph", "_cost", "_hop", "_len", "_valid_rows", "computations")

    def __init__(self, graph: GraphView) -> None:
        self.graph = graph
        self._cost: dict[int, float] = {}
        self._hop: dict[int, int] = {}
        self._len: dict[int, int] = {}
        #: rows 0..valid_rows-1 are up to date
        self._valid_rows = 0
        #: how many rows were computed (tests and benches look at it)
        self.computations = 0

    def invalidate(self, level: int) -> None:
        """Forget rows ``level..N`` (a level-``level`` connection was added, lost or changed)."""
        if level < self._valid_rows:
            self._valid_rows = level
            drop = [u for u in self._cost if unit_level(u) >= level]
            for u in drop:
                del self._cost[u]
                self._hop.pop(u, None)
                self._len.pop(u, None)

    def rebind(self, graph: GraphView) -> None:
        """Use a rebuilt graph (same vertex); rows still valid are kept."""
        self.graph = graph
        for u in [u for u in self._cost if u not in graph.node_level]:
            del self._cost[u]
            self._hop.pop(u, None)
            self._len.pop(u, None)

    def _ensure(self, row: int) -> None:
        g = self.graph
        while self._valid_rows <= row and self._valid_rows <= g.levels:
            self._compute_row(self._valid_rows)
            self._valid_rows += 1

    def cost(self, node: int) -> float:
        """Shortest-path cost from graph node ``node`` to the vertex (inf when none)."""
        g = self.graph
        level = g.node_level.get(node)
        if level is None:
            return math.inf
        self._ensure(level)
        return self._cost.get(node, math.inf)

    def hop(self, node: int) -> int | None:
        """The best hop (a broker code) toward graph node ``node``; None if unreachable or the vertex."""
        g = self.graph
        level = g.node_level.get(node)
        if level is None:
            return None
        self._ensure(level)
        h = self._hop.get(node)
        return None if h is None or h == _NO_HOP else h

    def table(self) -> dict[int, tuple[float, int | None]]:
        """Every node's (cost, hop): the whole routing cache."""
        g = self.graph
        self._ensure(g.levels)
        return {u: (self._cost.get(u, math.inf), self.hop(u)) for u in g.node_level}

    def _compute_row(self, row: int) -> None:
        g = self.graph
        self.computations += 1
        vertex = g.vertex
        cost, hop = self._cost, self._hop
        members = [u for u, lvl in g.node_level.items() if lvl == row]
        # labels are (cost, links on the path, hop): the cheapest path, then the shortest, then the lowest hop
        best: dict[int, tuple[float, int, int]] = {}
        length = self._len
        if row == 0:
            best[vertex] = (0.0, 0, _NO_HOP)
        weight = g.weight
        for v in members:
            if v == vertex:
                continue
            lab = None
            for u, e in g.ul[v].items():
                if g.node_level[u] >= row:
                    continue  # same-row links are relaxed by the Dijkstra below
                cu = cost.get(u)
                if cu is None or math.isinf(cu):
                    continue
                w = weight(e)
                cand = (cu + w, length[u] + 1, self._hop_via(u, v, e))
                if lab is None or cand < lab:
                    lab = cand
            if lab is not None:
                best[v] = lab
        # Dijkstra inside the row (links between nodes of the same level go both ways)
        heap = [(c, n, h, u) for u, (c, n, h) in best.items()]
        heapq.heapify(heap)
        done: set[int] = set()
        while heap:
            c, n, h, u = heapq.heappop(heap)
            if u in done or best.get(u) != (c, n, h):
                continue
            done.add(u)
            cost[u] = c
            length[u] = n
            hop[u] = h
            for v, e in g.ul[u].items():
                if v in done or g.node_level[v] != row:
                    continue
                cand = (c + weight(e), n + 1, self._hop_via(u, v, e))
                old = best.get(v)
                if old is None or cand < old:
                    best[v] = cand
                    heapq.heappush(heap, (cand[0], cand[1], cand[2], v))
        for u in members:
            if u not in done:
                cost[u] = math.inf
                hop.pop(u, None)
                length.pop(u, None)

    def _hop_via(self, u: int, v: int, e: Edge) -> int:
        """The hop label of ``v`` reached from ``u`` over edge ``e``."""
        if u != self.graph.vertex:
            return self._hop[u]
        return self.first_hop(v, e)

    def first_hop(self, v: int, e: Edge) -> int:
        """The hop of a path that leaves the vertex over edge ``e`` to its neighbour ``v``."""
        if self.graph.node_level[v] == 0:
            return v  # a broker of the vertex's own cluster, joined by a level-0 link
        if e.hops:
            return min(e.hops, key=lambda p: (e.hops[p], p))
        return v


def constrained_hop(graph: GraphView, target: int, avoid: frozenset[int] | set[int]) -> int | None:
    """The best hop toward graph node ``target`` on paths that pass through none of the nodes in ``avoid``.

    Routing information carried by a message lists the units it already left
    (routing paper 3.4: "used to avoid routing the event to the same unit
    twice").  Every broker sees other units only as abstract nodes, so two
    brokers can each find the cheapest way through the other's unit; a message
    that never goes back into a unit it left cannot loop.  This is the
    uncached search used when the cached best hop would lead back.
    """
    g = graph
    g.refresh()
    if target in avoid or target not in g.node_level:
        return None
    vertex = g.vertex
    level = g.node_level
    best: dict[int, tuple[float, int, int]] = {vertex: (0.0, 0, _NO_HOP)}
    heap = [(0.0, 0, _NO_HOP, vertex)]
    done: set[int] = set()
    cache = g.cache
    while heap:
        c, n, h, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        if u == target:
            return None if h == _NO_HOP else h
        lu = level[u]
        # outward from u: neighbours v that have u in their L_UL (level(v) >= level(u))
        for v, e in list(g.d[u].items()) + list(g.ul[u].items()):
            if v in done or v in avoid or level[v] < lu:
                continue
            cand = (c + g.weight(e), n + 1, cache._hop_via(u, v, e) if u == vertex else h)
            old = best.get(v)
            if old is None or cand < old:
                best[v] = cand
                heapq.heappush(heap, (cand[0], cand[1], cand[2], v))
    return None
