"""Durability and mobility (GES service paper 6.1, 8.6-8.9, 9.1), sans-IO: storage brokers and durable clients.

**Storage brokers.**  Each cluster has one storage broker (the configuration
names it; the default is the cluster's lowest address).  Its store
(:class:`~multihop.ges.storage.Storage`, injected: in-memory in the simulator,
SQLite live) holds every event it must still hand out, with a bit vector:
bit 0 stands for the gateways' far ends (the event was published in this
cluster and its copies are not yet acknowledged by every next hop), bit ``k``
for the durable client with slot ``k`` homed here whose profile the event
matched.  A client's acknowledgement clears its bit, the last hop's
acknowledgement clears bit 0, and an entry whose vector is zero is deleted.

**Durable clients** are *homed* at the storage broker of the cluster they first
attached in: their subscriptions live in that broker's profile (it is their
proxy, 8.6: events for a disconnected client still go there and are stored).
Wherever a client is attached, its broker relays between it and the home store
(:class:`~multihop.ges.messages.Relay` along best hops: the paper's recovery
events "with a destination list internal to the event", 8.7).  The store sends
a client's entries in entry order, each chained to the previous one (``prev``):
the client acknowledges cumulatively (ACK: garbage collection) and asks for a
gap again (NAK: retransmission); an entry unacknowledged for ``RTO`` is sent
again.  A resume presents the last event received per publisher: the store
checks it (an unknown client id, or a position the store never gave that
client, is refused), clears what the client has, and sends the rest, then the
live entries, from the same queue: no gap, no duplicate.

**Who a client is.**  A durable id belongs to whoever holds its credential: a
client's first connection brings a random token (256 bits) that its home keeps
only as a hash (:func:`credential_hash`); a resume must present it (compared in
constant time), and one with none or another is refused, the client's state left
as it is.  A plain connect of an id the home holds state for is refused as in use
(``REFUSED_IN_USE``), never a reset.  The attaching broker changes nothing for the
id until the home accepted the attach: the connection the id had there stays, and
the new one's requests wait (they are dropped if it is refused).

**Publishing.**  A client's broker passes each event to the client's home
storage broker (the store of the cluster it first attached in), which stores it (bit 0 plus its homed clients' bits), answers
"stored" (the client's local queue releases the event then) and routes it
from there.  A copy is acknowledged to the previous hop only when every copy
made of it was acknowledged by the next hops and every local entry it made is
committed (:class:`~multihop.ges.erp.EventRouting` in durable mode), so no hop
forgets an event before the next one has it (9.1.1); a storage broker that
restarts routes again every entry whose bit 0 is still set.

The machine is driven by :class:`~multihop.ges.broker.BrokerCore`; it reads no
clock and does no I/O (the store is the driver's object; the broker commits it
before sending what the batch allows).
"""

from __future__ import annotations

import hashlib
import hmac
from collections import deque
from typing import Any, Literal, Protocol, TypeAlias

from multihop.ges.address import Address, contains, unit_id
from multihop.ges.broker_view import BrokerView, EventRouter
from multihop.ges.errors import StoreWriteError
from multihop.ges.event import EventData, EventId, names_and_values
from multihop.ges.messages import (
    REFUSED_IN_USE,
    REFUSED_OTHER,
    REFUSED_RESUME,
    REFUSED_UNAVAILABLE,
    ActiveReply,
    AttachRefused,
    DurableAttach,
    DurableDeliver,
    NotStored,
    ProfileResync,
    Refused,
    Relay,
    SAck,
    SActive,
    SDeliver,
    SDetach,
    SNotStored,
    SPublish,
    SRefuse,
    SRegister,
    SStored,
    SSubAck,
    SSubscribe,
    Stored,
    SWelcome,
    Welcome,
)
from multihop.ges.ppp import ProfilePropagation
from multihop.ges.storage import Storage, StoredClient, event_size

__all__ = [
    "DurableBroker",
    "Durability",
    "StoreRole",
    "credential_hash",
    "order_key",
    "storage_brokers_of",
    "ROUTE_BIT",
    "WINDOW",
    "RTO",
    "RETRY",
    "RETRY_MAX_TICKS",
    "VIRTUAL_BASE",
]

#: bit 0 of an entry: the gateways' far ends still have to acknowledge it
ROUTE_BIT = 1
#: entries in flight to one client session (sent, not acknowledged)
WINDOW = 4096
#: an unacknowledged session is sent again after this many seconds, the wait doubling up to RTO_MAX ...
RTO = 0.2
RTO_MAX = 3.2
#: ... and given up (suspended until the client acks or resumes, or the graph changes) after this many tries
RTO_TRIES = 20
#: a relayed request (register, subscribe, publish) is sent again after this many seconds, the wait
#: doubling up to RETRY_MAX_TICKS times this, until it is answered or its client detaches
RETRY = 0.2
RETRY_MAX_TICKS = 16
#: requests a durable client may send before its home accepted its attach (its queue goes out at a resume)
EARLY_MAX = 12_000
#: attaches that left before their home answered, remembered (so an accepted one is marked away)
LEFT_MAX = 4096
#: the profile peer ids of homed clients (the store subscribes for them): VIRTUAL_BASE - slot
VIRTUAL_BASE = -(1 << 50)
#: a durability timer's name (:meth:`Durability.fire`): a session's RTO ``("dur-rto", client, incarnation,
#: entries acknowledged when it was set)``, the relayed requests' retry tick ``("dur-retry",)``, or a store's
#: next try at a batch it could not write (``("dur-commit",)``)
DurabilityTimer: TypeAlias = tuple[Literal["dur-rto"], str, int, int] | tuple[Literal["dur-retry"]] | tuple[Literal["dur-commit"]]
#: a relayed request waiting for its answer: ``("reg", client, incarnation)`` or ``("sub", client, subscription)``
_RequestKey: TypeAlias = tuple[Literal["reg", "sub"], str, int]


def credential_hash(client: str, credential: str) -> str:
    """What a store keeps of a durable client's credential: SHA-256 over a fixed prefix, the client id and the
    credential (the credential itself is a 256-bit random token, so no salt or stretching is needed)."""
    return hashlib.sha256(b"multihop-ges-credential\x00" + client.encode() + b"\x00" + credential.encode()).hexdigest()


def order_key(eid: EventId) -> tuple[int, int, int]:
    """The order of a publisher's events across its incarnations: (incarnation, timestamp, sequence)."""
    return (eid.incarnation, eid.timestamp, eid.sequence)


def storage_brokers_of(topology: Any) -> dict[int, int]:
    """The storage broker of each cluster of a topology: its lowest address (the documented rule)."""
    out: dict[int, int] = {}
    levels = topology.levels
    for a in sorted(topology.brokers):
        out.setdefault(unit_id(a.code, 1, levels), a.code)
    return out


class DurableBroker(BrokerView, Protocol):
    """The broker as durability sees it: a :class:`~multihop.ges.broker_view.BrokerView` with its profiles,
    its event routing and its own durability side."""

    @property
    def ppp(self) -> ProfilePropagation:
        """The broker's profile propagation (durable clients' subscriptions, deciders)."""
        ...

    @property
    def event_router(self) -> EventRouter:
        """The broker's event routing, Python's or the native engine's (stored entries are routed as origin)."""
        ...

    @property
    def durability(self) -> Durability:
        """The broker's durability side (:class:`Durability`: the relay, and the store if it has one)."""
        ...


class _Session:
    """A homed client's delivery session (in memory: a restart starts a new one)."""

    __slots__ = ("broker", "incarnation", "queue", "sent", "prev", "active", "idle", "timer", "replay", "delivered", "suspended")

    def __init__(self, broker: int, incarnation: int) -> None:
        self.broker = broker
        self.incarnation = incarnation
        self.queue: deque[int] = deque()  # pending entries (unacknowledged), ascending
        self.sent = 0  # how many at the front of the queue were sent
        self.prev = -1  # the entry sent last (the chain)
        self.active = True
        self.idle = 0  # RTOs without progress
        self.timer = False
        self.replay = 0  # entries pending when the session started
        self.delivered = 0  # entries acknowledged in this session
        self.suspended = False  # RTO gave up (no route to its broker?): woken when the graph changes


class StoreRole:
    """The storage broker's side (see the module docstring)."""

    def __init__(self, core: DurableBroker, storage: Storage) -> None:
        self.core = core
        self.storage = storage
        st = storage.load()
        #: entry -> [event, bits]
        self.entries: dict[int, list[Any]] = {e: [ev, b] for e, (ev, b) in st.entries.items()}
        self.next_entry = max(self.entries, default=0) + 1
        self.clients: dict[str, StoredClient] = st.clients
        self.by_slot: dict[int, str] = {c.slot: name for name, c in st.clients.items()}
        self.streams = st.streams
        self.sessions: dict[str, _Session] = {}
        #: per publisher: the entries being routed now (one batch), and the ones stored after them
        self.inflight: dict[str, set[int]] = {}
        self.waiting: dict[str, list[int]] = {}
        self._dirty: set[str] = set()  # sessions with new entries to send
        self._stored_to: dict[tuple[int, str], EventId] = {}  # (broker, client) -> its last event stored
        self._dirty_streams: set[tuple[str, int]] = set()  # streams whose last event changed this round
        self._dirty_progress: dict[tuple[str, str], EventId] = {}  # (client, publisher) -> last acknowledged
        #: per publisher, its last event stored (order key), over its incarnations
        self._pub_last: dict[str, tuple[int, int, int]] = {}
        for (pub, inc), (ts, seq) in self.streams.items():
            k = (inc, ts, seq)
            if pub not in self._pub_last or k > self._pub_last[pub]:
                self._pub_last[pub] = k
        self._graph_at = -1
        self.bytes = sum(event_size(v[0]) for v in self.entries.values())
        self.counters = {
            "stored": 0,
            "duplicates": 0,
            "early": 0,
            "collected": 0,
            "sent": 0,
            "resent": 0,
            "refused": 0,
            "write_errors": 0,
            "not_stored": 0,
        }
        #: what the store said this round, sent once the batch it vouches for is committed: (broker, message)
        self._held: list[tuple[int, Any]] = []
        #: why the last commit failed (a full disk): None while the store writes
        self.write_error: str | None = None
        self._commit_due = False  # a failed batch is written again when the commit timer fired
        self._commit_timer = False
        self._commit_wait = RETRY

    # ---- committing ------------------------------------------------------------------------

    def _send(self, dst: int, body: Any) -> None:
        """Send a store message once the round's batch is committed (it may say "stored", "welcome", ...)."""
        self._held.append((dst, body))

    def commit(self) -> bool:
        """Commit the open batch, then send what it vouches for; False if the store cannot write now.

        A failed commit (:class:`~multihop.ges.errors.StoreWriteError`: a full disk) keeps the batch;
        the store reports the reason (:meth:`status`, "not stored" answers to publishers) and tries
        again when the ``dur-commit`` timer fires (every ``RETRY`` seconds, doubling up to
        ``RETRY_MAX_TICKS`` times that), until a commit goes through: then everything held goes out,
        in order, and storing goes on, without a restart.
        """
        if self.write_error is not None and not self._commit_due:
            return False
        self._commit_due = False
        for _ in range(4):  # what a released message does here may write again (a detach): bounded
            try:
                self.storage.commit()
            except StoreWriteError as e:
                self.write_error = str(e)
                self.counters["write_errors"] += 1
                if not self._commit_timer:
                    self._commit_timer = True
                    self.core.set_timer(self._commit_wait, ("dur-commit",))
                    self._commit_wait = min(2 * self._commit_wait, RETRY * RETRY_MAX_TICKS)
                return False
            if self.write_error is not None:
                self.write_error = None
                self._commit_wait = RETRY
            if not self._held:
                break
            held, self._held = self._held, []
            relay = self.core.durability.relay
            for dst, body in held:
                relay(dst, body)
        return True

    def fire_commit(self) -> None:
        """The ``dur-commit`` timer: the next round writes the kept batch again."""
        self._commit_timer = False
        if self.write_error is not None:
            self._commit_due = True

    def refuse_publish(self, src: int, msg: SPublish) -> None:
        """The store cannot write: a publication is not stored, and its publisher is told why (its broker sends
        it again later).  Nothing of it is kept, so nothing it would add waits in memory."""
        self.counters["not_stored"] += len(msg.events)
        me = Address.from_code(self.core.code, self.core.levels)
        reason = f"storage broker {me} cannot store now: {self.write_error}"
        self.core.durability.relay(src, SNotStored(msg.client, msg.events[0].id, reason))

    def start(self) -> None:
        """After a (re)start: subscribe for the homed clients, route again what is not acknowledged, resume sessions."""
        ppp = self.core.ppp
        for _name, c in self.clients.items():
            for sub, chain in c.subs.items():
                ppp.subscribe(VIRTUAL_BASE - c.slot, sub, chain)
        for e, (ev, bits) in list(self.entries.items()):
            if bits & ROUTE_BIT:
                self.waiting.setdefault(ev.id.publisher, []).append(e)
        for pub in list(self.waiting):
            self._launch(pub)
        for name, c in self.clients.items():
            if c.broker >= 0:
                self._open_session(name, c.broker, c.incarnation)

    # ---- events ------------------------------------------------------------------------------

    def _stream_new(self, ev: EventData) -> bool:
        i = ev.id
        key = (i.publisher, i.incarnation)
        last = self.streams.get(key)
        order = (i.timestamp, i.sequence)
        if last is not None and order <= last:
            self.counters["duplicates"] += 1
            return False
        self.streams[key] = order
        self._dirty_streams.add(key)  # written once per round (flush)
        k = (i.incarnation, i.timestamp, i.sequence)
        newest = self._pub_last.get(i.publisher)
        if newest is None or k > newest:
            self._pub_last[i.publisher] = k
        return True

    def _put(self, ev: EventData, bits: int) -> int:
        e = self.next_entry
        self.next_entry += 1
        self.entries[e] = [ev, bits]
        self.bytes += event_size(ev)
        self.storage.put(e, ev, bits)
        self.counters["stored"] += 1
        b = bits >> 1
        slot = 1
        while b:
            if b & 1:
                name = self.by_slot[slot]
                s = self.sessions.get(name)
                if s is not None:
                    s.queue.append(e)
                    self._dirty.add(name)
            b >>= 1
            slot += 1
        return e

    def on_match(self, ev: EventData, peers: set[int]) -> None:
        """ERP delivered ``ev`` here and it matched these homed clients' profile peers: store it for them."""
        if not self._stream_new(ev):
            return
        bits = 0
        for p in peers:
            bits |= 1 << (VIRTUAL_BASE - p)
        if bits:
            self._put(ev, bits)

    def _last_of(self, publisher: str) -> tuple[int, int, int] | None:
        return self._pub_last.get(publisher)

    def publish(self, src: int, client: str, ev: EventData, prev: EventId | None) -> None:
        """A client of broker ``src`` published ``ev`` after ``prev``: store, answer "stored", route.

        Events are stored in the publisher's order: one whose predecessor is not stored
        yet (a retry overtook it) is ignored, and its broker sends it again later.
        """
        last = self._last_of(ev.id.publisher)
        if prev is not None and (last is None or order_key(prev) > last):
            self.counters["early"] += 1
            return
        if last is not None and order_key(ev.id) <= last:
            self.counters["duplicates"] += 1
        elif self._stream_new(ev):
            bits = ROUTE_BIT
            for p in self.core.ppp.local.match(*names_and_values(ev)):
                bits |= 1 << (VIRTUAL_BASE - p)
            e = self._put(ev, bits)
            self.waiting.setdefault(ev.id.publisher, []).append(e)
            if not self.inflight.get(ev.id.publisher):
                self._launch(ev.id.publisher)
        # one "stored" per round: the publisher's events are stored in its order, so it covers the earlier ones
        self._stored_to[(src, client)] = ev.id

    def flush(self) -> None:
        """Send the sessions' new entries (one batch per session; called before the outbox is taken)."""
        v = self.core.gpp.version
        if v != self._graph_at:
            self._graph_at = v
            for name, s in self.sessions.items():
                if s.suspended:  # a route to its broker may be back
                    s.suspended, s.active, s.idle = False, True, 0
                    self._dirty.add(name)
        for name in self._dirty:
            session = self.sessions.get(name)
            if session is not None:
                self._pump(name, session)
        self._dirty.clear()
        if self._stored_to:
            for (src, client), eid in self._stored_to.items():
                self._send(src, SStored(client, eid))
            self._stored_to = {}
        for key in self._dirty_streams:
            self.storage.put_stream(key[0], key[1], self.streams[key])
        self._dirty_streams.clear()
        for (client, pub), i in self._dirty_progress.items():
            self.storage.put_progress(client, pub, i)
        self._dirty_progress.clear()

    def _launch(self, pub: str) -> None:
        """Route the publisher's waiting entries, as one batch, in order."""
        batch = self.waiting.pop(pub, [])
        if not batch:
            return
        self.inflight[pub] = set(batch)
        erp = self.core.event_router
        for e in batch:
            erp.originate(self.entries[e][0], ("entry", e))

    def route_done(self, entry: int) -> None:
        """Every next hop acknowledged the copies of ``entry``: clear bit 0; when the publisher's batch is
        done, route the next one (so a publisher's events reach every store in its order: a newer
        event never overtakes an older one that took a detour around a failure)."""
        v = self.entries.get(entry)
        if v is None:
            return
        pub = v[0].id.publisher
        self._clear(entry, ROUTE_BIT)
        fl = self.inflight.get(pub)
        if fl is not None:
            fl.discard(entry)
            if not fl:
                del self.inflight[pub]
                self._launch(pub)

    def _clear(self, entry: int, bit: int) -> None:
        v = self.entries.get(entry)
        if v is None or not v[1] & bit:
            return
        v[1] &= ~bit
        self.storage.set_bits(entry, v[1])
        if not v[1]:
            del self.entries[entry]
            self.bytes -= event_size(v[0])
            self.counters["collected"] += 1

    # ---- clients -----------------------------------------------------------------------------

    def _slot_for(self, client: str) -> int:
        used = set(self.by_slot)
        slot = 1
        while slot in used:
            slot += 1
        return slot

    def _save_client(self, name: str) -> None:
        c = self.clients[name]
        self.storage.put_client(name, c.slot, c.subs, c.broker, c.incarnation, c.credential)

    def _pending(self, slot: int) -> list[int]:
        bit = 1 << slot
        return [e for e, v in self.entries.items() if v[1] & bit]

    def register(self, src: int, msg: SRegister) -> None:
        """A durable client (re)connects at broker ``src``.

        Who may: a known id only with its credential (the hash kept here must match; no or a
        wrong credential is refused, and the client's state stays as it is), and only by a
        resume: a plain connect of a known id is refused as in use (``REFUSED_IN_USE``), never a
        reset.  An unknown id is registered with the credential it brings.
        """
        name = msg.client
        c = self.clients.get(name)
        if c is not None:
            why = self._check_credential(name, c, msg.credential)
            if not why and msg.incarnation <= c.incarnation:
                s = self.sessions.get(name)
                if msg.incarnation == c.incarnation and c.broker == src and s is not None:
                    # the same request again (its broker retried before the answer came): answer again, change nothing
                    self._send(src, SWelcome(name, msg.incarnation, s.replay))
                return  # (an older incarnation's request that arrived late: nobody waits for it)
            if msg.resume and why:
                self._refuse(src, msg, why, REFUSED_RESUME)
                return
            if not msg.resume:
                s = self.sessions.get(name)
                state = "connected" if s is not None and s.active else "away"
                self._refuse(
                    src,
                    msg,
                    f"client id {name!r} is in use: storage broker {self._me()} holds its state ({state}, "
                    f"{len(self._pending(c.slot))} events pending); its owner resumes it (resume=True, with its credential), "
                    "a new client takes another id",
                    REFUSED_IN_USE,
                )
                return
        if self.write_error is not None:
            self._refuse(src, msg, f"storage broker {self._me()} cannot write its store now: {self.write_error}", REFUSED_UNAVAILABLE)
            return
        if msg.resume:
            reason = self._check_resume(name, c, msg.last)
            if reason:
                self._refuse(src, msg, reason, REFUSED_RESUME)
                return
            assert c is not None
            last = {i.publisher: i for i in msg.last}
            bit = 1 << c.slot
            for e in self._pending(c.slot):
                ev = self.entries[e][0]
                have = last.get(ev.id.publisher)
                if have is not None and order_key(ev.id) <= order_key(have):
                    self._clear(e, bit)
            for pub, i in last.items():
                if c.progress.get(pub) != i:
                    c.progress[pub] = i
                    self.storage.put_progress(name, pub, i)
        else:
            if not msg.credential:
                self._refuse(src, msg, f"client {name!r} brings no credential: a durable client needs one", REFUSED_OTHER)
                return
            c = StoredClient(self._slot_for(name), credential=credential_hash(name, msg.credential))
            self.clients[name] = c
            self.by_slot[c.slot] = name
        c.broker, c.incarnation = src, msg.incarnation
        self._save_client(name)
        s = self._open_session(name, src, msg.incarnation, pump=False)
        self._send(src, SWelcome(name, msg.incarnation, s.replay))
        self._pump(name, s)

    def _me(self) -> Address:
        return Address.from_code(self.core.code, self.core.levels)

    def _refuse(self, src: int, msg: SRegister, reason: str, kind: int) -> None:
        self.counters["refused"] += 1
        self._send(src, SRefuse(msg.client, msg.incarnation, reason, kind))

    def _check_credential(self, name: str, c: StoredClient, presented: str) -> str:
        """Why ``presented`` does not prove it is client ``name`` ("" if it does); compared in constant time."""
        if not presented:
            return (
                f"client {name!r} presents no credential: storage broker {self._me()} holds state for this id, and only the "
                "credential its first connection got (LiveClient.credential) resumes it; its state is left as it is"
            )
        if not hmac.compare_digest(credential_hash(name, presented), c.credential):
            return f"client {name!r} presents a credential that is not this id's (storage broker {self._me()}): its state is left as it is"
        return ""

    def _check_resume(self, name: str, c: StoredClient | None, last: tuple[EventId, ...]) -> str:
        me = Address.from_code(self.core.code, self.core.levels)
        if c is None:
            return f"unknown client id {name!r}: storage broker {me} has no durable client of that id"
        pending_ids = {self.entries[e][0].id for e in self._pending(c.slot)}
        seen: set[str] = set()
        for i in last:
            if i.publisher in seen:
                return f"client {name!r} presents two positions for publisher {i.publisher!r}"
            seen.add(i.publisher)
            if i == c.progress.get(i.publisher) or i in pending_ids:
                continue
            acked = c.progress.get(i.publisher)
            return (
                f"client {name!r} presents last event {tuple(i)} of publisher {i.publisher!r}, which storage broker {me} "
                f"never gave it (its last acknowledged event of that publisher: {tuple(acked) if acked else 'none'})"
            )
        return ""

    def _open_session(self, name: str, broker: int, incarnation: int, pump: bool = True) -> _Session:
        c = self.clients[name]
        s = _Session(broker, incarnation)
        s.queue.extend(self._pending(c.slot))
        s.replay = len(s.queue)
        self.sessions[name] = s
        if pump:
            self._pump(name, s)
        return s

    def subscribe(self, src: int, msg: SSubscribe) -> None:
        """Add or remove a homed client's subscription (idempotent: requests are retried)."""
        c = self.clients.get(msg.client)
        if c is None:
            return  # not registered (yet): the broker retries
        peer = VIRTUAL_BASE - c.slot
        if msg.chain is None:
            if msg.sub in c.subs:
                del c.subs[msg.sub]
                self.core.ppp.unsubscribe(peer, msg.sub)
                self._save_client(msg.client)
        elif msg.sub not in c.subs:
            c.subs[msg.sub] = msg.chain
            self.core.ppp.subscribe(peer, msg.sub, msg.chain)
            self._save_client(msg.client)
        self._send(src, SSubAck(msg.client, msg.sub))

    def active(self, src: int, msg: SActive) -> None:
        """The active level of a homed client's subscription, for its broker."""
        c = self.clients.get(msg.client)
        level = -1
        if c is not None and msg.sub in c.subs:
            level = self.core.ppp.active_level(VIRTUAL_BASE - c.slot, msg.sub)
        self._send(src, SActive(msg.client, msg.sub, level))

    def ack(self, msg: SAck) -> None:
        """A client acknowledged up to ``upto`` (and with ``nak`` wants what follows again)."""
        s = self.sessions.get(msg.client)
        c = self.clients.get(msg.client)
        if s is None or c is None or s.incarnation != msg.incarnation:
            return
        bit = 1 << c.slot
        q = s.queue
        progressed = False
        while q and q[0] <= msg.upto:
            e = q.popleft()
            progressed = True
            s.sent = max(0, s.sent - 1)
            s.delivered += 1
            v = self.entries.get(e)
            if v is not None:
                i = v[0].id
                c.progress[i.publisher] = i
                self._dirty_progress[(msg.client, i.publisher)] = i  # written once per round (flush)
                self._clear(e, bit)
        if progressed:
            s.idle = 0
        s.active, s.suspended = True, False
        if msg.nak:
            self.counters["resent"] += s.sent
            s.sent = 0
            s.prev = msg.upto
        self._pump(msg.client, s)

    def detach(self, msg: SDetach) -> None:
        """The client's session ended: stop sending (what is pending stays stored)."""
        s = self.sessions.get(msg.client)
        if s is not None and s.incarnation == msg.incarnation:
            s.active = False
            c = self.clients[msg.client]
            c.broker = -1  # a restart does not send to it: it is away until it resumes
            self._save_client(msg.client)

    def _pump(self, name: str, s: _Session) -> None:
        if not s.active:
            return
        q = s.queue
        n = min(len(q), WINDOW) - s.sent
        if n > 0:
            out = []
            first_prev = s.prev
            for k in range(s.sent, s.sent + n):
                e = q[k]
                v = self.entries.get(e)
                if v is None:
                    continue
                out.append((e, v[0]))
            s.sent += n
            if out:
                s.prev = out[-1][0]
                self.counters["sent"] += len(out)
                self._send(s.broker, SDeliver(name, s.incarnation, first_prev, tuple(out)))
        if s.sent and not s.timer:
            s.timer = True
            self.core.set_timer(min(RTO * (1 << s.idle), RTO_MAX), ("dur-rto", name, s.incarnation, s.delivered))

    def fire(self, name: str, incarnation: int, delivered: int) -> None:
        """The RTO of a session fired: no ack since, so send from the last acknowledged entry again."""
        s = self.sessions.get(name)
        if s is None or s.incarnation != incarnation:
            return
        s.timer = False
        if not s.sent or not s.active:
            return
        if s.delivered == delivered:
            s.idle += 1
            if s.idle >= RTO_TRIES:
                s.active = False  # its ack or resume, or a change of the graph, wakes the session
                s.suspended = True
                s.sent = 0
                s.prev = -1
                return
            self.counters["resent"] += s.sent
            s.sent = 0
            s.prev = -1  # a new chain: the client filters by its last event per publisher
        self._pump(name, s)

    # ---- views -------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Stored events and bytes, the oldest entry and who has not acknowledged it, and per homed client its progress."""
        oldest: dict[str, Any] | None = None
        if self.entries:
            e = next(iter(self.entries))
            ev, bits = self.entries[e]
            who = ["gateways"] if bits & ROUTE_BIT else []
            b, slot = bits >> 1, 1
            while b:
                if b & 1:
                    who.append(self.by_slot.get(slot, f"slot {slot}"))
                b >>= 1
                slot += 1
            oldest = {"entry": e, "event": tuple(ev.id), "waiting_for": who}
        clients = {}
        for name, c in self.clients.items():
            s = self.sessions.get(name)
            pending = len(s.queue) if s else len(self._pending(c.slot))
            clients[name] = {
                "incarnation": c.incarnation,
                "broker": str(Address.from_code(c.broker, self.core.levels)) if c.broker >= 0 else None,
                "connected": bool(s and s.active),
                "pending": pending,
                "replay": s.replay if s else 0,
                "replayed": min(s.delivered, s.replay) if s else 0,
            }
        return {
            "location": self.storage.location,
            "events": len(self.entries),
            "bytes": self.bytes,
            "oldest": oldest,
            "clients": clients,
            "write_error": self.write_error,
            "held_messages": len(self._held),
            **self.counters,
        }


class _Attached:
    __slots__ = ("client", "incarnation", "home", "welcomed", "early")

    def __init__(self, client: str, incarnation: int, home: int) -> None:
        self.client = client
        self.incarnation = incarnation
        self.home = home
        self.welcomed = False
        #: what the client asked before its home accepted it: relayed once it is (dropped if it is refused)
        self.early: list[tuple[Any, ...]] = []


class Durability:
    """The durability side of one broker: the relay for attached durable clients, and the store if it has one."""

    def __init__(self, core: DurableBroker, storage_brokers: dict[int, int], storage: Storage | None) -> None:
        self.core = core
        #: cluster unit -> its storage broker
        self.storage_brokers = storage_brokers
        cluster = unit_id(core.code, 1, core.levels)
        self.my_store = storage_brokers.get(cluster, -1)
        self.store: StoreRole | None = StoreRole(core, storage) if storage is not None else None
        #: client peer -> attached durable client
        self.attached: dict[int, _Attached] = {}
        #: client id -> its connection here that its home accepted
        self._by_name: dict[str, int] = {}
        #: (client, incarnation) -> its connection here waiting for its home's answer
        self._joining: dict[tuple[str, int], int] = {}
        #: connections that left before their home answered -> their home (if it accepts them after all, they are away)
        self._left_joining: dict[tuple[str, int], int] = {}
        #: relayed requests waiting for their answer: key -> [dst, body, tries]
        self.pending: dict[_RequestKey, list[Any]] = {}
        self._retry_timer = False
        self._restarted = False
        self._resync_at = -1
        self._resync_tries = 0
        self._pub_out: dict[tuple[int, str], list[Any]] = {}  # (home, client) -> [prev, events] of this round
        #: per client, its publications not yet confirmed stored, in order: [{id: (home, event, prev)}, progress,
        #: ticks to wait, next wait]; sent again together when its store said nothing for a while
        self._pubs: dict[str, list[Any]] = {}
        self.counters = {"relayed": 0, "relay_dropped": 0, "retries": 0}

    def start(self, epoch: int) -> None:
        """Called once the broker is set up (a store reloads its state).

        A restarted broker (``epoch`` > 0) lost the profiles it decided with; the only
        brokers with subscriptions are the storage brokers, so it asks each of them for a
        snapshot (:class:`~multihop.ges.messages.ProfileResync`) until one arrives.
        """
        self._restarted = epoch > 0
        self._arm()  # a restarted broker asks for profiles again every RETRY until it has them
        if self.store is not None:
            self.store.start()

    @property
    def restarting(self) -> bool:
        """A restarted broker that has not got its profiles back yet: it parks every event copy."""
        return self._restarted

    def missing_profiles(self, level: int) -> set[int]:
        """A restarted broker: the storage brokers inside its level-``level`` unit whose profile it has not got yet
        (it parks the events it would decide there until they came)."""
        if not self._restarted:
            return set()
        me = self.core.code
        unit = unit_id(me, level, self.core.levels)
        origins = self.core.ppp.origins
        return {s for s in self.storage_brokers.values() if s != me and s not in origins and contains(unit, s)}

    def flush(self) -> None:
        """Before the outbox is taken: the round's publications, the store's sessions, and the snapshots a
        restarted broker still lacks."""
        if self._pub_out:
            out, self._pub_out = self._pub_out, {}
            for (home, client), (prev, evs) in out.items():
                self.relay(home, SPublish(client, tuple(evs), prev))
        if self.store is not None:
            self.store.flush()
        if self._restarted:
            ppp = self.core.ppp
            ppp.deciders()  # brings ppp.decided up to date
            missing: set[int] = set()
            for lvl in ppp.decided:
                missing |= self.missing_profiles(lvl)
            if not missing and self.core.gpp.links:  # (no link yet: it decides nothing yet either)
                self._restarted = False
                self.core.event_router.retry_parked()
            elif self.core.gpp.version != self._resync_at:
                self._resync_at = self.core.gpp.version
                for s in sorted(missing):
                    ppp._route(s, ProfileResync(s, self.core.code))

    # ---- relaying -----------------------------------------------------------------------------

    def relay(self, dst: int, body: Any) -> None:
        """Send ``body`` to broker ``dst`` (handled here if it is this broker)."""
        if dst == self.core.code:
            self.on_body(dst, body)
            return
        self._forward(Relay(dst, self.core.code, body, ()))

    def _forward(self, msg: Relay) -> None:
        gpp = self.core.gpp
        hop = gpp.hop_to(msg.dst, msg.left)
        if hop is None or hop not in gpp.links:
            self.counters["relay_dropped"] += 1  # the ends retry
            return
        self.counters["relayed"] += 1
        self.core.send(hop, msg._replace(left=gpp.leaving(hop, msg.left)))

    def on_relay(self, msg: Relay) -> None:
        """A relayed message arrived from a neighbour."""
        if msg.dst == self.core.code:
            self.on_body(msg.src, msg.body)
        else:
            self._forward(msg)

    def _request(self, key: _RequestKey, dst: int, body: Any) -> None:
        self.pending[key] = [dst, body, 1, 1]  # destination, message, ticks to wait, the next wait
        self.relay(dst, body)
        self._arm()

    def _arm(self) -> None:
        if (self.pending or self._pubs or (self._restarted and self._resync_tries < RETRY_MAX_TICKS * 4)) and not self._retry_timer:
            self._retry_timer = True
            self.core.set_timer(RETRY, ("dur-retry",))

    def retry_all(self) -> None:
        """A gateway came up: send the waiting requests again now."""
        for v in list(self.pending.values()):
            self.relay(v[0], v[1])
        for client in list(self._pubs):
            self._resend_pubs(client)

    def _resend_pubs(self, client: str) -> None:
        """Send a client's unconfirmed publications again, in order, as one relay."""
        q = self._pubs[client][0]
        if not q:
            return
        first = next(iter(q.values()))
        home, prev = first[0], first[2]
        self.counters["retries"] += 1
        self.relay(home, SPublish(client, tuple(v[1] for v in q.values()), prev))

    def on_body(self, src: int, body: Any) -> None:
        """A durability message for this broker from broker ``src``."""
        t = type(body)
        st = self.store
        if t is SRegister:
            if st is not None:
                st.register(src, body)
        elif t is SSubscribe:
            if st is not None:
                st.subscribe(src, body)
        elif t is SPublish:
            if st is not None:
                if st.write_error is not None:
                    st.refuse_publish(src, body)
                    return
                prev = body.prev
                for ev in body.events:
                    st.publish(src, body.client, ev, prev)
                    prev = ev.id
        elif t is SAck:
            if st is not None:
                st.ack(body)
        elif t is SDetach:
            if st is not None:
                st.detach(body)
        elif t is SActive:
            if body.level == -2:
                if st is not None:
                    st.active(src, body)
            else:
                peer = self._by_name.get(body.client)
                if peer is not None:
                    self.core.send(peer, ActiveReply(body.sub, body.level))
        elif t is SWelcome or t is SRefuse:
            if t is SWelcome:
                self._welcome(body)
            else:
                self._refused(body)
            self.pending.pop(("reg", body.client, body.incarnation), None)
        elif t is SSubAck:
            self.pending.pop(("sub", body.client, body.sub), None)
        elif t is SStored:
            # everything up to body.event is stored (in the publisher's order): stop retrying those
            key = order_key(body.event)
            p = self._pubs.get(body.client)
            if p is not None:
                q = p[0]
                while q:
                    first = next(iter(q))
                    if order_key(first) > key:
                        break
                    del q[first]
                p[1], p[2], p[3] = True, 1, 1  # progress: the store answers, no retry due
                if not q:
                    del self._pubs[body.client]
            peer = self._by_name.get(body.client)
            if peer is not None:
                self.core.send(peer, Stored((body.event,)))
        elif t is SNotStored:
            peer = self._by_name.get(body.client)
            if peer is not None:
                self.core.send(peer, NotStored((body.event,), body.reason))
        elif t is SDeliver:
            peer = self._by_name.get(body.client)
            a = self.attached.get(peer) if peer is not None else None
            if peer is not None and a is not None and a.incarnation == body.incarnation:
                self.core.send(peer, DurableDeliver(body.prev, body.entries))

    # ---- attached clients -----------------------------------------------------------------------

    def attach(self, peer: int, msg: DurableAttach) -> None:
        """A durable client attached here (a first connection or a resume).

        Nothing changes for the id until its home accepted the attach (the credential is checked
        there): a connection of the same id already attached here stays until then, and the new
        one's requests wait.  Then the new connection replaces the old one.
        """
        home = msg.home if msg.home >= 0 else self.my_store
        a = _Attached(msg.client, msg.incarnation, home)
        self.attached[peer] = a
        if home < 0:
            self.core.send(peer, AttachRefused(REFUSED_OTHER, f"broker {self.core.address}'s cluster has no storage broker"))
            return
        key = (msg.client, msg.incarnation)
        if key in self._joining:
            self.core.send(
                peer, AttachRefused(REFUSED_IN_USE, f"client {msg.client!r}, incarnation {msg.incarnation}, is being attached here already")
            )
            return
        self._joining[key] = peer
        self._request(
            ("reg", msg.client, msg.incarnation), home, SRegister(msg.client, msg.incarnation, msg.resume, msg.last, msg.previous, msg.credential)
        )

    def _welcome(self, body: SWelcome) -> None:
        peer = self._joining.pop((body.client, body.incarnation), None)
        a = self.attached.get(peer) if peer is not None else None
        if peer is None or a is None:
            home = self._left_joining.pop((body.client, body.incarnation), None)
            if home is not None:  # it left before the answer came: it is away
                self.relay(home, SDetach(body.client, body.incarnation))
            return
        old = self._by_name.get(a.client)
        if old is not None and old != peer:
            self.core.client_detach(old)  # the same client's previous connection here: replaced
        self._by_name[a.client] = peer
        a.welcomed = True
        self.core.send(peer, Welcome(a.home, body.replay))
        early, a.early = a.early, []
        for what, *args in early:
            getattr(self, what)(peer, *args)

    def _refused(self, body: SRefuse) -> None:
        peer = self._joining.pop((body.client, body.incarnation), None)
        self._left_joining.pop((body.client, body.incarnation), None)
        a = self.attached.get(peer) if peer is not None else None
        if peer is None or a is None:
            return
        self.core.client_detach(peer)
        self.core.send(peer, AttachRefused(body.kind, body.reason))  # after: detach drops the outbox

    def _early(self, peer: int, a: _Attached, request: tuple[Any, ...]) -> None:
        """A request of a client its home has not accepted yet: kept until it is (at most ``EARLY_MAX``)."""
        if len(a.early) >= EARLY_MAX:
            self.core.send(peer, Refused(str(request[0]), f"more than {EARLY_MAX} requests before the home store accepted the attach"))
            return
        a.early.append(request)

    def detach(self, peer: int) -> None:
        """The client's channel closed."""
        a = self.attached.pop(peer, None)
        if a is None:
            return
        if not a.welcomed:  # its home has not accepted it (and may refuse it): it changes nothing of the id here
            key = (a.client, a.incarnation)
            if self._joining.get(key) == peer:
                del self._joining[key]
                self.pending.pop(("reg", a.client, a.incarnation), None)
                self._left_joining[key] = a.home  # if the home accepts it after all, it is away
                if len(self._left_joining) > LEFT_MAX:  # (answers that never come: the oldest are forgotten)
                    del self._left_joining[next(iter(self._left_joining))]
            return
        if self._by_name.get(a.client) == peer:
            del self._by_name[a.client]
            for k in [k for k, v in self.pending.items() if k[0] != "reg" and getattr(v[1], "client", None) == a.client]:
                del self.pending[k]
            self._pubs.pop(a.client, None)  # the client sends its unstored events again when it resumes
        self.relay(a.home, SDetach(a.client, a.incarnation))

    def subscribe(self, peer: int, sub: int, chain: Any) -> None:
        """An attached client's subscription change (``chain`` None: removal) goes to its home store."""
        a = self.attached[peer]
        if not a.welcomed:
            self._early(peer, a, ("subscribe", sub, chain))
            return
        self._request(("sub", a.client, sub), a.home, SSubscribe(a.client, sub, chain))

    def publish(self, peer: int, ev: EventData, prev: EventId | None) -> None:
        """An attached client published: to its home storage broker, again until it is stored.

        The home, not this cluster's store: one store stores and routes all of a
        publisher's events, so a roaming publisher's events (and the ones it sends
        again after a failure) are stored once and leave in its order.
        """
        a = self.attached[peer]
        if not a.welcomed:
            self._early(peer, a, ("publish", ev, prev))
            return
        p = self._pubs.get(a.client)
        if p is None:
            p = self._pubs[a.client] = [{}, False, 1, 1]  # unconfirmed, progress since the last tick, ticks, next wait
        p[0][ev.id] = (a.home, ev, prev)
        # sent at the end of the round, with the client's other events of the round (one relay)
        out = self._pub_out.get((a.home, a.client))
        if out is None:
            self._pub_out[(a.home, a.client)] = [prev, [ev]]
        else:
            out[1].append(ev)
        self._arm()

    def ack(self, peer: int, upto: int, nak: bool) -> None:
        """The client acknowledged (or asked again)."""
        a = self.attached[peer]
        if not a.welcomed:
            self._early(peer, a, ("ack", upto, nak))
            return
        self.relay(a.home, SAck(a.client, a.incarnation, upto, nak))

    def active(self, peer: int, sub: int) -> None:
        """Ask the home store for a subscription's active level."""
        a = self.attached[peer]
        if not a.welcomed:
            self._early(peer, a, ("active", sub))
            return
        self.relay(a.home, SActive(a.client, sub, -2))

    def fire(self, name: DurabilityTimer) -> None:
        """A durability timer fired."""
        if name[0] == "dur-rto":
            if self.store is not None:
                self.store.fire(name[1], name[2], name[3])
            return
        if name[0] == "dur-commit":
            if self.store is not None:
                self.store.fire_commit()
            return
        self._retry_timer = False
        for v in self.pending.values():
            v[2] -= 1
            if v[2] <= 0:
                v[3] = min(2 * v[3], RETRY_MAX_TICKS)
                v[2] = v[3]
                self.counters["retries"] += 1
                self.relay(v[0], v[1])
        for client, p in self._pubs.items():
            if p[1]:  # its store confirmed something since the last tick: it is busy, not gone
                p[1] = False
                continue
            p[2] -= 1
            if p[2] <= 0:
                p[3] = min(2 * p[3], RETRY_MAX_TICKS)
                p[2] = p[3]
                self._resend_pubs(client)
        if self._restarted and self._resync_tries < RETRY_MAX_TICKS * 4:
            self._resync_tries += 1  # (then only graph changes make it ask again: a store may be down for good)
            self._resync_at = -1  # ask again at the next flush (a request may have found no route)
        self._arm()

    def status(self) -> dict[str, Any]:
        """The store's status (if this broker has one) and the attached durable clients."""
        out: dict[str, Any] = {
            "attached": {
                a.client: {"incarnation": a.incarnation, "home": str(Address.from_code(a.home, self.core.levels)) if a.home >= 0 else None}
                for a in self.attached.values()
            },
            "waiting_requests": len(self.pending) + sum(len(p[0]) for p in self._pubs.values()),
        }
        if self.store is not None:
            out["store"] = self.store.status()
        return out
