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

from typing import Any, Generic, Hashable, Iterable, Protocol, Sequence, TypeVar

from multihop.ges.profile import WILDCARD, Chain

__all__ = ["ProfileGraph", "GraphLike"]


_NONE: dict[Any, Any] = {}  # the shared empty mapping of a node without edges (never written)

#: what a graph's destinations are: unit codes (int) at a broker, client peers in its local graph
U = TypeVar("U", bound=Hashable)


class _Node(Generic[U]):
    """An attribute reached by a path of constraints, and the edge that leads to it.

    Edges are indexed by the next attribute first, then by value, so a match at a
    node looks up the event's next attribute once and then its value and ``*``
    (two dict lookups of strings, no key tuple made per step).  The units of the
    edge leading here live on the node (the graph is a tree: one edge per node).
    """

    __slots__ = ("next", "dests", "units")

    def __init__(self) -> None:
        #: next attribute -> value -> child node (the edge (value, next attribute))
        self.next: dict[str, dict[str, _Node[U]]] = _NONE
        #: value -> {unit: count}: destination edges (a profile ends here)
        self.dests: dict[str, dict[U, int]] = _NONE
        #: {unit: count} of the edge that leads to this node (unused at a root)
        self.units: dict[U, int] = {}


class GraphLike(Protocol):
    """What the protocols use of a profile graph with integer destinations: a :class:`ProfileGraph` ``[int]``,
    or the native one (``multihop._ges.ProfileGraph``, same semantics) that the native event engine decides with."""

    def add(self, chain: Chain, unit: int, count: int = 1) -> bool:
        """Add ``count`` predicates of ``unit`` for ``chain``; True if the chain was new for that unit."""
        ...

    def remove(self, chain: Chain, unit: int, count: int = 1) -> bool:
        """Remove ``count`` predicates (KeyError if fewer are held); True if none is left for the chain."""
        ...

    def match(self, names: Sequence[str], values: Sequence[str]) -> set[int]:
        """The destinations of an event with these attribute names and canonical values."""
        ...

    def chains(self) -> list[tuple[Chain, int, int]]:
        """Every (chain, unit, count) held."""
        ...

    def units(self) -> set[int]:
        """Every destination with at least one predicate."""
        ...

    def clear(self) -> None:
        """Forget every profile."""
        ...

    @property
    def profiles(self) -> int:
        """Profiles held."""
        ...

    @property
    def edges(self) -> int:
        """Edges in the graph (destination edges included)."""
        ...


class ProfileGraph(Generic[U]):
    """A profile graph whose destinations are units (or any hashable: client ids at a broker)."""

    __slots__ = ("roots", "profiles", "edges", "_refs")

    #: changes to any profile graph of this process (made, added to, removed from, cleared): a result
    #: derived from graphs (the event routing's remembered decisions) stays valid while this is unchanged
    generation = 0

    def __init__(self) -> None:
        ProfileGraph.generation += 1
        self.roots: dict[str, _Node[U]] = {}
        #: destination -> how many destination edges name it (matching stops once every one is found)
        self._refs: dict[U, int] = {}
        #: profiles held (sum of all predicate counts on destination edges)
        self.profiles = 0
        #: edges in the graph (destination edges included)
        self.edges = 0

    def add(self, chain: Chain, unit: U, count: int = 1) -> bool:
        """Add ``count`` predicates of ``unit`` for ``chain``; True if the chain was new for that unit."""
        ProfileGraph.generation += 1
        node = self.roots.get(chain[0][0])
        if node is None:
            node = self.roots[chain[0][0]] = _Node()
        last = len(chain) - 1
        for i in range(last):
            value, nxt = chain[i][1], chain[i + 1][0]
            if node.next is _NONE:
                node.next = {}
            by_value = node.next.get(nxt)
            if by_value is None:
                by_value = node.next[nxt] = {}
            child = by_value.get(value)
            if child is None:
                child = by_value[value] = _Node()
                self.edges += 1
            child.units[unit] = child.units.get(unit, 0) + count
            node = child
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

    def remove(self, chain: Chain, unit: U, count: int = 1) -> bool:
        """Remove ``count`` predicates; edges and nodes whose counts reach zero go.

        True if the unit has no predicate left for the chain.  Raises KeyError if
        the unit has fewer than ``count`` predicates for it.
        """
        ProfileGraph.generation += 1
        root = self.roots.get(chain[0][0])
        if root is None:
            raise KeyError(f"no profile {chain!r} for {unit!r}")
        path: list[tuple[_Node[U], str, str, _Node[U]]] = []  # (parent, next attribute, value, child)
        node = root
        last = len(chain) - 1
        for i in range(last):
            value, nxt = chain[i][1], chain[i + 1][0]
            child = node.next.get(nxt, _NONE).get(value)
            if child is None or child.units.get(unit, 0) < count:
                raise KeyError(f"no profile {chain!r} for {unit!r}")
            path.append((node, nxt, value, child))
            node = child
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
        for _, _, _, child in path:
            n = child.units[unit] - count
            if n:
                child.units[unit] = n
            else:
                del child.units[unit]
        # remove edges left without units, deepest first
        for parent, nxt, value, child in reversed(path):
            if not child.units:
                by_value = parent.next[nxt]
                del by_value[value]
                if not by_value:
                    del parent.next[nxt]
                self.edges -= 1
        if not root.next and not root.dests:
            del self.roots[chain[0][0]]
        self.profiles -= count
        return left == 0

    def match(self, names: Sequence[str], values: Sequence[str]) -> set[U]:
        """The destinations of an event with these attribute names and canonical values.

        The walk goes attribute by attribute over the frontier of nodes the event
        reached (each followed by its value and by ``*``), and stops once every
        destination the graph holds is found.
        """
        out: set[U] = set()
        node = self.roots.get(names[0]) if names else None
        if node is None:
            return out
        everyone = len(self._refs)
        frontier = [node]
        last = len(names) - 1
        i = 0
        while True:
            v = values[i]
            nxt = names[i + 1] if i < last else None
            reached: list[_Node[U]] = []
            for node in frontier:
                d = node.dests
                if d:
                    hit = d.get(v)
                    if hit:
                        out.update(hit)
                    hit = d.get(WILDCARD)
                    if hit:
                        out.update(hit)
                if nxt is not None and node.next:
                    by_value = node.next.get(nxt)
                    if by_value is not None:
                        child = by_value.get(v)
                        if child is not None:
                            reached.append(child)
                        child = by_value.get(WILDCARD)
                        if child is not None:
                            reached.append(child)
            if not reached or len(out) >= everyone:
                return out
            frontier = reached
            i += 1

    def chains(self) -> list[tuple[Chain, U, int]]:
        """Every (chain, unit, count) held (for tests and status)."""
        out: list[tuple[Chain, U, int]] = []

        def walk(node: _Node[U], attr: str, prefix: tuple[tuple[str, str], ...]) -> None:
            for v, units in node.dests.items():
                for u, c in units.items():
                    out.append((prefix + ((attr, v),), u, c))
            for nxt, by_value in node.next.items():
                for v, child in by_value.items():
                    walk(child, nxt, prefix + ((attr, v),))

        for attr, node in self.roots.items():
            walk(node, attr, ())
        return out

    def units(self) -> set[U]:
        """Every destination with at least one predicate."""
        return {u for _, u, _ in self.chains()}

    def clear(self) -> None:
        """Forget every profile."""
        ProfileGraph.generation += 1
        self.roots.clear()
        self._refs.clear()
        self.profiles = 0
        self.edges = 0

    @classmethod
    def of(cls, items: Iterable[tuple[Chain, U]]) -> "ProfileGraph[U]":
        """A graph holding one predicate per (chain, unit)."""
        g = cls()
        for chain, unit in items:
            g.add(chain, unit)
        return g
