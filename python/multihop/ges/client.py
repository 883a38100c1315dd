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

from multihop.ges.event import SEQUENCE_MAX, Event, EventId, make_event
from multihop.ges.messages import ActiveQuery, ActiveReply, Attach, Deliver, Publish, Refused, Subscribe, Unsubscribe
from multihop.ges.profile import Chain, make_chain

__all__ = ["ClientCore", "check_client_id"]


def check_client_id(client_id: Any) -> str:
    """A client id, checked: a non-empty string of at most 128 bytes without NUL (an int is turned into its text)."""
    if isinstance(client_id, int) and not isinstance(client_id, bool):
        client_id = str(client_id)
    if not isinstance(client_id, str) or not client_id or "\x00" in client_id or len(client_id.encode()) > 128:
        raise ValueError(f"client id must be a non-empty string of at most 128 bytes without NUL, got {client_id!r}")
    return client_id


class ClientCore:
    """One client's protocol state (see the module docstring)."""

    def __init__(self, client_id: str, incarnation: int, now_us: int) -> None:
        self.client = check_client_id(client_id)
        self.incarnation = int(incarnation)
        self.timestamp = int(now_us)
        self.sequence = 0
        self._next_sub = 1
        self.subs: dict[int, Chain] = {}
        self.outbox: list[Any] = [Attach(self.client, self.incarnation)]
        self.inbox: deque[Event] = deque()
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
        eid = EventId(self.client, self.timestamp, self.sequence, self.incarnation)
        ev = make_event(eid, content, payload)  # checks before the sequence is used
        self.sequence += 1
        self.outbox.append(Publish(ev))
        return eid

    def ask_active(self, sub: int) -> None:
        """Ask the broker for the active level of a subscription (the answer lands in :attr:`active`)."""
        if sub not in self.subs:
            raise KeyError(f"no subscription {sub}")
        self.outbox.append(ActiveQuery(sub))

    def on_message(self, msg: Any) -> None:
        """A message from the broker."""
        t = type(msg)
        if t is Deliver:
            for data in msg.events:
                ev = Event(data)
                self.inbox.append(ev)
                self.received.append(ev)
        elif t is ActiveReply:
            self.active[msg.sub] = msg.level
        elif t is Refused:
            self.refusals.append((msg.what, msg.reason))

    def take(self) -> list[Any]:
        """Messages to send to the broker, in order."""
        out, self.outbox = self.outbox, []
        return out
