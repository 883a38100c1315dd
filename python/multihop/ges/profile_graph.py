"""The profile graph (routing paper 3.3.2-3.3.4), after Gryphon's matching algorithm.

Profiles (chains of constraints on successive attributes) are merged into one
graph: a node stands for an attribute reached by a path of constraints, an edge
for one constraint (a value or ``*``) leading to the node of the next
attribute, and the last constraint of a profile is a *destination edge*.  No
two edges end at one node: the graph is a tree (a trie) over
``(value, next attribute)`` steps.  Every edge carries the units interested in
its traversal with their predicate counts (delta-omega), so removing a profile
decrements the counts and removes the edges (and nodes) that reach zero.

Matching an event walks the tree from the node of its first attribute,
following at each node the edge of the event's value and the ``*`` edge, into a
child only if the child's attribute is the event's next one; every destination
edge met adds its units to the result (the walk stops once every destination
the graph holds is in).  The cost depends on the edges an event can traverse,
not on the number of profiles.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable, Sequence

from multihop.ges.profile import WILDCARD, Chain

__all__ = ["ProfileGraph"]


_NONE: dict[Any, Any] = {}  # the shared empty mapping of a node without edges (never written)


class _Node:
    """An attribute reached by a path of constraints (its dicts are made when first needed)."""

    __slots__ = ("edges", "dests")

    def __init__(self) -> None:
        #: (value, next attribute) -> [child node, {unit: count}]
        self.edges: dict[tuple[str, str], list[Any]] = _NONE
        #: value -> {unit: count}: destination edges (a profile ends here)
        self.dests: dict[str, dict[Hashable, int]] = _NONE


class ProfileGraph:
    """A profile graph whose destinations are units (or any hashable: client ids at a broker)."""

    __slots__ = ("roots", "profiles", "edges", "_refs")

    def __init__(self) -> None:
        self.roots: dict[str, _Node] = {}
        #: destination -> how many destination edges name it (matching stops once every one is found)
        self._refs: dict[Hashable, int] = {}
        #: profiles held (sum of all predicate counts on destination edges)
        self.profiles = 0
        #: edges in the graph (destination edges included)
        self.edges = 0

    def add(self, chain: Chain, unit: Hashable, count: int = 1) -> bool:
        """Add ``count`` predicates of ``unit`` for ``chain``; True if the chain was new for that unit."""
        node = self.roots.get(chain[0][0])
        if node is None:
            node = self.roots[chain[0][0]] = _Node()
        last = len(chain) - 1
        for i in range(last):
            step = (chain[i][1], chain[i + 1][0])
            e = node.edges.get(step)
            if e is None:
                if node.edges is _NONE:
                    node.edges = {}
                e = node.edges[step] = [_Node(), {}]
                self.edges += 1
            e[1][unit] = e[1].get(unit, 0) + count
            node = e[0]
        d = node.dests.get(chain[last][1])
        if d is None:
            if node.dests is _NONE:
                node.dests = {}
            d = node.dests[chain[last][1]] = {}
            self.edges += 1
        old = d.get(unit, 0)
        d[unit] = old + count
        if old == 0:
            self._refs[unit] = self._refs.get(unit, 0) + 1
        self.profiles += count
        return old == 0

    def remove(self, chain: Chain, unit: Hashable, count: int = 1) -> bool:
        """Remove ``count`` predicates; edges and nodes whose counts reach zero go.

        True if the unit has no predicate left for the chain.  Raises KeyError if
        the unit has fewer than ``count`` predicates for it.
        """
        root = self.roots.get(chain[0][0])
        if root is None:
            raise KeyError(f"no profile {chain!r} for {unit!r}")
        path: list[tuple[_Node, tuple[str, str]]] = []
        node = root
        last = len(chain) - 1
        for i in range(last):
            step = (chain[i][1], chain[i + 1][0])
            e = node.edges.get(step)
            if e is None or e[1].get(unit, 0) < count:
                raise KeyError(f"no profile {chain!r} for {unit!r}")
            path.append((node, step))
            node = e[0]
        d = node.dests.get(chain[last][1])
        if d is None or d.get(unit, 0) < count:
            raise KeyError(f"no profile {chain!r} for {unit!r}")
        left = d[unit] - count
        if left:
            d[unit] = left
        else:
            del d[unit]
            refs = self._refs[unit] - 1
            if refs:
                self._refs[unit] = refs
            else:
                del self._refs[unit]
            if not d:
                del node.dests[chain[last][1]]
                self.edges -= 1
        for parent, step in path:
            units = parent.edges[step][1]
            n = units[unit] - count
            if n:
                units[unit] = n
            else:
                del units[unit]
        # remove edges left without units, deepest first
        for parent, step in reversed(path):
            e = parent.edges[step]
            if not e[1]:
                del parent.edges[step]
                self.edges -= 1
        if not root.edges and not root.dests:
            del self.roots[chain[0][0]]
        self.profiles -= count
        return left == 0

    def match(self, names: Sequence[str], values: Sequence[str]) -> set[Hashable]:
        """The destinations of an event with these attribute names and canonical values."""
        out: set[Hashable] = set()
        node = self.roots.get(names[0]) if names else None
        if node is None:
            return out
        n = len(names)
        everyone = len(self._refs)
        stack = [(node, 0)]
        while stack and len(out) < everyone:
            node, i = stack.pop()
            v = values[i]
            d = node.dests
            if d:
                hit = d.get(v)
                if hit:
                    out.update(hit)
                hit = d.get(WILDCARD)
                if hit:
                    out.update(hit)
            if i + 1 < n and node.edges:
                nxt = names[i + 1]
                e = node.edges.get((v, nxt))
                if e is not None:
                    stack.append((e[0], i + 1))
                e = node.edges.get((WILDCARD, nxt))
                if e is not None:
                    stack.append((e[0], i + 1))
        return out

    def chains(self) -> list[tuple[Chain, Hashable, int]]:
        """Every (chain, unit, count) held (for tests and status)."""
        out: list[tuple[Chain, Hashable, int]] = []

        def walk(node: _Node, attr: str, prefix: tuple[tuple[str, str], ...]) -> None:
            for v, units in node.dests.items():
                for u, c in units.items():
                    out.append((prefix + ((attr, v),), u, c))
            for (v, nxt), (child, _) in node.edges.items():
                walk(child, nxt, prefix + ((attr, v),))

        for attr, node in self.roots.items():
            walk(node, attr, ())
        return out

    def units(self) -> set[Hashable]:
        """Every destination with at least one predicate."""
        return {u for _, u, _ in self.chains()}

    def clear(self) -> None:
        """Forget every profile."""
        self.roots.clear()
        self._refs.clear()
        self.profiles = 0
        self.edges = 0

    @classmethod
    def of(cls, items: Iterable[tuple[Chain, Hashable]]) -> "ProfileGraph":
        """A graph holding one predicate per (chain, unit)."""
        g = cls()
        for chain, unit in items:
            g.add(chain, unit)
        return g
