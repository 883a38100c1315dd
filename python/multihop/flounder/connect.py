"""Which transport a generated binding binds over, and the bind itself.

``mod.EchoBinding.bind(d, name, transport=...)`` takes ``"ump"``,
``"multihop"`` or ``"auto"`` (its default).  Flounder's generated bind tries
the interconnect drivers in a fixed order and keeps the first that can reach
the service (TN-006 §5.1: LMP first when both ends share a core, then the
others).  Here there are two drivers, and "auto" asks the runtime's routing
table which one fits, before binding:

* **UMP** when the two ends can share memory directly: the service's core is
  the client's own core, or the routing table gives the service's core as its
  own next hop from the client's core, that is the runtime has a direct link
  between the two cores.  With ``direct`` routing that is every pair; with
  ``fat-tree`` the cores of one socket and the socket leaders among
  themselves; with ``ring`` the neighbours on the ring.
* **multi-hop** otherwise: the runtime was set up (``ring``, ``fat-tree``)
  not to hold a point-to-point link between those cores, and the channel goes
  through the monitors the table names, as a TN-006 multi-hop channel does.

So the routing mode a runtime was started with is also its statement of which
cores may talk directly, and "auto" follows it: a ``direct`` runtime always
gets the fastest channel, a ``fat-tree`` runtime on a NUMA machine keeps
cross-socket traffic on the leaders' links.

The rule lives once, in the engine (``core-rs/dispatcher/src/transport_choice.rs``):
``Dispatcher.bind(..., transport="auto")`` resolves it with two questions to
the initial monitor (the registry's ``Lookup`` for the service's core, the
client core's routing row), and the C ABI's ``mh_bind(d, name, "auto", ...)``
is the same call.  ``Dispatcher.choose_transport`` asks the same two questions
without binding.
"""

from __future__ import annotations

from typing import Any

from multihop import _core
from multihop.defaults import DEFAULT_TIMEOUT, DEFAULT_WINDOW

__all__ = ["TRANSPORTS", "bind_channel", "choose_transport"]

TRANSPORTS = ("auto", "ump", "multihop")
"""What a generated binding's ``bind`` takes as ``transport``."""


def choose_transport(d: _core.Dispatcher, service: str | int) -> str:
    """The transport "auto" picks for binding ``d`` to ``service``: ``"ump"`` or ``"multihop"``.

    ``"ump"`` when the service's core is ``d``'s core or a direct neighbour of
    it in the runtime's routing table, else ``"multihop"`` (see the module
    docstring).

    Raises:
        BindError: the service is not exported, or ``d``'s runtime is gone.
    """
    if isinstance(service, str):
        return d.choose_transport(name=service)
    return d.choose_transport(iref=service)


def bind_channel(
    d: _core.Dispatcher,
    service: str | int,
    transport: str = "auto",
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    window: int = DEFAULT_WINDOW,
    max_message: int | None = None,
) -> _core.Channel:
    """Bind ``d`` to ``service`` (a name or an iref) over ``transport``; return the channel.

    ``transport`` is ``"ump"``, ``"multihop"`` or ``"auto"`` (resolved by the
    engine, as :func:`choose_transport` says).  ``timeout``, ``window`` and ``max_message`` are
    those of :meth:`multihop.Dispatcher.bind`.

    Raises:
        ValueError: an unknown transport.
        TypeError: ``service`` is neither a str nor an int.
        BindError, Timeout: as :meth:`multihop.Dispatcher.bind`.
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown transport {transport!r}: expected one of {', '.join(map(repr, TRANSPORTS))}")
    if isinstance(service, bool) or not isinstance(service, (str, int)):
        raise TypeError(f"service must be a name (str) or an iref (int), got {type(service).__name__}")
    target: dict[str, Any] = {"name": service} if isinstance(service, str) else {"iref": service}
    return d.bind(**target, transport=transport, timeout=timeout, max_message=max_message, window=window)
