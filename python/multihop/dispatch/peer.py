"""The dispatch peer as a sans-IO state machine: a message or a timer in, messages and timers out.

A :class:`PeerMachine` never touches a channel or a clock.  Its driver (the
live one in :mod:`.driver`, or the simulator in :mod:`.sim`) feeds it

* ``handle_message(src, record, now_ns)``: a decoded message from node ``src``
  (the first message of a channel names the node: ``client_hello`` /
  ``peer_hello``),
* ``handle_connected(node, now_ns)`` / ``handle_connect_failed(node, now_ns)``:
  the channel it asked for with :meth:`poll_connect` is up, or could not be made,
* ``handle_closed(node, now_ns)``: the channel to ``node`` closed (its process
  died or left),
* ``handle_timeout(now_ns)``: whenever :meth:`poll_timeout` has passed,

and drains :meth:`poll_transmit` (``(dst, record)`` to send, in order),
:meth:`poll_connect` (peers to bind to) and :meth:`poll_event` (what happened,
for logs and tests).  The parts: :mod:`.serving` (queues and deliveries),
:mod:`.replication` (lazy updates, snapshots, requests for data); this module
routes messages, keeps sources, sinks and members, and runs the timers.

Membership: a peer starts *joining* when others exist (given as ``peers``):
it binds to each, says ``peer_hello``, asks the lowest one for a snapshot and
becomes *active* (serving partitions) when the snapshot ends.  Heartbeats every
``heartbeat``; a peer silent for ``dead_after``, or whose channel closed, is
dead: the survivors recompute which peer serves each partition (rendezvous
hashing over the active peers) and the new owners deliver from their copies.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from multihop.dispatch.config import PeerConfig
from multihop.dispatch.ids import Nid, hex_id, short
from multihop.dispatch.news import StoredNews
from multihop.dispatch.partition import NO_PARTITION, choose_partition, owner_map
from multihop.dispatch.qos import MAX_QUEUE_LIMIT, NO_BOUND
from multihop.dispatch.replication import Replication
from multihop.dispatch.sinks import SinkState
from multihop.dispatch.sources import SourceState, source_error
from multihop.dispatch.topics import TopicError, check_declared, decode_topics, encode_topics
from multihop.dispatch.wire import CLIENT_KINDS, M, Record

__all__ = ["PeerMachine", "MAX_SKEW_NS"]

MAX_SKEW_NS = 1_000_000_000
"""A news stamped further than this in the future is taken as entering now."""

_PRUNE_NS = 250_000_000


class PeerMachine(Replication):
    """One dispatch peer (see the module docstring)."""

    def __init__(self, me: Nid, domain: Nid, config: PeerConfig, now_ns: int, peers: Iterable[Nid] = ()) -> None:
        existing = sorted(set(peers) - {me})
        super().__init__(me, domain, config, now_ns, active=not existing)
        self.init_replication()
        self.join_candidates = list(existing)
        self.join_target: Nid | None = None
        self.join_deadline: int | None = None
        self.leave_deadline: int | None = None
        self.next_prune = now_ns + _PRUNE_NS
        self.hello_sent: set[Nid] = set()
        self.gone: set[Nid] = set()  # peers that left gracefully (their last updates may still come)
        self._timeout: int | None = None
        self._timeout_valid = False  # poll_timeout's answer holds until the next input
        for peer in existing:
            self.connect(peer)
        if not existing:
            self.event("active", why="first peer of the domain")
        self._handlers: dict[str, Callable[[Nid, Record], None]] = {
            "client_hello": self.on_client_hello, "source_info": self.on_source_info, "news": self.on_news,
            "sink_info": self.on_sink_info, "sink_ack": self.on_sink_ack, "leave": self.on_leave,
            "peer_hello": self.on_peer_hello, "heartbeat": self.on_heartbeat, "queue_updates": self.on_queue_updates,
            "stored_news": self.on_stored_news, "snapshot_request": self.on_snapshot_request,
            "snapshot_end": self.on_snapshot_end, "news_request": self.on_news_request,
            "request_data": self.on_request_data, "node_unknown": self.on_node_unknown,
            "sink_left": self.on_sink_left, "peer_leave": self.on_peer_leave,
            "status_request": self.on_status_request, "shutdown": self.on_shutdown,
        }

    # ---- inputs ----------------------------------------------------------

    def handle_message(self, src: Nid, rec: Record, now_ns: int) -> None:
        """Feed one message from node ``src``."""
        self._timeout_valid = False
        self.now_ns = max(self.now_ns, now_ns)
        handler = self._handlers.get(rec.name)
        if handler is None:
            self.counters["unexpected"] += 1
            self.event("unexpected", src=short(src), message=rec.name)
            return
        if self.links.get(src) == "peer" and src not in self.gone:
            self.members.heard(src, self.now_ns)
        handler(src, rec)
        self.pump_dirty()

    def handle_connected(self, node: Nid, now_ns: int) -> None:
        """The channel to peer ``node`` we asked for is up."""
        self._timeout_valid = False
        self.now_ns = max(self.now_ns, now_ns)
        self.links[node] = "peer"
        self.say_hello(node)
        if not self.active and self.join_target is None:
            self.request_snapshot(node)

    def handle_connect_failed(self, node: Nid, now_ns: int) -> None:
        """A peer we tried to bind to is gone."""
        self._timeout_valid = False
        self.now_ns = max(self.now_ns, now_ns)
        if node in self.join_candidates:
            self.join_candidates.remove(node)
        if node == self.join_target:
            self.next_join_target()
        elif not self.active and not self.join_candidates and self.join_target is None:
            self.become_active("no other peer could be reached")

    def handle_closed(self, node: Nid, now_ns: int) -> None:
        """The channel to ``node`` closed: a dead peer, or a client that went away."""
        self._timeout_valid = False
        self.now_ns = max(self.now_ns, now_ns)
        kind = self.links.pop(node, None)
        self.hello_sent.discard(node)
        if kind == "peer":
            self.declare_dead(node, "its channel closed")
            if node == self.join_target:
                self.next_join_target()
        elif kind == "sink" and node in self.sinks:
            self.remove_sink(node, broadcast=True)
        elif kind == "source" and node in self.sources:
            self.sources[node].connected = False
        self.pump_dirty()

    def handle_timeout(self, now_ns: int) -> None:
        """Run every timer due by ``now_ns``."""
        self._timeout_valid = False
        self.now_ns = now = max(self.now_ns, now_ns)
        m = self.members
        if now >= m.next_beat_ns:
            m.next_beat_ns = now + m.heartbeat_ns
            self.beat()
        for peer in m.silent(now):
            self.declare_dead(peer, "no heartbeat")
        due = self.updates_deadline()
        if due is not None and now >= due:
            self.flush_updates()
        self.judge_rates()
        for st in self.sources.values():
            if st.gap_due is not None and now >= st.gap_due:
                self.ask_missing(st)
        if self.join_deadline is not None and now >= self.join_deadline:
            self.next_join_target()
        if now >= self.next_prune:
            self.next_prune = now + _PRUNE_NS
            self.expire_copies()
            self.store.prune(now)
        if self.leave_deadline is not None and (now >= self.leave_deadline or not self.inflight_total()):
            self.finish_leaving()
        self.dirty.update(sid for sid, s in self.sinks.items() if self.serves(s))
        self.pump_dirty()

    # ---- outputs ---------------------------------------------------------

    def poll_transmit(self) -> tuple[Nid, Record] | None:
        """The next message to send, ``(destination node, record)``, or None."""
        return self._out.popleft() if self._out else None

    def poll_connect(self) -> Nid | None:
        """The next peer to bind to, or None."""
        return self._connects.popleft() if self._connects else None

    def poll_event(self) -> tuple[str, dict[str, Any]] | None:
        """The next event (name, fields), or None."""
        return self._events.popleft() if self._events else None

    def poll_timeout(self) -> int | None:
        """When :meth:`handle_timeout` must next run (absolute ns), or None if only messages can wake us."""
        if self._timeout_valid:
            return self._timeout
        self._timeout = self._compute_timeout()
        self._timeout_valid = True
        return self._timeout

    def _compute_timeout(self) -> int | None:
        now = self.now_ns
        times = [self.members.next_deadline(), self.next_prune]
        for t in (self.updates_deadline(), self.join_deadline, self.leave_deadline):
            if t is not None:
                times.append(t)
        for st in self.sources.values():
            if st.gap_due is not None:
                times.append(st.gap_due)
            if st.monitor is not None and st.connected:
                d = st.monitor.deadline()
                if d is not None:
                    times.append(d)
        for s in self.sinks.values():
            if self.serves(s):
                t = s.queue.next_time(now)
                if t is not None:
                    times.append(t)
        return min(times)

    # ---- clients ---------------------------------------------------------

    def on_client_hello(self, src: Nid, rec: Record) -> None:
        """A source, sink, relay or administrator opened a channel: welcome it (or refuse another domain's)."""
        if rec.domain != self.domain:
            self.send(src, M.messages.refused(self.me, rec.client, f"this peer belongs to domain {hex_id(self.domain)}, "
                                                                   f"not {hex_id(rec.domain)}"))
            self.counters["refused"] += 1
            return
        self.links[src] = CLIENT_KINDS[rec.kind]
        topics = encode_topics(self.cfg.topics) if self.cfg.topics is not None else ""
        self.send(src, M.messages.welcome(self.me, self.domain, self.members.epoch, self.cfg.window,
                                          self.member_list(), topics))

    def member_list(self) -> list[Record]:
        """The members as the wire's ``member`` structs."""
        return [M.member(n, a) for n, a in self.members.listing()]

    def refuse(self, src: Nid, client: Nid, reason: str) -> None:
        """Tell a client why we refused what it sent."""
        self.counters["refused"] += 1
        self.send(src, M.messages.refused(self.me, client, reason[:1000]))

    def on_source_info(self, src: Nid, rec: Record) -> None:
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

    def on_news(self, src: Nid, rec: Record) -> None:
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
            targets = [self.sinks[s] for s in self.topics.recipients(n.topics)
                       if s not in tombs and self.sinks[s].info.join_ns <= n.entry_ns]
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

    def on_sink_info(self, src: Nid, rec: Record) -> None:
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
                info = M.messages.sink_info(*(part if f == "partition" else getattr(rec, f) for f in rec._fields))
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

    def sink_error(self, rec: Record) -> str | None:
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

    def add_sink(self, info: Record) -> SinkState:
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

    def on_leave(self, src: Nid, rec: Record) -> None:
        """A client closes: a sink is forgotten by every peer; a source stops being monitored."""
        if rec.client != src:
            self.counters["unexpected"] += 1
            return
        kind = self.links.get(src)
        if kind == "sink":
            self.remove_sink(src, broadcast=True)
        elif kind == "source" and src in self.sources:
            self.sources[src].connected = False

    def on_sink_left(self, src: Nid, rec: Record) -> None:
        """Another peer says a sink is gone."""
        self.remove_sink(rec.sink, broadcast=False)

    # ---- peers -----------------------------------------------------------

    def say_hello(self, node: Nid) -> None:
        """Send our ``peer_hello`` on a peer channel (once)."""
        if node not in self.hello_sent:
            self.hello_sent.add(node)
            self.send(node, M.messages.peer_hello(self.me, self.domain, self.active))

    def on_peer_hello(self, src: Nid, rec: Record) -> None:
        """A peer opened a channel to us (or answered ours)."""
        if rec.domain != self.domain or rec.peer != src:
            self.refuse(src, rec.peer, "peer of another domain (or not the node it claims)")
            return
        self.links[src] = "peer"
        self.say_hello(src)
        if self.members.heard(src, self.now_ns, rec.active):
            self.membership_changed(f"peer {short(src)} said hello")

    def on_heartbeat(self, src: Nid, rec: Record) -> None:
        """A peer is alive (and active or not)."""
        if self.links.get(src) != "peer" or rec.peer != src:
            self.counters["unexpected"] += 1
            return
        if src in self.gone:
            return
        if self.members.heard(src, self.now_ns, rec.active, rec.load):
            self.membership_changed(f"peer {short(src)} is {'active' if rec.active else 'joining'}")

    def on_peer_leave(self, src: Nid, rec: Record) -> None:
        """A peer leaves gracefully: its partitions go to the others now."""
        if rec.peer != src:
            return
        self.gone.add(src)
        if self.members.remove(src):
            self.event("peer_left", peer=short(src))
            self.membership_changed(f"peer {short(src)} left")

    def declare_dead(self, peer: Nid, why: str) -> None:
        """A peer is dead: forget it; the survivors take its partitions over."""
        if self.members.remove(peer):
            self.counters["peers_dead"] += 1
            self.event("peer_dead", peer=short(peer), why=why)
            self.membership_changed(f"peer {short(peer)} is dead ({why})")

    def membership_changed(self, why: str) -> None:
        """Recompute who serves each partition; start serving what we took over; tell the clients."""
        old = self.owners
        self.owners = owner_map(self.cfg.partitions, self.members.active_ids())
        gained = [p for p, (a, b) in enumerate(zip(old, self.owners)) if b == self.me and a != self.me]
        if gained:
            sinks = [s for s in self.sinks.values() if s.partition in set(gained)]
            self.event("took_over", partitions=len(gained), sinks=len(sinks), why=why)
            for s in sinks:
                self.dirty.add(s.id)
        self.to_clients(M.messages.members(self.me, self.members.epoch, self.member_list()))

    def beat(self) -> None:
        """Send our heartbeat to every peer."""
        load = sum(1 for s in self.sinks.values() if self.owners[s.partition] == self.me)
        self.to_peers(M.messages.heartbeat(self.me, self.active, load, self.members.epoch))

    def request_snapshot(self, node: Nid) -> None:
        """Ask ``node`` for its state (joining)."""
        self.join_target = node
        self.join_deadline = self.now_ns + self.cfg.ns("join_timeout")
        self.send(node, M.messages.snapshot_request(self.me))

    def next_join_target(self) -> None:
        """The snapshot did not come: ask another peer, or go active alone."""
        if self.join_target in self.join_candidates:
            self.join_candidates.remove(self.join_target)
        self.join_target = None
        self.join_deadline = None
        if self.active:
            return
        for node in self.join_candidates:
            if self.links.get(node) == "peer":
                self.request_snapshot(node)
                return
        if not self.join_candidates:
            self.become_active("no peer could give a snapshot")

    def on_snapshot_end(self, src: Nid, rec: Record) -> None:
        """The snapshot we asked for is complete: go active."""
        if src == self.join_target and not self.active:
            self.become_active(f"snapshot from {short(src)}: {rec.sources} sources, {rec.sinks} sinks, {rec.stored} news")

    def become_active(self, why: str) -> None:
        """Start serving partitions."""
        self.join_target = None
        self.join_deadline = None
        self.members.set_active(True)
        self.event("active", why=why)
        self.membership_changed(why)
        self.beat()

    # ---- leaving, administration -----------------------------------------

    def leave(self) -> None:
        """Leave gracefully: stop delivering, hand our updates over, tell everyone; stop once acks are in."""
        self._timeout_valid = False
        if self.leaving:
            return
        self.leaving = True
        self.flush_updates()
        self.to_peers(M.messages.peer_leave(self.me))
        self.to_clients(M.messages.peer_leave(self.me))
        self.leave_deadline = self.now_ns + self.cfg.ns("dead_after")
        self.event("leaving")

    def inflight_total(self) -> int:
        """News delivered by us and not acknowledged yet."""
        return sum(len(s.inflight) for s in self.sinks.values() if s.reliable)

    def finish_leaving(self) -> None:
        """The last updates go out; the driver may stop once it has sent them."""
        self.flush_updates()
        self.leave_deadline = None
        self.stopped = True
        self.event("stopped")

    def on_status_request(self, src: Nid, rec: Record) -> None:
        """Answer ``multihop dispatch status`` (without the per-sink and per-source details if they do not fit)."""
        text = self.status_json()
        if len(text.encode()) > 1_040_000:
            st = self.status()
            st["sinks"] = {"count": len(st["sinks"]), "truncated": True}
            st["sources"] = {"count": len(st["sources"]), "truncated": True}
            text = json.dumps(st, sort_keys=True, default=str)
        self.send(src, M.messages.status_reply(self.me, text))

    def on_shutdown(self, src: Nid, rec: Record) -> None:
        """``multihop dispatch down``: leave gracefully."""
        self.event("shutdown", by=short(src))
        self.leave()

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

    def status(self) -> dict[str, Any]:
        """This peer's state and counters (``multihop dispatch status``)."""
        owned: dict[str, int] = {}
        for o in self.owners:
            if o is not None:
                owned[hex_id(o)] = owned.get(hex_id(o), 0) + 1
        out = {
            "peer": hex_id(self.me), "domain": hex_id(self.domain), "active": self.active, "leaving": self.leaving,
            "members": [{"id": hex_id(n), "active": a} for n, a in self.members.listing()],
            "epoch": self.members.epoch, "partitions": owned, "stored": len(self.store),
            "sources": {hex_id(k): v.status() for k, v in self.sources.items()},
            "sinks": {hex_id(k): dict(v.status(), served_here=self.serves(v)) for k, v in self.sinks.items()},
            "counters": dict(self.counters),
        }
        if self.status_hook is not None:
            out["driver"] = self.status_hook()
        return out
