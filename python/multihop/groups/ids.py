"""Destination ids of an application group (TN-006 4.1), as 32-bit integers.

TN-006 gives every member of an application group a *node id*, every
multicast group a *multicast id*, and the group an *application broadcast id*,
and requires the three sets to be disjoint (their union is the *destination
ids*).  We make them disjoint by construction, with the kind in the top two
bits, so a monitor tells them apart from the id alone (the wire format in
``docs/groups.md`` carries the id as a ``u32``):

=============  ==========================  =================================
kind           range                       assigned
=============  ==========================  =================================
node id        ``1 .. 2**30 - 1``          at join, counting up, never reused
multicast id   ``2**30 + 1 .. 2**31 - 1``  at creation, counting up, never reused
broadcast id   ``2**31`` (one value)       every member of every group
=============  ==========================  =================================

Ids are never reused within a group, so a stale id (a member that left or
died, a multicast group that was removed) can never address a newcomer: it
is rejected as unknown.  ``0`` is no id.
"""

from __future__ import annotations

from typing import Literal

from multihop.groups.errors import GroupError

__all__ = [
    "BROADCAST",
    "MULTICAST_BASE",
    "NODE_LIMIT",
    "MULTICAST_LIMIT",
    "DestKind",
    "dest_kind",
    "node_id",
    "multicast_id",
    "is_node",
    "is_multicast",
]

MULTICAST_BASE = 1 << 30
"""The first multicast id is ``MULTICAST_BASE + 1``."""

BROADCAST = 1 << 31
"""The application broadcast id: the same single value in every group."""

NODE_LIMIT = MULTICAST_BASE - 1
"""The largest node id."""

MULTICAST_LIMIT = BROADCAST - 1
"""The largest multicast id."""

DestKind = Literal["node", "multicast", "broadcast"]


def node_id(n: int) -> int:
    """The ``n``-th node id of a group (``n`` from 1); raises GroupError past :data:`NODE_LIMIT`."""
    if not 1 <= n <= NODE_LIMIT:
        raise GroupError(f"node number {n} is out of range 1..{NODE_LIMIT}")
    return n


def multicast_id(n: int) -> int:
    """The ``n``-th multicast id of a group (``n`` from 1)."""
    if not 1 <= n <= MULTICAST_LIMIT - MULTICAST_BASE:
        raise GroupError(f"multicast number {n} is out of range 1..{MULTICAST_LIMIT - MULTICAST_BASE}")
    return MULTICAST_BASE + n


def dest_kind(dest: object) -> DestKind:
    """Which kind of destination id ``dest`` is.

    Raises:
        GroupError: ``dest`` is not an int, is 0, negative, or above ``2**31``.
    """
    if isinstance(dest, bool) or not isinstance(dest, int):
        raise GroupError(f"a destination id is an int, got {dest!r}")
    if dest == BROADCAST:
        return "broadcast"
    if 1 <= dest <= NODE_LIMIT:
        return "node"
    if MULTICAST_BASE < dest <= MULTICAST_LIMIT:
        return "multicast"
    raise GroupError(
        f"{dest!r} is no destination id: node ids are 1..{NODE_LIMIT}, multicast ids "
        f"{MULTICAST_BASE + 1}..{MULTICAST_LIMIT}, the broadcast id is {BROADCAST}"
    )


def is_node(dest: int) -> bool:
    """Whether ``dest`` is a node id (no error for other ints)."""
    return isinstance(dest, int) and not isinstance(dest, bool) and 1 <= dest <= NODE_LIMIT


def is_multicast(dest: int) -> bool:
    """Whether ``dest`` is a multicast id (no error for other ints)."""
    return isinstance(dest, int) and not isinstance(dest, bool) and MULTICAST_BASE < dest <= MULTICAST_LIMIT
