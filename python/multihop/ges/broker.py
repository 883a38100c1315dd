"""One broker's protocol core: every GES machine of a broker behind one sans-IO interface.

Inputs: :meth:`BrokerCore.link_up`, :meth:`link_down`, :meth:`receive` (a
message from a neighbour) and :meth:`fire` (a timer the driver set).
Outputs: :meth:`take_outbox` (messages per neighbour) and :meth:`take_timers`
(timers to set, as ``(delay, name)``).  The simulator and the live broker
both drive this class; neither the class nor the machines inside it do I/O
or read a clock.
"""

from __future__ import annotations

from typing import Any

from multihop.ges.address import Address
from multihop.ges.costs import CostMatrix
from multihop.ges.gpp import GatewayPropagation
from multihop.ges.graph import ConnectivityGraph
from multihop.ges.messages import Connections, JoinReply, JoinRequest, Message

__all__ = ["BrokerCore"]


class BrokerCore:
    """The protocol state of broker ``address`` (see the module docstring)."""

    def __init__(self, address: Address, costs: CostMatrix | None = None, thresholds: tuple[int, ...] = (8, 4)) -> None:
        self.address = address
        self.code = address.code
        self.levels = address.levels
        self.costs = costs or CostMatrix(self.levels)
        self.gpp = GatewayPropagation(self.code, self.levels, self.costs)
        self.thresholds = tuple(thresholds)
        self._out: dict[int, list[Message]] = {}
        self._timers: list[tuple[float, Any]] = []
        #: messages that did not fit the protocol (wrong kind, unknown peer): counted, dropped
        self.refused = 0
        from multihop.ges.nap import NodeOrganization

        self.nap = NodeOrganization(self)

    # ---- inputs -------------------------------------------------------------

    def link_up(self, peer: int, incarnation: int = 0, cost: int = 0) -> None:
        """A gateway to broker ``peer`` is up."""
        self.gpp.link_up(peer, incarnation, cost)

    def link_down(self, peer: int) -> None:
        """The gateway to broker ``peer`` is lost."""
        self.gpp.link_down(peer)
        self._out.pop(peer, None)

    def receive(self, peer: int, msg: Message) -> None:
        """A message from neighbour ``peer`` (or, for NAP, from a broker not yet joined)."""
        if type(msg) is Connections:
            self.gpp.receive(peer, msg.records)
        elif type(msg) is JoinRequest:
            self.nap.on_request(peer, msg)
        elif type(msg) is JoinReply:
            self.nap.on_reply(peer, msg)
        else:
            self.refused += 1

    def fire(self, name: Any) -> None:
        """A timer set through :meth:`take_timers` fired."""

    def send(self, peer: int, msg: Message) -> None:
        """Queue ``msg`` for neighbour ``peer`` (used by the machines)."""
        self._out.setdefault(peer, []).append(msg)

    # ---- outputs -------------------------------------------------------------

    def take_outbox(self) -> dict[int, list[Message]]:
        """Messages to send, per neighbour, in order (GPP records as one batch first); empties the outbox."""
        out: dict[int, list[Message]] = {}
        for peer, records in self.gpp.take_outbox().items():
            out[peer] = [Connections(tuple(records))]
        for peer, msgs in self._out.items():
            out.setdefault(peer, []).extend(msgs)
        self._out = {}
        return out

    def take_timers(self) -> list[tuple[float, Any]]:
        """Timers to set: ``(delay in seconds, name)``; the driver calls :meth:`fire` with the name."""
        t, self._timers = self._timers, []
        return t

    # ---- views ------------------------------------------------------------------

    def graph(self) -> ConnectivityGraph:
        """This broker's :class:`~multihop.ges.graph.ConnectivityGraph`."""
        return self.gpp.graph()

    def gatekeeper_levels(self) -> set[int]:
        """Levels of this broker's live gateways."""
        return self.gpp.gatekeeper_levels()
