"""The messages of the group protocols, as plain immutable values (no bytes, no I/O).

Three conversations (the wire encodings are in ``docs/groups.md``):

* **data**, member to members along a tree: :class:`Data`, and for total
  order :class:`Submit` (sender to sequencer) whose stamped copy is a
  :class:`Data` with ``stamp > 0``;
* **requests**, member to the membership service (in phase 2 the initial
  monitor, beside the name registry): :class:`Request` subclasses, each
  answered by one :class:`Reply` carrying the same ``req``;
* **view changes**, service to members: :class:`Prepare` (stop sending in
  the current view and report what you sent), :class:`Flushed` (the
  report; for a dead member its monitor sends it, see :class:`Died`), and
  :class:`Install` (the next view, and how far every stream of the old view
  goes, so each member knows when it has everything of the old view).

A *stream* is one destination id of one view: every (sender, stream) pair
numbers its messages 1, 2, 3 ... (``seq``).  Ordering is per stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from multihop.groups.view import Endpoint, View

__all__ = [
    "Data",
    "Submit",
    "Request",
    "CreateGroup",
    "Join",
    "Leave",
    "CreateMulticast",
    "JoinMulticast",
    "LeaveMulticast",
    "Reply",
    "Prepare",
    "Flushed",
    "Died",
    "Install",
    "StreamMark",
]


@dataclass(frozen=True)
class Data:
    """One group message as a member receives it.

    ``sender`` and ``seq`` name it (the original sender's node id and its
    number in the stream); ``vc`` is the causal vector clock (one count per
    member of the view, in node-id order; empty unless the group is causal);
    ``stamp`` is the sequencer's number (total order; 0 otherwise).
    """

    group: str
    view: int
    dest: int
    sender: int
    seq: int
    payload: bytes = b""
    vc: tuple[int, ...] = ()
    stamp: int = 0


@dataclass(frozen=True)
class Submit:
    """A total-order message on its way from its sender to the stream's sequencer."""

    group: str
    view: int
    dest: int
    sender: int
    seq: int
    payload: bytes = b""


@dataclass(frozen=True)
class Request:
    """A request of an endpoint to the membership service; ``req`` pairs it with its :class:`Reply`."""

    req: int
    endpoint: Endpoint
    group: str


@dataclass(frozen=True)
class CreateGroup(Request):
    """Create application group ``group`` with an ordering and a tree mode (the creator does not join)."""

    order: str = "fifo"
    tree: str = "numa"


@dataclass(frozen=True)
class Join(Request):
    """Join application group ``group``; the reply carries the new node id."""


@dataclass(frozen=True)
class Leave(Request):
    """Leave application group ``group`` (and every multicast group in it)."""


@dataclass(frozen=True)
class CreateMulticast(Request):
    """Create a multicast group in ``group`` (a member asks); the reply carries its multicast id."""


@dataclass(frozen=True)
class JoinMulticast(Request):
    """Join multicast group ``mcast`` of ``group``."""

    mcast: int = 0


@dataclass(frozen=True)
class LeaveMulticast(Request):
    """Leave multicast group ``mcast`` of ``group``."""

    mcast: int = 0


@dataclass(frozen=True)
class Reply:
    """The answer to a request: ``error`` is None on success, else what was wrong; ``value`` an id."""

    req: int
    group: str
    value: int = 0
    error: str | None = None


@dataclass(frozen=True)
class StreamMark:
    """How far one stream of a closing view goes: ``sender``'s last ``seq`` to ``dest``.

    For a total-order stream, ``sender`` is the sequencer and ``seq`` its
    last stamp; ``submitted`` maps each original sender to the last of its
    submissions the sequencer stamped (the rest are submitted again in the
    next view).
    """

    dest: int
    sender: int
    seq: int
    submitted: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Prepare:
    """Service to every live member of ``view``: stop sending in it and answer with :class:`Flushed`."""

    group: str
    view: int


@dataclass(frozen=True)
class Flushed:
    """A member's (or, for a dead one, its monitor's) report on ``view``: how far each of its streams went."""

    group: str
    view: int
    node: int
    marks: tuple[StreamMark, ...] = ()


@dataclass(frozen=True)
class Died:
    """The monitor of a dead endpoint tells the service, with what that endpoint wrote before it died.

    ``flushed`` holds one report per group the endpoint was in (the last
    frame of each stream its link carried: the monitor forwards everything
    the dead dispatcher wrote before it handles the death).
    """

    endpoint: Endpoint
    flushed: tuple[Flushed, ...] = ()


@dataclass(frozen=True)
class Install:
    """The next view, and where every stream of the view it replaces ends.

    A member installs ``view`` (and runs its callbacks) only after it has
    delivered, of the old view, every message up to these marks that was
    addressed to it.  ``joined``, ``left`` and ``died`` are node ids.
    """

    view: View
    closing: tuple[StreamMark, ...] = ()
    joined: tuple[int, ...] = ()
    left: tuple[int, ...] = ()
    died: tuple[int, ...] = ()
