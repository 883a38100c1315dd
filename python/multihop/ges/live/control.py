"""The control connection to a live broker: status, gateway changes, shutdown (rpcs of ``ges_broker.if``)."""

from __future__ import annotations

import json
from typing import Any

from multihop.defaults import DEFAULT_TIMEOUT
from multihop.ges.address import Address
from multihop.ges.live import wire
from multihop.ges.live.wire import KIND_CONTROL

__all__ = ["Control"]

UP, DOWN, COST, EXPECT = 1, 0, 2, 3


class Control:
    """A control channel to broker ``address`` of ``system``, bound from ``dispatcher``."""

    def __init__(self, dispatcher: Any, system: str, address: str, timeout: float = 10.0, runtime: str | None = None) -> None:
        """``runtime``: the broker runs on that other runtime of the fabric (bound as ``service@runtime``)."""
        self.address = address
        service = wire.service_name(system, address) + (f"@{runtime}" if runtime else "")
        self.ch = dispatcher.bind(service, transport="multihop", timeout=timeout)
        self.binding = wire.stub.Binding(self.ch)
        self.binding.tx.hello(kind=KIND_CONTROL, address=0, incarnation=0, cost=0, system=system, timeout=timeout)

    def status(self, timeout: float = 10.0) -> dict[str, Any]:
        """The broker's state (see :meth:`LiveBroker.status`)."""
        status: dict[str, Any] = json.loads(self.binding.rpc.status(timeout=timeout))  # LiveBroker.status's dict
        return status

    def gateway(self, peer: str, op: int, incarnation: int = 0, cost: int = 0, timeout: float = 10.0) -> None:
        """Dial the gateway to ``peer`` (``UP``), close it (``DOWN``), set its cost (``COST``), or
        announce that ``peer`` will dial (``EXPECT``). Raises ValueError with the broker's reason on refusal."""
        levels = len(self.address.split(".")) - 1
        r = self.binding.rpc.gateway(peer=Address(peer, levels).code, op=op, incarnation=incarnation, cost=cost, timeout=timeout)
        if r.result != 0:
            raise ValueError(f"broker {self.address}: {r.error}")

    def shutdown(self) -> None:
        """Ask the broker to stop."""
        self.binding.tx.shutdown(timeout=DEFAULT_TIMEOUT)

    def close(self) -> None:
        """Close the control channel."""
        self.ch.close()
