"""The event routing protocol (ERP, routing paper 3.4-3.5) of one broker, sans-IO.

The broker of the publishing client delivers to its own interested clients and
starts the event **up**: at each level ``l`` (1 .. N + 1) the event must reach
a decider of the publisher's level-``l`` unit ``U`` (a gatekeeper: see
:mod:`multihop.ges.ppp`), found inside the publisher's level-``l - 1`` unit, so
the climb never leaves the unit the event is already in.  That decider computes
from its profile graph the children of ``U`` with an interested client, leaves
out the child the event came up from (marked reached), and sends the event
**down** into each; then the climb goes on at level ``l + 1``.  An event sent
down into unit ``T`` arrives at a broker of ``T`` through a gateway of level
``>= level(T)``, which makes that broker a decider of ``T``: it computes the
interested children of ``T`` and sends the event into each, recursively, until
the brokers with interested clients deliver to them.  So an event enters a unit
only when a client inside is interested, or as transit on the best path to one.

Copies travel along best hops from the routing cache; copies of one event
going the same way are merged (their targets listed together); the routing
information (``reached``) is stripped of the levels below each gateway crossed.
A broker acknowledges the copies it handled on each gateway (lazily: with its
next copies back, after ``ACK_EVERY`` copies, or after ``ACK_DELAY``); when a gateway
is lost, the copies sent over it and not acknowledged are routed again, before
any newer event, over the alternate route (3.7, figure 12b); the duplicate
filter (:mod:`multihop.ges.dedup`) drops the ones that had arrived.  A copy
that has passed ``TTL`` brokers is dropped.

**Remembered decisions** (not in durable mode): what a broker does with a copy
depends only on the copy's routing fields, the event's signature, what its
profile graphs answer for the event's values, its graph (the GPP version) and
its profile graphs (:attr:`ProfileGraph.generation`), and on the duplicate
filter.  So a copy of a new kind is handled in full while the broker notes what
it did (the profile graphs it asked and their answers, the duplicate-filter
roles it passed, the clients it delivered to, the copies it sent and where).
The next copy of that kind (same routing fields and signature) asks the same
graphs again; when every answer is the same, it replays the plan: the same
roles are checked and set, the same deliveries and copies are made with the
new event.  A copy whose answers differ from every plan of its kind, whose
roles are not all new (a duplicate), a plan made while something unusual
happened (a duplicate, no route, not a decider, the TTL) and any change of graph
or profiles fall back to the full handling; plans are forgotten when the graphs
change, and at most ``PLANS`` kinds (``VARIANTS`` plans each) are kept.

**Durable mode** (a system with storage brokers, :mod:`multihop.ges.durability`):
a copy is acknowledged to the previous hop only once everything made of it is
safe: every copy it produced was acknowledged by its next hop and every entry
it produced is in the batch the broker commits before it sends acknowledgements
(GES service paper 9.1.1: an ACK only after the next hop has the event, all the
way to the stores, so a hop never forgets an event another hop still needs).  A
copy with no route (its next broker is down, a gateway is lost without an
alternate) is *parked* and routed again when the graph changes (9.3.1), instead of
being dropped.  Storage brokers originate the events published in their cluster
(:meth:`EventRouting.originate`), and learn when every next hop has them.  What
the store must do (store an event delivered here for the homed clients it
matched, an entry every next hop has) is queued while a call routes and done, in
order, when the call ends (:func:`run_store_calls`): the native engine hands its
store calls over the same way, so both make the same decisions in the same order.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Protocol, TypeAlias, TypeVar

from multihop.ges.address import contains, unit_id, unit_level
from multihop.ges.broker_view import BrokerView, Cause
from multihop.ges.dedup import DuplicateFilter
from multihop.ges.durability import Durability
from multihop.ges.event import EventData, EventId, names_and_values
from multihop.ges.messages import DOWN, UP, EventAck, EventCopy, Events
from multihop.ges.ppp import ProfilePropagation
from multihop.ges.profile_graph import GraphLike, ProfileGraph

__all__ = ["Cause", "EventRouting", "RoutingBroker", "TTL", "had_deciders_now", "run_store_calls"]

#: most brokers a copy may pass (legs are loop-free; this is the safety net)
TTL = 255
#: acknowledge a gateway at once when this many copies wait for it ...
ACK_EVERY = 64
#: ... else at the latest after this many seconds. Not 0.1: at the paper's 10 events/s a timer of the
#: publisher's period fired on every broker of the path just as the next event came through (a broker
#: acknowledges 100 ms after a copy came, and the next copy comes 100 ms later), so each event shared the
#: CPUs with the acknowledgements of the brokers ahead and the upstream brokers they woke. Measured on the
#: testbed (native engine, 9 hops, 10/s, 150 events, runs alternated, 2 CPUs): median latency 1.64-2.03 ms
#: at 0.1 s against 1.50-1.63 ms at 0.25 s, and a fifth less broker CPU. Any fixed delay meets some rate (4/s
#: here); a longer one keeps an acknowledgement off the path for more events at every rate.
ACK_DELAY = 0.25
ACK_TIMER = "erp-ack"
_DELIVER = 0
#: most kinds of copies a broker remembers decisions for; all are forgotten when this many are held (0: none kept)
PLANS = 4096
#: most plans per kind (events of one kind that the profile graphs answer differently for)
VARIANTS = 8
#: builds a NamedTuple from its fields in order, without its Python-level ``__new__``
_new = tuple.__new__
#: counters that make a handling too unusual to remember
_UNUSUAL = ("duplicates", "unroutable", "not_decider", "ttl", "parked")
_PARK = None  # the "hop" of targets with no route (durable mode parks them)
#: targets of a copy grouped by next hop (or _PARK)
_Fwd: TypeAlias = dict[int | None, list[int]]
#: what a remembered decision is made while handling (an EventData published here, an EventCopy received)
_Arg = TypeVar("_Arg")


class _Plan:
    """What the handling of one kind of copy did (see "Remembered decisions" in the module docstring)."""

    __slots__ = ("checks", "roles", "clients", "sends", "decisions")

    def __init__(self) -> None:
        self.checks: list[tuple[GraphLike, set[int]]] = []  # profile graphs asked and their answers, in order
        self.roles: list[int] = []  # duplicate-filter roles the event passed, in order
        self.clients: list[int] = []  # local clients it was delivered to
        self.sends: list[tuple[int, EventCopy]] = []  # (neighbour, copy sent) in order; the copy's event is replaced
        self.decisions = 0


class _Kind:
    """The plans of one kind of copy, and which plan the values seen so far chose (most ``VARIANTS * 64``)."""

    __slots__ = ("plans", "by_values")

    def __init__(self) -> None:
        self.plans: list[_Plan] = []
        self.by_values: dict[str, _Plan] = {}


class RoutingBroker(BrokerView, Protocol):
    """The broker as ERP sees it: a :class:`~multihop.ges.broker_view.BrokerView` with its profiles and durability."""

    @property
    def ppp(self) -> ProfilePropagation:
        """The broker's profile propagation (the profile graphs ERP matches against)."""
        ...

    @property
    def durability(self) -> Durability:
        """The broker's durability side (stores, storage brokers, restarts)."""
        ...


#: a store call: (0, event, homed clients' profile peers it matched) or (1, entry routed, None)
StoreCall: TypeAlias = tuple[int, Any, Any]


def run_store_calls(calls: deque[StoreCall], durability: Durability) -> None:
    """Do the store calls queued while routing, in order (durable mode): ``on_match`` for an event delivered
    at a storage broker, ``route_done`` for an entry every next hop has (which may route the publisher's next
    entries, whose calls join the same queue)."""
    st = durability.store
    while calls:
        kind, a, b = calls.popleft()
        if st is None:
            continue
        if kind == 0:
            st.on_match(a, b)
        else:
            st.route_done(a)


def had_deciders_now(core: RoutingBroker, lvl: int) -> bool:
    """Whether the publisher's level-``lvl`` unit has (or had: lost gateways count) a decider inside ``core``'s
    level-(lvl-1) unit (``core`` too, if its gateway of that level is lost): then the climb must go on once one
    is reachable (durable mode)."""
    code = core.code
    known = core.gpp.gatekeepers_of_my_units(include_dead=True).get(lvl, set())
    if any(x == code or ((x ^ code).bit_length() - 1) // 6 < lvl - 1 for x in known):
        return True
    # a restarted broker may not know the gateways yet; the storage brokers (one per cluster, from the
    # configuration) tell whether there are clusters outside this level-(lvl-1) unit: if so, some level
    # from lvl up has deciders in a connected system, and the climb must not stop here
    below = unit_id(code, lvl - 1, core.levels)
    return any(not contains(below, s) for s in core.durability.storage_brokers.values())


class EventRouting:
    """ERP state of one broker (see the module docstring)."""

    def __init__(self, core: RoutingBroker) -> None:
        self.core = core
        self.code = core.code
        self.levels = core.levels
        self.dedup = DuplicateFilter()
        self._seq: dict[int, int] = {}  # peer -> next link sequence number
        self.unacked: dict[int, dict[int, EventCopy]] = {}  # peer -> seq -> copy
        self._recv: dict[int, int] = {}  # peer -> highest sequence handled
        #: peer -> copies handled since the last ack to it
        self._ack_due: dict[int, int] = {}
        self._ack_timer = False
        self._out: dict[int, list[EventCopy]] = {}
        #: client peer -> events to deliver
        self.deliveries: dict[int, list[EventData]] = {}
        #: durable mode (set by the broker): acknowledgements wait for the next hops, unroutable copies park
        self.durable = False
        self._cause: Cause | None = None  # what the copies being made now are owed to
        self._open: dict[Cause, int] = {}  # cause -> copies/entries it still waits for
        self._deps: dict[int, dict[int, Cause | None]] = {}  # peer -> link seq -> cause of that copy
        self._inq: dict[int, dict[int, None]] = {}  # peer -> incoming seqs not yet safe
        self._done: dict[int, list[int]] = {}  # peer -> seqs that became safe since the last ack
        # a copy dropped as a duplicate must not be acknowledged before the copy it duplicates is safe
        # (else the previous hop forgets it while the original waits here, parked, and newer events overtake it)
        self._dup_hit = False
        self._ev_cause: dict[EventId, Cause] = {}  # event id -> open cause that handled it here first
        self._cause_ev: dict[Cause, EventId] = {}  # the reverse
        self._listeners: dict[Cause, list[Cause]] = {}  # cause -> causes of duplicates waiting for it
        self._parked_n: dict[Cause, int] = {}  # cause -> its copies parked here
        self._had_at: tuple[int, dict[int, bool]] = (-1, {})  # graph version -> level -> _had_deciders
        self._epoch: dict[int, int] = {}  # peer -> link epoch (raised when the gateway is lost)
        #: copies with no route now: (cause, copy), routed again when the graph changes
        self.parked: list[tuple[Cause | None, EventCopy]] = []
        self._parked_at = -1
        #: what the store must do, queued while a call routes (see the module docstring)
        self.store_calls: deque[StoreCall] = deque()
        #: remembered decisions: kind of copy (routing fields, signature) -> plans, valid for the stamp in _plans_at
        self._plans: dict[tuple[object, ...], _Kind] = {}
        self._plans_at: tuple[int, int] = (-1, -1)
        self._rec: _Plan | None = None  # the plan being noted while a copy is handled in full
        self.counters = {
            "published": 0,
            "delivered": 0,
            "copies_in": 0,
            "copies_out": 0,
            "decisions": 0,
            "duplicates": 0,
            "ttl": 0,
            "unroutable": 0,
            "rerouted": 0,
            "not_decider": 0,
            "parked": 0,
            "replayed": 0,  # copies handled by replaying a remembered decision
        }

    # ---- inputs ----------------------------------------------------------------------------------

    def publish(self, ev: EventData) -> None:
        """A local client published ``ev``: deliver here, then climb."""
        if self.durable:
            self._publish(ev)
            run_store_calls(self.store_calls, self.core.durability)
            return
        if self._planned(("pub", ev.signature), ev, 0, self._publish, ev):
            self.counters["published"] += 1

    def _publish(self, ev: EventData) -> None:
        if not self._accept(ev.id, _DELIVER):
            self.counters["duplicates"] += 1  # a client resent it
            return
        self.counters["published"] += 1
        self._deliver(ev)
        me = self.code
        self._up(EventCopy(ev, me, UP, 1, (), (me,), 0))

    # ---- remembered decisions ------------------------------------------------------------------------

    def _planned(self, key: tuple[object, ...], ev: EventData, hops: int, handle: Callable[[_Arg], None], arg: _Arg) -> bool:
        """Handle ``arg`` with ``handle`` (in full, noting a plan: False) or replay a plan remembered
        for ``key`` whose profile graphs answer the same for ``ev`` (True)."""
        stamp = (self.core.gpp.version, ProfileGraph.generation)
        if stamp != self._plans_at:
            self._plans.clear()
            self._plans_at = stamp
        kind = self._plans.get(key)
        if kind is not None and hops < TTL:
            plan = kind.by_values.get(ev.values)  # these values chose it before: the graphs answer the same
            if plan is None:
                plan = self._choose(kind.plans, ev)
                if plan is not None:
                    if len(kind.by_values) >= VARIANTS * 64:
                        kind.by_values.clear()
                    kind.by_values[ev.values] = plan
            if plan is not None and self._replay(plan, ev, hops):
                self.counters["replayed"] += 1
                return True
        counters = self.counters
        before = [counters[k] for k in _UNUSUAL]
        decisions = counters["decisions"]
        rec = self._rec = _Plan()
        try:
            handle(arg)
        finally:
            self._rec = None
        if PLANS > 0 and hops < TTL and before == [counters[k] for k in _UNUSUAL] and stamp == (self.core.gpp.version, ProfileGraph.generation):
            rec.decisions = counters["decisions"] - decisions
            if kind is None:
                if len(self._plans) >= PLANS:
                    self._plans.clear()
                kind = self._plans[key] = _Kind()
            if len(kind.plans) < VARIANTS:
                kind.plans.append(rec)
            else:  # the oldest variant goes, with the values that chose it
                old = kind.plans.pop(0)
                kind.plans.append(rec)
                kind.by_values = {v: p for v, p in kind.by_values.items() if p is not old}
            kind.by_values[ev.values] = rec
        return False

    @staticmethod
    def _choose(plans: list[_Plan], ev: EventData) -> _Plan | None:
        """The first plan whose profile graphs answer for ``ev`` what they answered when it was made."""
        names, values = names_and_values(ev)
        asked: dict[int, set[int]] = {}
        for plan in plans:
            for g, expect in plan.checks:
                got = asked.get(id(g))
                if got is None:
                    got = asked[id(g)] = g.match(names, values)
                if got != expect:
                    break
            else:
                return plan
        return None

    def _match(self, g: GraphLike, names: tuple[str, ...], values: list[str]) -> set[int]:
        """``g.match`` (noted in the plan being made)."""
        got = g.match(names, values)
        if self._rec is not None:
            self._rec.checks.append((g, got))
        return got

    def forget_plans(self) -> None:
        """Forget every remembered decision (a gateway came up or went)."""
        self._plans.clear()

    def _replay(self, plan: _Plan, ev: EventData, hops: int) -> bool:
        """Do what ``plan`` did, for event ``ev`` that came ``hops`` brokers; False (nothing done) if
        the event is not new in every role the plan passed."""
        eid = ev.id
        order = (eid.timestamp, eid.sequence)
        last = self.dedup.last
        pub, inc = eid.publisher, eid.incarnation
        roles = plan.roles
        for role in roles:  # (plain loops: a comprehension is a function call per event)
            seen = last.get((pub, inc, role))
            if seen is not None and order <= seen:
                return False
        for role in roles:
            last[(pub, inc, role)] = order
        counters = self.counters
        if plan.clients:
            deliveries = self.deliveries
            for client in plan.clients:
                box = deliveries.get(client)
                if box is None:
                    deliveries[client] = [ev]
                else:
                    box.append(ev)
            counters["delivered"] += len(plan.clients)
        counters["decisions"] += plan.decisions
        if plan.sends:
            hops += 1
            seqs, unacked, out = self._seq, self.unacked, self._out
            for peer, c in plan.sends:
                copy = _new(EventCopy, (ev, c.origin, c.mode, c.level, c.targets, c.reached, hops, c.left))
                seq = seqs.get(peer, 0)
                seqs[peer] = seq + 1
                unacked.setdefault(peer, {})[seq] = copy
                queue = out.get(peer)
                if queue is None:
                    out[peer] = [copy]
                else:
                    queue.append(copy)
            counters["copies_out"] += len(plan.sends)
        return True

    def _accept(self, eid: EventId, role: int) -> bool:
        """The duplicate filter's verdict for ``eid`` in ``role`` (noted in the plan being made)."""
        if self.dedup.accept(eid, role):
            if self._rec is not None:
                self._rec.roles.append(role)
            return True
        return False

    def originate(self, ev: EventData, cause: Cause) -> None:
        """Durable mode: this storage broker routes ``ev`` (stored in its cluster) as its origin.

        ``cause`` is told to the store (:meth:`StoreRole.route_done`) once every next hop acknowledged.
        """
        self.counters["published"] += 1
        self.dedup.accept(ev.id, _DELIVER)
        me = self.code
        self._cause = cause
        self._open[cause] = self._open.get(cause, 0) + 1
        copy = EventCopy(ev, me, UP, 1, (), (me,), 0)
        self._dup_hit = False
        if self.core.durability.restarting:
            self._park(copy)  # its graph and profiles are not back yet
        else:
            self._up(copy)
        self._cause = None
        self._hold(cause, ev.id)
        self._release(cause)
        run_store_calls(self.store_calls, self.core.durability)

    def _hold(self, cause: Cause, eid: EventId) -> None:
        """After handling a copy: remember the cause that waits for this event here, or make a pure
        duplicate wait for it."""
        if self._open[cause] > 1:
            if eid not in self._ev_cause:
                self._ev_cause[eid] = cause
                self._cause_ev[cause] = eid
        elif self._dup_hit:
            # only while the older copy is parked here: it has gone nowhere yet, so its chain cannot wait
            # for this duplicate (a copy of its own that came back), and the wait cannot close a cycle
            older = self._ev_cause.get(eid)
            if older is not None and older in self._open and self._parked_n.get(older, 0):
                self._open[cause] += 1
                self._listeners.setdefault(older, []).append(cause)

    def on_events(self, peer: int, msg: Events) -> None:
        """Copies from neighbour ``peer``."""
        seq = msg.first_seq
        last = self._recv.get(peer, -1)
        durable = self.durable
        for copy in msg.copies:
            if seq > last:
                last = seq
                self.counters["copies_in"] += 1
                if durable:
                    cause: Cause = ("in", peer, self._epoch.get(peer, 0), seq)
                    self._inq.setdefault(peer, {})[seq] = None
                    self._open[cause] = 1
                    self._cause = cause
                    self._dup_hit = False
                    if self.core.durability.restarting:
                        self._park(copy)
                    else:
                        self._handle(copy)
                    self._cause = None
                    self._hold(cause, copy.event.id)
                    self._release(cause)
                else:
                    ev = copy.event
                    key = (copy.mode, copy.level, copy.targets, copy.reached, copy.left, copy.origin, ev.signature)
                    self._planned(key, ev, copy.hops, self._handle, copy)
            seq += 1
        self._recv[peer] = last
        if peer not in self._ack_due:
            self._ack_due[peer] = 0
            if not self._ack_timer:
                self._ack_timer = True
                self.core.set_timer(ACK_DELAY, ACK_TIMER)
        self._ack_due[peer] += len(msg.copies)
        if self.store_calls:
            run_store_calls(self.store_calls, self.core.durability)

    def on_ack(self, peer: int, msg: EventAck) -> None:
        """Neighbour ``peer`` handled our copies up to ``msg.upto``."""
        box = self.unacked.get(peer)
        if box:
            deps = self._deps.get(peer)
            upto = msg.upto
            # a box holds its copies in sequence order (numbered as they were queued; a lost link
            # empties it), so the acknowledged ones are a prefix: no walk over what is still in flight
            done: list[int] = []
            for s in box:
                if s > upto:
                    break
                done.append(s)
            if msg.also:
                done += [s for s in dict.fromkeys(msg.also) if s > upto and s in box]  # (a peer may repeat one)
            for s in done:
                del box[s]
                if deps:
                    cause = deps.pop(s, None)
                    if cause is not None:
                        self._release(cause)
            if self.store_calls:
                run_store_calls(self.store_calls, self.core.durability)

    def _release(self, cause: Cause) -> None:
        """One thing ``cause`` waited for is safe; when nothing is left, the cause is done."""
        n = self._open[cause] - 1
        if n:
            self._open[cause] = n
            return
        del self._open[cause]
        eid = self._cause_ev.pop(cause, None)
        if eid is not None:
            del self._ev_cause[eid]
        for waiting in self._listeners.pop(cause, ()):
            self._release(waiting)
        if cause[0] == "in":
            _, peer, epoch, seq = cause
            if self._epoch.get(peer, 0) != epoch:
                return  # that gateway is gone: its sender routes the copy again itself
            q = self._inq.get(peer)
            if q is not None:
                q.pop(seq, None)
            self._done.setdefault(peer, []).append(seq)
            self._ack_due[peer] = ACK_EVERY  # at once: the origin waits for it before routing the next batch
        elif self.core.durability.store is not None:
            self.store_calls.append((1, cause[1], None))

    def _safe_upto(self, peer: int) -> int:
        q = self._inq.get(peer)
        if q:
            return next(iter(q)) - 1
        return self._recv[peer]

    def retry_parked(self) -> None:
        """Route the parked copies again (the graph changed)."""
        if self.core.durability.restarting:
            return
        self._parked_at = self.core.gpp.version
        parked, self.parked = self.parked, []
        for cause, copy in parked:
            if cause is not None:
                n = self._parked_n.pop(cause, 0) - 1
                if n > 0:
                    self._parked_n[cause] = n
            self._cause = cause
            self._route_again(copy)
            self._cause = None
            if cause is not None:
                self._release(cause)
        run_store_calls(self.store_calls, self.core.durability)

    def route_parked(self) -> None:
        """Route the parked copies again if the graph changed since they were last routed (durable mode: the
        broker calls it before its store commits, so what they store is in the batch their acknowledgements
        vouch for)."""
        if self.parked and self._parked_at != self.core.gpp.version:
            self.retry_parked()

    def link_down(self, peer: int) -> None:
        """The gateway to ``peer`` is lost: route its unacknowledged copies again, first."""
        self.forget_plans()
        pending = self.unacked.pop(peer, {})
        self._out.pop(peer, None)
        self._seq.pop(peer, None)
        self._recv.pop(peer, None)
        self._ack_due.pop(peer, None)
        deps = self._deps.pop(peer, {})
        if self.durable:
            self._epoch[peer] = self._epoch.get(peer, 0) + 1
            self._inq.pop(peer, None)
            self._done.pop(peer, None)
        for s in sorted(pending):
            self.counters["rerouted"] += 1
            cause = deps.get(s)
            self._cause = cause
            self._route_again(pending[s])
            self._cause = None
            if cause is not None:
                self._release(cause)
        if self.store_calls:
            run_store_calls(self.store_calls, self.core.durability)

    def client_gone(self, peer: int) -> None:
        """A client detached."""
        self.deliveries.pop(peer, None)

    def take_deliveries(self) -> dict[int, list[EventData]]:
        """Per client: the events to deliver (in order); empties them."""
        d, self.deliveries = self.deliveries, {}
        return d

    # ---- handling ------------------------------------------------------------------------------

    def _handle(self, copy: EventCopy) -> None:
        if copy.mode == UP:
            self._up(copy)
            return
        transit: _Fwd = {}
        decided: _Fwd = {}
        me = self.code
        for t in copy.targets:
            if contains(t, me):
                self._down(t, copy, decided)
            else:
                self._toward(t, transit, copy.left)
        # transit targets keep their leg (the units already left); targets decided here start a new one
        self._send_down(copy, transit, copy.left)
        self._send_down(copy, decided, ())

    def _route_again(self, copy: EventCopy) -> None:
        """A copy that was on its way out of here: choose its hop(s) again (a new leg)."""
        if copy.mode == UP:
            self._up(copy._replace(left=()))
            return
        self._handle(copy._replace(left=()))

    def _toward(self, target: int, fwd: _Fwd, avoid: tuple[int, ...]) -> None:
        hop = self.core.gpp.hop_to(target, avoid)
        if hop is None:
            if self.durable:
                fwd.setdefault(_PARK, []).append(target)
                return
            self.counters["unroutable"] += 1
            return
        fwd.setdefault(hop, []).append(target)

    def _park(self, copy: EventCopy) -> None:
        self.counters["parked"] += 1
        cause = self._cause
        if cause is not None:
            self._open[cause] = self._open.get(cause, 0) + 1
            self._parked_n[cause] = self._parked_n.get(cause, 0) + 1
        self.parked.append((cause, copy))

    def _down(self, t: int, copy: EventCopy, fwd: _Fwd) -> None:
        """This broker is inside target ``t``: deliver (t is this broker) or decide among t's children."""
        ev = copy.event
        if t == self.code:
            if self._accept(ev.id, _DELIVER):
                self._deliver(ev)
            else:
                self.counters["duplicates"] += 1
                self._dup_hit = True
            return
        lvl = unit_level(t)
        if self.durable and self.core.durability.missing_profiles(lvl):
            fwd.setdefault(_PARK, []).append(t)  # restarted: no profiles to decide with yet
            return
        if not self._accept(ev.id, -lvl):
            self.counters["duplicates"] += 1
            self._dup_hit = True
            return
        names, values = names_and_values(ev)
        ppp = self.core.ppp
        ppp.deciders()  # keeps ``decided`` and its graphs current
        g = ppp.graphs.get(lvl)
        dests = None if g is None else self._match(g, names, values)
        if dests is None:
            # not a decider of t (a gateway changed meanwhile): hand the copy for t to the nearest one
            self.counters["not_decider"] += 1
            self.dedup.last.pop((ev.id.publisher, ev.id.incarnation, -lvl), None)
            d = self._nearest(self.core.ppp.deciders()[lvl])
            hop = None if d is None else self.core.gpp.hop_to(d)
            if hop is None and self.durable:
                fwd.setdefault(_PARK, []).append(t)
            elif hop is None:
                self.counters["unroutable"] += 1
            else:
                fwd.setdefault(hop, []).append(t)
            return
        self.counters["decisions"] += 1
        me = self.code
        reached = copy.reached
        for c in sorted(dests):  # (in order: the native engine makes the same copies in the same order)
            if c in reached:
                continue
            if contains(c, me):
                self._down(c, copy, fwd)
            else:
                self._toward(c, fwd, ())

    def _up(self, copy: EventCopy) -> None:
        """Climb: decide at each level this broker decides; hand the rest to the nearest decider."""
        ev, origin = copy.event, copy.origin
        n1 = self.levels + 1
        lvl = copy.level
        ppp = self.core.ppp
        fwd: _Fwd = {}
        reached = copy.reached
        deciders = ppp.deciders()  # also brings ppp.decided up to date
        while lvl <= n1:
            if lvl in ppp.decided:
                if self.durable and self.core.durability.missing_profiles(lvl):
                    self._park(copy._replace(level=lvl, targets=(), reached=reached, left=()))
                    break
                if not self._accept(ev.id, lvl):
                    self.counters["duplicates"] += 1
                    self._dup_hit = True
                    break
                g = ppp.graphs.get(lvl)
                dests = set() if g is None else self._match(g, *names_and_values(ev))
                came_from = unit_id(origin, lvl - 1, self.levels)
                self.counters["decisions"] += 1
                reached = reached + (came_from,)
                for c in sorted(dests):
                    if c not in reached:
                        self._toward(c, fwd, ())
                lvl += 1
                continue
            if lvl == copy.level and copy.targets:
                d: int | None = copy.targets[0]  # on its way to the decider chosen for this level: keep the leg
                left = copy.left
            else:
                # a decider of the publisher's level-lvl unit inside its level-(lvl-1) unit (where this broker is)
                ds = {x for x in deciders[lvl] if ((x ^ self.code).bit_length() - 1) // 6 < lvl - 1}
                d = self._nearest(ds)
                left = ()
            if d is None and self.durable and self._had_deciders(lvl):
                # no decider reachable now (one is down, a gateway is lost): wait for the graph to change
                self._park(copy._replace(level=lvl, targets=(), reached=reached, left=()))
            elif d is not None:
                hop = self.core.gpp.hop_to(d, left)
                if hop is None and self.durable:
                    self._park(copy._replace(level=lvl, targets=(d,), reached=reached, left=()))
                elif hop is None:
                    self.counters["unroutable"] += 1
                else:
                    self._send(hop, copy._replace(level=lvl, targets=(d,), reached=reached, left=left))
            break
        if fwd:
            self._send_down(copy._replace(reached=reached), fwd, ())

    def _had_deciders(self, lvl: int) -> bool:
        """Whether the publisher's level-``lvl`` unit has (or had: lost gateways count) a decider inside this
        broker's level-(lvl-1) unit (this broker too, if its gateway of that level is lost): then the climb
        must go on once one is reachable."""
        v = self.core.gpp.version
        if self._had_at[0] != v:
            self._had_at = (v, {})
        hit = self._had_at[1].get(lvl)
        if hit is None:
            hit = self._had_at[1][lvl] = self._had_deciders_now(lvl)
        return hit

    def _had_deciders_now(self, lvl: int) -> bool:
        return had_deciders_now(self.core, lvl)

    def _nearest(self, candidates: set[int]) -> int | None:
        best = None
        cost_to = self.core.gpp.cost_to
        for d in candidates:
            if d == self.code:
                continue
            c = cost_to(d)
            if c == float("inf"):
                continue
            key = (c, d)
            if best is None or key < best:
                best = key
        return None if best is None else best[1]

    def _deliver(self, ev: EventData) -> None:
        names, values = names_and_values(ev)
        if self.durable:  # the only local subscribers are a storage broker's homed clients: store for them
            if self.core.durability.store is not None:
                matched = self.core.ppp.local.match(names, values)
                if matched:
                    self.store_calls.append((0, ev, matched))
            return
        rec = self._rec
        for client in sorted(self._match(self.core.ppp.local, names, values)):
            self.deliveries.setdefault(client, []).append(ev)
            self.counters["delivered"] += 1
            if rec is not None:
                rec.clients.append(client)

    # ---- output -----------------------------------------------------------------------------------

    def _send_down(self, copy: EventCopy, fwd: _Fwd, left: tuple[int, ...]) -> None:
        for hop, targets in fwd.items():
            c = EventCopy(copy.event, copy.origin, DOWN, 0, tuple(targets), copy.reached, copy.hops, left)
            if hop is _PARK:
                self._park(c._replace(left=()))
            else:
                self._send(hop, c)

    def _send(self, peer: int, copy: EventCopy) -> None:
        link = self.core.gpp.links.get(peer)
        if link is None:
            if self.durable:
                self._park(copy)
                return
            self.counters["unroutable"] += 1
            return
        if copy.hops >= TTL:
            self.counters["ttl"] += 1
            return
        # strip what only made sense below this gateway's level; note the unit being left
        gpp = self.core.gpp
        p = link.level
        reached = copy.reached if p == 0 else tuple(u for u in copy.reached if unit_level(u) >= p)
        out = copy._replace(reached=reached, left=gpp.leaving(peer, copy.left), hops=copy.hops + 1)
        seq = self._seq.get(peer, 0)
        self._seq[peer] = seq + 1
        self.unacked.setdefault(peer, {})[seq] = out
        cause = self._cause
        if cause is not None:
            self._deps.setdefault(peer, {})[seq] = cause
            self._open[cause] += 1
        self._out.setdefault(peer, []).append(out)
        self.counters["copies_out"] += 1
        if self._rec is not None:
            self._rec.sends.append((peer, out))

    def fire(self, name: object) -> None:
        """The ack timer fired: acknowledge every gateway that has copies to acknowledge."""
        if name == ACK_TIMER:
            self._ack_timer = False
            for peer in self._ack_due:
                self._ack_due[peer] = ACK_EVERY  # due now

    def take(self) -> dict[int, list[Events | EventAck]]:
        """Per neighbour: an Events batch (numbered) and/or an EventAck; per client: the events to deliver.

        Acks are lazy: a gateway is acknowledged with the next copies sent back over
        it, when ``ACK_EVERY`` copies wait, or when the ack timer (``ACK_DELAY``) fires,
        so a quiet stream costs its sender no extra wake-up per event.
        """
        self.route_parked()
        out: dict[int, list[Events | EventAck]] = {}
        for peer, copies in self._out.items():
            first = self._seq[peer] - len(copies)
            out.setdefault(peer, []).append(Events(first, tuple(copies)))
        due = self._ack_due
        if due:
            links = self.core.gpp.links
            durable = self.durable
            for peer in [p for p, n in due.items() if n >= ACK_EVERY or p in self._out]:
                if peer in links:
                    if durable:
                        upto = self._safe_upto(peer)
                        also = tuple(s for s in self._done.pop(peer, ()) if s > upto)
                        out.setdefault(peer, []).append(EventAck(upto, also))
                    else:
                        out.setdefault(peer, []).append(EventAck(self._recv[peer]))
                del due[peer]
        self._out = {}
        return out
