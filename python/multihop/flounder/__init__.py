"""Flounder run-time support: what generated bindings import when they run.

The compiler (:mod:`multihop.idl`: parser, checker, the Python and C back ends) turns an
interface file into a binding module; this package is what that module uses at run time,
as Barrelfish keeps ``lib/barrelfish/flounder_support.c`` apart from ``tools/flounder``.
It is part of the core: it imports nothing of the compiler or of any application.

* :mod:`~multihop.flounder.binding`: :class:`Binding`, the base of every generated
  ``<Name>Binding`` (receive side, handlers, rpc waiting, serving, asyncio);
* :mod:`~multihop.flounder.connect`: which transport ``bind(..., transport="auto")`` takes,
  and the bind itself;
* :mod:`~multihop.flounder.server`: :class:`Server`, the export side (a service whose clients
  get bindings, served by a handler);
* :mod:`~multihop.flounder.wire`: the codec's shared pieces (records, array packers, the slow
  path that explains a bad argument, the integer formats, :class:`FixedLayout`);
* :mod:`~multihop.flounder.errors`: :class:`DecodeError` and :class:`UnhandledMessage`.

The wire format is written down in ``flounder-idl/WIRE.md``.
"""

from __future__ import annotations

from multihop.flounder.binding import Binding, Rx
from multihop.flounder.connect import TRANSPORTS, bind_channel, choose_transport
from multihop.flounder.errors import DecodeError, UnhandledMessage
from multihop.flounder.server import STOP_SLICE, ServedBinding, Server
from multihop.flounder.wire import FixedLayout, Record

__all__ = [
    "Binding",
    "DecodeError",
    "FixedLayout",
    "Record",
    "Rx",
    "STOP_SLICE",
    "ServedBinding",
    "Server",
    "TRANSPORTS",
    "UnhandledMessage",
    "bind_channel",
    "choose_transport",
]
