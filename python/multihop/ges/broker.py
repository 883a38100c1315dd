"""One broker's protocol core: every GES machine of a broker behind one sans-IO interface.

Inputs: :meth:`BrokerCore.link_up`, :meth:`link_down`, :meth:`receive` (a
message from a neighbour broker), :meth:`client_attach`, :meth:`client_receive`,
:meth:`client_detach` (a client's channel), and :meth:`fire` (a timer the
driver set).  Outputs: :meth:`take_outbox` (messages per neighbour broker and
per client) and :meth:`take_timers`.  The simulator and the live broker both
drive this class; neither the class nor the machines inside it do I/O or read
a clock.

Machines: gateway propagation (:mod:`~multihop.ges.gpp`), node organization
(:mod:`~multihop.ges.nap`), profile propagation (:mod:`~multihop.ges.ppp`),
event routing (:mod:`~multihop.ges.erp`), durability (:mod:`~multihop.ges.durability`).
Each takes this class as its broker, typed by what it uses of it
(:mod:`~multihop.ges.broker_view`), so none of them imports this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from multihop.ges.address import Address
from multihop.ges.costs import CostMatrix
from multihop.ges.durability import Durability
from multihop.ges.erp import EventRouting
from multihop.ges.gpp import GatewayPropagation
from multihop.ges.graph import ConnectivityGraph
from multihop.ges.messages import (
    ActiveQuery,
    ActiveReply,
    Attach,
    Connections,
    Deliver,
    DurableAck,
    DurableAttach,
    DurableNak,
    EventAck,
    Events,
    JoinReply,
    JoinRequest,
    ProfileAck,
    ProfileResync,
    ProfileUpdate,
    Publish,
    Refused,
    Relay,
    Subscribe,
    Unsubscribe,
)
from multihop.ges.nap import NodeOrganization
from multihop.ges.ppp import ProfilePropagation

if TYPE_CHECKING:
    from multihop.ges.native import NativeEventRouting
    from multihop.ges.storage import Storage

__all__ = ["BrokerCore", "ClientSession"]


class ClientSession:
    """A client attached to this broker: its id and incarnation."""

    __slots__ = ("client", "incarnation")

    def __init__(self, client: str, incarnation: int) -> None:
        self.client = client
        self.incarnation = incarnation


class BrokerCore:
    """The protocol state of broker ``address`` (see the module docstring)."""

    def __init__(
        self,
        address: Address,
        costs: CostMatrix | None = None,
        thresholds: tuple[int, ...] = (8, 4),
        *,
        storage_brokers: dict[int, int] | None = None,
        storage: "Storage | None" = None,
        epoch: int = 0,
        native: bool = False,
    ) -> None:
        """``storage_brokers`` (cluster unit -> its storage broker) turns durability on
        (:mod:`multihop.ges.durability`); ``storage`` is this broker's store if it is one;
        ``epoch`` counts the broker's restarts (its profile versions start above the old ones).

        ``native``: route events with the native engine (:class:`~multihop.ges.native.NativeEventRouting`,
        crate ``core-rs/ges``) instead of the Python reference (:class:`~multihop.ges.erp.EventRouting`); the
        profile graphs are then the native ones, which the engine decides with (durable mode too: the engine
        hands the store its calls, :mod:`multihop.ges.native`)."""
        self.address = address
        self.code = address.code
        self.levels = address.levels
        self.costs = costs or CostMatrix(self.levels)
        self.gpp = GatewayPropagation(self.code, self.levels, self.costs)
        self.thresholds = tuple(thresholds)
        self._out: dict[int, list[Any]] = {}
        #: durable mode: hop acknowledgements held while this broker's store cannot write (one per neighbour)
        self._held_acks: dict[int, EventAck] = {}
        #: durable mode: whether the store committed what the last :meth:`take_outbox` vouched for (a live
        #: broker's native engine holds its acknowledgements while it is False)
        self.store_safe = True
        self._timers: list[tuple[float, Any]] = []
        #: messages that did not fit the protocol (wrong kind, unknown peer): counted, dropped
        self.refused = 0
        self.nap = NodeOrganization(self)
        self.durable = storage_brokers is not None
        #: whether the native engine routes this broker's events
        self.native = native
        self.erp: EventRouting | NativeEventRouting
        if self.native:
            from multihop import _ges
            from multihop.ges.native import NativeEventRouting

            self.ppp = ProfilePropagation(self, graph_factory=_ges.ProfileGraph)
            self.erp = NativeEventRouting(self)
        else:
            self.ppp = ProfilePropagation(self)
            self.erp = EventRouting(self)
        #: client peer id (chosen by the driver) -> session
        self.clients: dict[int, ClientSession] = {}
        self.durability = Durability(self, storage_brokers or {}, storage)
        if self.durable:
            self.erp.durable = True
            # deciders take a restarted broker's snapshot as newer; a storage broker always sends one (even empty),
            # so a restarted decider knows when it has every profile
            self.ppp.version = (epoch << 32) + (storage is not None)
            self.durability.start(epoch)

    @property
    def event_router(self) -> EventRouting | NativeEventRouting:
        """The event routing, as durability uses it (stored entries routed as origin, parked copies)."""
        return self.erp

    # ---- broker inputs ------------------------------------------------------------------------

    def link_up(self, peer: int, incarnation: int = 0, cost: int = 0) -> None:
        """A gateway to broker ``peer`` is up."""
        self.gpp.link_up(peer, incarnation, cost)
        self.erp.forget_plans()
        if self.durable:
            self.durability.retry_all()

    def link_down(self, peer: int) -> None:
        """The gateway to broker ``peer`` is lost."""
        self.gpp.link_down(peer)
        self._out.pop(peer, None)
        self._held_acks.pop(peer, None)
        self.erp.link_down(peer)

    def receive(self, peer: int, msg: Any) -> None:
        """A message from neighbour ``peer`` (or, for NAP, from a broker not yet joined)."""
        t = type(msg)
        if t is Events:
            if peer in self.gpp.links:
                self.erp.on_events(peer, msg)
            else:
                self.refused += 1
        elif t is EventAck:
            self.erp.on_ack(peer, msg)
        elif t is Relay:
            self.durability.on_relay(msg)
        elif t is Connections:
            self.gpp.receive(peer, msg.records)
        elif t is ProfileUpdate:
            self.ppp.on_update(msg)
        elif t is ProfileAck or t is ProfileResync:
            self.ppp.on_control(msg)
        elif t is JoinRequest:
            self.nap.on_request(peer, msg)
        elif t is JoinReply:
            self.nap.on_reply(peer, msg)
        else:
            self.refused += 1

    # ---- client inputs -------------------------------------------------------------------------

    def client_attach(self, peer: int, msg: Attach | DurableAttach) -> None:
        """A client's channel opened with ``Attach`` or ``DurableAttach`` (``peer`` is the driver's id for the channel)."""
        if type(msg) is DurableAttach:
            if not self.durable:
                self.send(peer, Refused("DurableAttach", f"broker {self.address} runs without stable storage"))
                return
            self.clients[peer] = ClientSession(msg.client, msg.incarnation)
            self.durability.attach(peer, msg)
            return
        if self.durable:
            self.send(peer, Refused("Attach", f"broker {self.address} has stable storage: clients attach as durable clients"))
            return
        self.clients[peer] = ClientSession(msg.client, msg.incarnation)

    def client_detach(self, peer: int) -> None:
        """A client's channel closed: its subscriptions go."""
        if self.clients.pop(peer, None) is not None:
            if self.durable:
                self.durability.detach(peer)
                self._out.pop(peer, None)
                return
            self.ppp.client_gone(peer)
            self.erp.client_gone(peer)
            self._out.pop(peer, None)

    def client_receive(self, peer: int, msg: Any) -> None:
        """A message from an attached client; bad requests are answered with :class:`Refused`."""
        session = self.clients.get(peer)
        if session is None:
            self.refused += 1
            return
        t = type(msg)
        try:
            if self.durable:
                self._durable_request(peer, session, msg)
            elif t is Publish:
                if msg.event.id.publisher != session.client or msg.event.id.incarnation != session.incarnation:
                    raise ValueError(f"event id {msg.event.id} is not of this client ({session.client!r}, incarnation {session.incarnation})")
                self.erp.publish(msg.event)
            elif t is Subscribe:
                self.ppp.subscribe(peer, msg.sub, msg.chain)
            elif t is Unsubscribe:
                try:
                    self.ppp.unsubscribe(peer, msg.sub)
                except KeyError:
                    raise ValueError(f"no subscription {msg.sub}") from None
            elif t is ActiveQuery:
                try:
                    level = self.ppp.active_level(peer, msg.sub)
                except KeyError:
                    level = -1
                self.send(peer, ActiveReply(msg.sub, level))
            else:
                raise ValueError(f"a client cannot send {t.__name__}")
        except (ValueError, TypeError) as e:
            self.refused += 1
            self.send(peer, Refused(t.__name__, str(e)))

    def _durable_request(self, peer: int, session: ClientSession, msg: Any) -> None:
        t = type(msg)
        d = self.durability
        if t is Publish:
            i = msg.event.id
            if i.publisher != session.client or i.incarnation > session.incarnation:
                raise ValueError(f"event id {i} is not of this client ({session.client!r}, incarnation <= {session.incarnation})")
            d.publish(peer, msg.event, msg.prev)  # (the live wire validated it, as for plain clients)
        elif t is DurableAck:
            d.ack(peer, msg.upto, False)
        elif t is DurableNak:
            d.ack(peer, msg.after, True)
        elif t is Subscribe:
            d.subscribe(peer, msg.sub, msg.chain)
        elif t is Unsubscribe:
            d.subscribe(peer, msg.sub, None)
        elif t is ActiveQuery:
            d.active(peer, msg.sub)
        else:
            raise ValueError(f"a client cannot send {t.__name__}")

    def fire(self, name: Any) -> None:
        """A timer set through :meth:`take_timers` fired."""
        if type(name) is tuple and name and name[0] in ("dur-rto", "dur-retry", "dur-commit"):
            self.durability.fire(name)
            return
        self.erp.fire(name)

    def set_timer(self, delay: float, name: Any) -> None:
        """Ask the driver for a timer (used by the machines): :meth:`fire` gets ``name`` after ``delay`` seconds."""
        self._timers.append((delay, name))

    def send(self, peer: int, msg: Any) -> None:
        """Queue ``msg`` for neighbour or client ``peer`` (used by the machines)."""
        self._out.setdefault(peer, []).append(msg)

    # ---- outputs -------------------------------------------------------------------------------

    def take_outbox(self) -> dict[int, list[Any]]:
        """Messages to send, per neighbour or client, in order; empties the outbox.

        Per neighbour: connection records (one batch) first, then profile and join
        messages, then event copies and acknowledgements.  Per client: replies, then
        one :class:`Deliver` with its events in order.
        """
        if self.durable:
            # parked copies routed again now, before the store commits: what they store for its homed clients
            # is in the batch, so the acknowledgements they free vouch only for what the store holds
            self.erp.route_parked()
        self.durability.flush()
        st = self.durability.store
        # before any ack or "stored" this batch allows leaves; a store that cannot write (a full disk) keeps
        # its batch and holds what it vouches for: its own messages, and the hop acknowledgements
        safe = self.store_safe = st is None or st.commit()
        self.ppp.flush()
        out: dict[int, list[Any]] = {}
        for peer, records in self.gpp.take_outbox().items():
            out[peer] = [Connections(tuple(records))]
        for peer, msgs in self._out.items():
            out.setdefault(peer, []).extend(msgs)
        self._out = {}
        erp_out = self.erp.take()
        if not safe:
            for peer, msgs in erp_out.items():
                for m in msgs:
                    if type(m) is EventAck:
                        self._hold_ack(peer, m)
                    else:
                        out.setdefault(peer, []).append(m)
        else:
            if self._held_acks:
                held, self._held_acks = self._held_acks, {}
                for peer, ack in held.items():
                    if peer in self.gpp.links:
                        out.setdefault(peer, []).append(ack)
            for peer, msgs in erp_out.items():
                out.setdefault(peer, []).extend(msgs)
        for peer, evs in self.erp.take_deliveries().items():
            if peer in self.clients:
                out.setdefault(peer, []).append(Deliver(tuple(evs)))
        return out

    def _hold_ack(self, peer: int, ack: EventAck) -> None:
        """Keep a hop acknowledgement until the store's batch is committed (acknowledgements only grow: one
        merged acknowledgement per neighbour says everything the held ones said)."""
        old = self._held_acks.get(peer)
        if old is not None:
            upto = max(old.upto, ack.upto)
            ack = EventAck(upto, tuple(sorted({s for s in (*old.also, *ack.also) if s > upto})))
        self._held_acks[peer] = ack

    def take_timers(self) -> list[tuple[float, Any]]:
        """Timers to set: ``(delay in seconds, name)``; the driver calls :meth:`fire` with the name."""
        t, self._timers = self._timers, []
        return t

    # ---- views -------------------------------------------------------------------------------------

    def graph(self) -> ConnectivityGraph:
        """This broker's :class:`~multihop.ges.graph.ConnectivityGraph`."""
        return self.gpp.graph()

    def gatekeeper_levels(self) -> set[int]:
        """Levels of this broker's live gateways."""
        return self.gpp.gatekeeper_levels()
