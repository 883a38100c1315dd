"""The native event engine behind the event routing's interface (issue 28).

:class:`NativeEventRouting` stands where :class:`~multihop.ges.erp.EventRouting` stands in a
:class:`~multihop.ges.broker.BrokerCore` (``BrokerCore(..., native=True)``) and makes the same
decisions: the same deliveries, the same copies with the same routing information, numbered the
same, in the same order (``tests/ges/test_ges_native_erp.py`` runs whole simulated systems with each
and compares their traces event by event). The routing itself runs in Rust
(``multihop._ges.EventRouting``, crate ``core-rs/ges``: ``src/erp.rs``, ``src/routing.rs``).

The control plane stays here, in Python, as it is: GPP, NAP, PPP, the connectivity graph and its
routing cache. What the event routing reads of it is pushed into the engine before each call that
may route (a *snapshot*: the live gateways, the graph's nodes and edges, the cache's rows, the
deciders of the broker's units and the levels it decides), whenever the GPP version moved since the
last push; the profile graphs the engine decides with are the native graphs PPP itself keeps
(``multihop._ges.ProfileGraph``: the broker's PPP makes its graphs native when the engine runs), so a
profile change is in the engine as soon as PPP makes it. Either is applied between calls, never
during one.

Durable mode (``erp.py``'s acknowledgements that follow causes, parking, storage brokers
originating their entries) is in the engine too: what the durability side says (restarting, the
levels whose profiles a restarted broker still misses, whether it has a store, the levels whose
climb must wait for a decider) is pushed with the snapshot, and what the store must do (store an
event delivered here for the homed clients it matched, an entry every next hop has) comes back from
each call as a batch of store calls, done in order by the Python store
(:func:`~multihop.ges.erp.run_store_calls`, as the reference does them).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from multihop import _ges
from multihop.ges.broker_view import Cause
from multihop.ges.erp import ACK_DELAY, ACK_TIMER, RoutingBroker, StoreCall, had_deciders_now, run_store_calls
from multihop.ges.event import EventData, EventId
from multihop.ges.messages import EventAck, EventCopy, Events

__all__ = ["NativeEventRouting", "routing_snapshot"]


def routing_snapshot(
    core: RoutingBroker,
) -> tuple[int, dict[int, int], list[tuple[int, int, float, int | None, list[tuple[int, float]], int | None]], dict[int, set[int]], frozenset[int]]:
    """What the event routing reads of ``core``'s control plane, as ``EventRouting.set_routing`` takes it:
    ``(GPP version, {peer: gateway level}, nodes, deciders, decided levels)``, each node as ``(node, level,
    cost, best hop, [(neighbour, edge weight), ...], hop of a path from the vertex over the edge to it)``."""
    gpp, ppp = core.gpp, core.ppp
    deciders = ppp.deciders()  # (brings ppp.decided and its graphs up to date, as the Python path does)
    g = gpp.graph()
    cache = g.cache
    table = cache.table()
    vertex = g.vertex
    out_of_vertex = {**g.d[vertex], **g.ul[vertex]}
    nodes: list[tuple[int, int, float, int | None, list[tuple[int, float]], int | None]] = []
    for u, lvl in g.node_level.items():
        cost, hop = table[u]
        edges = [(v, float(g.weight(e))) for v, e in g.d[u].items()] + [(v, float(g.weight(e))) for v, e in g.ul[u].items()]
        e = out_of_vertex.get(u)
        nodes.append((u, lvl, float(cost), hop, edges, None if e is None else cache.first_hop(u, e)))
    return gpp.version, {p: link.level for p, link in gpp.links.items()}, nodes, deciders, ppp.decided


class NativeEventRouting:
    """The event routing of one broker in the native engine, with :class:`~multihop.ges.erp.EventRouting`'s
    interface (see the module docstring)."""

    def __init__(self, core: RoutingBroker) -> None:
        self.core = core
        self.code = core.code
        self.levels = core.levels
        self.engine = _ges.EventRouting(core.code, core.levels, EventId, EventData, EventCopy)
        self._durable = False
        #: what the store must do, as the engine handed it over (see the module docstring)
        self.store_calls: deque[StoreCall] = deque()
        #: a live broker's engine writes what the routing makes (``multihop._ges.Engine``): :meth:`take` and
        #: :meth:`take_deliveries` then leave it where it is
        self.wire = False
        self._routing_at = -1
        self._had = 0
        self._graphs: tuple[object, object] | None = None

    @property
    def durable(self) -> bool:
        """Durable mode (set by the broker before any event)."""
        return self._durable

    @durable.setter
    def durable(self, on: bool) -> None:
        if on and not self._durable:
            self.engine.set_durable()
        self._durable = on

    def sync(self) -> None:
        """Push what changed of the control plane (the routing when the GPP version moved, the graphs
        when PPP made new ones; in durable mode what the durability side says) before the engine routes."""
        core = self.core
        moved = core.gpp.version != self._routing_at
        if moved:
            version, links, nodes, deciders, decided = routing_snapshot(core)
            self.engine.set_routing(version, links, nodes, deciders, decided)
            self._routing_at = version
        if self._durable:
            d = core.durability
            if moved:
                self._had = sum(1 << lvl for lvl in range(1, core.levels + 2) if had_deciders_now(core, lvl))
            missing = 0
            if d.restarting:
                missing = sum(1 << lvl for lvl in range(1, core.levels + 2) if d.missing_profiles(lvl))
            self.engine.set_durable_state(d.restarting, missing, d.store is not None, self._had)
        ppp = core.ppp
        if self._graphs is None or self._graphs[0] is not ppp.graphs or self._graphs[1] is not ppp.local:
            self.engine.set_graphs(ppp.graphs, ppp.local)  # type: ignore[arg-type]  # PPP makes native graphs here
            self._graphs = (ppp.graphs, ppp.local)

    # ---- EventRouting's interface ---------------------------------------------------------------

    @property
    def counters(self) -> dict[str, int]:
        """The event counters (``EventRouting.counters``; ``replayed`` and ``parked`` stay 0)."""
        return self.engine.counters()

    def publish(self, ev: EventData) -> None:
        """A local client published ``ev``: deliver here, then climb."""
        self.sync()
        self.engine.publish(ev)

    def on_events(self, peer: int, msg: Events) -> None:
        """Copies from neighbour ``peer``."""
        self.sync()
        self.engine.on_events(peer, msg.first_seq, msg.copies)
        if not self.wire and self.engine.take_timer():  # (a live broker's engine keeps the timer itself)
            self.core.set_timer(ACK_DELAY, ACK_TIMER)
        self.run_store_calls()

    def on_ack(self, peer: int, msg: EventAck) -> None:
        """Neighbour ``peer`` handled our copies up to ``msg.upto`` (and those in ``msg.also``)."""
        if self._durable:
            self.sync()
        self.engine.on_ack(peer, msg.upto, list(msg.also))
        self.run_store_calls()

    def link_down(self, peer: int) -> None:
        """The gateway to ``peer`` is lost: route its unacknowledged copies again, first."""
        self.sync()
        self.engine.link_down(peer)
        self.run_store_calls()

    # ---- durable mode ------------------------------------------------------------------------------

    def originate(self, ev: EventData, cause: Cause) -> None:
        """Durable mode: this storage broker routes ``ev`` (entry ``cause[1]`` of its store) as its origin."""
        self.sync()
        self.engine.originate(ev, cause[1])
        self.run_store_calls()

    def retry_parked(self) -> None:
        """Durable mode: route the parked copies again (the graph changed, or a restart has its profiles)."""
        self.sync()
        self.engine.retry_parked()
        self.run_store_calls()

    def route_parked(self) -> None:
        """Durable mode: route the parked copies again if the graph changed since they were last routed (before
        the store commits: see ``EventRouting.route_parked``)."""
        if self._durable:
            self.sync()
            if self.engine.parked_due():
                self.retry_parked()

    def run_store_calls(self) -> None:
        """Take the store calls the engine made and do them, in order, after any already queued."""
        if not self._durable:
            return
        calls = self.engine.take_store_calls()
        if calls:
            self.store_calls.extend(calls)
        if self.store_calls:
            run_store_calls(self.store_calls, self.core.durability)

    def client_gone(self, peer: int) -> None:
        """A client detached."""
        self.engine.client_gone(peer)

    def forget_plans(self) -> None:
        """(The engine remembers no decisions: nothing to forget.)"""

    def fire(self, name: object) -> None:
        """The ack timer fired."""
        if name == ACK_TIMER:
            self.engine.fire_ack()

    def take(self) -> dict[int, list[Events | EventAck]]:
        """Per neighbour: an Events batch (numbered) and/or an EventAck, as ``EventRouting.take`` (nothing
        for a live broker's engine, which writes them itself)."""
        if self.wire:
            return {}
        if self._durable:
            self.sync()  # (parked copies wait for the graph pushed now)
        if not self.engine.pending():
            return {}
        self.sync()
        # the reference routes parked copies again first thing in take (the engine would, too, but the entries
        # the store launches then must go out in this take: done here, with the store's calls)
        self.route_parked()
        out: dict[int, list[Events | EventAck]] = {}
        for peer, first, copies, ack in self.engine.take():
            msgs: list[Events | EventAck] = []
            if copies is not None and first is not None:
                msgs.append(Events(first, copies))
            if ack is not None:
                msgs.append(EventAck(ack[0], tuple(ack[1])))
            out[peer] = msgs
        return out

    def take_deliveries(self) -> dict[int, list[EventData]]:
        """Per client: the events to deliver (in order); empties them (nothing for a live broker's engine)."""
        if self.wire:
            return {}
        return {client: evs for client, evs in self.engine.take_deliveries()}

    def status(self) -> dict[str, Any]:
        """What the engine holds (for a broker's status)."""
        return {"engine": "native", "in_flight": self.engine.in_flight()}
