"""Stable storage for GES events (GES service paper 8.6-8.9): the interface and an in-memory store.

A **storage broker** (one per cluster) keeps every event routed to its cluster
that some client homed there, or a gateway far end, still has to get, with a bit
vector of who that is (:mod:`multihop.ges.durability`).  What it keeps, and what
a store must give back after a crash:

* **entries**: entry number (ascending, never reused) -> event and bit vector; a
  vector that reaches zero is garbage collected (the entry is deleted);
* **clients**: the durable clients homed at the store: bit slot, subscriptions,
  and per publisher the last event the client acknowledged (what a resume is
  checked against);
* **streams**: per publisher stream ``(publisher, incarnation)`` the last event
  stored, so a copy that arrives again after a crash is dropped, not stored twice.

Writes are grouped: every ``put_*`` / ``set_bits`` belongs to the current batch
and :meth:`Storage.commit` makes the batch durable at once (a broker commits
before it sends the acknowledgements the batch allows; see
:meth:`multihop.ges.broker.BrokerCore.take_outbox`).  A crash loses at most the
uncommitted batch, which nobody was told about.

:class:`MemoryStorage` is the simulator's store: it keeps the committed state in
memory and drops the open batch on :meth:`MemoryStorage.crash`, which is what a
killed process does to an SQLite file (:mod:`multihop.ges.storage_sqlite`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Protocol

from multihop.ges.errors import StorageError
from multihop.ges.event import EventData, EventId
from multihop.ges.profile import Chain

__all__ = ["Storage", "StoredState", "StoredClient", "MemoryStorage", "StorageError", "event_size"]


@dataclass
class StoredClient:
    """A durable client homed at a store."""

    slot: int  #: its bit in the entries' bit vectors (0 is the gateways' bit)
    subs: dict[int, Chain] = field(default_factory=dict)  #: subscription id -> chain
    progress: dict[str, EventId] = field(default_factory=dict)  #: publisher -> last event acknowledged
    broker: int = -1  #: the broker it was last attached to (the store resumes sending there after a restart)
    incarnation: int = -1  #: its incarnation there


@dataclass
class StoredState:
    """Everything a store holds, as loaded at start."""

    entries: dict[int, tuple[EventData, int]] = field(default_factory=dict)  #: entry -> (event, bits), ascending
    clients: dict[str, StoredClient] = field(default_factory=dict)
    streams: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  #: (publisher, inc) -> last order


def event_size(ev: EventData) -> int:
    """Bytes an event takes in a store (id, signature, values, payload)."""
    return len(ev.id.publisher) + 24 + len(ev.signature) + len(ev.values) + len(ev.payload)


class Storage(Protocol):
    """What a storage broker needs from a store (see the module docstring)."""

    #: where the store lives (a file path, or ``":memory:"``): named in errors and in ``ges status``
    location: str

    def load(self) -> StoredState:
        """The committed state (called once, at start)."""
        ...

    def put(self, entry: int, event: EventData, bits: int) -> None:
        """Store a new entry."""
        ...

    def set_bits(self, entry: int, bits: int) -> None:
        """Change an entry's bit vector; 0 deletes the entry (garbage collection)."""
        ...

    def put_client(self, client: str, slot: int, subs: dict[int, Chain], broker: int, incarnation: int) -> None:
        """Create or update a durable client (its slot, subscriptions, current broker and incarnation)."""
        ...

    def put_progress(self, client: str, publisher: str, event: EventId) -> None:
        """The last event of ``publisher`` that ``client`` acknowledged."""
        ...

    def put_stream(self, publisher: str, incarnation: int, order: tuple[int, int]) -> None:
        """The last event stored of a publisher stream."""
        ...

    def commit(self) -> None:
        """Make the batch durable."""
        ...

    def close(self) -> None:
        """Commit and release the store."""
        ...


class MemoryStorage:
    """An in-memory :class:`Storage` with commit semantics (the simulator's stable storage)."""

    def __init__(self, location: str = ":memory:") -> None:
        self.location = location
        self._committed = StoredState()
        self._batch: list[tuple] = []
        #: commits so far
        self.commits = 0

    def load(self) -> StoredState:
        """A copy of the committed state."""
        return copy.deepcopy(self._committed)

    def put(self, entry: int, event: EventData, bits: int) -> None:
        """Store a new entry (in the open batch)."""
        self._batch.append(("put", entry, event, bits))

    def set_bits(self, entry: int, bits: int) -> None:
        """Change an entry's bits; 0 deletes it (in the open batch)."""
        self._batch.append(("bits", entry, bits))

    def put_client(self, client: str, slot: int, subs: dict[int, Chain], broker: int, incarnation: int) -> None:
        """Create or update a durable client (in the open batch)."""
        self._batch.append(("client", client, slot, dict(subs), broker, incarnation))

    def put_progress(self, client: str, publisher: str, event: EventId) -> None:
        """Record a client's last acknowledged event of a publisher (in the open batch)."""
        self._batch.append(("progress", client, publisher, event))

    def put_stream(self, publisher: str, incarnation: int, order: tuple[int, int]) -> None:
        """Record the last stored event of a stream (in the open batch)."""
        self._batch.append(("stream", publisher, incarnation, order))

    def commit(self) -> None:
        """Apply the open batch to the committed state."""
        if not self._batch:
            return
        st = self._committed
        for op in self._batch:
            kind = op[0]
            if kind == "put":
                st.entries[op[1]] = (op[2], op[3])
            elif kind == "bits":
                if op[2]:
                    if op[1] in st.entries:
                        st.entries[op[1]] = (st.entries[op[1]][0], op[2])
                else:
                    st.entries.pop(op[1], None)
            elif kind == "client":
                c = st.clients.get(op[1])
                if c is None:
                    st.clients[op[1]] = StoredClient(op[2], op[3], {}, op[4], op[5])
                else:
                    c.slot, c.subs, c.broker, c.incarnation = op[2], op[3], op[4], op[5]
            elif kind == "progress":
                st.clients[op[1]].progress[op[2]] = op[3]
            else:
                st.streams[(op[1], op[2])] = op[3]
        self._batch = []
        self.commits += 1

    def crash(self) -> None:
        """What a killed process does: the open batch is gone, the committed state stays."""
        self._batch = []

    def close(self) -> None:
        """Commit."""
        self.commit()

    @property
    def stored_events(self) -> int:
        """Committed entries."""
        return len(self._committed.entries)
