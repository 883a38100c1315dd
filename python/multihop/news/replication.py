"""Keeping the copies in step: lazy updates, snapshots for joining peers, requests for data.

Part of :class:`~multihop.news.peer.PeerMachine` (a mixin).

* **Lazy updates.** The peer that delivers a news to a sink (for a reliable
  sink: once the sink acknowledged it) sends ``QueueUpdate(news, peer, source,
  sink)`` to the other peers, batched for at most ``update_delay``; they drop
  that news from their copy of the sink's queue.  An update for a news not
  held yet leaves a tombstone; one about an unknown sink or source also asks a
  random peer for it (``request_data``).
* **Snapshots.** A joining peer asks one peer for its state: every source
  (``source_info``), every sink (``sink_info``), every news held with the
  sinks it is still pending for (``stored_news``), then ``snapshot_end``.
* **Missing news.** A gap in a source's sequence asks a random peer for the
  missing news (``news_request``); it answers with those it holds.
"""

from __future__ import annotations

import json

from multihop.news.errors import TopicError
from multihop.news.ids import NewsKey, Nid, hex_id
from multihop.news.news import StoredNews
from multihop.news.serving import Serving
from multihop.news.sources import SourceState
from multihop.news.topics import decode_topics
from multihop.news.validate import seq_error
from multihop.news.wire import M, Record

__all__ = ["Replication", "MAX_GAP"]

MAX_GAP = 100_000
"""The most missing news one gap asks for (older ones are given up at once)."""

_PENDING_CHUNK = 4096


class Replication(Serving):
    """Lazy updates, snapshots and requests for data (see the module docstring)."""

    def init_replication(self) -> None:
        """Set up this part's fields (called by the machine's constructor)."""
        self.updates: list[M.queue_update] = []
        self.updates_since: int | None = None
        self.acks_due: set[Nid] = set()
        self.asked: dict[Nid, int] = {}  # node asked for with request_data -> when
        self._last_stored: NewsKey | None = None

    # ---- lazy updates ----------------------------------------------------

    def queue_update(self, key: NewsKey, sink: Nid) -> None:
        """Note that ``sink`` got news ``key`` from us; the others hear it within ``update_delay``."""
        if not self.members.others:
            return  # no other copy to keep in step
        self.updates.append(M.queue_update(key[1], self.me, key[0], sink))
        if self.updates_since is None:
            self.updates_since = self.now_ns
        if len(self.updates) >= 256:
            self.flush_updates()

    def flush_updates(self) -> None:
        """Send the batched updates to every peer, and the due source acknowledgements."""
        ups = self.updates
        for i in range(0, len(ups), 256):
            self.to_peers(M.messages.queue_updates(ups[i : i + 256]))
        self.counters["updates_sent"] += len(ups)
        self.updates = []
        self.updates_since = None
        for sid in self.acks_due:
            st = self.sources.get(sid)
            if st is not None and self.links.get(sid) == "source":
                st.acked = st.next_seq
                self.send(sid, M.messages.news_ack(self.me, sid, st.next_seq))
        self.acks_due.clear()

    def updates_deadline(self) -> int | None:
        """When the batched updates (or acks) must go."""
        if self.updates_since is None and not self.acks_due:
            return None
        since = self.updates_since if self.updates_since is not None else self.now_ns
        return since + self.cfg.ns("update_delay")

    def on_queue_updates(self, src: Nid, rec: M.messages.queue_updates) -> None:
        """Another peer delivered news: drop them from our copies."""
        self.counters["updates_received"] += len(rec.updates)
        for u in rec.updates:
            key = (u.source, u.news)
            sink = self.sinks.get(u.sink)
            if sink is None:
                self.store.tomb(key, u.sink, self.now_ns)
                self.ask_for(u.sink)
                continue
            if not self.dequeue(sink, key) and key not in self.store:
                self.store.tomb(key, u.sink, self.now_ns)
            if u.source not in self.sources:
                self.ask_for(u.source)
            self.dirty.add(sink.id)

    # ---- requests for data -----------------------------------------------

    def ask_for(self, node: Nid) -> None:
        """Ask a random peer for a node we do not know (at most once a second per node)."""
        now = self.now_ns
        if now - self.asked.get(node, -(1 << 62)) < 1_000_000_000:
            return
        peer = self.random_peer()
        if peer is None:
            return
        self.asked[node] = now
        self.counters["requests_for_data"] += 1
        self.send(peer, M.messages.request_data(self.me, node))

    def on_request_data(self, src: Nid, rec: M.messages.request_data) -> None:
        """Describe a source or sink to the peer that asked."""
        if rec.peer != src:
            self.bad_frame(src, rec.name, "a request_data names another peer than its channel's")
            return
        node = rec.node
        st = self.sources.get(node)
        if st is not None and st.info is not None:
            self.send(src, st.describe())
        elif node in self.sinks:
            self.send(src, self.sinks[node].info)
        else:
            self.send(src, M.messages.node_unknown(self.me, node))

    def on_node_unknown(self, src: Nid, rec: M.messages.node_unknown) -> None:
        """The peer we asked does not know the node either."""
        self.counters["nodes_unknown"] += 1

    # ---- missing news ----------------------------------------------------

    def want(self, st: SourceState, first: int, last: int) -> None:
        """Note news ``first..last`` of a source as missing and ask a peer for them."""
        if last < first:
            return
        if last - first + 1 > MAX_GAP:
            self.counters["gap_given_up"] += last - first + 1 - MAX_GAP
            first = last - MAX_GAP + 1
        st.missing.update(range(first, last + 1))
        st.gap_tries = 0
        self.ask_missing(st)

    def ask_missing(self, st: SourceState) -> None:
        """Ask a random peer for a source's missing news (or give up after ``gap_tries``, or with no peer to ask).

        A joining peer with no peer to ask yet (it bound to them, none has spoken) keeps the
        gap: its snapshot fills part of it and it asks for the rest once active.
        """
        if not st.missing:
            st.gap_due = None
            return
        peer = self.random_peer()
        if peer is None and not self.active:
            st.gap_due = self.now_ns + self.cfg.ns("gap_retry")
            return
        if peer is None or st.gap_tries >= self.cfg.gap_tries:
            self.counters["gap_given_up"] += len(st.missing)
            st.missing.clear()
            st.gap_due = None
            self.unpark(st)
            return
        st.gap_tries += 1
        self.counters["news_requests"] += 1
        self.send(peer, M.messages.news_request(self.me, st.id, min(st.missing), max(st.missing)))
        st.gap_due = self.now_ns + self.cfg.ns("gap_retry")

    def pending_for(self, key: NewsKey) -> list[Nid]:
        """The sinks a news is still pending for at this peer (queued, or in flight unacknowledged)."""
        return [sid for sid, s in self.sinks.items() if key in s.queue or (s.reliable and key in s.inflight)]

    def stored_messages(self, n: StoredNews) -> list[Record]:
        """``stored_news`` for one held news (several if it is pending for many sinks)."""
        pending = self.pending_for(n.key)
        chunks = [pending[i : i + _PENDING_CHUNK] for i in range(0, len(pending), _PENDING_CHUNK)] or [[]]
        return [
            M.messages.stored_news(n.key[0], n.key[1], n.priority, n.entry_ns, n.release_ns, n.origin, n.wire_topics, n.payload, chunk)
            for chunk in chunks
        ]

    def on_news_request(self, src: Nid, rec: M.messages.news_request) -> None:
        """Send the asking peer the news of the range that we hold (at most :data:`MAX_GAP` of them)."""
        if rec.peer != src or rec.first > rec.last:
            self.bad_frame(src, rec.name, f"a news_request from {hex_id(rec.peer)} for {rec.first}..{rec.last}")
            return
        first, last = rec.first, min(rec.last, rec.first + MAX_GAP - 1)
        for seq in range(first, last + 1):
            n = self.store.get((rec.source, seq))
            if n is not None:
                for m in self.stored_messages(n):
                    self.send(src, m)

    def on_stored_news(self, src: Nid, rec: M.messages.stored_news) -> None:
        """A news from another peer (snapshot or recovery), with the sinks it is pending for there.

        Checked as a source's news is: its number, its topics, and, for a source
        registered here, the priority it registered.
        """
        key = (rec.source, rec.seq)
        st = self.sources.get(rec.source)
        why = seq_error(rec.seq)
        if why is None and st is not None and st.info is not None and rec.priority != st.info.priority:
            why = f"priority {rec.priority} is not the priority {st.info.priority} its source registered"
        if why is None:
            try:
                decode_topics(rec.topics)
            except TopicError as e:
                why = str(e)
        if why is not None:
            self.bad_frame(src, rec.name, f"stored news {rec.seq} of {hex_id(rec.source)}: {why}")
            return
        if st is not None and rec.seq in st.missing:
            st.missing.discard(rec.seq)
            if not st.missing:
                st.gap_due = None
        existing = self.store.get(key)
        if existing is not None:
            if key == self._last_stored:  # a further chunk of the same news
                for sid in rec.pending:
                    s = self.sinks.get(sid)
                    if s is not None and not self.store.has_tomb(key, sid):
                        self.enqueue(s, existing)
            else:
                self.counters["duplicates"] += 1
            return
        topics = decode_topics(rec.topics)
        n = StoredNews(key, rec.priority, rec.entry_ns, rec.release_ns, rec.origin, topics, rec.topics, bytes(rec.payload))
        self._last_stored = key
        self.accept(n, pending=list(rec.pending))
        if st is not None:
            self.unpark(st)

    def unpark(self, st: SourceState) -> None:
        """Accept a source's parked news that no missing news precedes any more, in sequence order."""
        if not st.parked:
            return
        low = min(st.missing) if st.missing else None
        keep = []
        for n in sorted(st.parked, key=lambda x: x.key[1]):
            if low is not None and n.key[1] > low:
                keep.append(n)
            elif n.key not in self.store:
                self.accept(n)
        st.parked = keep

    # ---- snapshots -------------------------------------------------------

    def on_snapshot_request(self, src: Nid, rec: M.messages.snapshot_request) -> None:
        """Send a joining peer our whole state."""
        if rec.peer != src:
            self.bad_frame(src, rec.name, "a snapshot_request names another peer than its channel's")
            return
        sources = [st for st in self.sources.values() if st.info is not None and not st.foreign]
        for st in sources:
            self.send(src, st.describe())
        for s in self.sinks.values():
            self.send(src, s.info)
        stored = 0
        for n in self.store:
            for m in self.stored_messages(n):
                self.send(src, m)
            stored += 1
        self.send(src, M.messages.snapshot_end(self.me, len(sources), len(self.sinks), stored))
        self.counters["snapshots_served"] += 1

    def status_json(self) -> str:
        """This peer's status as JSON."""
        return json.dumps(self.status(), sort_keys=True, default=str)
