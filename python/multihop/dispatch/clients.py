"""A peer's clients: hellos, sources and their news, sinks and their registrations.

Part of :class:`~multihop.dispatch.peer.PeerMachine` (a mixin over
:class:`~multihop.dispatch.replication.Replication`): it welcomes clients (or
refuses another domain's), registers sources (QoS checked again: a client
may be forged) and takes their news (sequence gaps, topic checks, rate
schedule and monitor, acks), takes relayed news of other domains, registers
sinks (the JOIN and its load-sharing choice, registrations from peers,
attaches) and forgets them, and judges the sources' ``min_per_unit``.
"""

from __future__ import annotations

from multihop.dispatch.ids import Nid, hex_id, short
from multihop.dispatch.news import StoredNews
from multihop.dispatch.partition import NO_PARTITION, choose_partition
from multihop.dispatch.qos import MAX_QUEUE_LIMIT, NO_BOUND
from multihop.dispatch.replication import Replication
from multihop.dispatch.sinks import SinkState
from multihop.dispatch.sources import SourceState, source_error
from multihop.dispatch.errors import TopicError
from multihop.dispatch.topics import check_declared, decode_topics, encode_topics
from multihop.dispatch.wire import CLIENT_KINDS, M

__all__ = ["Clients", "MAX_SKEW_NS"]

MAX_SKEW_NS = 1_000_000_000
"""A news stamped further than this in the future is taken as entering now."""


class Clients(Replication):
    """What a peer does with sources, sinks and relays (see the module docstring)."""

    def on_client_hello(self, src: Nid, rec: M.messages.client_hello) -> None:
        """A source, sink, relay or administrator opened a channel: welcome it (or refuse another domain's)."""
        if rec.domain != self.domain:
            self.send(src, M.messages.refused(self.me, rec.client, f"this peer belongs to domain {hex_id(self.domain)}, not {hex_id(rec.domain)}"))
            self.counters["refused"] += 1
            return
        self.links[src] = CLIENT_KINDS[rec.kind]
        topics = encode_topics(self.cfg.topics) if self.cfg.topics is not None else ""
        self.send(src, M.messages.welcome(self.me, self.domain, self.members.epoch, self.cfg.window, self.member_list(), topics))

    def member_list(self) -> list[M.member]:
        """The members as the wire's ``member`` structs."""
        return [M.member(n, a) for n, a in self.members.listing()]

    def refuse(self, src: Nid, client: Nid, reason: str) -> None:
        """Tell a client why we refused what it sent."""
        self.counters["refused"] += 1
        self.send(src, M.messages.refused(self.me, client, reason[:1000]))

    def on_source_info(self, src: Nid, rec: M.messages.source_info) -> None:
        """A source registers (its QoS), or a peer describes one (snapshot, request for data)."""
        kind = self.links.get(src)
        err = source_error(rec)
        if err is not None:
            if kind == "source":
                self.refuse(src, rec.source, f"source QoS refused: {err}")
            return
        st = self.sources.get(rec.source)
        self.asked.pop(rec.source, None)
        if kind == "peer":
            if st is None:
                st = self.sources[rec.source] = SourceState(rec, rec.source, self.cfg.ns("rate_grace"))
                st.next_seq = rec.next_seq
            return
        if kind != "source" or src != rec.source:
            self.counters["unexpected"] += 1
            return
        if st is None or st.info is None:
            old = st
            st = self.sources[rec.source] = SourceState(rec, rec.source, self.cfg.ns("rate_grace"))
            if old is not None:
                st.next_seq = old.next_seq
        st.connected = True
        if rec.next_seq > st.next_seq:
            first = st.next_seq
            st.next_seq = rec.next_seq
            if self.random_peer() is not None:
                self.want(st, first, rec.next_seq - 1)

    def on_news(self, src: Nid, rec: M.messages.news) -> None:
        """A news from a source (or, from another domain, from a relay)."""
        kind = self.links.get(src)
        key = (rec.source, rec.seq)
        if kind == "relay":
            st = self.sources.get(rec.source)
            if st is None:
                st = self.sources[rec.source] = SourceState(None, rec.source, 0, foreign=True)
            if key in self.store or rec.origin == self.domain:
                st.duplicates += 1
                return
        elif kind == "source":
            st = self.sources.get(rec.source)
            if st is None or st.info is None or src != rec.source:
                self.refuse(src, rec.source, "news from a source that did not register (send source_info first)")
                return
            if rec.seq < st.next_seq:
                st.duplicates += 1
                return
            if rec.seq > st.next_seq:
                self.want(st, st.next_seq, rec.seq - 1)
            st.next_seq = rec.seq + 1
            if st.reliable:
                if st.next_seq - st.acked >= self.cfg.ack_every:
                    st.acked = st.next_seq
                    self.send(src, M.messages.news_ack(self.me, src, st.next_seq))
                else:
                    self.acks_due.add(src)
                    if self.updates_since is None:
                        self.updates_since = self.now_ns
        else:
            self.counters["unexpected"] += 1
            return
        try:
            topics = decode_topics(rec.topics)
            check_declared(topics, self.cfg.declared, "news")
        except TopicError as e:
            st.rejected += 1
            self.refuse(src, rec.source, f"news {rec.seq} refused: {e}")
            return
        entry = rec.entry_ns if rec.entry_ns <= self.now_ns + MAX_SKEW_NS else self.now_ns
        release = st.schedule.release(entry) if st.schedule is not None else entry
        if st.monitor is not None:
            st.monitor.count(entry)
        st.received += 1
        self.counters["news"] += 1
        n = StoredNews(key, rec.priority, entry, release, rec.origin, topics, rec.topics, bytes(rec.payload))
        if st.missing and min(st.missing) < rec.seq:
            st.parked.append(n)  # after a gap: waits for the missing news (order per source)
            self.counters["parked"] += 1
        else:
            self.accept(n)

    def accept(self, n: StoredNews, pending: list[Nid] | None = None) -> None:
        """Hold a new news and queue it for its sinks: those it matches (or ``pending``, from another peer)."""
        self.store.add(n)
        tombs = self.store.tombs(n.key)
        if pending is None:
            targets = [self.sinks[s] for s in self.topics.recipients(n.topics) if s not in tombs and self.sinks[s].info.join_ns <= n.entry_ns]
        else:
            targets = []
            for sid in pending:
                s = self.sinks.get(sid)
                if s is None:
                    self.ask_for(sid)
                elif sid not in tombs:
                    targets.append(s)
        for s in targets:
            self.enqueue(s, n)

    def on_sink_info(self, src: Nid, rec: M.messages.sink_info) -> None:
        """A sink's JOIN (partition NO_PARTITION: we choose), its registration from a peer, or its attach."""
        kind = self.links.get(src)
        from_sink = kind == "sink" and src == rec.sink
        if kind not in ("peer",) and not from_sink:
            self.counters["unexpected"] += 1
            return
        self.asked.pop(rec.sink, None)
        known = self.sinks.get(rec.sink)
        if known is None:
            err = self.sink_error(rec)
            if err is not None:
                if from_sink:
                    self.refuse(src, rec.sink, f"sink refused: {err}")
                else:
                    self.counters["malformed"] += 1
                return
        if rec.partition == NO_PARTITION:
            if not from_sink:
                self.counters["unexpected"] += 1
                return
            if known is None:
                counts: dict[int, int] = {}
                for s in self.sinks.values():
                    counts[s.partition] = counts.get(s.partition, 0) + 1
                try:
                    part = choose_partition(rec.sink, self.owners, counts)
                except ValueError:
                    self.refuse(src, rec.sink, "no active peer serves a partition yet; try again")
                    return
                info = M.messages.sink_info(
                    rec.sink,
                    part,
                    rec.join_ns,
                    rec.max_delivery_ns,
                    rec.min_delivery_ns,
                    rec.reliable,
                    rec.history,
                    rec.queue_limit,
                    rec.overflow,
                    rec.topics,
                    rec.exclusive,
                )
                known = self.add_sink(info)
                self.to_peers(info)
            self.send(src, known.info)
        elif known is None:
            if rec.partition >= self.cfg.partitions:
                self.counters["malformed"] += 1
                return
            known = self.add_sink(rec)
        if from_sink:
            known.attached = True
            self.dirty.add(known.id)

    def sink_error(self, rec: M.messages.sink_info) -> str | None:
        """Why a sink registration is unacceptable, or None."""
        try:
            topics = decode_topics(rec.topics)
            excl = decode_topics(rec.exclusive)
        except TopicError as e:
            return str(e)
        if not topics:
            return "a sink must subscribe to at least one topic"
        try:
            check_declared(topics, self.cfg.declared, "sink topics")
        except TopicError as e:
            return str(e)
        stray = [t for t in excl if t not in topics]
        if stray:
            return f"exclusive topic(s) {stray} are not among the sink's topics {list(topics)}"
        if rec.max_delivery_ns != NO_BOUND and rec.min_delivery_ns > rec.max_delivery_ns:
            return "min_delivery_time is above max_delivery_time"
        if not 1 <= rec.queue_limit <= MAX_QUEUE_LIMIT:
            return f"queue_limit {rec.queue_limit} is outside 1..{MAX_QUEUE_LIMIT}"
        return None

    def add_sink(self, info: M.messages.sink_info) -> SinkState:
        """Register a sink and queue what it is owed from the store (the join cut, or all of history)."""
        s = SinkState(info)
        self.sinks[s.id] = s
        self.topics.add(s.id, s.topics, s.exclusive)
        wanted = set(s.topics)
        for n in self.store:
            if not wanted.intersection(n.topics) or self.store.has_tomb(n.key, s.id):
                continue
            if n.entry_ns >= info.join_ns or info.history:
                if s.id in self.topics.recipients(n.topics):
                    self.enqueue(s, n)
        if s.exclusive:
            excl = set(s.exclusive)
            for n in self.store:
                if n.entry_ns >= info.join_ns and excl.intersection(n.topics):
                    keep = self.topics.recipients(n.topics)
                    for other in self.sinks.values():
                        if other.id not in keep and n.key in other.queue:
                            self.dequeue(other, n.key)
        self.event("sink_added", sink=short(s.id), partition=s.partition, serves=self.owners[s.partition] == self.me)
        return s

    def remove_sink(self, sid: Nid, broadcast: bool) -> None:
        """Forget a sink (it left or died); tell the other peers if we learnt it first-hand."""
        s = self.sinks.pop(sid, None)
        if s is None:
            return
        self.topics.remove(sid, s.topics)
        for key in s.queue.keys():
            self.unref(key)
        if broadcast:
            self.to_peers(M.messages.sink_left(self.me, sid))
        self.event("sink_removed", sink=short(sid))

    def on_leave(self, src: Nid, rec: M.messages.leave) -> None:
        """A client closes: a sink is forgotten by every peer; a source stops being monitored."""
        if rec.client != src:
            self.counters["unexpected"] += 1
            return
        kind = self.links.get(src)
        if kind == "sink":
            self.remove_sink(src, broadcast=True)
        elif kind == "source" and src in self.sources:
            self.sources[src].connected = False

    def on_sink_left(self, src: Nid, rec: M.messages.sink_left) -> None:
        """Another peer says a sink is gone."""
        self.remove_sink(rec.sink, broadcast=False)

    def judge_rates(self) -> None:
        """Raise the ``min_per_unit`` alarms that are due (the coordinator tells the source)."""
        now = self.now_ns
        tell = self.coordinator()
        for st in self.sources.values():
            if st.monitor is None or not st.connected:
                continue
            for a in st.monitor.due(now):
                self.counters["rate_alarms"] += 1
                self.event("rate_alarm", source=short(st.id), unit=a.unit, units=a.units, count=a.count)
                if tell and self.links.get(st.id) == "source":
                    self.send(st.id, M.messages.rate_alarm(self.me, st.id, a.unit, a.units, a.count, a.min_per_unit))
