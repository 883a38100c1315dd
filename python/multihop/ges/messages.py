"""The protocol messages brokers exchange, as plain immutable values.

The protocol machines take and return these; the simulator hands them over
as objects, the live broker encodes them with the generated Flounder stubs
of ``flounder-idl/ges_broker.if`` (:mod:`multihop.ges.live.wire`).
"""

from __future__ import annotations

from typing import NamedTuple, Union

from multihop.ges.gpp import Record

__all__ = ["Connections", "JoinRequest", "JoinReply", "Message"]


class Connections(NamedTuple):
    """GPP: connection records (each with the level of its near end as sent)."""

    records: tuple[Record, ...]


class JoinRequest(NamedTuple):
    """NAP: a newcomer asks for a gateway of ``level`` (routing paper 3.1).

    ``level`` 0: a single node asks to join a cluster as a level-0 gatekeeper.
    ``level`` l > 0: a whole level-``l`` unit asks to be added under the parent
    unit of the member it asks (it keeps its inner addresses, its prefix is
    renamed).  The request travels from member to member (``target`` is the
    member it is addressed to, ``path`` the brokers it passed, for the reply);
    ``tried`` are the members that were at their threshold already.
    """

    request: int  #: unique id of the request
    level: int  #: the kind of gatekeeper asked for (see above)
    unit: int  #: for level 0: the cluster to join, or 0 for "a cluster next to the target"
    target: int  #: the member this request is addressed to
    path: tuple[int, ...]  #: brokers the request went through (the reply goes back along it)
    tried: tuple[int, ...]  #: members that were full already


class JoinReply(NamedTuple):
    """NAP: the answer to a :class:`JoinRequest`."""

    request: int
    accepted_by: int  #: the member that takes the newcomer (-1 if none)
    assigned: int  #: the newcomer's address code (node) or its new unit id (unit addition); -1 if refused
    gatekeepers: tuple[int, ...]  #: when every member was full: the unit's gatekeepers one level up
    path: tuple[int, ...]  #: the way back (the reply is passed to path[-1], which pops it)
    reason: str  #: why it was refused ("" when accepted)


Message = Union[Connections, JoinRequest, JoinReply]
