"""The dispatch peer as a sans-IO state machine: a message or a timer in, messages and timers out.

A :class:`PeerMachine` never touches a channel or a clock.  Its driver (the
live one in :mod:`.driver`, or the simulator in :mod:`.sim`) feeds it

* ``admit(record)``: whether a fresh channel whose first message is this
  hello may be named after the node it claims (a ``refused`` to write on that
  channel before closing it, or None),
* ``handle_message(src, record, now_ns)``: a decoded message from node ``src``
  (the first message of a channel names the node: ``client_hello`` /
  ``peer_hello``),
* ``handle_connected(node, now_ns)`` / ``handle_connect_failed(node, now_ns)``:
  the channel it asked for with :meth:`poll_connect` is up, or could not be made,
* ``handle_closed(node, now_ns)``: the channel to ``node`` closed (its process
  died or left),
* ``handle_timeout(now_ns)``: whenever :meth:`poll_timeout` has passed,

and drains :meth:`poll_transmit` (``(dst, record)`` to send, in order),
:meth:`poll_connect` (peers to bind to), :meth:`poll_close` (nodes whose
channels to cut, after what was queued for them, then ``handle_closed``) and
:meth:`poll_event` (what happened, for logs and tests).

Nothing a node sends can make the machine raise or queue a message that
cannot be encoded: each message is taken only from the kinds of node that
send it (:data:`~.validate.MAY_SEND`) and each field is checked
(:mod:`.validate`); a bad frame is counted (``bad_frames``, ``bad_<message>``
in the status), refused to a client with the reason, and a client that breaks
the protocol (another node's id, a message of another kind of node) is cut off.  The parts: :mod:`.clients` (sources, sinks, relays),
:mod:`.serving` (queues and deliveries), :mod:`.replication` (lazy updates,
snapshots, requests for data); this module routes messages, keeps the
members, runs the timers, leaves and answers the administrator.

Membership: a peer starts *joining* when others exist (given as ``peers``):
it binds to each, says ``peer_hello``, asks the lowest one for a snapshot and
becomes *active* (serving partitions) when the snapshot ends.  Heartbeats every
``heartbeat``; a peer silent for ``dead_after``, or whose channel closed, is
dead: the survivors recompute which peer serves each partition (rendezvous
hashing over the active peers) and the new owners deliver from their copies.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from multihop.news.clients import Clients
from multihop.news.config import PeerConfig
from multihop.news.ids import Nid, hex_id, short
from multihop.news.partition import owner_map
from multihop.news.validate import MAX_MEMBERS, MAX_SKEW_NS, MAY_SEND, hello_error, reason
from multihop.news.wire import Handler, M, Record, route

__all__ = ["PeerMachine", "MAX_SKEW_NS"]

_PRUNE_NS = 250_000_000


class PeerMachine(Clients):
    """One dispatch peer (see the module docstring)."""

    def __init__(self, me: Nid, domain: Nid, config: PeerConfig, now_ns: int, peers: Iterable[Nid] = (), secret: bytes = b"") -> None:
        existing = sorted(set(peers) - {me})
        super().__init__(me, domain, config, now_ns, active=not existing, secret=secret)
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
        m = M.messages
        self._handlers: dict[str, Handler] = dict(
            (
                route(m.client_hello, self.on_client_hello),
                route(m.source_info, self.on_source_info),
                route(m.news, self.on_news),
                route(m.sink_info, self.on_sink_info),
                route(m.sink_ack, self.on_sink_ack),
                route(m.leave, self.on_leave),
                route(m.peer_hello, self.on_peer_hello),
                route(m.heartbeat, self.on_heartbeat),
                route(m.queue_updates, self.on_queue_updates),
                route(m.stored_news, self.on_stored_news),
                route(m.snapshot_request, self.on_snapshot_request),
                route(m.snapshot_end, self.on_snapshot_end),
                route(m.news_request, self.on_news_request),
                route(m.request_data, self.on_request_data),
                route(m.node_unknown, self.on_node_unknown),
                route(m.sink_left, self.on_sink_left),
                route(m.peer_leave, self.on_peer_leave),
                route(m.status_request, self.on_status_request),
                route(m.shutdown, self.on_shutdown),
            )
        )

    # ---- inputs ----------------------------------------------------------

    def admit(self, rec: Record) -> M.messages.refused | None:
        """Whether a fresh channel whose first message is the hello ``rec`` may be named after the node it claims.

        None: the driver names the channel and feeds ``rec`` to :meth:`handle_message`.
        Otherwise the ``refused`` to write on that channel before closing it (counted):
        a hello for another domain, one whose proof is not the secret of the id it
        claims, one naming a node that already has a live channel to us (a source's
        id is bound to the channel that registered it: a second one is an impostor or a
        stale duplicate, not a second voice of the same node; two peers binding to each
        other at once are the one exception), or a peer beyond the domain's 64.
        """
        if isinstance(rec, M.messages.client_hello):
            node, domain, proof = rec.client, rec.domain, rec.proof
        elif isinstance(rec, M.messages.peer_hello):
            node, domain, proof = rec.peer, rec.domain, rec.proof
        else:
            return None
        why = hello_error(node, domain, bytes(proof), self.domain, self.me)
        kind = self.links.get(node)
        if why is None and kind is not None and (rec.name == "client_hello" or kind != "peer"):
            why = f"id {hex_id(node)} already has a channel to this peer (a node speaks on one channel)"
        if why is None and rec.name == "peer_hello" and node not in self.members.others and len(self.members.others) + 1 >= MAX_MEMBERS:
            why = f"the domain has its {MAX_MEMBERS} peers"
        if why is None:
            return None
        self._timeout_valid = False
        self.counters["bad_frames"] += 1
        self.counters[f"bad_{rec.name}"] += 1
        self.counters["refused"] += 1
        self.event("bad_frame", src=short(node), kind=None, message=rec.name, why=why, total=self.counters["bad_frames"])
        return M.messages.refused(self.me, node, reason(f"{rec.name} refused: {why}"))

    def handle_message(self, src: Nid, rec: Record, now_ns: int) -> None:
        """Feed one message from node ``src`` (taken only if nodes of its kind send it; see :data:`~.validate.MAY_SEND`)."""
        self._timeout_valid = False
        self.now_ns = max(self.now_ns, now_ns)
        if src in self.closing:
            self.counters["dropped_after_cut"] += 1
            return
        kind = self.links.get(src)
        handler = self._handlers.get(rec.name)
        if kind is None:
            if rec.name not in ("client_hello", "peer_hello"):
                self.bad_frame(src, rec.name, "the first message on a channel is a hello", close=True)
                return
        elif handler is None or rec.name not in MAY_SEND[kind]:
            self.bad_frame(src, rec.name, f"a {kind} does not send {rec.name}", close=kind != "peer")
            return
        assert handler is not None  # both hellos have handlers
        if kind == "peer" and src not in self.gone:
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
        self.closing.discard(node)
        self.answered.pop(node, None)
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
            self.forget_foreign_sources()
            for node in [n for n, t in self.asked.items() if now - t >= 10_000_000_000]:
                del self.asked[node]  # asked long ago and never answered: may be asked again, and the table stays bounded
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

    def poll_close(self) -> Nid | None:
        """The next node whose channels to cut (after sending what is queued for it; then call :meth:`handle_closed`), or None."""
        return self._closes.popleft() if self._closes else None

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

    # ---- peers -----------------------------------------------------------

    def say_hello(self, node: Nid) -> None:
        """Send our ``peer_hello`` on a peer channel (once)."""
        if node not in self.hello_sent:
            self.hello_sent.add(node)
            self.send(node, M.messages.peer_hello(self.me, self.domain, self.active, self.secret))

    def on_peer_hello(self, src: Nid, rec: M.messages.peer_hello) -> None:
        """A peer opened a channel to us (or answered ours): the domain, its id's proof, and room for it are checked."""
        why = hello_error(rec.peer, rec.domain, bytes(rec.proof), self.domain, self.me)
        if why is None and rec.peer != src:
            why = "the hello names another node than its channel's"
        if why is None and src not in self.members.others and len(self.members.others) + 1 >= MAX_MEMBERS:
            why = f"the domain has its {MAX_MEMBERS} peers"
        if why is not None:
            if self.links.get(src) == "peer":
                self.declare_dead(src, f"its hello was refused: {why}")
            self.bad_frame(src, rec.name, why, about=rec.peer, close=True)
            return
        self.links[src] = "peer"
        self.say_hello(src)
        if self.members.heard(src, self.now_ns, rec.active):
            self.membership_changed(f"peer {short(src)} said hello")

    def on_heartbeat(self, src: Nid, rec: M.messages.heartbeat) -> None:
        """A peer is alive (and active or not)."""
        if rec.peer != src:
            self.bad_frame(src, rec.name, "a heartbeat names another peer than its channel's")
            return
        if src in self.gone:
            return
        if self.members.heard(src, self.now_ns, rec.active, rec.load):
            self.membership_changed(f"peer {short(src)} is {'active' if rec.active else 'joining'}")

    def on_peer_leave(self, src: Nid, rec: M.messages.peer_leave) -> None:
        """A peer leaves gracefully: its partitions go to the others now."""
        if rec.peer != src:
            self.bad_frame(src, rec.name, "a peer_leave names another peer than its channel's")
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
        gained = [p for p, (a, b) in enumerate(zip(old, self.owners, strict=True)) if b == self.me and a != self.me]
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

    def on_snapshot_end(self, src: Nid, rec: M.messages.snapshot_end) -> None:
        """The snapshot we asked for is complete: go active."""
        if src == self.join_target and not self.active:
            self.become_active(f"snapshot from {short(src)}: {rec.sources} sources, {rec.sinks} sinks, {rec.stored} news")

    def become_active(self, why: str) -> None:
        """Start serving partitions; ask now for missing news nobody was asked for yet (the snapshot did not bring them)."""
        self.join_target = None
        self.join_deadline = None
        for st in self.sources.values():
            if st.missing and not st.gap_tries:
                st.gap_due = self.now_ns
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

    def on_status_request(self, src: Nid, rec: M.messages.status_request) -> None:
        """Answer ``multihop news status`` (without the per-sink and per-source details if they do not fit)."""
        text = self.status_json()
        if len(text.encode()) > 1_040_000:
            st = self.status()
            st["sinks"] = {"count": len(st["sinks"]), "truncated": True}
            st["sources"] = {"count": len(st["sources"]), "truncated": True}
            text = json.dumps(st, sort_keys=True, default=str)
        self.send(src, M.messages.status_reply(self.me, text))

    def on_shutdown(self, src: Nid, rec: M.messages.shutdown) -> None:
        """``multihop news down``: leave gracefully."""
        self.event("shutdown", by=short(src))
        self.leave()

    def status(self) -> dict[str, Any]:
        """This peer's state and counters (``multihop news status``)."""
        owned: dict[str, int] = {}
        for o in self.owners:
            if o is not None:
                owned[hex_id(o)] = owned.get(hex_id(o), 0) + 1
        out = {
            "peer": hex_id(self.me),
            "domain": hex_id(self.domain),
            "active": self.active,
            "leaving": self.leaving,
            "members": [{"id": hex_id(n), "active": a} for n, a in self.members.listing()],
            "epoch": self.members.epoch,
            "partitions": owned,
            "stored": len(self.store),
            "sources": {hex_id(k): v.status() for k, v in self.sources.items()},
            "sinks": {hex_id(k): dict(v.status(), served_here=self.serves(v)) for k, v in self.sinks.items()},
            "counters": dict(self.counters),
        }
        if self.status_hook is not None:
            out["driver"] = self.status_hook()
        return out
