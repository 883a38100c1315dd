"""One endpoint's side of group communication: requests, sends, view changes, deliveries (sans-IO).

A :class:`GroupMember` is driven the h11 way: the application calls its
request and send methods, the network feeds it what arrived
(:meth:`GroupMember.receive`), and both kinds of call only queue output:
:meth:`GroupMember.transmits` drains what to send, :meth:`GroupMember.events`
what to tell the application (the join and leave callbacks among them).

Rules it keeps (see :mod:`multihop.groups.view` and ``docs/groups.md``):

* a send goes out in the current view; between a :class:`Prepare` and the
  next view's install it waits in order and goes out in the next view (a
  destination gone by then gives :class:`SendFailed`);
* an :class:`Install` is applied only once every message of the old view
  up to its closing marks that was addressed here has been delivered; frames
  of the next view that arrive earlier wait;
* the leave callback (:class:`Left`) comes after everything addressed to
  this member in the views it was in; the join callback (:class:`Joined`)
  comes with the first view that has it.

Bad input raises :class:`GroupError` and changes nothing: a send to a group
this endpoint is not in (or to a destination its view lacks), a second join,
a leave or a multicast request by a non-member, an unknown ordering or tree
mode.  A frame that breaks the protocol raises :class:`ProtocolError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from multihop.errors import ProtocolError
from multihop.groups.errors import GroupError
from multihop.groups.events import (
    Created,
    Failed,
    Joined,
    Left,
    MulticastCreated,
    SendFailed,
    ToService,
    Transmit,
    ViewChanged,
)
from multihop.groups.ids import dest_kind
from multihop.groups.messages import (
    CreateGroup,
    CreateMulticast,
    Data,
    Flushed,
    Install,
    Join,
    JoinMulticast,
    Leave,
    LeaveMulticast,
    Prepare,
    Reply,
    Request,
    Submit,
)
from multihop.groups.streams import ViewStreams
from multihop.groups.trees import parse_tree
from multihop.groups.view import ORDERS, Endpoint, View

__all__ = ["GroupMember"]


@dataclass
class _Membership:
    """This endpoint's state in one group."""

    streams: ViewStreams | None = None  # None while the join is pending
    install: Install | None = None  # the next view, waiting for the old one's messages
    prepare: Prepare | None = None  # a Prepare of a view not installed here yet
    future: list[Data | Submit] = field(default_factory=list)  # frames of views not installed here yet
    queued: list[tuple[int, bytes]] = field(default_factory=list)  # sends held during a view change
    leaving: bool = False
    leave_req: Leave | None = None  # a total-order leave waits until its submissions are stamped


class GroupMember:
    """The group machine of one endpoint (one dispatcher), for every group it uses."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._groups: dict[str, _Membership] = {}
        self._left: dict[str, int] = {}  # group -> the first view this endpoint was no longer in
        self._pending: dict[int, Request] = {}
        self._next_req = 1
        self._tx: list[Transmit] = []
        self._ev: list[object] = []

    # ---- output ----------------------------------------------------------------

    def transmits(self) -> list[Transmit]:
        """Drain what to send (to the service, down trees, to single nodes), in order."""
        out, self._tx = self._tx, []
        return out

    def events(self) -> list[object]:
        """Drain what happened (joined, left, views, deliveries, failures), in order."""
        out, self._ev = self._ev, []
        return out

    # ---- queries ---------------------------------------------------------------

    def groups(self) -> list[str]:
        """The groups this endpoint is a member of (a view installed here), sorted."""
        return sorted(g for g, m in self._groups.items() if m.streams is not None)

    def node(self, group: str) -> int:
        """This endpoint's node id in ``group``; GroupError if it is not a member."""
        return self._member(group).me

    def leaving(self, group: str) -> bool:
        """Whether this endpoint has asked to leave ``group`` (it may send no more to it)."""
        m = self._groups.get(group)
        return m is not None and m.leaving

    def view(self, group: str) -> View:
        """This endpoint's installed view of ``group``; GroupError if it is not a member."""
        return self._member(group).view

    def streams(self, group: str) -> ViewStreams:
        """This endpoint's data plane in its current view of ``group``; GroupError if not a member."""
        return self._member(group)

    def _member(self, group: str) -> ViewStreams:
        m = self._groups.get(group)
        if m is None or m.streams is None:
            raise GroupError(
                f"endpoint {self.endpoint} is not a member of group {group!r}" + (" (its join is still pending)" if m is not None else "")
            )
        return m.streams

    # ---- requests --------------------------------------------------------------

    def _request(self, r: Request) -> int:
        self._pending[r.req] = r
        self._tx.append(ToService(r))
        return r.req

    def _req(self) -> int:
        self._next_req += 1
        return self._next_req - 1

    def create_group(self, group: str, order: str = "fifo", tree: str = "numa") -> int:
        """Ask for application group ``group`` (this endpoint does not join it); returns the request id.

        Raises:
            GroupError: an empty name, an unknown ordering or tree mode.
        """
        if not isinstance(group, str) or not group:
            raise GroupError(f"a group name is a non-empty string, got {group!r}")
        if order not in ORDERS:
            raise GroupError(f"unknown ordering {order!r}; valid: {', '.join(ORDERS)}")
        spec = str(parse_tree(tree))
        return self._request(CreateGroup(self._req(), self.endpoint, group, order, spec))

    def join(self, group: str) -> int:
        """Ask to join ``group``; :class:`Joined` follows (or :class:`Failed`). Returns the request id.

        Raises:
            GroupError: already a member, or a join of it already pending.
        """
        if group in self._groups:
            state = "already a member of" if self._groups[group].streams is not None else "already joining"
            raise GroupError(f"endpoint {self.endpoint} is {state} group {group!r}")
        self._groups[group] = _Membership()
        self._left.pop(group, None)
        return self._request(Join(self._req(), self.endpoint, group))

    def leave(self, group: str) -> int:
        """Ask to leave ``group``; :class:`Left` follows once everything addressed here is delivered.

        From this call on, sends to the group raise GroupError.  In a total-order
        group the request goes to the service only once every earlier send of
        this member has been stamped (so a leaver loses none of its messages).

        Raises:
            GroupError: not a member, or a leave already pending.
        """
        self._member(group)
        m = self._groups[group]
        if m.leaving:
            raise GroupError(f"endpoint {self.endpoint} is already leaving group {group!r}")
        m.leaving = True
        req = m.leave_req = Leave(self._req(), self.endpoint, group)
        self._maybe_leave(group)
        return req.req

    def _maybe_leave(self, group: str) -> None:
        """Send the deferred Leave once nothing of this member waits for a stamp."""
        m = self._groups.get(group)
        if m is None or m.leave_req is None or m.streams is None:
            return
        if m.queued or m.install is not None or m.streams.unstamped_count():
            return
        req, m.leave_req = m.leave_req, None
        self._request(req)

    def create_multicast(self, group: str) -> int:
        """Ask for a new (empty) multicast group in ``group``; :class:`MulticastCreated` follows."""
        self._member(group)
        return self._request(CreateMulticast(self._req(), self.endpoint, group))

    def join_multicast(self, group: str, mcast: int) -> int:
        """Ask to join multicast group ``mcast`` of ``group``; a :class:`ViewChanged` shows it."""
        self._member(group).view.multicast_members(mcast)
        return self._request(JoinMulticast(self._req(), self.endpoint, group, mcast))

    def leave_multicast(self, group: str, mcast: int) -> int:
        """Ask to leave multicast group ``mcast`` of ``group``; a :class:`ViewChanged` shows it."""
        self._member(group).view.multicast_members(mcast)
        return self._request(LeaveMulticast(self._req(), self.endpoint, group, mcast))

    # ---- sending ---------------------------------------------------------------

    def send(self, group: str, dest: int, payload: bytes) -> None:
        """Send ``payload`` to ``dest`` (a node id, a multicast id or the broadcast id) of ``group``.

        During a view change the send waits here, in order, for the next view.

        Raises:
            GroupError: not a member of ``group``, or ``dest`` is not a
                destination of its current view.
        """
        streams = self._member(group)
        if self._groups[group].leaving:
            raise GroupError(f"endpoint {self.endpoint} is leaving group {group!r}: it sends no more to it")
        dest_kind(dest)
        streams.view.destinations(dest)
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise GroupError(f"a payload is bytes, got {type(payload).__name__}")
        payload = bytes(payload)
        m = self._groups[group]
        if streams.closed or m.install is not None:
            m.queued.append((dest, payload))
            return
        tx, ev = streams.send(dest, payload)
        self._tx += tx
        self._ev += ev

    # ---- input -----------------------------------------------------------------

    def receive(self, msg: object) -> None:
        """Take one message from the network (service message or group frame).

        Raises:
            ProtocolError: a message that does not fit the protocol (state unchanged
                for the membership; a frame is not delivered).
        """
        if isinstance(msg, Reply):
            self._reply(msg)
        elif isinstance(msg, Prepare):
            self._prepare(msg)
        elif isinstance(msg, Install):
            self._install(msg)
        elif isinstance(msg, (Data, Submit)):
            self._frame(msg)
        else:
            raise ProtocolError(f"a group member does not take {type(msg).__name__} messages")

    def _reply(self, r: Reply) -> None:
        req = self._pending.pop(r.req, None)
        if req is None:
            raise ProtocolError(f"reply to unknown request {r.req}")
        if r.error is not None:
            if isinstance(req, Join):
                self._groups.pop(req.group, None)
            if isinstance(req, Leave) and req.group in self._groups:
                self._groups[req.group].leaving = False  # it may send again
            self._ev.append(Failed(r.req, r.group, r.error))
        elif isinstance(req, CreateGroup):
            self._ev.append(Created(r.req, r.group, r.value))
        elif isinstance(req, CreateMulticast):
            self._ev.append(MulticastCreated(r.req, r.group, r.value))

    def _prepare(self, p: Prepare) -> None:
        m = self._groups.get(p.group)
        if m is None or m.streams is None:
            raise ProtocolError(f"Prepare for group {p.group!r}, which endpoint {self.endpoint} is not in")
        if m.install is not None or p.view > m.streams.view.view_id:
            m.prepare = p  # for the view this member is about to install
            return
        if p.view != m.streams.view.view_id or m.streams.closed:
            raise ProtocolError(f"Prepare for view {p.view} of {p.group!r}; installed here: {m.streams.view.view_id}")
        marks = m.streams.close()
        self._tx.append(ToService(Flushed(p.group, p.view, m.streams.me, marks)))

    def _install(self, inst: Install) -> None:
        group = inst.view.group
        m = self._groups.get(group)
        if m is None:
            raise ProtocolError(f"Install of group {group!r}, which endpoint {self.endpoint} neither joined nor left")
        if m.install is not None:
            raise ProtocolError(f"Install of view {inst.view.view_id} while view {m.install.view.view_id} is pending")
        m.install = inst
        self._try_install(group)

    def _frame(self, f: Data | Submit) -> None:
        m = self._groups.get(f.group)
        if m is None and isinstance(f, Submit) and f.view < self._left.get(f.group, 0):
            return  # submitted to this endpoint as sequencer before it left: submitted again next view
        if m is None:
            raise ProtocolError(f"frame of group {f.group!r}, which endpoint {self.endpoint} is not in")
        if m.streams is None or f.view > m.streams.view.view_id:
            m.future.append(f)
            return
        if f.view < m.streams.view.view_id:
            if isinstance(f, Submit):
                return  # not stamped in its view: its sender submits it again in the next
            raise ProtocolError(f"frame of view {f.view} of {f.group!r} after view {m.streams.view.view_id} was installed")
        if isinstance(f, Submit):
            tx, ev = m.streams.submit(f)
            self._tx += tx
            self._ev += ev
        else:
            self._ev += m.streams.receive(f)
        if m.install is not None:
            self._try_install(f.group)
        self._maybe_leave(f.group)

    def _try_install(self, group: str) -> None:
        """Apply the pending Install if the old view's messages are all here; then what waited on it."""
        m = self._groups[group]
        inst = m.install
        assert inst is not None
        old = m.streams
        if old is not None and not old.satisfied(inst.closing):
            return
        resubmit = old.unstamped(inst.closing) if old is not None else []
        me = inst.view.node_of(self.endpoint)
        m.install = None
        if me is None:
            del self._groups[group]
            self._left[group] = inst.view.view_id
            for dest, payload in resubmit + m.queued:
                self._ev.append(SendFailed(group, dest, payload, f"endpoint {self.endpoint} left group {group!r}"))
            self._ev.append(Left(group, inst.view.view_id))
            return
        m.streams = ViewStreams(inst.view, me)
        if old is None:
            self._ev.append(Joined(group, me, inst.view))
        self._ev.append(ViewChanged(group, inst.view, inst.joined, inst.left, inst.died))
        waiting, m.queued = resubmit + m.queued, []
        for dest, payload in waiting:
            try:
                m.streams.view.destinations(dest)
            except GroupError as e:
                self._ev.append(SendFailed(group, dest, payload, str(e)))
                continue
            tx, ev = m.streams.send(dest, payload)
            self._tx += tx
            self._ev += ev
        future, m.future = m.future, []
        prepare, m.prepare = m.prepare, None
        for f in future:
            self._frame(f)
        if prepare is not None:
            self._prepare(prepare)
        self._maybe_leave(group)
