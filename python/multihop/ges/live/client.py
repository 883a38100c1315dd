"""A live GES client: a dispatcher attached to the runtime, a multi-hop channel to its broker.

``ges.connect(runtime_name, broker_address, client_id)`` returns a
:class:`LiveClient` with the same methods as the simulator's client:
``subscribe``, ``unsubscribe``, ``publish``, ``next``, ``active_level``,
``close`` (plus ``next_many`` and ``drain`` for high rates).  Every message
is a generated stub of ``flounder-idl/ges_client.if`` (after a
``ges_broker.hello``).  The client's incarnation defaults to the connection
time in microseconds, so a client that reconnects (or roams to another
broker) under the same id always starts a new incarnation; its event ids
are ``(client_id, timestamp, sequence, incarnation)``.

In a system with stable storage (``LiveSystem.up(..., durable=True)``) clients are
durable (:mod:`multihop.ges.durability`): ``client.disconnect()`` leaves without
losing events, ``ges.connect(..., resume=True)`` reconnects (to the same or another
broker) with what the previous connection of the same client id in this process
left (its credential, its home storage broker, the last event received per publisher,
the events not yet stored), and gets what it missed, then live events.  A new process
resumes a client with its credential and positions (``credential=``, ``last_received=``:
:attr:`LiveClient.credential`, :attr:`LiveClient.last_received`).
"""

from __future__ import annotations

import json
import secrets
import time
from collections import deque
from typing import Any, Iterable, Mapping

import multihop as mh
from multihop.defaults import DRAIN_BATCH
from multihop.ges.address import Address
from multihop.ges.client import QUEUE_MAX, ClientCore, DurableState, check_client_id, check_credential
from multihop.ges.errors import GesError, GesStateError, StorageError
from multihop.ges.event import Event, EventId
from multihop.ges.live import durable_wire, wire
from multihop.ges.live.system import CONFIG
from multihop.ges.messages import ActiveQuery, Attach, DurableAck, DurableAttach, DurableNak, NotStored, Publish, Stored, Subscribe, Unsubscribe

__all__ = ["LiveClient", "connect", "new_credential"]


#: durable clients' state across their connections in this process: (runtime, client id) -> state
_STATES: dict[tuple[str, str], DurableState] = {}


def connect(
    runtime_name: str,
    broker_address: str,
    client_id: str | int,
    *,
    core: int | None = None,
    incarnation: int | None = None,
    timeout: float = 10.0,
    dispatcher: Any = None,
    resume: bool = False,
    last_received: Mapping[str, EventId] | None = None,
    credential: str | None = None,
) -> "LiveClient":
    """Attach a client to broker ``broker_address`` of the GES system on runtime ``runtime_name``.

    ``core``: the runtime core of the client's dispatcher (default: its broker's).
    ``dispatcher``: attach through this process's dispatcher instead of a new one
    (several clients of one process can then wait together in ``Dispatcher.poll``).
    ``resume`` (durable systems): reconnect with the state the client's previous
    connection in this process left, and get the events it missed; ``last_received``
    replaces the last event per publisher it presents; ``credential`` the secret it
    presents (:attr:`LiveClient.credential` of its first connection: what a new process
    needs, with ``last_received``, to resume a client).  A durable id belongs to whoever
    holds its credential: a first connection makes one (a 256-bit random token; its home
    keeps only a hash), a resume must present it, and a plain connect of an id its home
    already holds state for is refused (ClientIdInUse), never a reset.
    Raises RuntimeNotFound, GesStateError (no GES system there, or no such broker),
    BindError / Timeout if the broker does not answer, ResumeRefused if a resume is refused
    (unknown id, no or a wrong credential, a position never given), ClientIdInUse,
    StorageError if the home store cannot write now.
    """
    return LiveClient(
        runtime_name,
        broker_address,
        client_id,
        core=core,
        incarnation=incarnation,
        timeout=timeout,
        dispatcher=dispatcher,
        resume=resume,
        last_received=last_received,
        credential=credential,
    )


def new_credential() -> str:
    """A new durable client's credential: 256 random bits from the operating system, as 43 URL-safe characters."""
    return secrets.token_urlsafe(32)


class LiveClient:
    """A client of a live GES system (see the module docstring)."""

    def __init__(
        self,
        runtime_name: str,
        broker_address: str,
        client_id: str | int,
        *,
        core: int | None = None,
        incarnation: int | None = None,
        timeout: float = 10.0,
        dispatcher: Any = None,
        resume: bool = False,
        last_received: Mapping[str, EventId] | None = None,
        credential: str | None = None,
    ) -> None:
        if credential is not None:
            credential = check_credential(credential)
        rt = mh.Runtime.attach(runtime_name)
        path = rt.dir / CONFIG
        if not path.exists():
            raise GesStateError(f"no GES system runs on runtime {runtime_name!r}")
        cfg = json.loads(path.read_text())
        addr = str(Address(broker_address))
        info = cfg["brokers"].get(addr)
        if info is None:
            raise GesStateError(f"no broker {addr} in the GES system on runtime {runtime_name!r}")
        self.broker = addr
        inc = incarnation if incarnation is not None else time.time_ns() // 1000
        self.durable = bool(cfg.get("storage_dir"))
        if resume and not self.durable:
            raise GesStateError(f"resume=True needs a GES system with stable storage (the one on {runtime_name!r} has none)")
        cid = check_client_id(client_id)
        if credential is not None and not self.durable:
            raise GesStateError(f"credential= is for a GES system with stable storage (the one on {runtime_name!r} has none)")
        #: what to put back if the attach is refused: this process's state of the id stays as it was
        self._undo: tuple[tuple[str, str], DurableState | None, tuple[Any, ...] | None] | None = None
        if self.durable:
            key = (runtime_name, cid)
            before = _STATES.get(key)
            state = before if resume else None
            self._undo = (key, before, state.mark() if state is not None else None)
            if state is None:
                state = DurableState(credential or ("" if resume else new_credential()))
            elif credential is not None:
                state.credential = credential
            if last_received is not None:
                state.last = dict(last_received)
            _STATES[key] = state
            self.core = ClientCore(cid, inc, time.time_ns() // 1000, state, resume, Address(addr).code)
        else:
            self.core = ClientCore(cid, inc, time.time_ns() // 1000)
        self._own_dispatcher = dispatcher is None
        self._d = rt.dispatcher(info["core"] if core is None else core) if dispatcher is None else dispatcher
        try:
            self.ch = self._d.bind(
                wire.service_name(cfg["system"], addr), transport=wire.transport_of(cfg), window=64, max_message=wire.MAX_MESSAGE, timeout=timeout
            )
            self.ch.send(wire.stub.encode("hello", kind=wire.KIND_CLIENT, address=0, incarnation=0, cost=0, system=cfg["system"]), timeout)
        except BaseException:
            if self._own_dispatcher:
                self._d.detach()
            raise
        self._inbox: deque[Event] = deque()
        #: events delivered so far
        self.delivered = 0
        self._active: dict[int, int] = {}
        self._closed = False
        self._flush()
        if self.durable:
            try:
                self._wait_welcome(timeout)
            except BaseException as e:
                self.close()
                if isinstance(e, GesError):  # refused: this process's state of the id stays as it was
                    self._restore()
                raise

    def _wait_welcome(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        core = self.core
        while not core.welcomed and core.refused is None:  # bounded by the deadline
            left = deadline - time.monotonic()
            if left <= 0:
                raise mh.Timeout(f"broker {self.broker} did not answer client {self.client_id!r}'s attach within {timeout} s")
            for data in self.ch.recv_batch(64, timeout=left):
                self._take(data)
        if core.refused is not None:
            raise core.refusal(self.broker)

    def _restore(self) -> None:
        if self._undo is None:
            return
        key, before, fields = self._undo
        if before is None:
            _STATES.pop(key, None)
        else:
            _STATES[key] = before
            if fields is not None:
                before.undo(fields)

    # ---- identity ----------------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        """This client's id."""
        return self.core.client

    @property
    def incarnation(self) -> int:
        """This client's incarnation."""
        return self.core.incarnation

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` (or :meth:`disconnect`) ended this connection."""
        return self._closed

    @property
    def credential(self) -> str | None:
        """Durable: this client's credential, the secret that proves it owns its id (None for a plain client).

        Keep it where you keep the client's positions (:attr:`last_received`): a new process resumes
        the client with ``ges.connect(..., resume=True, credential=..., last_received=...)``.  Whoever
        has it can take the client's place; its home storage broker keeps only a hash of it."""
        d = self.core.durable
        return d.credential if d is not None else None

    @property
    def last_received(self) -> dict[str, EventId]:
        """Durable: the last event received per publisher (what a resume presents), a copy."""
        d = self.core.durable
        return dict(d.last) if d is not None else {}

    @property
    def refusals(self) -> list[tuple[str, str]]:
        """Requests the broker refused so far: (what, reason)."""
        return self.core.refusals

    # ---- sending -----------------------------------------------------------------------------

    def _flush(self, timeout: float = 10.0) -> None:
        enc = wire.client_stub.encode
        batch: list[bytes] = []
        for m in self.core.take():
            t = type(m)
            if t is Publish and self.durable:
                data = durable_wire.encode_publish(m)
            elif t is DurableAck or t is DurableNak:
                data = durable_wire.encode_client_ack(m)
            elif t is DurableAttach:
                data = durable_wire.durable_attach(m)
            elif t is Publish:
                ev = m.event
                data = enc(
                    "publish", timestamp=ev.id.timestamp, sequence=ev.id.sequence, signature=ev.signature, values=ev.values, payload=ev.payload
                )
            elif t is Subscribe:
                from multihop.ges.profile import chain_text

                data = enc("subscribe", sub=m.sub, chain=chain_text(m.chain))
            elif t is Unsubscribe:
                data = enc("unsubscribe", sub=m.sub)
            elif t is ActiveQuery:
                data = enc("active_call", sub=m.sub)
            elif t is Attach:
                data = enc("attach", client=m.client, incarnation=m.incarnation)
            else:  # pragma: no cover - ClientCore makes no other message
                raise TypeError(t.__name__)
            batch.append(data)
        if len(batch) == 1:
            self.ch.send(batch[0], timeout)
        elif batch:
            # in order, as batch frames on the multi-hop channel (one credit and one wake-up for many)
            self.ch.send_batch(batch, timeout)

    def subscribe(self, profile: Iterable[Any]) -> int:
        """Subscribe (profile: ``[(attribute, value or "*"), ...]`` in signature order); returns the subscription id."""
        sub = self.core.subscribe(profile)
        self._flush()
        return sub

    def unsubscribe(self, sub: int) -> None:
        """Remove a subscription."""
        self.core.unsubscribe(sub)
        self._flush()

    def publish(self, content: Mapping[str, Any], payload: bytes = b"") -> EventId:
        """Publish an event (content: attribute -> value in signature order); returns its id.

        A durable client keeps it in its local queue until its home storage broker stored
        it; while disconnected it only queues it (at most ``QUEUE_MAX``, then GesStateError).
        """
        d = self.core.durable
        if d is not None and not self._closed and len(d.queue) >= 1024:
            if len(d.queue) % 256 == 0 or len(d.queue) >= QUEUE_MAX:
                _ = self.queued  # take in the "stored" answers that came meanwhile (non-blocking)
            if len(d.queue) >= QUEUE_MAX:
                self.wait_stored(10.0)  # connected and full: wait for the store rather than refuse
        eid = self.core.publish(content, payload, time.time_ns() // 1000)
        if not self._closed:
            self._flush()
        return eid

    def publish_many(self, events: Iterable[tuple[Mapping[str, Any], bytes]]) -> list[EventId]:
        """Publish several events, ``(content, payload)`` each, in order; returns their ids.

        Same checks and ids as :meth:`publish` one at a time, but the events go to the broker
        together (batch frames on the multi-hop channel): for a publisher that has many events
        at once, much less CPU per event than a ``publish`` call each. If one is refused (a bad
        content), the events before it are sent and the error is raised.
        """
        if self.durable:
            return [self.publish(content, payload) for content, payload in events]
        now = time.time_ns() // 1000
        publish = self.core.publish
        ids: list[EventId] = []
        try:
            for content, payload in events:
                ids.append(publish(content, payload, now))
        finally:
            if not self._closed:
                self._flush()
        return ids

    def disconnect(self) -> None:
        """Durable: leave without losing anything; ``ges.connect(..., resume=True)`` comes back."""
        if not self.durable:
            raise GesStateError("disconnect is for clients of a system with stable storage; use close()")
        self.core.disconnect()
        self.close()

    @property
    def queued(self) -> int:
        """Durable: published events not yet confirmed stored (reads what the broker sent so far)."""
        if self.core.durable is None:
            return 0
        for _ in range(1 << 20):  # bounded: a broker sends a finite backlog
            batch = self.ch.recv_batch(DRAIN_BATCH, timeout=0) if not self._closed else []
            for data in batch:
                self._take(data)
            if not batch:
                break
        return len(self.core.durable.queue)

    @property
    def store_error(self) -> str | None:
        """Durable: why the home store answered "not stored" last (a full disk), None once it stores again
        (reads what the broker sent so far).  The events stay queued and go out again meanwhile."""
        if self.core.durable is None:
            return None
        _ = self.queued  # takes in the answers that came
        return self.core.store_error

    @property
    def replay_progress(self) -> tuple[int, int]:
        """Durable: (events replayed so far, events waiting in storage when this connection started)."""
        return (self.core.replayed, self.core.replay)

    def wait_stored(self, timeout: float = 10.0) -> None:
        """Durable: wait until every event published so far is in stable storage.

        Raises Timeout if they are not within ``timeout`` seconds, StorageError (naming the reason)
        if the home store said it cannot store them now (a full disk: they stay queued and go out
        again), GesStateError on a client of a system without stable storage (nothing is stored there)."""
        durable = self.core.durable
        if durable is None:
            raise GesStateError(f"wait_stored: client {self.client_id!r} is not durable (its GES system has no stable storage)")
        deadline = time.monotonic() + timeout
        while len(durable.queue):  # bounded by the deadline
            left = deadline - time.monotonic()
            if left <= 0:
                n = self.queued
                if self.core.store_error is not None:
                    raise StorageError(
                        f"{n} events of client {self.client_id!r} not stored within {timeout} s: {self.core.store_error} "
                        "(they stay queued, and go out again until the store takes them)"
                    )
                raise mh.Timeout(f"{n} events of client {self.client_id!r} not stored within {timeout} s")
            for data in self.ch.recv_batch(64, timeout=left):
                self._take(data)

    # ---- receiving ---------------------------------------------------------------------------

    def _take(self, data: bytes) -> None:
        rec = wire.client_stub.decode(data)
        if self.durable:
            msg = durable_wire.decode_durable_for_client(rec, wire.decode_deliveries)
            if msg is not None:
                if type(msg) is tuple:  # stored / not stored: the client's own event ids
                    i = EventId(self.client_id, msg[1], msg[2], msg[3])
                    msg = Stored((i,)) if msg[0] == "stored" else NotStored((i,), msg[4])
                core = self.core
                core.on_message(msg)
                if core.inbox:
                    self.delivered += len(core.inbox)
                    self._inbox.extend(core.inbox)
                    core.inbox.clear()
                    core.received.clear()  # the live client keeps no history
                self._flush()  # acknowledgements
                return
        messages = wire.client_stub.messages
        if isinstance(rec, messages.deliver):
            evs = wire.decode_deliveries(rec)
            self.delivered += len(evs)
            self._inbox.extend(Event(e) for e in evs)
        elif isinstance(rec, messages.active_response):
            self._active[-1] = rec.level
        elif isinstance(rec, messages.refused):
            self.core.refusals.append((rec.what, rec.reason))
            if rec.what == "DurableAttach":
                self.core.refused = rec.reason

    def next(self, timeout: float | None = 1.0) -> Event:
        """The next event delivered; raises Timeout after ``timeout`` seconds (None: wait forever)."""
        if self._inbox:
            return self._inbox.popleft()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._inbox:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            for data in self.ch.recv_batch(64, timeout=left):
                self._take(data)
            if not self._inbox and deadline is not None and time.monotonic() >= deadline:
                raise mh.Timeout(f"no event for client {self.client_id!r} within {timeout} s")
        return self._inbox.popleft()

    def next_many(self, max_count: int = 4096, timeout: float | None = 1.0) -> list[Event]:
        """Every event already here (at most ``max_count``), waiting up to ``timeout`` for the first; [] on timeout."""
        if not self._inbox:
            for data in self.ch.recv_batch(64, timeout=timeout):
                self._take(data)
        out: list[Event] = []
        while self._inbox and len(out) < max_count:
            out.append(self._inbox.popleft())
        return out

    def drain(self, timeout: float | None = 1.0) -> int:
        """Receive and count deliveries without making Event objects (for clients that only count); returns how many."""
        if self.durable:
            return len(self.next_many(1 << 30, timeout))
        n = 0
        for data in self.ch.recv_batch(64, timeout=timeout):
            rec = wire.client_stub.decode(data)
            if isinstance(rec, wire.client_stub.messages.deliver):
                n += len(rec.heads)
            elif isinstance(rec, wire.client_stub.messages.refused):
                self.core.refusals.append((rec.what, rec.reason))
        self.delivered += n
        return n

    def active_level(self, sub: int, timeout: float = 10.0) -> int:
        """From which unit level on the subscription is active (0: its broker; levels + 1: the whole system)."""
        self._active.pop(-1, None)
        self.core.ask_active(sub)
        self._flush()
        deadline = time.monotonic() + timeout
        while -1 not in self._active:
            left = deadline - time.monotonic()
            if left <= 0:
                raise mh.Timeout(f"broker {self.broker} did not answer within {timeout} s")
            for data in self.ch.recv_batch(64, timeout=left):
                self._take(data)
        return self._active.pop(-1)

    def close(self) -> None:
        """Close the channel and detach (the broker drops this client's subscriptions; a durable client's stay
        with its home storage broker)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.ch.close()
        finally:
            if self._own_dispatcher:
                self._d.detach()

    def __enter__(self) -> "LiveClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
