"""The SQLite store of a storage broker: one file per broker, WAL mode, batched commits (stdlib ``sqlite3``).

**synchronous = FULL** (the default; ``NORMAL`` can be asked for).  In WAL mode
``NORMAL`` already survives the death of the process (a SIGKILL: the committed
WAL frames are in the kernel's page cache), but not a power loss or a kernel
crash, which can take the last commits with them.  A storage broker tells the
previous hop and the publisher "stored" after :meth:`SqliteStorage.commit`, and
that promise is the whole point of stable storage, so the default makes every
commit reach the disk (one fsync of the WAL per commit).  The cost is paid per
*batch*: the broker commits once per round of its loop, however many events the
round stored (:meth:`~multihop.ges.broker.BrokerCore.take_outbox`), so the fsync
is shared by the batch (``benches/bench_ges_durability.py`` measures both levels).

**Identity.**  The ``meta`` table holds a magic string, the schema version and
the broker's address.  Opening a file that is not SQLite, is another program's
database, has another schema version, belongs to another broker, or fails
``PRAGMA quick_check`` raises :class:`~multihop.ges.errors.StorageError` naming
the file; nothing is written to it.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

from multihop.ges.errors import StorageError, StoreWriteError
from multihop.ges.event import EventData, EventId
from multihop.ges.profile import Chain, chain_text, parse_chain
from multihop.ges.storage import StoredClient, StoredState

__all__ = ["SqliteStorage", "MAGIC", "SCHEMA_VERSION"]

MAGIC = "multihop-ges-storage"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (entry INTEGER PRIMARY KEY, publisher TEXT NOT NULL, ts INTEGER NOT NULL,
    seq INTEGER NOT NULL, inc INTEGER NOT NULL, signature TEXT NOT NULL, vals TEXT NOT NULL,
    payload BLOB NOT NULL, bits BLOB NOT NULL);
CREATE TABLE clients (client TEXT PRIMARY KEY, slot INTEGER NOT NULL, subs TEXT NOT NULL,
    broker INTEGER NOT NULL, inc INTEGER NOT NULL);
CREATE TABLE progress (client TEXT NOT NULL, publisher TEXT NOT NULL, ts INTEGER NOT NULL,
    seq INTEGER NOT NULL, inc INTEGER NOT NULL, PRIMARY KEY (client, publisher));
CREATE TABLE streams (publisher TEXT NOT NULL, inc INTEGER NOT NULL, ts INTEGER NOT NULL,
    seq INTEGER NOT NULL, PRIMARY KEY (publisher, inc));
"""


def _bits_blob(bits: int) -> bytes:
    return bits.to_bytes((bits.bit_length() + 7) // 8 or 1, "little")


class SqliteStorage:
    """A :class:`~multihop.ges.storage.Storage` in one SQLite file (see the module docstring).

    ``owner`` is the storage broker's address: a file made for another broker is refused.
    """

    def __init__(self, path: str | os.PathLike[str], owner: str, synchronous: str = "FULL") -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self.location = os.fspath(path)
        self.owner = owner
        self.synchronous = synchronous
        existed = os.path.exists(self.location) and os.path.getsize(self.location) > 0
        try:
            self.db = sqlite3.connect(self.location, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise StorageError(f"GES storage file {self.location}: cannot open: {e}") from None
        try:
            self._check_or_create(existed)
        except sqlite3.DatabaseError as e:
            self.db.close()
            raise StorageError(f"GES storage file {self.location} is corrupt or not an SQLite database: {e}") from None
        except StorageError:
            self.db.close()
            raise
        self._puts: dict[int, list[Any]] = {}  # entry -> row, inserted at commit
        self._bits: dict[int, int] = {}
        self._other: list[tuple[str, tuple[str | int, ...]]] = []  # (statement, its parameters)
        #: commits so far
        self.commits = 0

    def _check_or_create(self, existed: bool) -> None:
        db = self.db
        if existed:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "meta" not in tables:
                raise StorageError(f"GES storage file {self.location} is a foreign SQLite database (no GES meta table; tables: {sorted(tables)})")
            meta = dict(db.execute("SELECT key, value FROM meta"))
            if meta.get("magic") != MAGIC:
                raise StorageError(f"GES storage file {self.location} is a foreign SQLite database (magic {meta.get('magic')!r})")
            if meta.get("schema") != str(SCHEMA_VERSION):
                raise StorageError(f"GES storage file {self.location} has schema version {meta.get('schema')}, this build reads {SCHEMA_VERSION}")
            if meta.get("owner") != self.owner:
                raise StorageError(f"GES storage file {self.location} belongs to broker {meta.get('owner')}, not {self.owner}")
            ok = db.execute("PRAGMA quick_check").fetchone()[0]
            if ok != "ok":
                raise StorageError(f"GES storage file {self.location} fails its integrity check: {ok}")
        mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise StorageError(f"GES storage file {self.location}: cannot switch to WAL mode (got {mode})")
        db.execute(f"PRAGMA synchronous={self.synchronous}")
        if not existed:
            db.execute("BEGIN")
            for stmt in _SCHEMA.strip().split(";"):
                if stmt.strip():
                    db.execute(stmt)
            db.executemany("INSERT INTO meta VALUES (?, ?)", [("magic", MAGIC), ("schema", str(SCHEMA_VERSION)), ("owner", self.owner)])
            db.execute("COMMIT")

    # ---- reading ---------------------------------------------------------------------------

    def load(self) -> StoredState:
        """The committed state."""
        st = StoredState()
        db = self.db
        for entry, pub, ts, seq, inc, sig, vals, payload, bits in db.execute("SELECT * FROM events ORDER BY entry"):
            st.entries[entry] = (EventData(EventId(pub, ts, seq, inc), sig, vals, bytes(payload)), int.from_bytes(bits, "little"))
        for client, slot, subs, broker, inc in db.execute("SELECT client, slot, subs, broker, inc FROM clients"):
            st.clients[client] = StoredClient(slot, {int(k): parse_chain(v) for k, v in json.loads(subs).items()}, {}, broker, inc)
        for client, pub, ts, seq, inc in db.execute("SELECT client, publisher, ts, seq, inc FROM progress"):
            if client in st.clients:
                st.clients[client].progress[pub] = EventId(pub, ts, seq, inc)
        for pub, inc, ts, seq in db.execute("SELECT publisher, inc, ts, seq FROM streams"):
            st.streams[(pub, inc)] = (ts, seq)
        return st

    def stats(self) -> dict[str, int]:
        """Committed events and their bytes, and the file's size (database and WAL)."""
        n, size = self.db.execute("SELECT count(*), coalesce(sum(length(payload) + length(vals) + length(signature)), 0) FROM events").fetchone()
        disk = sum(os.path.getsize(p) for p in (self.location, self.location + "-wal") if os.path.exists(p))
        return {"events": n, "bytes": size, "file_bytes": disk}

    # ---- writing (batched) --------------------------------------------------------------------

    def put(self, entry: int, event: EventData, bits: int) -> None:
        """Store a new entry (in the open batch)."""
        i = event.id
        self._puts[entry] = [entry, i.publisher, i.timestamp, i.sequence, i.incarnation, event.signature, event.values, event.payload, bits]

    def set_bits(self, entry: int, bits: int) -> None:
        """Change an entry's bits; 0 deletes it (in the open batch).

        An entry put in the same batch is changed before it is written (and never written
        if its vector is already zero): an event stored and acknowledged within one round
        costs no write at all.
        """
        row = self._puts.get(entry)
        if row is not None:
            if bits:
                row[8] = bits
            else:
                del self._puts[entry]
            return
        self._bits[entry] = bits

    def put_client(self, client: str, slot: int, subs: dict[int, Chain], broker: int, incarnation: int) -> None:
        """Create or update a durable client (in the open batch)."""
        text = json.dumps({str(k): chain_text(v) for k, v in subs.items()})
        self._other.append(("INSERT OR REPLACE INTO clients VALUES (?, ?, ?, ?, ?)", (client, slot, text, broker, incarnation)))

    def put_progress(self, client: str, publisher: str, event: EventId) -> None:
        """Record a client's last acknowledged event of a publisher (in the open batch)."""
        self._other.append(
            ("INSERT OR REPLACE INTO progress VALUES (?, ?, ?, ?, ?)", (client, publisher, event.timestamp, event.sequence, event.incarnation))
        )

    def put_stream(self, publisher: str, incarnation: int, order: tuple[int, int]) -> None:
        """Record the last stored event of a stream (in the open batch)."""
        self._other.append(("INSERT OR REPLACE INTO streams VALUES (?, ?, ?, ?)", (publisher, incarnation, order[0], order[1])))

    def commit(self) -> None:
        """Write the open batch in one transaction.

        A write that fails (``sqlite3.OperationalError``: a full disk, an I/O error, a lock)
        rolls the transaction back, keeps the batch, and raises
        :class:`~multihop.ges.errors.StoreWriteError` naming the file and SQLite's reason; a later
        call writes the kept batch (with whatever was added meanwhile) again, and writing it
        twice is harmless (every statement is idempotent).  Any other SQLite error raises
        :class:`~multihop.ges.errors.StorageError`.
        """
        if not (self._puts or self._bits or self._other):
            return
        db = self.db
        try:
            db.execute("BEGIN")
            if self._puts:
                db.executemany(
                    "INSERT OR REPLACE INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [(*r[:8], _bits_blob(r[8])) for r in self._puts.values()]
                )
            if self._bits:
                gone = sorted(e for e, b in self._bits.items() if not b)
                kept = [(_bits_blob(b), e) for e, b in self._bits.items() if b]
                if gone:  # runs of consecutive entries go in one range delete each (a replay collects runs)
                    runs: list[tuple[int, int]] = []
                    lo = gone[0]
                    for x, y in zip(gone, gone[1:]):
                        if y != x + 1:
                            runs.append((lo, x))
                            lo = y
                    runs.append((lo, gone[-1]))
                    db.executemany("DELETE FROM events WHERE entry BETWEEN ? AND ?", runs)
                if kept:
                    db.executemany("UPDATE events SET bits = ? WHERE entry = ?", kept)
            for sql, args in self._other:
                db.execute(sql, args)
            db.execute("COMMIT")
        except sqlite3.Error as e:
            self._rollback(e)
            writes = len(self._puts) + len(self._bits) + len(self._other)
            if isinstance(e, sqlite3.OperationalError):
                raise StoreWriteError(f"GES storage file {self.location}: cannot commit {writes} writes: {e} (kept for the next commit)") from e
            raise StorageError(f"GES storage file {self.location}: commit failed: {e}") from e
        except BaseException as e:
            self._rollback(e)
            raise
        self._puts, self._bits, self._other = {}, {}, []
        self.commits += 1

    def _rollback(self, cause: BaseException) -> None:
        """End the failed transaction, if SQLite has not already (it rolls back by itself after a full disk or an
        I/O error); a failure of the rollback is noted on ``cause``, never raised instead of it."""
        if not self.db.in_transaction:
            return
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.Error as r:
            cause.add_note(f"(and the rollback after it failed too: {r})")

    def close(self) -> None:
        """Commit and close the file."""
        try:
            self.commit()
        finally:
            self.db.close()
