"""Serving sinks: put news in their queues, deliver the eligible ones, take acknowledgements.

Part of :class:`~multihop.news.peer.PeerMachine` (a mixin over
:class:`~multihop.news.peer_state.PeerState`).  Every peer queues every
news for every interested sink; only the peer serving the sink's partition
delivers, highest priority first, at most ``window`` unacknowledged, and
drops (and tells the sink) what expired.
"""

from __future__ import annotations

from multihop.news.ids import NewsKey, Nid
from multihop.news.news import StoredNews
from multihop.news.peer_state import PeerState
from multihop.news.sinks import NOTICE_KINDS, SinkState
from multihop.news.wire import M

__all__ = ["Serving"]

EXPIRED, OVERFLOW = NOTICE_KINDS


class Serving(PeerState):
    """Queueing and delivery (see the module docstring)."""

    def enqueue(self, sink: SinkState, news: StoredNews) -> None:
        """Queue ``news`` for ``sink`` (the overflow policy may drop one news)."""
        key = news.key
        if key in sink.inflight:
            return
        victim = sink.queue.push(key, news.priority, news.entry_ns, sink.eligible_at(news.release_ns, news.entry_ns), sink.expires_at(news.entry_ns))
        if victim != key and key in sink.queue:
            news.refs += 1
        if victim is not None:
            if victim != key:
                self.unref(victim)
            self.counters["overflowed"] += 1
            if self.serves(sink):
                sink.note(OVERFLOW, victim)
        self.dirty.add(sink.id)

    def unref(self, key: NewsKey) -> None:
        """One queue fewer holds news ``key``."""
        n = self.store.get(key)
        if n is not None and n.refs > 0:
            n.refs -= 1

    def dequeue(self, sink: SinkState, key: NewsKey) -> bool:
        """Remove news ``key`` from ``sink``'s queue (a lazy update said it was delivered); True if it was there."""
        if sink.queue.remove(key):
            self.unref(key)
            return True
        return sink.inflight.pop(key, None) is not None

    def pump(self, sink: SinkState) -> None:
        """Deliver what ``sink`` may have now, if this peer serves it; tell it what expired or overflowed."""
        if not self.serves(sink):
            return
        now = self.now_ns
        for gone in sink.queue.pop_expired(now):
            self.unref(gone)
            sink.note(EXPIRED, gone)
            self.counters["expired"] += 1
        window = self.cfg.window
        store = self.store
        while len(sink.inflight) < window:
            key = sink.queue.next_eligible(now)
            if key is None:
                break
            sink.queue.remove(key)
            n = store.get(key)
            if n is None:  # cannot happen: a queued news is referenced
                self.counters["lost_from_store"] += 1
                continue
            n.refs -= 1
            self.send(sink.id, n.deliver())
            sink.inflight[key] = now
            sink.delivered += 1
            self.counters["delivered"] += 1
            if not sink.reliable:
                self.queue_update(key, sink.id)
        if len(sink.inflight) < window:
            for rec in sink.take_notices():
                self.send(sink.id, rec)

    def pump_dirty(self) -> None:
        """Pump every sink marked dirty."""
        while self.dirty:
            sid = self.dirty.pop()
            sink = self.sinks.get(sid)
            if sink is not None:
                self.pump(sink)

    def on_sink_ack(self, src: Nid, rec: M.messages.sink_ack) -> None:
        """A sink acknowledged news we delivered: free its window; for a reliable sink, tell the other peers."""
        if src != rec.sink:
            self.bad_frame(src, rec.name, "a sink acknowledges only its own news", close=True)
            return
        sink = self.sinks.get(rec.sink)
        if sink is None:
            self.counters["unexpected"] += 1
            return
        for nid_ in rec.ids:
            key = (nid_.source, nid_.seq)
            if sink.inflight.pop(key, None) is not None:
                sink.acked += 1
                if sink.reliable:
                    self.queue_update(key, sink.id)
            elif sink.reliable and self.dequeue(sink, key):
                self.queue_update(key, sink.id)  # delivered by the peer serving it before us
        self.dirty.add(sink.id)

    def expire_copies(self) -> None:
        """Drop expired news from the queues of sinks this peer does not serve (replicas forget them silently)."""
        now = self.now_ns
        for sink in self.sinks.values():
            if not self.serves(sink):
                for key in sink.queue.pop_expired(now):
                    self.unref(key)
