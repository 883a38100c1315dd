"""A peer's clients: hellos, sources and their news, sinks and their registrations.

Part of :class:`~multihop.news.peer.PeerMachine` (a mixin over
:class:`~multihop.news.replication.Replication`): it welcomes clients (or
refuses another domain's, and impostors), registers sources (QoS checked
again: a client may be forged; answered with the registration) and takes their
news (every field checked, the QoS the registered one, sequence gaps, rate
schedule and monitor, acks), takes relayed news of other domains (bounded in
what they may claim), registers sinks (the JOIN and its load-sharing choice,
registrations from peers, attaches) and forgets them, and judges the
sources' ``min_per_unit``.  A refused frame goes through
:meth:`~.peer_state.PeerState.bad_frame`: counted, told to the client, and the
client cut off when it broke the protocol.
"""

from __future__ import annotations

from multihop.news.ids import Nid, hex_id, short
from multihop.news.news import StoredNews
from multihop.news.partition import NO_PARTITION, choose_partition
from multihop.news.replication import Replication
from multihop.news.sinks import SinkState
from multihop.news.sources import SourceState
from multihop.news.topics import decode_topics, encode_topics
from multihop.news.validate import MAX_SKEW_NS, hello_error, same_qos, seq_error, sink_info_error, source_info_error, topics_error
from multihop.news.wire import CLIENT_KINDS, M

__all__ = ["Clients", "MAX_SKEW_NS"]


class Clients(Replication):
    """What a peer does with sources, sinks and relays (see the module docstring)."""

    def on_client_hello(self, src: Nid, rec: M.messages.client_hello) -> None:
        """A source, sink, relay or administrator opened a channel: welcome it, or refuse it and cut it off.

        Refused: another domain's hello, one whose proof is not the secret of the id it claims,
        and a second hello on a channel that names another kind of node.
        """
        why = hello_error(rec.client, rec.domain, bytes(rec.proof), self.domain, self.me)
        if why is None and rec.client != src:
            why = "the hello names another node than its channel's"
        kind = CLIENT_KINDS[rec.kind]
        old = self.links.get(src)
        if why is None and old is not None and old != kind:
            why = f"this channel is a {old}'s; it cannot become a {kind}'s"
        if why is not None:
            self.bad_frame(src, rec.name, why, about=rec.client, close=True)
            return
        self.links[src] = kind
        topics = encode_topics(self.cfg.topics) if self.cfg.topics is not None else ""
        self.send(src, M.messages.welcome(self.me, self.domain, self.members.epoch, self.cfg.window, self.member_list(), topics))

    def member_list(self) -> list[M.member]:
        """The members as the wire's ``member`` structs."""
        return [M.member(n, a) for n, a in self.members.listing()]

    def on_source_info(self, src: Nid, rec: M.messages.source_info) -> None:
        """A source registers (its QoS), or a peer describes one (snapshot, request for data).

        A source registers only itself (its channel is bound to its id), with a QoS the
        peers accept; its QoS is then fixed: a registration with another one is refused.
        An accepted registration is answered with this peer's ``source_info`` of it (the
        source waits for every peer's answer before it is made).
        """
        err = source_info_error(rec, self.now_ns)
        if self.links.get(src) == "peer":
            if err is not None:
                self.bad_frame(src, rec.name, err)
                return
            self.asked.pop(rec.source, None)
            if rec.source not in self.sources:
                described = self.sources[rec.source] = SourceState(rec, rec.source, self.cfg.ns("rate_grace"))
                described.next_seq = rec.next_seq
            return
        if rec.source != src:
            self.bad_frame(src, rec.name, f"a source registers only itself ({hex_id(src)}), not {hex_id(rec.source)}", close=True)
            return
        if err is not None:
            self.bad_frame(src, rec.name, f"source QoS refused: {err}")
            return
        self.asked.pop(src, None)
        st = self.sources.get(src)
        if st is not None and st.info is not None and not same_qos(st.info, rec):
            i = st.info
            self.bad_frame(
                src,
                rec.name,
                f"source {hex_id(src)} is registered with priority {i.priority}, unit {i.unit_ns} ns, "
                f"min/max per unit {i.min_per_unit}/{i.max_per_unit}, reliable={bool(i.reliable)}, origin {i.origin_ns} ns; "
                "a source's QoS does not change",
            )
            return
        if st is None or st.info is None:
            old = st
            st = self.sources[src] = SourceState(rec, src, self.cfg.ns("rate_grace"))
            if old is not None:
                st.next_seq = old.next_seq
        st.connected = True
        if rec.next_seq > st.next_seq:
            first = st.next_seq
            st.next_seq = rec.next_seq
            if self.random_peer() is not None or not self.active:  # a joining peer's peers have the news, spoken yet or not
                self.want(st, first, rec.next_seq - 1)
        self.send(src, st.describe())

    def on_news(self, src: Nid, rec: M.messages.news) -> None:
        """A news from a source (or, from another domain, from a relay): every field checked, its QoS the source's.

        A source sends only its own news, numbered up to :data:`~.validate.MAX_SEQ`; the
        priority and origin are those it registered (a news claiming others is refused, and
        its number is used up).  A relay's news keep their foreign id and priority, bounded:
        never a source of this domain, never this domain as origin, and per foreign source
        one origin and one priority (its first news here fixes them, as a registration would).
        """
        err = seq_error(rec.seq)
        if err is not None:
            self.bad_frame(src, rec.name, f"news of {hex_id(rec.source)}: {err}")
            return
        key = (rec.source, rec.seq)
        if self.links.get(src) == "relay":
            st = self.sources.get(rec.source)
            why = self.relayed_news_error(rec, st) or topics_error(rec.topics, self.cfg.declared, "news")
            if why is not None:
                if st is not None:
                    st.rejected += 1
                self.bad_frame(src, rec.name, f"news {rec.seq} of {hex_id(rec.source)}: {why}")
                return
            if st is None:
                st = self.sources[rec.source] = SourceState(None, rec.source, 0, foreign=True)
                st.origin, st.priority = rec.origin, rec.priority
            st.last_ns = self.now_ns
            if key in self.store:
                st.duplicates += 1
                return
            priority = rec.priority
        else:  # a source: MAY_SEND lets no other kind of node send news
            if rec.source != src:
                self.bad_frame(src, rec.name, f"a source sends only its own news ({hex_id(src)}), not {hex_id(rec.source)}'s", close=True)
                return
            st = self.sources.get(src)
            if st is None or st.info is None:
                self.bad_frame(src, rec.name, "news from a source that did not register (send source_info first)")
                return
            if rec.seq < st.next_seq or key in self.store:
                st.duplicates += 1
                return
            if rec.seq > st.next_seq:
                self.want(st, st.next_seq, rec.seq - 1)
            st.next_seq = rec.seq + 1  # used up, even by a news refused below: the source did send it
            if st.reliable:
                if st.next_seq - st.acked >= self.cfg.ack_every:
                    st.acked = st.next_seq
                    self.send(src, M.messages.news_ack(self.me, src, st.next_seq))
                else:
                    self.acks_due.add(src)
                    if self.updates_since is None:
                        self.updates_since = self.now_ns
            priority = st.info.priority
            why = None
            if rec.priority != priority:
                why = f"priority {rec.priority} is not the priority {priority} its source registered"
            elif rec.origin != self.domain:
                why = f"origin {hex_id(rec.origin)} is not this domain (a source's news enter here)"
            elif rec.entry_ns < st.info.origin_ns:
                why = f"entry time {rec.entry_ns} ns is before its source registered ({st.info.origin_ns} ns)"
            if why is not None:
                st.rejected += 1
                self.bad_frame(src, rec.name, f"news {rec.seq}: {why}")
                return
        why = topics_error(rec.topics, self.cfg.declared, "news")
        if why is not None:
            st.rejected += 1
            self.bad_frame(src, rec.name, f"news {rec.seq}: {why}")
            return
        topics = decode_topics(rec.topics)
        entry = rec.entry_ns if rec.entry_ns <= self.now_ns + MAX_SKEW_NS else self.now_ns
        release = st.schedule.release(entry) if st.schedule is not None else entry
        if st.monitor is not None:
            st.monitor.count(entry)
        st.received += 1
        self.counters["news"] += 1
        n = StoredNews(key, priority, entry, release, rec.origin, topics, rec.topics, bytes(rec.payload))
        if st.missing and min(st.missing) < rec.seq:
            st.parked.append(n)  # after a gap: waits for the missing news (order per source)
            self.counters["parked"] += 1
        else:
            self.accept(n)

    def relayed_news_error(self, rec: M.messages.news, st: SourceState | None) -> str | None:
        """Why a relay may not bring this news, or None (see :meth:`on_news`)."""
        if rec.origin == self.domain:
            return "a relay brings other domains' news, not this domain's own"
        if st is None:
            return None
        if not st.foreign:
            return f"{hex_id(rec.source)} is a source of this domain: a relay cannot speak for it"
        if st.origin is not None and rec.origin != st.origin:
            return f"origin {hex_id(rec.origin)} is not the origin {hex_id(st.origin)} of this source's news"
        if st.priority is not None and rec.priority != st.priority:
            return f"priority {rec.priority} is not the priority {st.priority} of this source's news"
        return None

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
        """A sink's JOIN (partition NO_PARTITION: we choose), its registration from a peer, or its attach.

        A sink registers only itself; an unknown sink's registration is checked whole
        (:func:`~.validate.sink_info_error`); a known sink keeps its registration, and may
        attach only with the partition it was given.
        """
        from_sink = self.links.get(src) == "sink"
        if from_sink and rec.sink != src:
            self.bad_frame(src, rec.name, f"a sink registers only itself ({hex_id(src)}), not {hex_id(rec.sink)}", close=True)
            return
        known = self.sinks.get(rec.sink)
        if known is None:
            err = sink_info_error(rec, self.now_ns, self.cfg.partitions, NO_PARTITION, self.cfg.declared)
            if err is not None:
                self.bad_frame(src, rec.name, f"sink refused: {err}")
                return
        elif rec.partition not in (NO_PARTITION, known.partition):
            self.bad_frame(src, rec.name, f"sink {hex_id(rec.sink)} has partition {known.partition}, not {rec.partition}")
            return
        self.asked.pop(rec.sink, None)
        if rec.partition == NO_PARTITION:
            if not from_sink:
                self.bad_frame(src, rec.name, "only the sink itself sends its JOIN")
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
            known = self.add_sink(rec)
        if from_sink:
            known.attached = True
            self.dirty.add(known.id)

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
            self.bad_frame(src, rec.name, f"a client says only its own leave ({hex_id(src)}), not {hex_id(rec.client)}'s", close=True)
            return
        kind = self.links.get(src)
        if kind == "sink":
            self.remove_sink(src, broadcast=True)
        elif kind == "source" and src in self.sources:
            self.sources[src].connected = False

    def on_sink_left(self, src: Nid, rec: M.messages.sink_left) -> None:
        """Another peer says a sink is gone."""
        if rec.peer != src:
            self.bad_frame(src, rec.name, "a sink_left names another peer than its channel's")
            return
        self.remove_sink(rec.sink, broadcast=False)

    def forget_foreign_sources(self) -> None:
        """Forget the foreign sources no news came from for ``history`` (what relays bring is bounded in memory too)."""
        horizon = self.now_ns - self.cfg.ns("history")
        for sid in [sid for sid, st in self.sources.items() if st.foreign and st.last_ns < horizon]:
            del self.sources[sid]
            self.counters["foreign_sources_forgotten"] += 1

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
