"""What a peer knows of a sink: its registration, its queue, and what is in flight to it.

Every peer keeps every sink's queue (active replication); only the peer that
serves the sink's partition delivers.  It sends at most ``window`` news that
the sink has not acknowledged, so a slow sink's news wait here, in priority
order, bounded by its ``queue_limit``.  Expired and overflowed news are told
to the sink (their ids, at most ``MAX_NOTICE_IDS`` waiting, beyond that only
the running totals) whenever it has room in its window.
"""

from __future__ import annotations

from multihop.news.ids import NewsKey, Nid
from multihop.news.qos import NO_BOUND, OVERFLOW_POLICIES
from multihop.news.queues import SinkQueue
from multihop.news.topics import decode_topics
from multihop.news.wire import M

__all__ = ["SinkState", "MAX_NOTICE_IDS", "NOTICE_KINDS"]

MAX_NOTICE_IDS = 4096
"""Ids of expired or overflowed news a peer keeps for a sink until it can tell it."""

NOTICE_KINDS = (M.notice_kind.NOTICE_EXPIRED, M.notice_kind.NOTICE_OVERFLOW)


class SinkState:
    """A sink as one peer sees it."""

    __slots__ = ("id", "info", "topics", "exclusive", "queue", "inflight", "attached", "notices", "totals", "delivered", "acked")

    def __init__(self, info: M.messages.sink_info) -> None:
        self.id: Nid = info.sink
        self.info = info
        self.topics = decode_topics(info.topics)
        self.exclusive = decode_topics(info.exclusive)
        policy = OVERFLOW_POLICIES[int(info.overflow)]
        self.queue = SinkQueue(info.queue_limit, policy)
        self.inflight: dict[NewsKey, int] = {}  # news sent and not acknowledged -> when sent
        self.attached = False  # the sink has a channel to this peer
        self.notices: dict[int, list[NewsKey]] = {k: [] for k in NOTICE_KINDS}
        self.totals: dict[int, int] = {k: 0 for k in NOTICE_KINDS}
        self.delivered = 0
        self.acked = 0

    @property
    def partition(self) -> int:
        """The sink's partition."""
        return int(self.info.partition)

    @property
    def reliable(self) -> bool:
        """Whether the sink wants acknowledged, exactly-once delivery."""
        return bool(self.info.reliable)

    def eligible_at(self, release_ns: int, entry_ns: int) -> int:
        """When a news (released at ``release_ns``, entered at ``entry_ns``) may go to this sink."""
        return max(release_ns, entry_ns + self.info.min_delivery_ns)

    def expires_at(self, entry_ns: int) -> int | None:
        """The last instant a news entered at ``entry_ns`` may be delivered (None: never expires)."""
        if self.info.max_delivery_ns == NO_BOUND:
            return None
        return entry_ns + self.info.max_delivery_ns

    def note(self, kind: int, key: NewsKey) -> None:
        """Count an expired or overflowed news (keeping its id to tell the sink, up to the bound)."""
        self.totals[kind] += 1
        ids = self.notices[kind]
        if len(ids) < MAX_NOTICE_IDS:
            ids.append(key)

    def take_notices(self) -> list[M.messages.sink_notice]:
        """The ``sink_notice`` messages to send now (ids in chunks of 512), emptying the lists."""
        out: list[M.messages.sink_notice] = []
        for kind in NOTICE_KINDS:
            ids = self.notices[kind]
            if not ids:
                continue
            for i in range(0, len(ids), 512):
                chunk = [M.news_id(src, seq) for src, seq in ids[i : i + 512]]
                out.append(M.messages.sink_notice(self.id, kind, self.totals[kind], chunk))
            self.notices[kind] = []
        return out

    def status(self) -> dict[str, object]:
        """Counters for ``multihop news status``."""
        return {
            "partition": self.partition,
            "queued": len(self.queue),
            "in_flight": len(self.inflight),
            "attached": self.attached,
            "delivered": self.delivered,
            "acked": self.acked,
            "expired": self.totals[NOTICE_KINDS[0]],
            "overflowed": self.totals[NOTICE_KINDS[1]],
            "topics": list(self.topics),
            "exclusive": list(self.exclusive),
            "reliable": self.reliable,
        }
