"""multihop: a Barrelfish-style multi-hop messaging runtime (public API).

>>> import multihop as mh
>>> with mh.Runtime.start("demo", cores=[0, 1]) as rt:      # doctest: +SKIP
...     srv, cli = rt.dispatcher(core=1), rt.dispatcher(core=0)
...     svc = srv.export("echo")
...     ch = cli.bind("echo", transport="ump")
...     peer = svc.accept(timeout=5)
...     ch.send(b"ping"); peer.recv(timeout=1)
b'ping'
"""

from __future__ import annotations

import importlib
import types

from multihop import aio  # noqa: F401  (mh.aio.stats; the coroutines behind the *_async methods)
from multihop._core import MAX_HANDLES, Channel, Dispatcher, GroupPort, Handle, Service
from multihop.errors import (
    BindError,
    CapSendError,
    ChannelClosed,
    ExportError,
    HeldLost,
    IdlError,
    MessageTooLarge,
    MonitorError,
    MultihopError,
    ProtocolError,
    RoutingError,
    RuntimeExists,
    RuntimeNotFound,
    Timeout,
    TxBusy,
)
from multihop.fabric import Fabric
from multihop.runtime import Runtime
from multihop.topology import Topology

__version__ = "0.1.0"


def __getattr__(name: str) -> types.ModuleType:
    """``mh.idl`` (the Flounder compiler: ``mh.idl.load``, ``mh.idl.parse``), imported on first use.

    The core does not import the compiler, which stands a layer above it (docs/architecture.md);
    ``import multihop.idl`` is the same module.
    """
    if name == "idl":
        return importlib.import_module("multihop.idl")
    raise AttributeError(f"module 'multihop' has no attribute {name!r}")


__all__ = [
    "BindError",
    "CapSendError",
    "Channel",
    "ChannelClosed",
    "Dispatcher",
    "ExportError",
    "Fabric",
    "GroupPort",
    "Handle",
    "HeldLost",
    "IdlError",
    "MAX_HANDLES",
    "MessageTooLarge",
    "MonitorError",
    "MultihopError",
    "ProtocolError",
    "RoutingError",
    "Runtime",
    "RuntimeExists",
    "RuntimeNotFound",
    "Service",
    "Timeout",
    "Topology",
    "TxBusy",
    "aio",
    "idl",
]
