"""A multicast tree over cores: who sends to whom, and in which order.

A :class:`Tree` has a root (the sender's core) and, for every core, the
ordered tuple of its children: a core sends its copies in that order, which
matters (the numa tree sends to far sockets first).  The constructor checks
the shape, so a :class:`Tree` always reaches every one of its cores exactly
once from the root, with no cycle; trees are built by
:mod:`multihop.groups.trees` (``flat``, ``radix``, ``numa``) and
:mod:`multihop.groups.machine_tree` (``machine``).

In phase 2 each core's children become that monitor's fan-out entry for the
group (``docs/groups.md``); here a tree is a value the simulator plays.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from multihop.groups.errors import GroupError

__all__ = ["Tree"]


@dataclass(frozen=True)
class Tree:
    """A rooted tree over distinct cores with ordered children (immutable, validated).

    ``children`` maps a core to the cores it sends to, in send order; leaves
    may be left out.  The tree's cores are the root and every child.

    Raises:
        GroupError: a core with two parents, the root as a child, a core with
            children that the root never reaches, or a non-int core id.
    """

    root: int
    children: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    mode: str = "custom"
    #: child -> parent (made from ``children``; not compared, not shown)
    _parent: dict[int, int] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        kids = {int(c): tuple(int(x) for x in cs) for c, cs in self.children.items() if cs}
        for core in (self.root, *kids, *(x for cs in kids.values() for x in cs)):
            if isinstance(core, bool) or not isinstance(core, int) or core < 0:
                raise GroupError(f"tree cores must be non-negative ints, got {core!r}")
        parent: dict[int, int] = {}
        for core, cs in kids.items():
            for child in cs:
                if child == self.root:
                    raise GroupError(f"core {core} sends to the root {self.root}: a tree has no cycle")
                if child in parent:
                    raise GroupError(f"core {child} has two parents ({parent[child]} and {core}): every core is reached exactly once")
                parent[child] = core
        reached = {self.root}
        stack = [self.root]
        while stack:  # bounded: each core is pushed once (it has one parent)
            for child in kids.get(stack.pop(), ()):
                reached.add(child)
                stack.append(child)
        unreached = sorted(set(kids) - reached)
        if unreached:
            raise GroupError(f"cores {unreached} have children but the root {self.root} never reaches them")
        object.__setattr__(self, "children", kids)
        object.__setattr__(self, "_parent", parent)

    @property
    def cores(self) -> tuple[int, ...]:
        """Every core of the tree, root first, then breadth first in send order."""
        return tuple(self.breadth_first())

    def breadth_first(self) -> Iterator[int]:
        """The cores, root first, level by level, each level in send order."""
        level = [self.root]
        while level:
            yield from level
            level = [c for core in level for c in self.children.get(core, ())]

    def children_of(self, core: int) -> tuple[int, ...]:
        """The cores ``core`` sends to, in order (empty for a leaf)."""
        return self.children.get(core, ())

    def parent_of(self, core: int) -> int | None:
        """The core that sends to ``core`` (None for the root); GroupError if not in the tree."""
        if core == self.root:
            return None
        parent = self._parent
        if core not in parent:
            raise GroupError(f"core {core} is not in the tree rooted at {self.root}")
        return parent[core]

    def path_to(self, core: int) -> list[int]:
        """The cores from the root down to ``core``, both included."""
        path = [core]
        while path[-1] != self.root:
            parent = self.parent_of(path[-1])
            assert parent is not None
            path.append(parent)
        return path[::-1]

    def depth(self) -> int:
        """The number of edges on the longest root-to-leaf path (0 for a lone root)."""
        return max(len(self.path_to(c)) - 1 for c in self.cores)

    def edges(self) -> list[tuple[int, int]]:
        """Every (parent, child) edge, parents breadth first, children in send order."""
        return [(c, x) for c in self.breadth_first() for x in self.children.get(c, ())]

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form: ``{"root": 0, "mode": "numa", "children": {"0": [8, 1]}}``."""
        return {"root": self.root, "mode": self.mode, "children": {str(c): list(cs) for c, cs in sorted(self.children.items())}}

    def render(self) -> str:
        """The tree as indented text, one core a line, children in send order."""
        lines: list[str] = []

        def walk(core: int, indent: int) -> None:
            lines.append("  " * indent + str(core))
            for child in self.children.get(core, ()):
                walk(child, indent + 1)

        walk(self.root, 0)
        return "\n".join(lines)

    @classmethod
    def from_parents(cls, root: int, order: Sequence[tuple[int, int]], mode: str = "custom") -> Tree:
        """A tree from ``(parent, child)`` edges listed in send order."""
        kids: dict[int, list[int]] = {}
        for parent, child in order:
            kids.setdefault(parent, []).append(child)
        return cls(root, {c: tuple(cs) for c, cs in kids.items()}, mode)
