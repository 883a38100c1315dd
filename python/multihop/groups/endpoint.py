"""A dispatcher's group endpoint, live: :func:`group` (``multihop.groups.group(rt, ...)``), ``d.join``, ``d.leave`` and :class:`Group`.

Each dispatcher that uses groups gets one :class:`GroupEndpoint`: a channel
to the runtime's group service (:mod:`multihop.groups.gsd`, started on
demand), a :class:`multihop.GroupPort` on its link to its monitor (group
frames, with the credits of every tree it sends on), and the sans-IO
:class:`~multihop.groups.member.GroupMember` that orders what arrives (the
phase-1 machines: fifo, causal, total, view changes, closing marks).

Every call on a group (``send``, ``recv``, ``convergecast``, ``join``, ...)
pumps the endpoint (control messages, frames).  Between calls a keeper
thread pumps it every 10 ms, so a member that is busy elsewhere still
answers view changes and takes frames (its callbacks may then run on that
thread); a stopped process takes nothing, so once its window is full,
senders to it block (docs/groups.md §6).

Payloads carry one tag byte ahead of the application's bytes: 0 for a plain
message, 1 or 2 (then a u16 request number and a u32 timeout in ms) for a
convergecast request, whose recipients answer at once with
``reply(delivery)`` (the join's ``reply`` callback; an empty ack without
one).  Tag 1 (aggregated, the default): the reply goes up to the member's
own monitor, the monitors merge the replies up the request's tree and the
root monitor sends the sender one result (``core-rs/monitor/src/multicast/ccast.rs``,
docs/groups.md §8).  Tag 2 (``unicast=True``, the flat baseline): the
request goes to each node id and each reply straight to the sender, whose
:class:`~multihop.groups.convergecast.Convergecast` gathers them.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import multihop as mh
from multihop.defaults import DEFAULT_WINDOW
from multihop.errors import ChannelClosed, MultihopError, ProtocolError, Timeout, TxBusy
from multihop.groups import codec
from multihop.groups.convergecast import Convergecast, Partial
from multihop.groups.errors import GroupError
from multihop.groups.events import (
    Delivered,
    Failed,
    Joined,
    Left,
    Multicast,
    MulticastCreated,
    SendFailed,
    ToService,
    Unicast,
    ViewChanged,
)
from multihop.groups.frames import (
    CC_AGGREGATED,
    CC_DIRECT,
    CC_TAG,
    FLAG_CONVERGECAST,
    FLAG_GAVE_UP,
    FLAG_MERGED,
    KIND_REPLY,
    KIND_SUBMIT,
    decode,
    decode_partial,
    encode_data,
    encode_reply,
    encode_submit,
    encode_up_reply,
)
from multihop.groups.gsd import SERVICE, ensure_service
from multihop.groups.ids import BROADCAST
from multihop.groups.member import GroupMember
from multihop.groups.messages import CreateGroup, Data, Reply, Submit
from multihop.groups.trees import parse_tree
from multihop.groups.view import ORDERS, Endpoint, View

__all__ = ["Delivery", "GroupInfo", "Group", "GroupEndpoint", "ConvergecastTimeout", "group", "join", "leave", "endpoint_of"]

_PLAIN = b"\x00"
_POLL = 0.01  # longest wait for frames before looking at the service's channel again


@dataclass(frozen=True)
class Delivery:
    """One delivered group message: who sent it, to which destination, in which view.

    ``request`` is the convergecast request number when the message is one
    (0 otherwise); the endpoint has answered it already.
    """

    group: str
    sender: int
    dest: int
    view: int
    payload: bytes
    request: int = 0


@dataclass(frozen=True)
class GroupInfo:
    """An application group as the service installed it: its id, ordering, tree mode, window and view."""

    name: str
    group_id: int
    order: str
    tree: str
    window: int
    view: View

    @property
    def members(self) -> dict[int, Endpoint]:
        """Node id -> endpoint, in the installed view."""
        return dict(self.view.members)


class ConvergecastTimeout(Timeout):
    """A convergecast that did not complete in time; ``partial`` holds what arrived."""

    def __init__(self, message: str, partial: Partial) -> None:
        super().__init__(message)
        self.partial = partial


def _deadline(timeout: float | None) -> float | None:
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
        raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
    return None if timeout is None else time.monotonic() + timeout


def _left(deadline: float | None) -> float:
    return _POLL if deadline is None else max(0.0, min(_POLL, deadline - time.monotonic()))


def _expired(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


class Group:
    """This dispatcher's membership of one application group (from ``d.join``)."""

    def __init__(self, ep: GroupEndpoint, name: str) -> None:
        self._ep = ep
        self.name = name

    @property
    def node(self) -> int:
        """This member's node id (GroupError once it left)."""
        return self._ep.member.node(self.name)

    @property
    def broadcast(self) -> int:
        """The group's broadcast id (every member)."""
        return BROADCAST

    @property
    def view(self) -> View:
        """The installed view (members and multicast groups)."""
        return self._ep.member.view(self.name)

    @property
    def group_id(self) -> int:
        """The universe-unique group id."""
        return self._ep.gids[self.name]

    def send(self, dest: int, payload: bytes, timeout: float | None = None) -> None:
        """Send ``payload`` to ``dest`` (a node id, a multicast id, or :attr:`broadcast`).

        Waits while the tree's window is spent (a slow member downstream),
        at most ``timeout`` seconds (None: as long as it takes).

        Raises:
            GroupError: not a member (or leaving), an unknown destination, a
                payload that is not bytes.
            Timeout: no credit within ``timeout``. The message is not
                withdrawn (its place in the group's order is taken): it stays
                queued in this endpoint and goes out first, in order, with
                the next call on any group of this dispatcher or within 10 ms
                by the endpoint's keeper, once the tree has credit.
        """
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise GroupError(f"a payload is bytes, got {type(payload).__name__}")
        self._ep.send(self.name, dest, _PLAIN + bytes(payload), _deadline(timeout))

    def recv(self, timeout: float | None = None) -> Delivery:
        """The next delivery of this group, in the group's order. Timeout if none comes in time."""
        return self._ep.recv(self.name, _deadline(timeout))

    def try_recv(self) -> Delivery | None:
        """The next delivery if one is here now, else None."""
        try:
            return self._ep.recv(self.name, time.monotonic())
        except Timeout:
            return None

    def convergecast(self, payload: bytes = b"", timeout: float | None = 30.0, *, unicast: bool = False, aggregate: bool = True) -> Partial:
        """Send ``payload`` to every member and gather their replies (the survivors', and who is missing).

        The request goes down the group's tree as one broadcast, and the
        monitors merge the replies back up it: each monitor sends its parent
        one report, the root monitor sends this member the result. A member
        that dies, or every member below a monitor that dies, is in the
        result's ``missing``. With ``unicast`` this member sends the request
        to each node id itself and each member replies straight back (the
        flat unicast shoot-down the trees are measured against). With
        ``aggregate=False`` the request goes down the tree but each member
        replies straight back, as with ``unicast`` (the baseline the
        aggregation is measured against).

        Raises:
            ConvergecastTimeout: not complete in time; its ``partial`` holds
                the replies that arrived and names the missing (the monitors
                stop waiting shortly before ``timeout``, deepest first, so the
                survivors' replies still come back).
        """
        return self._ep.convergecast(self.name, bytes(payload), _deadline(timeout), unicast, aggregate)

    def create_multicast(self, timeout: float | None = 30.0) -> int:
        """Create an empty multicast group in this group; returns its multicast id."""
        return self._ep.create_multicast(self.name, _deadline(timeout))

    def join_multicast(self, mcast: int, timeout: float | None = 30.0) -> None:
        """Join multicast group ``mcast`` (returns once a view with it is installed here)."""
        self._ep.multicast_change(self.name, mcast, True, _deadline(timeout))

    def leave_multicast(self, mcast: int, timeout: float | None = 30.0) -> None:
        """Leave multicast group ``mcast`` (returns once a view without it is installed here)."""
        self._ep.multicast_change(self.name, mcast, False, _deadline(timeout))

    def leave(self, timeout: float | None = 30.0) -> None:
        """Leave the group (same as ``d.leave(name)``)."""
        self._ep.leave(self.name, _deadline(timeout))

    def sync(self, timeout: float | None = 30.0) -> None:
        """Return once this member has installed the group's current view (joins, leaves, multicast groups
        other members made): view changes reach each member on its own time."""
        self._ep.sync(self.name, _deadline(timeout))

    def reply(self, delivery: Delivery, payload: bytes = b"") -> None:
        """Answer the convergecast request ``delivery`` with ``payload`` (a member that joined with
        ``auto_ack=False`` and no ``reply`` callback answers each request itself; until it does, the
        convergecast waits for it).

        Raises:
            GroupError: ``delivery`` is not a request of this group awaiting this member's answer (a plain
                message, or answered already), or ``payload`` is not bytes.
        """
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise GroupError(f"a reply is bytes, got {type(payload).__name__}")
        self._ep.reply(self.name, delivery, bytes(payload))

    def pending(self) -> int:
        """Deliveries waiting for :meth:`recv`."""
        return len(self._ep.inbox.get(self.name, ()))

    def __repr__(self) -> str:
        return f"<Group {self.name!r} of {self._ep.me}>"


@dataclass
class _Callbacks:
    on_join: Callable[[int, View], None] | None = None
    on_leave: Callable[[int, View], None] | None = None
    on_view: Callable[[ViewChanged], None] | None = None
    reply: Callable[[Delivery], bytes] | None = None
    auto_ack: bool = True


@dataclass(frozen=True)
class _Owed:
    """A convergecast request delivered here that the application answers itself (:meth:`Group.reply`)."""

    tag: int
    view: int
    dest: int
    root: int


_R = TypeVar("_R")


@dataclass(frozen=True)
class _Out:
    """One queued send: an encoded group frame for the port, or a message for the group service's channel."""

    data: bytes
    to_service: bool = False


class GroupEndpoint:
    """One dispatcher's group machinery (see the module text).

    Threads. Any number of the dispatcher's threads may call in at once (one in ``recv(timeout=None)``,
    another in ``send(timeout=3)``, the keeper); no lock is held across a wait, so each call ends on its own
    timeout whatever the others wait for. Three locks, always taken in this order:

    - ``_rx`` is held by the one thread that waits for frames (``port.recv_many`` with a wait), from the
      wait until the frames it got are in ``_inq``, so frames are handled in the order they arrived. Other
      waiters wait on ``_changed`` meanwhile; a thread that holds ``_lock`` only tries ``_rx``.
    - ``_lock`` (the state lock, re-entrant for callbacks) guards the member machine and every table here;
      it is held only while they change, never while waiting. ``_changed`` (its condition) is notified
      whenever a pump took something.
    - ``_tx`` is held by the one thread sending the queue ``_unsent`` in order; only that thread waits for a
      tree's credit, and it does not hold ``_lock`` then. A send with a timeout waits for ``_tx`` at most
      until its deadline; pumps and ``_lock`` holders only try it.

    Callbacks (``on_join``, ``on_view``, ``reply``, ...) run with ``_lock`` held: one that waits (a call on
    the group) makes the member's other threads wait for it.
    """

    def __init__(self, d: mh.Dispatcher, timeout: float = 30.0) -> None:
        self.d = d
        self.port = mh.GroupPort(d)
        rt = mh.Runtime.attach(Path(self.port.runtime_dir).name)
        ensure_service(rt, timeout)
        self.me = Endpoint(d.core, os.getpid())
        # Multi-hop: the channel rides this dispatcher's link, so it closes with the dispatcher (a detach
        # or a death): that is how the service learns that this endpoint is gone.
        self.ch = d.bind(SERVICE, transport="multihop", timeout=timeout)
        self.ch.send(json.dumps({"op": "hello", "core": d.core, "pid": os.getpid()}).encode())
        self.member = GroupMember(self.me)
        self.gids: dict[str, int] = {}
        self.names: dict[int, str] = {}
        self.inbox: dict[str, deque[Delivery]] = {}
        self.callbacks: dict[str, _Callbacks] = {}
        self.replies: dict[int, Reply] = {}
        self.failures: dict[int, str] = {}
        self.mcreated: dict[int, int] = {}
        self.infos: dict[int, dict[str, Any]] = {}
        self._info_next = 0
        self.left: set[str] = set()
        self.send_failures: list[SendFailed] = []
        self.protocol_errors = 0
        self.service_gone = False
        self.closed: dict[str, str] = {}  # group -> why it is closed (a monitor on its trees died)
        self.handled = 0  # frames taken by pump, and the ns it spent on them (waits left out)
        self.handle_ns = 0
        self._early: list[bytes] = []
        self._cc: dict[tuple[str, int], Convergecast] = {}  # direct (unicast) requests of this member
        self._cc_results: dict[tuple[str, int], tuple[Partial, bool] | None] = {}  # aggregated: result, gave_up
        self._cc_roots: dict[tuple[str, int, int], int] = {}  # (group, requester, request) -> its tree's root core
        self._owed: dict[tuple[str, int, int], _Owed] = {}  # requests the application answers itself
        self._cc_next = 0
        self._busy = False
        # Frames taken from the port and not yet handled, in arrival order (see the class text).
        self._inq: deque[bytes] = deque()
        # What this endpoint has to send, in order: the member machine's transmits and REPLY frames,
        # encoded. A frame whose tree has no credit waits here (the call that sent it raised Timeout,
        # or it came from a pump) and goes first with the next call or keeper pump. ``_queued`` counts
        # what was ever put here (under ``_lock``), ``_sent`` what left (by the ``_tx`` holder).
        self._unsent: deque[_Out] = deque()
        self._queued = 0
        self._sent = 0
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._rx = threading.RLock()
        self._tx = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._keeper, name=f"mh-groups-{d.core}", daemon=True).start()

    def _keeper(self) -> None:
        """Pump every 10 ms (view changes and credits go on between calls); it never waits for a lock."""
        while not self._closed.wait(_POLL):
            if not self._lock.acquire(blocking=False):
                continue
            try:
                self._pump_now()
            except MultihopError:
                with contextlib.suppress(MultihopError):
                    self.ch.close()  # the dispatcher or the service is gone: calls will say so
                return
            except Exception:
                self.protocol_errors += 1
            finally:
                self._lock.release()

    def close(self) -> None:
        """Stop the keeper thread (the dispatcher is going away)."""
        self._closed.set()

    # ---- the pump ------------------------------------------------------------

    def pump(self, wait: float = 0.0) -> bool:
        """Take what arrived (service messages, frames), waiting up to ``wait`` s for frames; True if anything came.

        The wait holds no lock: other threads' calls go on meanwhile.
        """
        with self._lock:
            if self._pump_now():
                return True
        return wait > 0 and self._await_input(wait)

    def _pump_now(self) -> bool:
        """Take what is here now, without waiting (``_lock`` held); True if anything came."""
        got = False
        for _ in range(4096 if not self.service_gone else 0):
            try:
                raw = self.ch.try_recv()
            except ChannelClosed:
                # Data of installed views keeps flowing; membership calls raise (docs/groups.md §9).
                self.service_gone = True
                break
            if raw is None:
                break
            got = True
            self._control(raw)
        if self._rx.acquire(blocking=False):  # else the thread that holds it is taking the frames
            try:
                self._inq.extend(self.port.recv_many(512, 0.0))
            finally:
                self._rx.release()
        took = self._take_frames()
        if got and self._early:
            early, self._early = self._early, []
            for f in early:
                self._frame(f)
        self._collect()
        if got or took:
            self._changed.notify_all()
        return got or took

    def _take_frames(self) -> bool:
        """Handle the frames in ``_inq``, in order (``_lock`` held); True if there were any."""
        if not self._inq:
            return False
        t0 = time.perf_counter_ns()
        n = 0
        while self._inq:
            self._frame(self._inq.popleft())
            n += 1
        # what handling a frame costs this endpoint (the machine model's receive cost)
        self.handle_ns += time.perf_counter_ns() - t0
        self.handled += n
        return True

    def _await_input(self, wait: float) -> bool:
        """Wait up to ``wait`` s for something to come (no lock held while waiting); True if something did.

        One thread at a time waits on the port (holding ``_rx``) and hands what it got to ``_inq``; the
        others wait on ``_changed``, which a pump that took something notifies.
        """
        if self._rx.acquire(blocking=False):
            try:
                frames = self.port.recv_many(512, wait)
                with self._lock:
                    self._inq.extend(frames)
                    return self._pump_now() or bool(frames)
            finally:
                self._rx.release()
        with self._changed:
            return self._changed.wait(wait)

    def _control(self, raw: bytes) -> None:
        msg, d = codec.decode(raw)
        if d["op"] == "info_reply":
            self.infos[int(d["req"])] = d
            return
        if d["op"] == "closed":
            self.closed[str(d["group"])] = str(d["reason"])
            return
        if d["op"] == "install" and "group_id" in d:
            name = d["view"]["group"]
            self.gids[name] = int(d["group_id"])
            self.names[int(d["group_id"])] = name
            self.port.set_window(int(d["group_id"]), int(d.get("window", DEFAULT_WINDOW)))
        if isinstance(msg, Reply):
            self.replies[msg.req] = msg
        if msg is None:
            return
        try:
            self.member.receive(msg)
        except ProtocolError:
            self.protocol_errors += 1

    def _frame(self, raw: bytes) -> None:
        try:
            f = decode(raw)
        except ProtocolError:
            self.protocol_errors += 1
            return
        name = self.names.get(f.group_id)
        if name is None:
            self._early.append(raw)  # its Install has not come yet
            return
        if f.kind == KIND_REPLY and f.flags & FLAG_MERGED:
            if (name, f.request) in self._cc_results:
                try:
                    self._cc_results[(name, f.request)] = (decode_partial(f.payload), bool(f.flags & FLAG_GAVE_UP))
                except ProtocolError:
                    self.protocol_errors += 1
            return  # else a result that came too late (its call timed out)
        if f.kind == KIND_REPLY:
            cc = self._cc.get((name, f.request))
            if cc is not None:
                try:
                    cc.reply(f.sender, f.payload)
                except GroupError:
                    self.protocol_errors += 1  # a second reply, or from a node not asked
            return
        if f.flags & FLAG_CONVERGECAST:
            self._cc_roots[(name, f.sender, f.request)] = f.root_core  # where this request's reply goes up
        msg: Data | Submit
        if f.kind == KIND_SUBMIT:
            msg = Submit(name, f.view, f.stamp, f.sender, f.seq, f.payload)
        else:
            msg = Data(name, f.view, f.dest, f.sender, f.seq, f.payload, f.vc, f.stamp)
        try:
            self.member.receive(msg)
        except ProtocolError:
            self.protocol_errors += 1

    # ---- sending ----------------------------------------------------------------

    def _collect(self) -> int | None:
        """Queue what the member machine has to send and hand it its events, until neither has more
        (``_lock`` held); what has credit now leaves at once, the rest stays queued in order.

        Returns the count of everything queued so far (a send waits until ``_sent`` reaches it), or None
        when a callback called in: the outer call goes on and queues it.
        """
        if self._busy:
            return None
        self._busy = True
        try:
            for _ in range(1_000_000):
                tx = self.member.transmits()
                for t in tx:
                    self._enqueue(t)
                self._drain_now()
                ev = self.member.events()
                for e in ev:
                    self._event(e)
                if not tx and not ev:
                    break
        finally:
            self._busy = False
        return self._queued

    def _enqueue(self, t: object) -> None:
        """Encode one transmit of the member machine (or a raw REPLY frame) onto ``_unsent`` (``_lock`` held)."""
        if isinstance(t, bytes):  # a REPLY frame
            out = _Out(t)
        elif isinstance(t, ToService):
            out = _Out(codec.encode(t.msg), to_service=True)
        else:
            frame = t.frame if isinstance(t, (Multicast, Unicast)) else None
            assert frame is not None
            gid = self.gids[frame.group]
            if isinstance(frame, Submit):
                assert isinstance(t, Unicast)
                out = _Out(encode_submit(frame, gid, t.node, self.me.core))
            else:
                out = _Out(encode_data(frame, gid, self.me.core))
        self._unsent.append(out)
        self._queued += 1

    def _drain_now(self) -> None:
        """Send what has credit now, in order, without waiting (never waits for ``_tx`` either)."""
        if self._tx.acquire(blocking=False):
            try:
                self._send_queued(None, 0.0)
            finally:
                self._tx.release()

    def _drain_to(self, mark: int | None, deadline: float | None) -> bool:
        """Send the queue in order until the first ``mark`` queued have left, waiting for credit (and for
        another thread sending the queue) until ``deadline``; True once they have. Holds no ``_lock``."""
        while mark is not None and self._sent < mark:
            if deadline is None:
                got = self._tx.acquire()
            else:
                left = deadline - time.monotonic()
                got = self._tx.acquire(timeout=left) if left > 0 else self._tx.acquire(blocking=False)
            if not got:
                return self._sent >= mark
            try:
                if not self._send_queued(mark, deadline):
                    return False
            finally:
                self._tx.release()
        return True

    def _send_queued(self, mark: int | None, deadline: float | None) -> bool:
        """Send from the head of ``_unsent`` (``_tx`` held) until ``mark`` have left (None: all), each frame
        waiting for credit until ``deadline`` (``0.0``: not at all; None: as long as it takes). True if done."""
        while self._unsent and (mark is None or self._sent < mark):
            if not self._transmit(self._unsent[0], deadline):
                return False
            self._unsent.popleft()
            self._sent += 1
        return True

    def _transmit(self, out: _Out, deadline: float | None) -> bool:
        """Send one queued item; False if it found no credit (or no room) by ``deadline``."""
        if out.to_service:
            self._service_check()
            if deadline == 0.0:
                try:
                    self.ch.try_send(out.data)
                except TxBusy:
                    return False
            else:
                self.ch.send(out.data, timeout=30)
            return True
        if deadline == 0.0:
            return self.port.try_send(out.data)
        try:
            self.port.send(out.data, timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except Timeout:
            return False
        return True

    def _open(self, name: str) -> None:
        """ChannelClosed if group ``name`` was closed (a monitor on its trees died: docs/groups.md §9)."""
        if name in self.closed:
            raise ChannelClosed(self.closed[name])

    def _service_check(self) -> None:
        if self.service_gone:
            raise mh.MonitorError(
                "the group service is gone: installed views keep working, membership cannot change (restart the runtime to change it)"
            )

    def _event(self, e: object) -> None:
        if isinstance(e, Delivered):
            self._delivered(e)
        elif isinstance(e, Joined):
            self.inbox.setdefault(e.group, deque())
            self.left.discard(e.group)
        elif isinstance(e, ViewChanged):
            cb = self.callbacks.get(e.group, _Callbacks())
            for (name, _), cc in self._cc.items():
                if name == e.group:
                    for n in e.died + e.left:
                        cc.member_gone(n)
            if cb.on_view is not None:
                cb.on_view(e)
            for n in e.joined:
                if cb.on_join is not None:
                    cb.on_join(n, e.view)
            for n in e.left + e.died:
                if cb.on_leave is not None:
                    cb.on_leave(n, e.view)
        elif isinstance(e, Left):
            self.left.add(e.group)
            for cc_key in [k for k in self._cc if k[0] == e.group]:
                self._cc.pop(cc_key)
            for root_key in [k for k in self._cc_roots if k[0] == e.group]:
                self._cc_roots.pop(root_key)
            for owed_key in [k for k in self._owed if k[0] == e.group]:
                self._owed.pop(owed_key)
        elif isinstance(e, Failed):
            self.failures[e.req] = e.error
        elif isinstance(e, MulticastCreated):
            self.mcreated[e.req] = e.mcast
        elif isinstance(e, SendFailed):
            self.send_failures.append(e)

    def _delivered(self, e: Delivered) -> None:
        payload = e.payload
        request = 0
        tag = payload[0] if payload else 0
        if tag in (CC_AGGREGATED, CC_DIRECT) and len(payload) >= CC_TAG.size:
            _, request, _timeout = CC_TAG.unpack_from(payload)
            payload = payload[CC_TAG.size :]
        else:
            payload = payload[1:]
        dl = Delivery(e.group, e.sender, e.dest, e.view, payload, request)
        if request:
            # The request's tree is rooted at the sender's core, or for a total-order stream at its sequencer's
            # (a request this member sent itself: its own core).
            root = self._cc_roots.pop((e.group, e.sender, request), self.me.core)
            owed = _Owed(tag, e.view, e.dest, root)
            cb = self.callbacks.get(e.group, _Callbacks())
            if cb.reply is not None:
                self._answer(e.group, e.sender, request, owed, bytes(cb.reply(dl)))
            elif cb.auto_ack:
                self._answer(e.group, e.sender, request, owed, b"")
            else:
                self._owed[(e.group, e.sender, request)] = owed
        self.inbox.setdefault(e.group, deque()).append(dl)

    def _answer(self, group: str, requester: int, request: int, owed: _Owed, answer: bytes) -> None:
        """Send this member's answer to ``requester``'s request: up to its monitor (aggregated), or straight back."""
        me = self.member.node(group)
        gid = self.gids[group]
        if owed.tag == CC_AGGREGATED:
            self._enqueue(encode_up_reply(gid, owed.view, owed.dest, owed.root, me, requester, request, answer))
        elif requester == me:
            cc = self._cc.get((group, request))
            if cc is not None:
                cc.reply(me, answer)
            return
        else:
            self._enqueue(encode_reply(gid, owed.view, requester, self.me.core, me, request, answer))
        self._drain_now()

    def reply(self, name: str, delivery: Delivery, answer: bytes) -> None:
        """Answer a request this member owes (see :meth:`Group.reply`)."""
        with self._lock:
            key = (name, delivery.sender, delivery.request)
            owed = self._owed.pop(key, None) if delivery.request and delivery.group == name else None
            if owed is None:
                raise GroupError(f"{delivery!r} is not a convergecast request of group {name!r} awaiting this member's reply")
            self._answer(name, delivery.sender, delivery.request, owed, answer)

    # ---- waiting ---------------------------------------------------------------

    def _wait(self, done: Callable[[], _R | None], deadline: float | None, expired: str, service: bool = False, group: str | None = None) -> _R:
        """Pump until ``done()`` (called with ``_lock`` held) gives something other than None or False, and
        return it; Timeout saying ``expired`` at ``deadline``. The waits between pumps hold no lock."""
        while True:
            with self._lock:
                got = done()
                if got is None or got is False:
                    self._pump_now()
                    got = done()
                if got is not None and got is not False:
                    return got
                if group is not None:
                    self._open(group)
                if service:
                    self._service_check()  # a membership change cannot complete without the service
                if _expired(deadline):
                    raise Timeout(expired)
            self._await_input(_left(deadline))

    def _request_result(self, req: int, deadline: float | None, what: str, service: bool = True) -> None:
        def answered() -> bool:
            if req in self.failures:
                raise GroupError(self.failures.pop(req))
            return req in self.replies

        self._wait(answered, deadline, f"{what}: not done within the timeout", service=service)

    # ---- operations --------------------------------------------------------------
    # Each takes ``_lock`` only to look and to change state; it waits (``_wait``, ``_drain_to``) without it.

    def join(self, name: str, cb: _Callbacks, deadline: float | None) -> Group:
        """Join ``name`` (callbacks ``cb``); returns once a view with this member is installed here."""
        with self._lock:
            self._pump_now()
            self._service_check()
            self._open(name)
            if not isinstance(name, str) or not name:
                raise GroupError(f"a group name is a non-empty string, got {name!r}")
            req = self.member.join(name)
            self.callbacks[name] = cb
            self._collect()
        what = f"join of group {name!r}"
        self._request_result(req, deadline, what, service=True)
        self._wait(lambda: name in self.member.groups(), deadline, f"{what}: not done within the timeout", service=True)
        return Group(self, name)

    def leave(self, name: str, deadline: float | None) -> None:
        """Leave ``name``; returns once the leave is installed (everything addressed here delivered)."""
        with self._lock:
            self._pump_now()
            self._service_check()
            self._open(name)
            req = self.member.leave(name)
            self._collect()

        def left() -> bool:
            if req in self.failures:
                raise GroupError(self.failures.pop(req))
            return name in self.left

        self._wait(left, deadline, f"leave of group {name!r}: not done within the timeout", service=True)

    def sync(self, name: str, deadline: float | None) -> None:
        """Return once this member has installed the view the service has installed now (or left ``name``)."""
        with self._lock:
            self._pump_now()
            self._service_check()
            self._open(name)
            self._info_next += 1
            req = self._info_next
        self.ch.send(json.dumps({"op": "info", "req": req, "group": name}).encode(), timeout=30)
        info = self._wait(lambda: self.infos.pop(req, None), deadline, f"view of group {name!r}: not done within the timeout", service=True)
        if info.get("error"):
            raise GroupError(info["error"])
        target = int(info["view"]["view_id"])

        def caught_up() -> bool:
            return name not in self.member.groups() or self.member.view(name).view_id >= target

        self._wait(caught_up, deadline, f"view {target} of group {name!r}: not done within the timeout", service=True)

    def send(self, name: str, dest: int, payload: bytes, deadline: float | None) -> None:
        """Send a tagged ``payload`` to ``dest`` of ``name`` (waits for a credit of the tree until ``deadline``).

        A destination this member's view lacks is looked up once more after :meth:`sync` (it may be in a
        view still on its way here) before the GroupError stands.
        """
        with self._lock:
            self._pump_now()
            self._open(name)
            try:
                self.member.send(name, dest, payload)
                mark = self._collect()
                again = False
            except GroupError:
                if name not in self.member.groups() or self.member.leaving(name):
                    raise
                again = True
        if again:
            self.sync(name, deadline)
            with self._lock:
                self._open(name)
                self.member.send(name, dest, payload)
                mark = self._collect()
        if not self._drain_to(mark, deadline):
            raise Timeout(
                f"group {name!r}: no credit on its tree within the timeout (a member downstream is slow or stopped);"
                " the message is queued here and goes out, in order, with this member's next calls"
            )

    def recv(self, name: str, deadline: float | None) -> Delivery:
        """The next delivery of ``name``; Timeout at ``deadline``, GroupError once nothing of it can come."""

        def take() -> Delivery | None:
            q = self.inbox.get(name)
            if q:
                return q.popleft()
            self._open(name)
            if name not in self.member.groups():
                raise GroupError(f"endpoint {self.me} is not a member of group {name!r} (and nothing of it is left to receive)")
            return None

        return self._wait(take, deadline, f"no delivery of group {name!r} within the timeout")

    def convergecast(self, name: str, payload: bytes, deadline: float | None, unicast: bool = False, aggregate: bool = True) -> Partial:
        """Send a convergecast request to every member of ``name`` and gather the replies (see :meth:`Group.convergecast`)."""
        with self._lock:
            self._pump_now()
            self._open(name)
            view = self.member.view(name)
            self._cc_next = self._cc_next % 65535 + 1
            request = self._cc_next
            key = (name, request)
            direct = unicast or not aggregate
            if not direct:
                self._cc_results[key] = None
        timeout_ms = 0 if deadline is None else max(1, min(0xFFFFFFFF, int((deadline - time.monotonic()) * 1000)))
        what = f"convergecast {request} of group {name!r}"
        if direct:
            dests = list(view.nodes) if unicast else [BROADCAST]
            tagged = CC_TAG.pack(CC_DIRECT, request, timeout_ms) + payload
            return self._convergecast_direct(name, view, request, dests, tagged, deadline, what)
        try:
            self.send(name, BROADCAST, CC_TAG.pack(CC_AGGREGATED, request, timeout_ms) + payload, deadline)
            result, gave_up = self._wait(lambda: self._cc_results[key], deadline, f"{what}: not done within the timeout", group=name)
        except Timeout:
            # Nothing came back up the tree in time: nobody is known to have replied.
            nobody = Partial({}, frozenset(view.destinations(BROADCAST)))
            raise ConvergecastTimeout(f"{what} incomplete: no result within the timeout", nobody) from None
        finally:
            with self._lock:
                self._cc_results.pop(key, None)
        if gave_up:
            raise ConvergecastTimeout(
                f"{what} incomplete: {len(result.replies)} replies, {len(result.missing)} missing (a monitor stopped waiting)", result
            )
        return result

    def _convergecast_direct(
        self, name: str, view: View, request: int, dests: list[int], tagged: bytes, deadline: float | None, what: str
    ) -> Partial:
        """The baselines: the request to each of ``dests`` (each node id, or the broadcast id down the tree),
        each reply straight back here."""
        cc = Convergecast(view.destinations(BROADCAST), ())
        with self._lock:
            self._cc[(name, request)] = cc
        try:
            for dest in dests:
                self.send(name, dest, tagged, deadline)
            self._wait(lambda: cc.done, deadline, f"{what}: not done within the timeout", group=name)
        except Timeout:
            with self._lock:
                part: Partial = cc._acc
            raise ConvergecastTimeout(f"{what} incomplete: {len(part.replies)} replies", part) from None
        finally:
            with self._lock:
                self._cc.pop((name, request), None)
        with self._lock:
            result = cc.poll()
        assert result is not None
        return result

    def create_multicast(self, name: str, deadline: float | None) -> int:
        """Create a multicast group in ``name``; returns its id once a view with it is installed here."""
        with self._lock:
            self._pump_now()
            self._service_check()
            self._open(name)
            req = self.member.create_multicast(name)
            self._collect()

        def created() -> int | None:
            if req in self.failures:
                raise GroupError(self.failures.pop(req))
            return self.mcreated.pop(req, None)

        mcast = self._wait(created, deadline, "multicast creation: not done within the timeout", service=True)
        self._wait(lambda: self._has_mcast(name, mcast), deadline, "multicast creation: not done within the timeout", service=True)
        return mcast

    def _has_mcast(self, name: str, mcast: int) -> bool:
        try:
            self.member.view(name).multicast_members(mcast)
            return True
        except GroupError:
            return False

    def multicast_change(self, name: str, mcast: int, join: bool, deadline: float | None) -> None:
        """Join (``join``) or leave multicast group ``mcast``; returns once the view shows it."""
        with self._lock:
            self._pump_now()
            self._service_check()
            self._open(name)
            lacks = name in self.member.groups() and not self._has_mcast(name, mcast)
        if lacks:
            self.sync(name, deadline)  # it may be in a view still on its way here
        with self._lock:
            req = self.member.join_multicast(name, mcast) if join else self.member.leave_multicast(name, mcast)
            self._collect()
        self._request_result(req, deadline, "multicast change", service=True)
        with self._lock:
            node = self.member.node(name)

        def installed() -> bool:
            return (node in self.member.view(name).multicast_members(mcast)) == join

        self._wait(installed, deadline, "multicast change: not done within the timeout", service=True)


_ENDPOINTS: dict[int, tuple[mh.Dispatcher, GroupEndpoint]] = {}


def endpoint_of(d: mh.Dispatcher) -> GroupEndpoint:
    """The group endpoint of dispatcher ``d`` (made on first use)."""
    got = _ENDPOINTS.get(id(d))
    if got is not None and got[0] is d:
        return got[1]
    ep = GroupEndpoint(d)
    _ENDPOINTS[id(d)] = (d, ep)
    return ep


def join(
    d: mh.Dispatcher,
    name: str,
    on_join: Callable[[int, View], None] | None = None,
    on_leave: Callable[[int, View], None] | None = None,
    on_view: Callable[[ViewChanged], None] | None = None,
    reply: Callable[[Delivery], bytes] | None = None,
    timeout: float | None = 30.0,
    auto_ack: bool = True,
) -> Group:
    """``d.join(name, ...)``: join application group ``name``; returns the :class:`Group`.

    ``on_join(node, view)`` and ``on_leave(node, view)`` run for every member
    that joins (this one first) or leaves or dies, ``on_view`` for every view
    change, ``reply(delivery)`` answers convergecast requests.  Without a
    ``reply`` callback each request is answered at once with an empty ack
    (``auto_ack``), or with ``auto_ack=False`` by the application, with
    :meth:`Group.reply`, when it is ready.

    Raises:
        GroupError: an unknown group, or this dispatcher is a member already
            (or joining): nothing changes.
    """
    for f, what in ((on_join, "on_join"), (on_leave, "on_leave"), (on_view, "on_view"), (reply, "reply")):
        if f is not None and not callable(f):
            raise TypeError(f"{what} must be callable or None, got {type(f).__name__}")
    if not isinstance(auto_ack, bool):
        raise TypeError(f"auto_ack must be a bool, got {type(auto_ack).__name__}")
    return endpoint_of(d).join(name, _Callbacks(on_join, on_leave, on_view, reply, auto_ack), _deadline(timeout))


def leave(d: mh.Dispatcher, name: str, timeout: float | None = 30.0) -> None:
    """``d.leave(name)``: leave group ``name`` once everything addressed here is delivered.

    Raises:
        GroupError: this dispatcher is not a member of ``name``.
    """
    endpoint_of(d).leave(name, _deadline(timeout))


def group(
    rt: mh.Runtime, name: str, order: str = "fifo", tree: str = "numa", *, create: bool = True, window: int = DEFAULT_WINDOW, timeout: float = 30.0
) -> GroupInfo:
    """``multihop.groups.group(rt, name, ...)``: the application group ``name``, created if it does not exist (``create``).

    ``order`` is ``fifo``, ``causal`` or ``total``; ``tree`` ``flat``,
    ``radix[:K]``, ``numa`` or ``machine``; ``window`` the credits per tree
    edge (1-4096).  An existing group is returned as it is if ``order`` and
    ``tree`` match it.

    Raises:
        GroupError: an unknown ordering or tree mode, a bad window, a group
            that exists with another ordering or tree, or (``create=False``)
            no such group. Nothing changes.
    """
    if not isinstance(name, str) or not name:
        raise GroupError(f"a group name is a non-empty string, got {name!r}")
    if order not in ORDERS:
        raise GroupError(f"unknown ordering {order!r}; valid: {', '.join(ORDERS)}")
    spec = str(parse_tree(tree))
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= 4096:
        raise GroupError(f"window must be an int in 1..4096, got {window!r}")
    ensure_service(rt, timeout)
    with rt.dispatcher(rt.cores[0]) as d:
        ch = d.bind(SERVICE, timeout=timeout)
        try:
            info = _ask(ch, {"op": "info", "req": 1, "group": name}, timeout)
            if info["error"] is not None:
                if not create:
                    raise GroupError(info["error"])
                req = CreateGroup(2, Endpoint(-1, os.getpid()), name, order, spec)
                ch.send(codec.encode(req, window=window), timeout=timeout)
                reply = _ask(ch, None, timeout)
                if reply.get("error"):
                    raise GroupError(reply["error"])
                info = _ask(ch, {"op": "info", "req": 3, "group": name}, timeout)
                if info["error"] is not None:
                    raise GroupError(info["error"])
            view = codec.view_from_dict(info["view"])
            if create and (view.order != order or view.tree != spec):
                raise GroupError(f"group {name!r} exists with order {view.order!r} and tree {view.tree!r}, not {order!r} and {spec!r}")
            return GroupInfo(name, int(info["group_id"]), view.order, view.tree, int(info["window"]), view)
        finally:
            ch.close()


def _ask(ch: Any, body: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
    if body is not None:
        ch.send(json.dumps(body).encode(), timeout=timeout)
    try:
        return dict(json.loads(ch.recv(timeout=timeout)))
    except MultihopError as e:
        raise mh.MonitorError(f"the group service did not answer: {e}") from None
