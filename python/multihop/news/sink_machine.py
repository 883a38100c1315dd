"""The sink client as a sans-IO machine: JOIN, attach, duplicate suppression, acks, notices.

The sink binds to every peer of its domain (so whichever peer serves its
partition, now or after a take-over, has a channel to it: the partition is
what it "listens on").  On the first welcome from an active peer it sends its
JOIN (``sink_info`` with no partition) there; the answer names its partition,
and it then attaches (``sink_info`` with the partition) on every channel.

Each delivered news is acknowledged on the channel it came from when the
application takes it (acks are batched: 64, or ``ACK_DELAY_NS`` after the oldest) (so a sink that stops reading stops its flow at
``window`` news and the rest waits in the peers' bounded queues).  A news seen
before (a new owner re-delivering what the dead one had sent) is acknowledged
and not handed out again: exactly once.  A news older than
``max_delivery_time`` when it arrives is dropped here too and counted with
the peers' expiry notices, so none later than the bound ever reaches the
application.

What a peer sends that makes no sense (a malformed topic list, an entry time
in the future, a notice or registration for another sink) is counted
(``bad_frames``) and dropped; the ids kept for notices are bounded
(:data:`MAX_NOTICE_KEPT` per kind, the rest counted).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any, Sequence

from multihop.news.errors import TopicError
from multihop.news.ids import NewsKey, Nid, short
from multihop.news.news import News
from multihop.news.partition import NO_PARTITION
from multihop.news.qos import OVERFLOW_POLICIES, SinkQoS
from multihop.news.topics import decode_topics, encode_topics
from multihop.news.validate import MAX_SKEW_NS
from multihop.news.wire import M, Record

__all__ = ["SinkMachine", "DEDUPE_HORIZON_NS", "MAX_NOTICE_KEPT"]

MAX_NOTICE_KEPT = 65_536
"""Ids of expired or overflowed news a sink keeps per kind (beyond, they are only counted)."""

DEDUPE_HORIZON_NS = 600 * 1_000_000_000
"""How long a sink remembers a news id (by entry time) to suppress its duplicates."""

ACK_DELAY_NS = 5_000_000
"""How long an acknowledgement may wait to be batched with others (the peers' window covers it)."""

_EXPIRED, _OVERFLOW = M.notice_kind.NOTICE_EXPIRED, M.notice_kind.NOTICE_OVERFLOW


class SinkMachine:
    """One sink (see the module docstring)."""

    def __init__(
        self,
        me: Nid,
        domain: Nid,
        topics: Sequence[str],
        qos: SinkQoS,
        history: bool,
        now_ns: int,
        dedupe_horizon_ns: int = DEDUPE_HORIZON_NS,
        secret: bytes = b"",
    ) -> None:
        self.me = me
        self.secret = secret  # shown in each hello: the data whose MD5 is ``me``
        self.domain = domain
        self.topics = tuple(topics)
        self.qos = qos
        self.exclusive = qos.exclusive_topics(self.topics)
        self.history = history
        self.join_ns = now_ns
        self.dedupe_horizon_ns = dedupe_horizon_ns
        self.info: M.messages.sink_info | None = None  # our registration, once a peer gave us a partition
        self.contact: Nid | None = None
        self.refused: str | None = None
        self.topic_error: str | None = None  # our topics are outside the domain's declared ones
        self.declared: frozenset[str] | None = None
        self.members: dict[Nid, bool] = {}
        self.epoch = 0
        self.linked: set[Nid] = set()
        self.welcomed: set[Nid] = set()
        self.ready: deque[News] = deque()
        self.seen: OrderedDict[NewsKey, int] = OrderedDict()
        self.acks: dict[Nid, list[M.news_id]] = {}
        self.pending_acks = 0
        self.ack_since: int | None = None  # when the oldest batched ack was made
        self.notice_ids: dict[int, set[NewsKey]] = {_EXPIRED: set(), _OVERFLOW: set()}
        self.notice_extra: dict[tuple[Nid, int], int] = {}  # (peer, kind) -> told in totals beyond the ids it sent
        self.notice_count: dict[tuple[Nid, int], int] = {}
        self.notice_beyond: dict[int, int] = {_EXPIRED: 0, _OVERFLOW: 0}  # ids not kept (over MAX_NOTICE_KEPT)
        self.counters: dict[str, int] = {"received": 0, "delivered": 0, "duplicates": 0, "late": 0, "bad_frames": 0}
        self.by_peer: dict[Nid, int] = {}
        self._out: deque[tuple[Nid, Record]] = deque()
        self._connects: deque[Nid] = deque()
        self._closing: deque[Nid] = deque()

    # ---- inputs ----------------------------------------------------------

    def join_record(self, partition: int = NO_PARTITION) -> M.messages.sink_info:
        """Our ``sink_info`` (a JOIN without a partition)."""
        q = self.qos
        return M.messages.sink_info(
            self.me,
            partition,
            self.join_ns,
            q.max_delivery_ns,
            q.min_delivery_ns,
            q.reliable,
            self.history,
            q.queue_limit,
            OVERFLOW_POLICIES.index(q.overflow),
            encode_topics(self.topics),
            encode_topics(self.exclusive),
        )

    def handle_connected(self, peer: Nid, now_ns: int) -> None:
        """A channel to ``peer`` is up: say hello (and attach, if we have our partition)."""
        self.linked.add(peer)
        self.members.setdefault(peer, False)
        self._out.append((peer, M.messages.client_hello(M.client_kind.CLIENT_SINK, self.me, self.domain, self.secret)))
        if self.info is not None:
            self._out.append((peer, self.info))

    def handle_connect_failed(self, peer: Nid, now_ns: int) -> None:
        """``peer`` could not be reached."""
        self.members.pop(peer, None)

    def handle_closed(self, peer: Nid, now_ns: int) -> None:
        """The channel to ``peer`` closed (everything it sent before was already read)."""
        self.linked.discard(peer)
        self.welcomed.discard(peer)
        self.members.pop(peer, None)
        self.acks.pop(peer, None)
        if peer == self.contact and self.info is None:
            self.contact = None
            self.try_join()

    def handle_message(self, src: Nid, rec: Record, now_ns: int) -> None:
        """A message from peer ``src`` (one that makes no sense is counted in ``bad_frames`` and dropped)."""
        if isinstance(rec, M.messages.deliver):
            self.on_deliver(src, rec, now_ns)
        elif isinstance(rec, M.messages.sink_notice):
            if rec.sink != self.me:
                self.counters["bad_frames"] += 1
                return
            self.on_notice(src, rec)
        elif isinstance(rec, (M.messages.welcome, M.messages.members)):
            welcome = isinstance(rec, M.messages.welcome)
            if isinstance(rec, M.messages.welcome):
                try:
                    declared = frozenset(decode_topics(rec.topics)) if rec.topics else None
                except TopicError:
                    self.counters["bad_frames"] += 1
                    return
                if rec.domain != self.domain:
                    self.counters["bad_frames"] += 1
                    return
                self.welcomed.add(src)
                self.declared = declared
            if rec.epoch >= self.epoch or welcome:
                self.epoch = max(self.epoch, rec.epoch)
                self.update_members([(m.id, m.active) for m in rec.members])
            self.try_join()
        elif isinstance(rec, M.messages.sink_info) and rec.sink == self.me and rec.partition != NO_PARTITION:
            if self.info is None:
                self.info = rec
                for peer in sorted(self.linked):
                    if peer != src:
                        self._out.append((peer, rec))
        elif isinstance(rec, M.messages.refused):
            if self.info is None:
                self.refused = f"peer {short(src)}: {rec.reason}"
        elif isinstance(rec, M.messages.peer_leave):
            self.members.pop(src, None)
        elif not isinstance(rec, M.messages.sink_info):  # another sink's registration: not ours, harmless
            self.counters["bad_frames"] += 1

    def update_members(self, listing: Sequence[tuple[Nid, bool]]) -> None:
        """Bind to every peer the list names that we have no channel with."""
        for peer, active in listing:
            if peer not in self.members and peer not in self.linked:
                self._connects.append(peer)
            self.members[peer] = active

    def try_join(self) -> None:
        """Send our JOIN to an active peer that welcomed us (once); not if our topics are not the domain's."""
        if self.info is not None or self.contact is not None or self.refused is not None:
            return
        if self.declared is not None:
            unknown = [t for t in self.topics if t not in self.declared]
            if unknown:
                known = ", ".join(sorted(self.declared))
                self.refused = self.topic_error = f"unknown topic(s) {unknown}; this domain declares only: {known}"
                return
        for peer in sorted(self.welcomed):
            if self.members.get(peer):
                self.contact = peer
                self._out.append((peer, self.join_record()))
                return

    def on_deliver(self, src: Nid, rec: M.messages.deliver, now_ns: int) -> None:
        """A news from the peer serving us: hand it out once, unless it is late (or makes no sense: counted, dropped)."""
        try:
            topics = decode_topics(rec.topics)
        except TopicError:
            self.counters["bad_frames"] += 1
            return
        if rec.entry_ns > now_ns + MAX_SKEW_NS:  # stamped in the future: its age, and the dedupe horizon, would be wrong
            self.counters["bad_frames"] += 1
            return
        key = (rec.source, rec.seq)
        self.counters["received"] += 1
        if key in self.seen:
            self.counters["duplicates"] += 1
            self.ack(src, key, now_ns)
            return
        self.seen[key] = rec.entry_ns
        if self.qos.max_delivery_time is not None and now_ns - rec.entry_ns > self.qos.max_delivery_ns:
            self.counters["late"] += 1
            self.note_expired(key)
            self.ack(src, key, now_ns)
            return
        self.by_peer[src] = self.by_peer.get(src, 0) + 1
        self.ready.append(News(rec.source, rec.seq, rec.priority, topics, rec.entry_ns, rec.origin, bytes(rec.payload), now_ns, src))

    def on_notice(self, src: Nid, rec: M.messages.sink_notice) -> None:
        """Expired or overflowed news, told by a peer."""
        kind = int(rec.kind)
        ids = self.notice_ids[kind]
        for i in rec.ids:
            if len(ids) < MAX_NOTICE_KEPT:
                ids.add((i.source, i.seq))
            elif (i.source, i.seq) not in ids:
                self.notice_beyond[kind] += 1
        k = (src, kind)
        self.notice_count[k] = self.notice_count.get(k, 0) + len(rec.ids)
        self.notice_extra[k] = max(0, rec.total - self.notice_count[k])

    def note_expired(self, key: NewsKey) -> None:
        """Remember a news we dropped as late (counted beyond :data:`MAX_NOTICE_KEPT`)."""
        ids = self.notice_ids[_EXPIRED]
        if len(ids) < MAX_NOTICE_KEPT:
            ids.add(key)
        elif key not in ids:
            self.notice_beyond[_EXPIRED] += 1

    def ack(self, peer: Nid, key: NewsKey, now_ns: int = 0) -> None:
        """Acknowledge news ``key`` to ``peer`` (sent in batches of 64, or once the oldest waited ``ACK_DELAY_NS``)."""
        if peer not in self.linked:
            return
        batch = self.acks.setdefault(peer, [])
        batch.append(M.news_id(key[0], key[1]))
        self.pending_acks += 1
        if self.ack_since is None:
            self.ack_since = now_ns
        if len(batch) >= 64:
            self._out.append((peer, M.messages.sink_ack(self.me, batch)))
            self.pending_acks -= len(batch)
            self.acks[peer] = []

    def ack_deadline(self) -> int | None:
        """When the batched acks must go (None: none waiting)."""
        return None if not self.pending_acks or self.ack_since is None else self.ack_since + ACK_DELAY_NS

    def flush_acks(self) -> None:
        """Send every batched acknowledgement now."""
        for peer, batch in self.acks.items():
            if batch:
                self._out.append((peer, M.messages.sink_ack(self.me, batch)))
        self.acks.clear()
        self.pending_acks = 0
        self.ack_since = None

    def flush_due_acks(self, now_ns: int) -> None:
        """Send the batched acks if the oldest has waited long enough (or many wait)."""
        due = self.ack_deadline()
        if due is not None and (now_ns >= due or self.pending_acks >= 32):
            self.flush_acks()

    # ---- the application's calls -----------------------------------------

    def take(self, now_ns: int) -> News | None:
        """The next news for the application (and its ack), or None."""
        while self.ready:
            n = self.ready.popleft()
            if self.qos.max_delivery_time is not None and now_ns - n.entry_ns > self.qos.max_delivery_ns:
                self.counters["late"] += 1  # went stale while the application was not reading
                self.note_expired(n.id)
                self.ack(n.peer, n.id, now_ns)
                continue
            self.ack(n.peer, n.id, now_ns)
            self.counters["delivered"] += 1
            self.prune(now_ns)
            return n
        return None

    def prune(self, now_ns: int) -> None:
        """Forget news ids older than the dedupe horizon."""
        horizon = now_ns - self.dedupe_horizon_ns
        seen = self.seen
        while seen:
            key, entry = next(iter(seen.items()))
            if entry >= horizon:
                break
            del seen[key]

    def leave_messages(self) -> list[tuple[Nid, Record]]:
        """Acks, then ``leave``, for every linked peer (closing)."""
        self.flush_acks()
        out = list(self._out)
        self._out.clear()
        return out + [(p, M.messages.leave(self.me)) for p in sorted(self.linked)]

    # ---- outputs ---------------------------------------------------------

    def has_output(self) -> bool:
        """Whether anything waits in :meth:`poll_transmit`, :meth:`poll_connect` or :meth:`poll_close`."""
        return bool(self._out or self._connects or self._closing)

    def poll_transmit(self) -> tuple[Nid, Record] | None:
        """The next message to send, or None."""
        return self._out.popleft() if self._out else None

    def poll_connect(self) -> Nid | None:
        """The next peer to bind to, or None."""
        return self._connects.popleft() if self._connects else None

    def poll_close(self) -> Nid | None:
        """The next peer whose channel to close, or None."""
        return self._closing.popleft() if self._closing else None

    @property
    def partition(self) -> int | None:
        """Our partition, once a peer gave it."""
        return None if self.info is None else int(self.info.partition)

    def stats(self) -> dict[str, Any]:
        """Counters: received, delivered, duplicates suppressed, expired, overflowed, per peer."""
        extra_exp = sum(v for (p, k), v in self.notice_extra.items() if k == _EXPIRED)
        extra_ovf = sum(v for (p, k), v in self.notice_extra.items() if k == _OVERFLOW)
        return dict(
            self.counters,
            expired=len(self.notice_ids[_EXPIRED]) + extra_exp + self.notice_beyond[_EXPIRED],
            overflowed=len(self.notice_ids[_OVERFLOW]) + extra_ovf + self.notice_beyond[_OVERFLOW],
            waiting=len(self.ready),
            partition=self.partition,
            peers=len(self.linked),
            by_peer={short(p): n for p, n in self.by_peer.items()},
        )
