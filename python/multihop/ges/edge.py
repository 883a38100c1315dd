"""An edge of a broker's connectivity graph: two nodes, a level, and the gateways it stands for.

:class:`~multihop.ges.graph.ConnectivityGraph` makes them; the routing cache
(:mod:`~multihop.ges.routing_cache`) reads them.
"""

from __future__ import annotations

__all__ = ["Edge"]


class Edge:
    """One edge: its two nodes (``a`` at the lower level), level, and the gateways it stands for."""

    __slots__ = ("a", "b", "level", "gateways", "hops")

    def __init__(self, a: int, b: int, level: int) -> None:
        self.a = a
        self.b = b
        self.level = level
        #: gateway key -> smallest extra cost among the connections of that gateway on this edge
        self.gateways: dict[int, int] = {}
        #: for an edge at the vertex: peer broker -> extra cost of the vertex's own gateway to it
        self.hops: dict[int, int] = {}

    def extra(self) -> int:
        """The smallest extra cost among the edge's gateways."""
        return min(self.gateways.values())
