"""The client side of GES, sans-IO: subscriptions, event ids, publishing, received events.

:class:`ClientCore` is what both clients run: the simulator's
(:meth:`Simulator.client <multihop.ges.simulator.Simulator.client>`) and the
live one (:func:`multihop.ges.connect`).  It makes the messages to send to the
client's broker and takes the broker's messages in; the clock is the
driver's (``now_us``), so event ids are reproducible in the simulator.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterable, Mapping

from multihop.ges.durability import order_key
from multihop.ges.errors import ClientIdInUse, GesStateError, ResumeRefused, StorageError
from multihop.ges.event import SEQUENCE_MAX, Event, EventData, EventId, make_event
from multihop.ges.messages import (
    REFUSED_IN_USE,
    REFUSED_OTHER,
    REFUSED_UNAVAILABLE,
    ActiveQuery,
    ActiveReply,
    Attach,
    AttachRefused,
    Deliver,
    DurableAck,
    DurableAttach,
    DurableDeliver,
    DurableNak,
    NotStored,
    Publish,
    Refused,
    Stored,
    Subscribe,
    Unsubscribe,
    Welcome,
)
from multihop.ges.profile import Chain, make_chain

__all__ = ["ClientCore", "DurableState", "check_client_id", "check_credential", "QUEUE_MAX"]

#: events a durable client keeps while they are not yet in stable storage (published while
#: disconnected, or not yet confirmed); publishing more raises GesStateError
QUEUE_MAX = 10_000


class DurableState:
    """What a durable client keeps across its incarnations (its "disk"): its credential, home store, last event
    per publisher, the events not yet stored, its subscriptions, the broker it was last attached to."""

    def __init__(self, credential: str = "") -> None:
        #: the secret that proves this client is the owner of its id (registered by its first connection)
        self.credential = credential
        self.home = -1
        self.previous = -1
        self.last: dict[str, EventId] = {}
        self.queue: dict[EventId, tuple[EventData, EventId | None]] = {}  #: event id -> (event, the one before)
        self.last_published: EventId | None = None
        self.subs: dict[int, Any] = {}
        self.next_sub = 1

    def mark(self) -> tuple[Any, ...]:
        """What an attach may change before it is answered (positions, credential, previous broker): for :meth:`undo`."""
        return (dict(self.last), self.credential, self.previous)

    def undo(self, mark: tuple[Any, ...]) -> None:
        """Put back what :meth:`mark` saw (an attach was refused: the client's state stays as it was)."""
        self.last, self.credential, self.previous = dict(mark[0]), mark[1], mark[2]


def check_credential(credential: Any) -> str:
    """A durable client's credential, checked: a string of 16 to 128 printable ASCII characters without spaces
    (what a client's first connection made: ``LiveClient.credential``)."""
    if not isinstance(credential, str):
        raise TypeError(f"credential must be a str (the client's LiveClient.credential), got {type(credential).__name__}")
    if not 16 <= len(credential) <= 128 or not all("!" <= ch <= "~" for ch in credential):
        raise ValueError(
            f"credential must be 16 to 128 printable ASCII characters without spaces (the client's LiveClient.credential), "
            f"got {len(credential)} characters"
        )
    return credential


def check_client_id(client_id: Any) -> str:
    """A client id, checked: a non-empty string of at most 128 bytes without NUL (an int is turned into its text)."""
    if isinstance(client_id, int) and not isinstance(client_id, bool):
        client_id = str(client_id)
    if not isinstance(client_id, str) or not client_id or "\x00" in client_id or len(client_id.encode()) > 128:
        raise ValueError(f"client id must be a non-empty string of at most 128 bytes without NUL, got {client_id!r}")
    return client_id


class ClientCore:
    """One client's protocol state (see the module docstring)."""

    def __init__(
        self, client_id: str, incarnation: int, now_us: int, durable: DurableState | None = None, resume: bool = False, broker: int = -1
    ) -> None:
        self.client = check_client_id(client_id)
        self.incarnation = int(incarnation)
        self.timestamp = int(now_us)
        self.sequence = 0
        self._next_sub = 1
        self.subs: dict[int, Chain] = {}
        self.inbox: deque[Event] = deque()
        #: durable clients: the state kept across incarnations (None: a plain client)
        self.durable = durable
        self.connected = True
        #: durable: the storage entry received last in this session (-1: the session starts)
        self.last_entry = -1
        #: durable: the broker accepted the attach (Welcome) / refused it (the reason)
        self.welcomed = False
        self.refused: str | None = None
        #: why, as a ``REFUSED_*`` code of :mod:`multihop.ges.messages`
        self.refused_kind = REFUSED_OTHER
        #: durable: events waiting in storage when this incarnation started, and how many of them arrived
        self.replay = 0
        self.replayed = 0
        #: durable: why the home store answered "not stored" last (None once it stored again)
        self.store_error: str | None = None
        if durable is None:
            self.outbox: list[Any] = [Attach(self.client, self.incarnation)]
        else:
            self.subs = durable.subs
            self._next_sub = durable.next_sub
            last = tuple(durable.last.values())
            self.outbox = [DurableAttach(self.client, self.incarnation, durable.home, durable.previous, last, resume, durable.credential)]
            durable.previous = broker
            # events not yet stored go out again, before anything new (their ids are of their incarnation)
            self.outbox.extend(Publish(ev, prev) for ev, prev in durable.queue.values())
        #: every event delivered so far, in order
        self.received: list[Event] = []
        #: subscription -> last active level the broker reported
        self.active: dict[int, int] = {}
        #: requests the broker refused, as (what, reason)
        self.refusals: list[tuple[str, str]] = []

    def subscribe(self, profile: Iterable[Any]) -> int:
        """Subscribe with a profile ``[(attribute, value or "*"), ...]`` (signature order); returns the subscription id."""
        chain = make_chain(list(profile))
        sub = self._next_sub
        self._next_sub += 1
        if self.durable is not None:
            self.durable.next_sub = self._next_sub
        self.subs[sub] = chain
        self.outbox.append(Subscribe(sub, chain))
        return sub

    def unsubscribe(self, sub: int) -> None:
        """Remove a subscription (KeyError if it is not one of this client's)."""
        if sub not in self.subs:
            raise KeyError(f"no subscription {sub} (this client has {sorted(self.subs)})")
        del self.subs[sub]
        self.outbox.append(Unsubscribe(sub))

    def publish(self, content: Mapping[str, Any], payload: bytes = b"", now_us: int | None = None) -> EventId:
        """Publish an event (``content``: attribute -> value, in signature order); returns its id."""
        if self.sequence >= SEQUENCE_MAX:
            self.timestamp = max(self.timestamp + 1, int(now_us or 0))
            self.sequence = 0
        d = self.durable
        if d is not None and len(d.queue) >= QUEUE_MAX:
            raise GesStateError(f"client {self.client!r}: {QUEUE_MAX} published events are not yet in stable storage (the local queue is full)")
        eid = EventId(self.client, self.timestamp, self.sequence, self.incarnation)
        ev = make_event(eid, content, payload)  # checks before the sequence is used
        self.sequence += 1
        prev = None
        if d is not None:
            prev = d.last_published
            d.queue[eid] = (ev, prev)
            d.last_published = eid
        if self.connected:
            self.outbox.append(Publish(ev, prev))
        return eid

    def ask_active(self, sub: int) -> None:
        """Ask the broker for the active level of a subscription (the answer lands in :attr:`active`)."""
        if sub not in self.subs:
            raise KeyError(f"no subscription {sub}")
        self.outbox.append(ActiveQuery(sub))

    def on_message(self, msg: Any) -> None:
        """A message from the broker."""
        t = type(msg)
        if t is DurableDeliver:
            self._durable_deliver(msg)
        elif t is Stored:
            d = self.durable
            assert d is not None  # a broker sends Stored to durable clients only
            q = d.queue
            self.store_error = None
            for i in msg.ids:  # stored in publishing order: every event up to i is stored
                if i in q:
                    while q:
                        first = next(iter(q))
                        del q[first]
                        if first == i:
                            break
        elif t is NotStored:
            self.store_error = msg.reason  # the events stay queued; the broker sends them again
        elif t is Welcome:
            self.welcomed = True
            d = self.durable
            assert d is not None  # a broker sends Welcome to durable clients only
            d.home = msg.home
            self.replay = msg.replay
        elif t is Deliver:
            for data in msg.events:
                ev = Event(data)
                self.inbox.append(ev)
                self.received.append(ev)
        elif t is ActiveReply:
            self.active[msg.sub] = msg.level
        elif t is Refused:
            self.refusals.append((msg.what, msg.reason))
            if msg.what == "DurableAttach":
                self.refused = msg.reason
                self.connected = False
        elif t is AttachRefused:
            self.refusals.append(("DurableAttach", msg.reason))
            self.refused, self.refused_kind = msg.reason, msg.kind
            self.connected = False

    def refusal(self, where: str) -> Exception:
        """The error a refused durable attach raises: ClientIdInUse (the id is taken), StorageError (the home store
        cannot write now) or ResumeRefused (anything else), naming the client, ``where`` it attached, and why."""
        text = f"client {self.client!r} at broker {where}: {self.refused}"
        if self.refused_kind == REFUSED_IN_USE:
            return ClientIdInUse(text)
        if self.refused_kind == REFUSED_UNAVAILABLE:
            return StorageError(text)
        return ResumeRefused(text)

    def _durable_deliver(self, msg: DurableDeliver) -> None:
        """Entries from the home store: accept the ones that continue the chain, ask again after a gap."""
        d = self.durable
        assert d is not None
        prev = msg.prev
        if prev == -1:
            self.last_entry = -1  # a new chain: what we have is filtered by publisher below
        elif prev != self.last_entry:
            if msg.entries and msg.entries[-1][0] > self.last_entry:
                self.outbox.append(DurableNak(self.last_entry))  # a gap: from our last entry again
            return
        last = d.last
        for entry, data in msg.entries:
            self.last_entry = entry
            i = data.id
            have = last.get(i.publisher)
            if have is not None and order_key(i) <= order_key(have):
                continue  # had it (a resend after a restart or a resume)
            last[i.publisher] = i
            ev = Event(data)
            self.inbox.append(ev)
            self.received.append(ev)
            if self.replayed < self.replay:
                self.replayed += 1
        self.outbox.append(DurableAck(self.last_entry))

    def disconnect(self) -> None:
        """Durable: stop talking to the broker; publishing goes on into the local queue."""
        self.connected = False
        self.outbox = []

    def take(self) -> list[Any]:
        """Messages to send to the broker, in order."""
        out, self.outbox = self.outbox, []
        return out
