"""What a broker's protocol machines see of the broker that runs them, as protocol types.

:class:`~multihop.ges.broker.BrokerCore` makes the machines (NAP, PPP, ERP, durability) and hands each itself;
a machine needs only the broker's identity, its gateways (:class:`~multihop.ges.gpp.GatewayPropagation`) and its
outputs (:meth:`send`, :meth:`set_timer`), plus, for ERP and durability, each other. Typing the machines against
:class:`BrokerView` (and the small views ERP and durability add) instead of ``BrokerCore`` keeps the imports one
way: ``broker`` imports the machines, and no machine imports ``broker``.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, TypeAlias

from multihop.ges.address import Address
from multihop.ges.event import EventData
from multihop.ges.gpp import GatewayPropagation
from multihop.ges.graph import ConnectivityGraph

__all__ = ["BrokerView", "Cause", "EventRouter"]

Cause: TypeAlias = tuple[Literal["in"], int, int, int] | tuple[Literal["entry"], int]
"""What ERP's copies are owed to in durable mode, told safe once every next hop acknowledged: a copy that came in
over a gateway ``("in", peer, link epoch, link seq)``, or a stored entry a storage broker routes as origin
``("entry", entry)``."""


class BrokerView(Protocol):
    """The broker as every machine sees it: identity, gateways, outputs."""

    @property
    def address(self) -> Address:
        """The broker's address."""
        ...

    @property
    def code(self) -> int:
        """The broker's address as a code."""
        ...

    @property
    def levels(self) -> int:
        """Levels of the hierarchy (1 + the highest unit level)."""
        ...

    @property
    def gpp(self) -> GatewayPropagation:
        """The broker's gateway propagation (its links, connections and routing)."""
        ...

    @property
    def thresholds(self) -> tuple[int, ...]:
        """NAP's most members per unit level."""
        ...

    #: messages that did not fit the protocol: counted, dropped
    refused: int

    def send(self, peer: int, msg: Any) -> None:
        """Queue ``msg`` for neighbour or client ``peer``."""
        ...

    def set_timer(self, delay: float, name: Any) -> None:
        """Ask the driver for timer ``name`` after ``delay`` seconds."""
        ...

    def client_detach(self, peer: int) -> None:
        """A client's channel is gone (or replaced)."""
        ...

    def graph(self) -> ConnectivityGraph:
        """The broker's connectivity graph."""
        ...


class EventRouter(Protocol):
    """What durability asks of the broker's event routing (ERP)."""

    def originate(self, ev: EventData, cause: Cause) -> None:
        """Route an event from this broker (a stored entry, owed to ``cause``)."""
        ...

    def retry_parked(self) -> None:
        """Route again the copies parked for want of a route."""
        ...
