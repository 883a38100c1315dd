"""The state every part of a peer machine shares, and its outputs.

:class:`PeerState` holds what :class:`~multihop.news.peer.PeerMachine` is
made of (the parts are mixins, one file each: :mod:`.serving` delivers to
sinks, :mod:`.replication` keeps the copies in step); nothing here does I/O
or reads a clock: times come in with each call.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from typing import Any, Callable

from multihop.news.config import PeerConfig
from multihop.news.ids import Nid, short
from multihop.news.membership import Membership
from multihop.news.news import StoredNews
from multihop.news.partition import owner_map
from multihop.news.sinks import SinkState
from multihop.news.sources import SourceState
from multihop.news.store import NewsStore
from multihop.news.topics import TopicTable
from multihop.news.validate import reason
from multihop.news.wire import M, Record

__all__ = ["PeerState", "LOGGED_BAD_FRAMES"]

LOGGED_BAD_FRAMES = 100
"""Bad frames told as events (and so logged) one by one; beyond, every 1000th (all are counted)."""

ANSWERS_PER_SECOND = 100
"""Bad frames of one client answered with ``refused`` per second; beyond, only counted (a client flooding bad
frames and reading nothing would otherwise grow the peer's outbox for it without bound)."""


class PeerState:
    """Fields of a peer machine and the helpers that emit its outputs."""

    def __init__(self, me: Nid, domain: Nid, config: PeerConfig, now_ns: int, active: bool, secret: bytes = b"") -> None:
        self.me = me
        self.secret = secret  # shown in our peer_hello: the data whose MD5 is ``me``
        self.domain = domain
        self.cfg = config
        self.now_ns = now_ns
        self.rng = random.Random(me.hi ^ me.lo)
        self.members = Membership(me, active, config.ns("heartbeat"), config.ns("dead_after"), now_ns)
        self.links: dict[Nid, str] = {}  # node with a channel to us -> "peer", "source", "sink", "relay", "admin"
        self.sources: dict[Nid, SourceState] = {}
        self.sinks: dict[Nid, SinkState] = {}
        self.topics = TopicTable()
        self.store = NewsStore(config.ns("history"), config.history_limit)
        self.owners: list[Nid | None] = owner_map(config.partitions, self.members.active_ids())
        self.counters: Counter[str] = Counter()
        self.dirty: set[Nid] = set()  # sinks whose deliveries may move
        self.leaving = False
        self.stopped = False
        self.status_hook: Callable[[], dict[str, Any]] | None = None  # the driver's counters for status replies (None in the simulator)
        self.closing: set[Nid] = set()  # nodes whose channels we cut (their frames are dropped until the close comes)
        self.answered: dict[Nid, tuple[int, int]] = {}  # client -> (second, refusals sent in it) for bad frames
        self._out: deque[tuple[Nid, Record]] = deque()
        self._connects: deque[Nid] = deque()
        self._closes: deque[Nid] = deque()
        self._events: deque[tuple[str, dict[str, Any]]] = deque()

    # ---- outputs ---------------------------------------------------------

    def send(self, dst: Nid, rec: Record) -> None:
        """Queue ``rec`` for ``dst`` (a node we have a channel with)."""
        self._out.append((dst, rec))

    def to_peers(self, rec: Record) -> None:
        """Queue ``rec`` for every peer we have a channel with."""
        for node, kind in self.links.items():
            if kind == "peer":
                self._out.append((node, rec))

    def to_clients(self, rec: Record, kinds: tuple[str, ...] = ("source", "sink", "relay")) -> None:
        """Queue ``rec`` for every client of the given kinds."""
        for node, kind in self.links.items():
            if kind in kinds:
                self._out.append((node, rec))

    def event(self, name: str, **fields: Any) -> None:
        """Record an event for the driver (logs) and the tests."""
        self._events.append((name, fields))
        self.counters[f"event_{name}"] += 1

    def connect(self, node: Nid) -> None:
        """Ask the driver to open a channel to ``node``."""
        self._connects.append(node)

    def close_link(self, node: Nid) -> None:
        """Ask the driver to close every channel of ``node`` (after what is queued for it); its frames are dropped meanwhile."""
        if node not in self.closing:
            self.closing.add(node)
            self._closes.append(node)
            self.counters["channels_cut"] += 1

    def refuse(self, src: Nid, client: Nid, text: str) -> None:
        """Tell a client why we refused what it sent (``text`` cut to fit a ``refused``)."""
        self.counters["refused"] += 1
        self.send(src, M.messages.refused(self.me, client, reason(text)))

    def bad_frame(self, src: Nid, name: str, why: str, *, about: Nid | None = None, close: bool = False) -> None:
        """A frame from ``src`` that we refuse: counted (``bad_frames`` and ``bad_<message>``), told, maybe cut off.

        A client is answered with ``refused`` naming the message and ``why``; with ``close``
        its channel is cut too (a frame that breaks the protocol rather than a value out of
        range).  A peer's frame is counted and dropped: peers are replicas, not clients, and
        cutting one off would declare it dead (``close`` still cuts a node whose peer hello failed).
        """
        self.counters["bad_frames"] += 1
        self.counters[f"bad_{name}"] += 1
        kind = self.links.get(src)
        n = self.counters["bad_frames"]
        if n <= LOGGED_BAD_FRAMES or n % 1000 == 0:
            self.event("bad_frame", src=short(src), kind=kind, message=name, why=why, total=n)
        if kind != "peer":
            second = self.now_ns // 1_000_000_000
            last, count = self.answered.get(src, (second, 0))
            count = count + 1 if last == second else 1
            self.answered[src] = (second, count)
            if count <= ANSWERS_PER_SECOND or close:
                self.refuse(src, about if about is not None else src, f"{name} refused: {why}")
            else:
                self.counters["refusals_not_sent"] += 1
        if close:
            self.close_link(src)

    # ---- provided by the mixins (serving, replication) ---------------------

    def queue_update(self, key: tuple[Nid, int], sink: Nid) -> None:
        """Note a delivery for the lazy ``QueueUpdate`` (:mod:`.replication`)."""
        raise NotImplementedError

    def pump(self, sink: SinkState) -> None:
        """Deliver what ``sink`` may have now (:mod:`.serving`)."""
        raise NotImplementedError

    def accept(self, n: "StoredNews", pending: list[Nid] | None = None) -> None:
        """Hold a new news and queue it for its sinks (:mod:`.peer`)."""
        raise NotImplementedError

    def status(self) -> dict[str, Any]:
        """This peer's state and counters (:mod:`.peer`)."""
        raise NotImplementedError

    # ---- derived ---------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether this peer serves partitions."""
        return self.members.me_active

    def serves(self, sink: SinkState) -> bool:
        """Whether this peer delivers to ``sink`` now."""
        return not self.leaving and self.members.me_active and sink.attached and self.owners[sink.partition] == self.me

    def coordinator(self) -> bool:
        """Whether this peer is the lowest active one (it alone signals rate alarms to sources)."""
        active = self.members.active_ids()
        return bool(active) and active[0] == self.me

    def random_peer(self) -> Nid | None:
        """A peer (other than us) we have a channel with, active ones first, chosen at random."""
        peers = [n for n, k in self.links.items() if k == "peer" and n in self.members.others]
        act = [n for n in peers if self.members.others[n].active]
        pool = sorted(act or peers)
        return self.rng.choice(pool) if pool else None
