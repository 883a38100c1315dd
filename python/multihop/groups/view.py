"""Endpoints and views: who is in an application group, as of one view.

An :class:`Endpoint` is one dispatcher of the universe (every dispatcher of a
runtime): the core it is attached on and the id its monitor gave it.

A :class:`View` is one numbered state of an application group: its members
(node id -> endpoint) and its multicast groups (multicast id -> node ids).
Every membership change (a join, a leave, a death, a multicast group created,
joined or left) makes the next view.  The rule TN-006 leaves undefined is
ours, and every machine of this package keeps it:

    **a message is delivered to the members of the view it was sent in**
    (its destination set is computed from that view: a member that joins
    later never sees it; a member that leaves later still gets it before its
    leave completes; a member that dies may miss it, and nobody else does).

For total order "sent" means *stamped by the sequencer* (see
:mod:`multihop.groups.ordering.total`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from multihop.groups.errors import GroupError
from multihop.groups.ids import BROADCAST, dest_kind

__all__ = ["Endpoint", "View", "ORDERS"]

ORDERS: tuple[str, ...] = ("fifo", "causal", "total")
"""The ordering a group is created with (fixed for the group's life)."""


@dataclass(frozen=True, order=True)
class Endpoint:
    """One dispatcher of the universe: its core and the id its monitor assigned."""

    core: int
    dispatcher: int

    def __str__(self) -> str:
        return f"{self.dispatcher}@{self.core}"


@dataclass(frozen=True)
class View:
    """One numbered membership of an application group (immutable).

    ``members`` maps node ids to endpoints; ``multicast`` maps multicast ids
    to the node ids in that multicast group (a multicast group may be empty).
    Both are kept sorted by id, so equal views compare equal.
    """

    group: str
    view_id: int
    order: str
    tree: str
    members: tuple[tuple[int, Endpoint], ...] = ()
    multicast: tuple[tuple[int, frozenset[int]], ...] = ()
    _by_node: dict[int, Endpoint] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", tuple(sorted(self.members)))
        object.__setattr__(self, "multicast", tuple(sorted((m, frozenset(n)) for m, n in self.multicast)))
        object.__setattr__(self, "_by_node", dict(self.members))

    @classmethod
    def make(
        cls, group: str, view_id: int, order: str, tree: str, members: Mapping[int, Endpoint], multicast: Mapping[int, Iterable[int]] | None = None
    ) -> View:
        """A view from plain mappings."""
        return cls(group, view_id, order, tree, tuple(members.items()), tuple((m, frozenset(n)) for m, n in (multicast or {}).items()))

    @property
    def nodes(self) -> tuple[int, ...]:
        """The members' node ids, ascending."""
        return tuple(n for n, _ in self.members)

    def endpoint(self, node: int) -> Endpoint:
        """The endpoint of member ``node``; GroupError if it is not a member of this view."""
        try:
            return self._by_node[node]
        except KeyError:
            raise GroupError(f"node id {node} is not a member of group {self.group!r} in view {self.view_id}") from None

    def node_of(self, endpoint: Endpoint) -> int | None:
        """The node id of ``endpoint`` in this view, or None if it is not a member."""
        for n, e in self.members:
            if e == endpoint:
                return n
        return None

    def multicast_members(self, mcast: int) -> frozenset[int]:
        """The node ids of multicast group ``mcast``; GroupError if it does not exist in this view."""
        for m, nodes in self.multicast:
            if m == mcast:
                return nodes
        raise GroupError(f"multicast id {mcast} is not a multicast group of {self.group!r} in view {self.view_id}")

    def destinations(self, dest: int) -> tuple[int, ...]:
        """The node ids a message to ``dest`` is delivered to in this view, ascending.

        The broadcast id reaches every member, a multicast id its group's
        members, a node id that one member (the sender included whenever it
        is in the set: self-delivery, so total order holds at the sender too).

        Raises:
            GroupError: ``dest`` is no destination id, or names a node or a
                multicast group this view does not have.
        """
        kind = dest_kind(dest)
        if kind == "broadcast":
            return self.nodes
        if kind == "multicast":
            return tuple(sorted(self.multicast_members(dest)))
        self.endpoint(dest)
        return (dest,)

    def sequencer(self, dest: int) -> int:
        """The total-order sequencer of ``dest``: its lowest destination node id in this view.

        GroupError when ``dest`` has no member (an empty multicast group).
        """
        nodes = self.destinations(dest)
        if not nodes:
            raise GroupError(f"destination {dest} of group {self.group!r} has no member in view {self.view_id}")
        return nodes[0]

    def cores(self, dest: int = BROADCAST) -> tuple[int, ...]:
        """The distinct cores of ``dest``'s members, ascending (what a tree spans)."""
        return tuple(sorted({self.endpoint(n).core for n in self.destinations(dest)}))
