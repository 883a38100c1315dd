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
cross-socket traffic on the leaders' links.  The decision costs one look at
``runtime.json`` and one status call to the initial monitor (which holds the
registry): 0.16 ms alone, and a UMP bind left to "auto" took 0.75 ms against
0.42 ms named explicitly (medians, ``pytest benches/micro --benchmark-only -k
bind``, this 2-CPU VM under load).

The dispatcher's runtime is found by its monitor's pid among the runtimes of
this user (``runtime.json`` of each directory under
:func:`multihop.paths.runtime_root`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from multihop import _core
from multihop.errors import BindError
from multihop.paths import monitor_socket, runtime_root

__all__ = ["TRANSPORTS", "bind_channel", "choose_transport", "runtime_of"]

TRANSPORTS = ("auto", "ump", "multihop")
"""What a generated binding's ``bind`` takes as ``transport``."""


def runtime_of(d: _core.Dispatcher) -> tuple[Path, dict[str, Any]]:
    """(directory, ``runtime.json`` contents) of the runtime ``d`` is attached to.

    Raises:
        BindError: no runtime of this user has ``d``'s monitor (it stopped).
    """
    pid = d.monitor_pid
    root = runtime_root()
    for meta_file in sorted(root.glob("*/runtime.json")):
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError):
            continue  # a runtime starting or stopping right now
        if any(m.get("pid") == pid for m in meta.get("monitors", [])):
            return meta_file.parent, meta
    raise BindError(f"the monitor of this dispatcher (pid {pid}, core {d.core}) belongs to no runtime under {root}")


def _service_core(directory: Path, meta: dict[str, Any], service: str | int) -> int:
    """The core of the dispatcher that exports ``service`` (a name, or an iref)."""
    if isinstance(service, int):
        return service >> 40  # an iref carries its exporter's core in its top bits
    initial = int(meta["cores"][0])
    status = _core.monitor_status(str(monitor_socket(directory, initial)))
    for entry in status.get("registry") or []:
        if entry["name"] == service:
            return int(entry["core"])
    raise BindError(f"no service {service!r} is exported in runtime {meta.get('name', directory.name)!r}")


def choose_transport(d: _core.Dispatcher, service: str | int) -> str:
    """The transport "auto" picks for binding ``d`` to ``service``: ``"ump"`` or ``"multihop"``.

    ``"ump"`` when the service's core is ``d``'s core or a direct neighbour of
    it in the runtime's routing table, else ``"multihop"`` (see the module
    docstring).

    Raises:
        BindError: the service is not exported, or ``d``'s runtime is gone.
    """
    directory, meta = runtime_of(d)
    dst = _service_core(directory, meta, service)
    src = d.core
    if dst == src:
        return "ump"
    row = meta.get("table", {}).get(str(src), {})
    return "ump" if row.get(str(dst)) == dst else "multihop"


def bind_channel(
    d: _core.Dispatcher,
    service: str | int,
    transport: str = "auto",
    *,
    timeout: float | None = 5.0,
    window: int = 16,
    max_message: int | None = None,
) -> _core.Channel:
    """Bind ``d`` to ``service`` (a name or an iref) over ``transport``; return the channel.

    ``transport`` is ``"ump"``, ``"multihop"`` or ``"auto"`` (decided by
    :func:`choose_transport`).  ``timeout``, ``window`` and ``max_message`` are
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
    if transport == "auto":
        transport = choose_transport(d, service)
    target: dict[str, Any] = {"name": service} if isinstance(service, str) else {"iref": service}
    return d.bind(**target, transport=transport, timeout=timeout, max_message=max_message, window=window)
