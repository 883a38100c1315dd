"""A dispatcher's group endpoint, live: ``rt.group``, ``d.join``, ``d.leave`` and :class:`Group`.

Each dispatcher that uses groups gets one :class:`GroupEndpoint`: a channel
to the runtime's group service (:mod:`multihop.groups.gsd`, started on
demand), a :class:`multihop._core.GroupPort` on its link to its monitor (group
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
root monitor sends the sender one result (``core-rs/src/group/ccast.rs``,
docs/groups.md §8).  Tag 2 (``unicast=True``, the flat baseline): the
request goes to each node id and each reply straight to the sender, whose
:class:`~multihop.groups.convergecast.Convergecast` gathers them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import multihop as mh
from multihop import _core
from multihop.errors import ChannelClosed, MultihopError, ProtocolError, Timeout
from multihop.groups import codec
from multihop.groups.convergecast import Convergecast, Partial
from multihop.groups.errors import GroupError
from multihop.groups.events import (
    Delivered,
    Failed,
    Joined,
    Left,
    MulticastCreated,
    Multicast,
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
from multihop.groups.gsd import DEFAULT_WINDOW, SERVICE, ensure_service
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


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _locked(f: Callable[Concatenate[GroupEndpoint, _P], _R]) -> Callable[Concatenate[GroupEndpoint, _P], _R]:
    @functools.wraps(f)
    def call(self: GroupEndpoint, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return f(self, *args, **kwargs)

    return call


class GroupEndpoint:
    """One dispatcher's group machinery (see the module text)."""

    def __init__(self, d: _core.Dispatcher, timeout: float = 30.0) -> None:
        self.d = d
        self.port = _core.GroupPort(d)
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
        # What this endpoint has to send, in order: the member machine's transmits and raw REPLY
        # frames. A frame whose tree has no credit waits here (the call that sent it raised
        # Timeout, or it came from a pump) and goes first with the next call or keeper pump.
        self._unsent: deque[object] = deque()
        self._lock = threading.RLock()
        self._closed = threading.Event()
        threading.Thread(target=self._keeper, name=f"mh-groups-{d.core}", daemon=True).start()

    def _keeper(self) -> None:
        """Pump every 10 ms while no call does (view changes and credits go on between calls)."""
        while not self._closed.wait(_POLL):
            if not self._lock.acquire(blocking=False):
                continue
            try:
                self.pump()
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
        """Take what arrived (service messages, frames), waiting up to ``wait`` s for frames; True if anything came."""
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
        frames = self.port.recv_many(512, 0.0 if got else wait)
        t0 = time.perf_counter_ns() if frames else 0
        for f in frames:
            self._frame(f)
        if got and self._early:
            early, self._early = self._early, []
            for f in early:
                self._frame(f)
        self._flush()
        if frames:  # what handling a frame costs this endpoint (the machine model's receive cost)
            self.handle_ns += time.perf_counter_ns() - t0
            self.handled += len(frames)
        return got or bool(frames)

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

    def _flush(self, deadline: float | None = 0.0) -> bool:
        """Send what the member machine has to send and hand it its events, until neither has more.

        A frame waits for a credit of its tree until ``deadline`` (``0.0``, the default: not at all;
        ``None``: for as long as it takes); what did not go stays queued, in order, for the next call.
        True when nothing is left queued.
        """
        if self._busy:
            return not self._unsent  # a callback called in: the outer flush goes on
        self._busy = True
        try:
            for _ in range(1_000_000):
                tx = self.member.transmits()
                self._unsent.extend(tx)
                drained = self._drain(deadline)
                ev = self.member.events()
                for e in ev:
                    self._event(e)
                if not tx and not ev:
                    return drained
            return not self._unsent
        finally:
            self._busy = False

    def _drain(self, deadline: float | None) -> bool:
        """Send the queued frames in order until one finds no credit by ``deadline``; True if all went."""
        while self._unsent:
            try:
                self._transmit(self._unsent[0], deadline)
            except Timeout:
                return False
            self._unsent.popleft()
        return True

    def _transmit(self, t: object, deadline: float | None) -> None:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if isinstance(t, bytes):  # a REPLY frame
            self.port.send(t, timeout=wait)
            return
        if isinstance(t, ToService):
            self._service_check()
            self.ch.send(codec.encode(t.msg), timeout=30)
            return
        frame = t.frame if isinstance(t, (Multicast, Unicast)) else None
        assert frame is not None
        gid = self.gids[frame.group]
        if isinstance(frame, Submit):
            assert isinstance(t, Unicast)
            self.port.send(encode_submit(frame, gid, t.node, self.me.core), timeout=wait)
        else:
            self.port.send(encode_data(frame, gid, self.me.core), timeout=wait)

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
            self._unsent.append(encode_up_reply(gid, owed.view, owed.dest, owed.root, me, requester, request, answer))
        elif requester == me:
            cc = self._cc.get((group, request))
            if cc is not None:
                cc.reply(me, answer)
            return
        else:
            self._unsent.append(encode_reply(gid, owed.view, requester, self.me.core, me, request, answer))
        self._drain(0.0)

    @_locked
    def reply(self, name: str, delivery: Delivery, answer: bytes) -> None:
        """Answer a request this member owes (see :meth:`Group.reply`)."""
        key = (name, delivery.sender, delivery.request)
        owed = self._owed.pop(key, None) if delivery.request and delivery.group == name else None
        if owed is None:
            raise GroupError(f"{delivery!r} is not a convergecast request of group {name!r} awaiting this member's reply")
        self._answer(name, delivery.sender, delivery.request, owed, answer)

    # ---- waiting ---------------------------------------------------------------

    def _wait(self, done: Callable[[], bool], deadline: float | None, what: str, service: bool = False, group: str | None = None) -> None:
        self.pump()
        while not done():
            if group is not None:
                self._open(group)
            if service:
                self._service_check()  # a membership change cannot complete without the service
            if _expired(deadline):
                raise Timeout(f"{what}: not done within the timeout")
            self.pump(_left(deadline))

    def _request_result(self, req: int, deadline: float | None, what: str, service: bool = True) -> None:
        self._wait(lambda: req in self.failures or req in self.replies, deadline, what, service=service)
        if req in self.failures:
            raise GroupError(self.failures.pop(req))

    # ---- operations --------------------------------------------------------------

    @_locked
    def join(self, name: str, cb: _Callbacks, deadline: float | None) -> Group:
        """Join ``name`` (callbacks ``cb``); returns once a view with this member is installed here."""
        self.pump()
        self._service_check()
        self._open(name)
        if not isinstance(name, str) or not name:
            raise GroupError(f"a group name is a non-empty string, got {name!r}")
        self.pump()
        req = self.member.join(name)
        self.callbacks[name] = cb
        self._flush()
        self._request_result(req, deadline, f"join of group {name!r}", service=True)
        self._wait(lambda: name in self.member.groups(), deadline, f"join of group {name!r}", service=True)
        return Group(self, name)

    @_locked
    def leave(self, name: str, deadline: float | None) -> None:
        """Leave ``name``; returns once the leave is installed (everything addressed here delivered)."""
        self.pump()
        self._service_check()
        self._open(name)
        req = self.member.leave(name)
        self._flush()
        self._wait(lambda: name in self.left or req in self.failures, deadline, f"leave of group {name!r}", service=True)
        if req in self.failures:
            raise GroupError(self.failures.pop(req))

    @_locked
    def sync(self, name: str, deadline: float | None) -> None:
        """Return once this member has installed the view the service has installed now (or left ``name``)."""
        self.pump()
        self._service_check()
        self._open(name)
        self._info_next += 1
        req = self._info_next
        self.ch.send(json.dumps({"op": "info", "req": req, "group": name}).encode(), timeout=30)
        self._wait(lambda: req in self.infos, deadline, f"view of group {name!r}", service=True)
        info = self.infos.pop(req)
        if info.get("error"):
            raise GroupError(info["error"])
        target = int(info["view"]["view_id"])

        def caught_up() -> bool:
            return name not in self.member.groups() or self.member.view(name).view_id >= target

        self._wait(caught_up, deadline, f"view {target} of group {name!r}", service=True)

    @_locked
    def send(self, name: str, dest: int, payload: bytes, deadline: float | None) -> None:
        """Send a tagged ``payload`` to ``dest`` of ``name`` (waits for a credit of the tree).

        A destination this member's view lacks is looked up once more after :meth:`sync` (it may be in a
        view still on its way here) before the GroupError stands.
        """
        self.pump()
        self._open(name)
        try:
            self.member.send(name, dest, payload)
        except GroupError:
            if name not in self.member.groups() or self.member.leaving(name):
                raise
            self.sync(name, deadline)
            self.member.send(name, dest, payload)
        if not self._flush(deadline):
            raise Timeout(
                f"group {name!r}: no credit on its tree within the timeout (a member downstream is slow or stopped);"
                " the message is queued here and goes out, in order, with this member's next calls"
            )

    @_locked
    def recv(self, name: str, deadline: float | None) -> Delivery:
        """The next delivery of ``name``; Timeout at ``deadline``, GroupError once nothing of it can come."""
        q = self.inbox.get(name)
        if not q:
            self.pump()
            q = self.inbox.setdefault(name, deque())
            while not q:
                self._open(name)
                if name not in self.member.groups():
                    raise GroupError(f"endpoint {self.me} is not a member of group {name!r} (and nothing of it is left to receive)")
                if _expired(deadline):
                    raise Timeout(f"no delivery of group {name!r} within the timeout")
                self.pump(_left(deadline))
        return q.popleft()

    @_locked
    def convergecast(self, name: str, payload: bytes, deadline: float | None, unicast: bool = False, aggregate: bool = True) -> Partial:
        """Send a convergecast request to every member of ``name`` and gather the replies (see :meth:`Group.convergecast`)."""
        self.pump()
        self._open(name)
        view = self.member.view(name)
        self._cc_next = self._cc_next % 65535 + 1
        request = self._cc_next
        timeout_ms = 0 if deadline is None else max(1, min(0xFFFFFFFF, int((deadline - time.monotonic()) * 1000)))
        what = f"convergecast {request} of group {name!r}"
        if unicast or not aggregate:
            dests = list(view.nodes) if unicast else [BROADCAST]
            return self._convergecast_direct(name, view, dests, CC_TAG.pack(CC_DIRECT, request, timeout_ms) + payload, deadline, what)
        key = (name, request)
        self._cc_results[key] = None
        try:
            self.send(name, BROADCAST, CC_TAG.pack(CC_AGGREGATED, request, timeout_ms) + payload, deadline)
            self._wait(lambda: self._cc_results[key] is not None, deadline, what, group=name)
            got = self._cc_results[key]
        except Timeout:
            # Nothing came back up the tree in time: nobody is known to have replied.
            nobody = Partial({}, frozenset(view.destinations(BROADCAST)))
            raise ConvergecastTimeout(f"{what} incomplete: no result within the timeout", nobody) from None
        finally:
            self._cc_results.pop(key, None)
        assert got is not None
        result, gave_up = got
        if gave_up:
            raise ConvergecastTimeout(
                f"{what} incomplete: {len(result.replies)} replies, {len(result.missing)} missing (a monitor stopped waiting)", result
            )
        return result

    def _convergecast_direct(self, name: str, view: View, dests: list[int], tagged: bytes, deadline: float | None, what: str) -> Partial:
        """The baselines: the request to each of ``dests`` (each node id, or the broadcast id down the tree),
        each reply straight back here."""
        request = self._cc_next
        cc = Convergecast(view.destinations(BROADCAST), ())
        self._cc[(name, request)] = cc
        try:
            for dest in dests:
                self.send(name, dest, tagged, deadline)
            self._wait(lambda: cc.done, deadline, what, group=name)
        except Timeout:
            part: Partial = cc._acc
            raise ConvergecastTimeout(f"{what} incomplete: {len(part.replies)} replies", part) from None
        finally:
            self._cc.pop((name, request), None)
        result = cc.poll()
        assert result is not None
        return result

    @_locked
    def create_multicast(self, name: str, deadline: float | None) -> int:
        """Create a multicast group in ``name``; returns its id once a view with it is installed here."""
        self.pump()
        self._service_check()
        self._open(name)
        req = self.member.create_multicast(name)
        self._flush()
        self._wait(lambda: req in self.mcreated or req in self.failures, deadline, "multicast creation", service=True)
        if req in self.failures:
            raise GroupError(self.failures.pop(req))
        mcast = self.mcreated.pop(req)
        self._wait(lambda: self._has_mcast(name, mcast), deadline, "multicast creation", service=True)
        return mcast

    def _has_mcast(self, name: str, mcast: int) -> bool:
        try:
            self.member.view(name).multicast_members(mcast)
            return True
        except GroupError:
            return False

    @_locked
    def multicast_change(self, name: str, mcast: int, join: bool, deadline: float | None) -> None:
        """Join (``join``) or leave multicast group ``mcast``; returns once the view shows it."""
        self.pump()
        self._service_check()
        self._open(name)
        if name in self.member.groups() and not self._has_mcast(name, mcast):
            self.sync(name, deadline)  # it may be in a view still on its way here
        req = self.member.join_multicast(name, mcast) if join else self.member.leave_multicast(name, mcast)
        self._flush()
        self._request_result(req, deadline, "multicast change", service=True)
        node = self.member.node(name)

        def installed() -> bool:
            return (node in self.member.view(name).multicast_members(mcast)) == join

        self._wait(installed, deadline, "multicast change", service=True)


_ENDPOINTS: dict[int, tuple[_core.Dispatcher, GroupEndpoint]] = {}


def endpoint_of(d: _core.Dispatcher) -> GroupEndpoint:
    """The group endpoint of dispatcher ``d`` (made on first use)."""
    got = _ENDPOINTS.get(id(d))
    if got is not None and got[0] is d:
        return got[1]
    ep = GroupEndpoint(d)
    _ENDPOINTS[id(d)] = (d, ep)
    return ep


def join(
    d: _core.Dispatcher,
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


def leave(d: _core.Dispatcher, name: str, timeout: float | None = 30.0) -> None:
    """``d.leave(name)``: leave group ``name`` once everything addressed here is delivered.

    Raises:
        GroupError: this dispatcher is not a member of ``name``.
    """
    endpoint_of(d).leave(name, _deadline(timeout))


def group(
    rt: mh.Runtime, name: str, order: str = "fifo", tree: str = "numa", *, create: bool = True, window: int = DEFAULT_WINDOW, timeout: float = 30.0
) -> GroupInfo:
    """``rt.group(name, ...)``: the application group ``name``, created if it does not exist (``create``).

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
