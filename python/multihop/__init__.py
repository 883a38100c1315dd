"""multihop: a Barrelfish-style multi-hop messaging runtime (public API)."""

from __future__ import annotations

from multihop.errors import (
    BindError,
    ChannelClosed,
    ExportError,
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

__all__ = [
    "BindError",
    "ChannelClosed",
    "ExportError",
    "IdlError",
    "MessageTooLarge",
    "MonitorError",
    "MultihopError",
    "ProtocolError",
    "RoutingError",
    "RuntimeExists",
    "RuntimeNotFound",
    "Timeout",
    "TxBusy",
]
