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

**A store that lost its file.**  A missing or empty file looks like a new store,
and a storage broker that started on it would silently drop every event and
client it held.  So the ``meta`` table also holds the store's identity (a random
``store_id``, made with the file) and its generation (one more at every open),
and once the store first holds data a **marker** beside it
(``ges-<address>.marker``, JSON: owner, store id, generation, since when) says
so; it is written (synced, renamed into place) before the first commit that
writes data, and again at every open.  Opening then refuses, naming the file and
the marker: a missing or empty file where the marker says data was; a file of
another store (another ``store_id``); an older copy of the store (a generation
below the marker's).  ``accept_empty=True`` (``--accept-empty-store``) is the
explicit "the loss is accepted": the store starts as it finds the file (empty if
missing) and the marker is made anew.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from itertools import pairwise
from pathlib import Path
from typing import Any

from multihop.ges.errors import StorageError, StoreWriteError
from multihop.ges.event import EventData, EventId
from multihop.ges.profile import Chain, chain_text, parse_chain
from multihop.ges.storage import StoredClient, StoredState

__all__ = ["SqliteStorage", "MAGIC", "MARKER_MAGIC", "SCHEMA_VERSION", "marker_path"]

MAGIC = "multihop-ges-storage"
MARKER_MAGIC = "multihop-ges-storage-marker"
SCHEMA_VERSION = 2  #: 2: clients have a credential hash

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (entry INTEGER PRIMARY KEY, publisher TEXT NOT NULL, ts INTEGER NOT NULL,
    seq INTEGER NOT NULL, inc INTEGER NOT NULL, signature TEXT NOT NULL, vals TEXT NOT NULL,
    payload BLOB NOT NULL, bits BLOB NOT NULL);
CREATE TABLE clients (client TEXT PRIMARY KEY, slot INTEGER NOT NULL, subs TEXT NOT NULL,
    broker INTEGER NOT NULL, inc INTEGER NOT NULL, credential TEXT NOT NULL);
CREATE TABLE progress (client TEXT NOT NULL, publisher TEXT NOT NULL, ts INTEGER NOT NULL,
    seq INTEGER NOT NULL, inc INTEGER NOT NULL, PRIMARY KEY (client, publisher));
CREATE TABLE streams (publisher TEXT NOT NULL, inc INTEGER NOT NULL, ts INTEGER NOT NULL,
    seq INTEGER NOT NULL, PRIMARY KEY (publisher, inc));
"""


def marker_path(location: str | os.PathLike[str]) -> str:
    """The marker beside a store file: ``ges-1.1.1.db`` -> ``ges-1.1.1.marker`` (not ``ges-1.1.1.db*``, which a
    removal of the file and its WAL would take along)."""
    p = Path(location)
    return str(p.with_name(p.stem + ".marker" if p.suffix else p.name + ".marker"))


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _bits_blob(bits: int) -> bytes:
    return bits.to_bytes((bits.bit_length() + 7) // 8 or 1, "little")


class SqliteStorage:
    """A :class:`~multihop.ges.storage.Storage` in one SQLite file (see the module docstring).

    ``owner`` is the storage broker's address: a file made for another broker is refused.
    ``accept_empty``: start even though the marker says the store held data the file no longer
    has (missing, empty, another store's or an older copy); :attr:`accepted_loss` says what was lost.
    """

    def __init__(self, path: str | os.PathLike[str], owner: str, synchronous: str = "FULL", *, accept_empty: bool = False) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self.location = os.fspath(path)
        self.owner = owner
        self.synchronous = synchronous
        #: the marker beside the file (see the module docstring)
        self.marker = marker_path(self.location)
        #: the store's identity (made when the file is made) and its generation (one more at every open)
        self.store_id = ""
        self.generation = 0
        #: with ``accept_empty``: what the marker said about the store that was lost (None: nothing was lost)
        self.accepted_loss: str | None = None
        existed = os.path.exists(self.location) and os.path.getsize(self.location) > 0
        marker = self._read_marker()
        if marker is not None and not existed:
            what = "missing" if not os.path.exists(self.location) else "empty (0 bytes)"
            lost = f"store {marker['store_id']}, generation {marker['generation']}, holding data since {_when(marker['since'])}"
            if not accept_empty:
                raise StorageError(
                    f"GES storage file {self.location} is {what}, but this storage broker stored data in it before "
                    f"(the marker {self.marker}: {lost}): starting on an empty store would lose every event and client it held. "
                    "Restore the file, or accept the loss explicitly: multihop ges restart NAME ADDRESS --accept-empty-store "
                    "(LiveSystem.restart(..., accept_empty_store=True))"
                )
            self.accepted_loss = f"{what} file, {lost}"
            os.unlink(self.marker)  # the loss is accepted: the new store writes its own marker once it holds data
            marker = None
        try:
            self.db = sqlite3.connect(self.location, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise StorageError(f"GES storage file {self.location}: cannot open: {e}") from None
        try:
            self._check_or_create(existed)
            if existed:
                self._check_identity(marker, accept_empty)
        except sqlite3.OperationalError as e:  # (a full disk, a lock, an I/O error: not the file's fault)
            self.db.close()
            raise StorageError(f"GES storage file {self.location}: cannot open it: {e}") from None
        except sqlite3.DatabaseError as e:
            self.db.close()
            raise StorageError(f"GES storage file {self.location} is corrupt or not an SQLite database: {e}") from None
        except StorageError:
            self.db.close()
            raise
        #: the marker is written before the first commit that writes data (if the file holds none yet)
        self._marker_due = not os.path.exists(self.marker)
        if self._marker_due and existed and self._holds_data():
            try:
                self._write_marker()
            except OSError as e:
                self.db.close()
                raise StorageError(f"GES storage file {self.location}: cannot write its marker {self.marker}: {e}") from None
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
            self.store_id = meta.get("store_id", "")
            self.generation = int(meta.get("generation", "0"))
        mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise StorageError(f"GES storage file {self.location}: cannot switch to WAL mode (got {mode})")
        db.execute(f"PRAGMA synchronous={self.synchronous}")
        if not existed:
            self.store_id, self.generation = uuid.uuid4().hex, 1
            db.execute("BEGIN")
            for stmt in _SCHEMA.strip().split(";"):
                if stmt.strip():
                    db.execute(stmt)
            db.executemany(
                "INSERT INTO meta VALUES (?, ?)",
                [("magic", MAGIC), ("schema", str(SCHEMA_VERSION)), ("owner", self.owner), ("store_id", self.store_id), ("generation", "1")],
            )
            db.execute("COMMIT")

    def _check_identity(self, marker: dict[str, Any] | None, accept_empty: bool) -> None:
        """The file must be the store the marker names, at its generation (or the one after it: a start that died
        between raising the file's generation and the marker's); then the generation goes one up."""
        if not self.store_id:  # a file of an older build: it gets an identity now
            self.store_id = uuid.uuid4().hex
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('store_id', ?)", (self.store_id,))
        if marker is not None:
            problem = ""
            if marker["store_id"] != self.store_id:
                problem = f"is store {self.store_id}, not store {marker['store_id']} that this storage broker held data in (another store's file?)"
            elif self.generation < marker["generation"]:
                problem = (
                    f"is generation {self.generation} of store {self.store_id}, but the store was opened at generation {marker['generation']} "
                    "since (an older copy of the file?)"
                )
            if problem:
                if not accept_empty:
                    raise StorageError(
                        f"GES storage file {self.location} {problem} (the marker {self.marker}, holding data since {_when(marker['since'])}): "
                        "what the store held since would be lost. Restore the right file, or accept the loss explicitly: "
                        "multihop ges restart NAME ADDRESS --accept-empty-store (LiveSystem.restart(..., accept_empty_store=True))"
                    )
                self.accepted_loss = f"the file {problem}"
                self.generation = max(self.generation, marker["generation"])
        self.generation += 1
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('generation', ?)", (str(self.generation),))
        if marker is not None:
            try:
                self._write_marker(marker["since"] if not self.accepted_loss else None)
            except OSError as e:
                raise StorageError(f"GES storage file {self.location}: cannot write its marker {self.marker}: {e}") from None

    def _holds_data(self) -> bool:
        return any(self.db.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone() for t in ("events", "clients", "progress", "streams"))

    def _read_marker(self) -> dict[str, Any] | None:
        """The marker's contents (None if there is none); StorageError if it is not a marker of this store's owner."""
        try:
            text = Path(self.marker).read_text()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StorageError(f"GES storage marker {self.marker} (beside {self.location}): cannot read it: {e}") from None
        try:
            m = json.loads(text)
            ok = m.get("magic") == MARKER_MAGIC and isinstance(m.get("store_id"), str) and isinstance(m.get("generation"), int)
            ok = ok and isinstance(m.get("since"), (int, float))
        except (ValueError, AttributeError):
            ok = False
        if not ok:
            raise StorageError(
                f"GES storage marker {self.marker} (beside {self.location}) is not a marker of this build: remove it only if the store never held data"
            )
        if m.get("owner") != self.owner:
            raise StorageError(f"GES storage marker {self.marker} belongs to broker {m.get('owner')}, not {self.owner}")
        return dict(m)

    def _write_marker(self, since: float | None = None) -> None:
        """Write the marker (atomically: a new file renamed over the old, synced with its directory)."""
        body = {
            "magic": MARKER_MAGIC,
            "owner": self.owner,
            "file": os.path.abspath(self.location),
            "store_id": self.store_id,
            "generation": self.generation,
            "since": since if since is not None else time.time(),
        }
        tmp = self.marker + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(body, indent=1).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.marker)
        dfd = os.open(os.path.dirname(os.path.abspath(self.marker)), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self._marker_due = False

    # ---- reading ---------------------------------------------------------------------------

    def load(self) -> StoredState:
        """The committed state."""
        st = StoredState()
        db = self.db
        for entry, pub, ts, seq, inc, sig, vals, payload, bits in db.execute("SELECT * FROM events ORDER BY entry"):
            st.entries[entry] = (EventData(EventId(pub, ts, seq, inc), sig, vals, bytes(payload)), int.from_bytes(bits, "little"))
        for client, slot, subs, broker, inc, cred in db.execute("SELECT client, slot, subs, broker, inc, credential FROM clients"):
            st.clients[client] = StoredClient(slot, {int(k): parse_chain(v) for k, v in json.loads(subs).items()}, {}, broker, inc, cred)
        for client, pub, ts, seq, inc in db.execute("SELECT client, publisher, ts, seq, inc FROM progress"):
            if client in st.clients:
                st.clients[client].progress[pub] = EventId(pub, ts, seq, inc)
        for pub, inc, ts, seq in db.execute("SELECT publisher, inc, ts, seq FROM streams"):
            st.streams[(pub, inc)] = (ts, seq)
        return st

    def stats(self) -> dict[str, Any]:
        """Committed events and their bytes, the file's size (database and WAL), the store's identity and marker."""
        n, size = self.db.execute("SELECT count(*), coalesce(sum(length(payload) + length(vals) + length(signature)), 0) FROM events").fetchone()
        disk = sum(os.path.getsize(p) for p in (self.location, self.location + "-wal") if os.path.exists(p))
        return {"events": n, "bytes": size, "file_bytes": disk, "store_id": self.store_id, "generation": self.generation, "marker": self.marker}

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

    def put_client(self, client: str, slot: int, subs: dict[int, Chain], broker: int, incarnation: int, credential: str) -> None:
        """Create or update a durable client (in the open batch); ``credential`` is its hash."""
        text = json.dumps({str(k): chain_text(v) for k, v in subs.items()})
        self._other.append(("INSERT OR REPLACE INTO clients VALUES (?, ?, ?, ?, ?, ?)", (client, slot, text, broker, incarnation, credential)))

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
        if self._marker_due:  # the store is about to hold data for the first time: the marker says so first
            try:
                self._write_marker()
            except OSError as e:
                raise StoreWriteError(f"GES storage file {self.location}: cannot write its marker {self.marker}: {e} (the batch is kept)") from e
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
                    for x, y in pairwise(gone):
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
