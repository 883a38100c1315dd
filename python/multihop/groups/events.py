"""What a member machine tells its application (the callbacks of TN-006 4.3.1) and asks the network to do.

Events (drained with :meth:`GroupMember.events`): :class:`Created`,
:class:`Joined` (the join callback), :class:`Left` (the leave callback),
:class:`ViewChanged`, :class:`MulticastCreated`, :class:`Sent`,
:class:`Delivered`, :class:`Failed`, :class:`SendFailed`.

Transmits (drained with :meth:`GroupMember.transmits`): :class:`ToService`,
:class:`Multicast` (down the tree of ``frame.dest`` in ``frame.view``, to
every member of that destination set but ``origin``, whose copy is local)
and :class:`Unicast` (to one node of ``frame.view``).
"""

from __future__ import annotations

from dataclasses import dataclass

from multihop.groups.messages import Data, Submit
from multihop.groups.view import Endpoint, View

__all__ = [
    "Created",
    "Joined",
    "Left",
    "ViewChanged",
    "MulticastCreated",
    "Sent",
    "Delivered",
    "Failed",
    "SendFailed",
    "ToService",
    "Multicast",
    "Unicast",
    "Event",
    "Transmit",
]


@dataclass(frozen=True)
class Created:
    """Group ``group`` was created; ``group_id`` is unique in the universe."""

    req: int
    group: str
    group_id: int


@dataclass(frozen=True)
class Joined:
    """This endpoint is now member ``node`` of ``group`` (the join callback)."""

    group: str
    node: int
    view: View


@dataclass(frozen=True)
class Left:
    """This endpoint has left ``group``, having delivered everything addressed to it (the leave callback)."""

    group: str
    view_id: int


@dataclass(frozen=True)
class ViewChanged:
    """A new view of ``group`` is installed here; node ids that joined, left and died in it."""

    group: str
    view: View
    joined: tuple[int, ...]
    left: tuple[int, ...]
    died: tuple[int, ...]


@dataclass(frozen=True)
class MulticastCreated:
    """Multicast group ``mcast`` of ``group`` exists (empty; members join it with join_multicast)."""

    req: int
    group: str
    mcast: int


@dataclass(frozen=True)
class Sent:
    """A send left this member in ``view`` (for total order: was submitted in it) for ``recipients``."""

    group: str
    view: int
    dest: int
    payload: bytes
    recipients: tuple[Endpoint, ...]


@dataclass(frozen=True)
class Delivered:
    """A message delivered here, in its stream's order."""

    group: str
    view: int
    dest: int
    sender: int
    payload: bytes


@dataclass(frozen=True)
class Failed:
    """Request ``req`` was refused; ``error`` says why (nothing changed)."""

    req: int
    group: str
    error: str


@dataclass(frozen=True)
class SendFailed:
    """A send queued during a view change could not go out in the next view (``error`` says why)."""

    group: str
    dest: int
    payload: bytes
    error: str


@dataclass(frozen=True)
class ToService:
    """A message for the membership service."""

    msg: object


@dataclass(frozen=True)
class Multicast:
    """``frame`` to every member of ``frame.dest`` in ``frame.view`` except node ``origin``, down a tree."""

    frame: Data
    origin: int


@dataclass(frozen=True)
class Unicast:
    """``frame`` to node ``node`` of ``frame.view``."""

    node: int
    frame: Data | Submit


Event = Created | Joined | Left | ViewChanged | MulticastCreated | Sent | Delivered | Failed | SendFailed
Transmit = ToService | Multicast | Unicast
