"""The link cost matrix (routing paper section 3.2.5, Table 1).

Traversing a connectivity-graph edge between a level-``x`` node and a
level-``y`` node costs ``x + y``: links inside a cluster are cheapest, and the
cost grows with the levels of the units joined, since higher-level gateways
carry more traffic.  On top of the matrix every gateway has its own extra
cost (default 0) that can be changed while the system runs ("if a certain
link is overloaded, we could increase the cost associated with traversal
along that link"); an edge made of several parallel gateways costs the
matrix value plus the smallest extra cost among them.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["CostMatrix"]


class CostMatrix:
    """``cost(x, y)``: the weight of an edge between graph nodes of levels ``x`` and ``y``.

    The default is Table 1 (``x + y``); pass ``matrix`` (a function of the two
    levels returning a non-negative number) to use another.
    """

    __slots__ = ("_table", "_fn")

    def __init__(self, levels: int, matrix: Callable[[int, int], float] | None = None) -> None:
        fn = matrix or (lambda x, y: x + y)
        self._fn = fn
        size = levels + 1
        table = [[float(fn(x, y)) for y in range(size)] for x in range(size)]
        for row in table:
            for v in row:
                if v < 0:
                    raise ValueError(f"link costs must be non-negative, the matrix gave {v}")
        self._table = table

    def __call__(self, x: int, y: int) -> float:
        """The matrix element (x, y)."""
        return self._table[x][y]

    def rows(self) -> list[list[float]]:
        """The whole matrix, one row per level."""
        return [list(r) for r in self._table]
