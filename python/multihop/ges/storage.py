"""Stable storage for GES events (GES service paper 8.6-8.9): the interface and an in-memory store.

A **storage broker** (one per cluster) keeps every event routed to its cluster
that some client homed there, or a gateway far end, still has to get, with a bit
vector of who that is (:mod:`multihop.ges.durability`).  What it keeps, and what
a store must give back after a crash:

* **entries**: entry number (ascending, never reused) -> event and bit vector; a
  vector that reaches zero is garbage collected (the entry is deleted);
* **clients**: the durable clients homed at the store: bit slot, subscriptions,
  per publisher the last event the client acknowledged (what a resume is
  checked against), and the hash of the client's credential (what proves a
  resume comes from the client);
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
from typing import Literal, Protocol, TypeAlias, assert_never

from multihop.ges.errors import StorageError, StoreWriteError
from multihop.ges.event import EventData, EventId
from multihop.ges.profile import Chain

__all__ = ["Storage", "StoredState", "StoredClient", "MemoryStorage", "StorageError", "StoreWriteError", "event_size"]


@dataclass
class StoredClient:
    """A durable client homed at a store."""

    slot: int  #: its bit in the entries' bit vectors (0 is the gateways' bit)
    subs: dict[int, Chain] = field(default_factory=dict)  #: subscription id -> chain
    progress: dict[str, EventId] = field(default_factory=dict)  #: publisher -> last event acknowledged
    broker: int = -1  #: the broker it was last attached to (the store resumes sending there after a restart)
    incarnation: int = -1  #: its incarnation there
    #: the hash of its credential (:func:`multihop.ges.durability.credential_hash`; never the credential itself)
    credential: str = ""


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

    def put_client(self, client: str, slot: int, subs: dict[int, Chain], broker: int, incarnation: int, credential: str) -> None:
        """Create or update a durable client (its slot, subscriptions, current broker and incarnation, the hash of its credential)."""
        ...

    def put_progress(self, client: str, publisher: str, event: EventId) -> None:
        """The last event of ``publisher`` that ``client`` acknowledged."""
        ...

    def put_stream(self, publisher: str, incarnation: int, order: tuple[int, int]) -> None:
        """The last event stored of a publisher stream."""
        ...

    def commit(self) -> None:
        """Make the batch durable.

        Raises :class:`~multihop.ges.errors.StoreWriteError` when it cannot write now (a full
        disk): the batch is kept, and a later ``commit`` writes it (with what was added since).
        """
        ...

    def close(self) -> None:
        """Commit and release the store."""
        ...


#: one write of :class:`MemoryStorage`'s open batch, tagged with what it writes (the put_* method's arguments)
_Write: TypeAlias = (
    tuple[Literal["put"], int, EventData, int]
    | tuple[Literal["bits"], int, int]
    | tuple[Literal["client"], str, int, dict[int, Chain], int, int, str]
    | tuple[Literal["progress"], str, str, EventId]
    | tuple[Literal["stream"], str, int, tuple[int, int]]
)


class MemoryStorage:
    """An in-memory :class:`Storage` with commit semantics (the simulator's stable storage)."""

    def __init__(self, location: str = ":memory:") -> None:
        self.location = location
        self._committed = StoredState()
        self._batch: list[_Write] = []
        #: commits so far
        self.commits = 0
        #: the simulator's full disk: while set, :meth:`commit` raises StoreWriteError with this reason
        #: (and keeps the batch), as :class:`~multihop.ges.storage_sqlite.SqliteStorage` does on a full disk
        self.fail_writes: str | None = None

    def load(self) -> StoredState:
        """A copy of the committed state."""
        return copy.deepcopy(self._committed)

    def put(self, entry: int, event: EventData, bits: int) -> None:
        """Store a new entry (in the open batch)."""
        self._batch.append(("put", entry, event, bits))

    def set_bits(self, entry: int, bits: int) -> None:
        """Change an entry's bits; 0 deletes it (in the open batch)."""
        self._batch.append(("bits", entry, bits))

    def put_client(self, client: str, slot: int, subs: dict[int, Chain], broker: int, incarnation: int, credential: str) -> None:
        """Create or update a durable client (in the open batch)."""
        self._batch.append(("client", client, slot, dict(subs), broker, incarnation, credential))

    def put_progress(self, client: str, publisher: str, event: EventId) -> None:
        """Record a client's last acknowledged event of a publisher (in the open batch)."""
        self._batch.append(("progress", client, publisher, event))

    def put_stream(self, publisher: str, incarnation: int, order: tuple[int, int]) -> None:
        """Record the last stored event of a stream (in the open batch)."""
        self._batch.append(("stream", publisher, incarnation, order))

    def commit(self) -> None:
        """Apply the open batch to the committed state (StoreWriteError while :attr:`fail_writes` is set)."""
        if not self._batch:
            return
        if self.fail_writes is not None:
            raise StoreWriteError(
                f"GES store {self.location}: cannot commit {len(self._batch)} writes: {self.fail_writes} (kept for the next commit)"
            )
        st = self._committed
        for op in self._batch:
            match op:
                case ("put", entry, event, bits):
                    st.entries[entry] = (event, bits)
                case ("bits", entry, bits):
                    if bits:
                        if entry in st.entries:
                            st.entries[entry] = (st.entries[entry][0], bits)
                    else:
                        st.entries.pop(entry, None)
                case ("client", client, slot, subs, broker, incarnation, credential):
                    c = st.clients.get(client)
                    if c is None:
                        st.clients[client] = StoredClient(slot, subs, {}, broker, incarnation, credential)
                    else:
                        c.slot, c.subs, c.broker, c.incarnation, c.credential = slot, subs, broker, incarnation, credential
                case ("progress", client, publisher, event_id):
                    st.clients[client].progress[publisher] = event_id
                case ("stream", publisher, incarnation, order):
                    st.streams[(publisher, incarnation)] = order
                case _:
                    assert_never(op)
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
