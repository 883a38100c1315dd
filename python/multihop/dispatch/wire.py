"""The dispatch messages on the wire: the generated Flounder stubs of ``flounder-idl/dispatch.if``.

The machines build and read the generated record classes directly
(``M.news(...)``, ``rec.name``), so the Flounder interface is the one
definition of every message; the drivers turn records into bytes with
:func:`encode` and back with :func:`decode` (``DecodeError`` for anything
that is not one of these messages).  ``dispatch_if.py`` is generated:
regenerate it with ``multihop stubgen flounder-idl/dispatch.if --lang python
-o python/multihop/dispatch/dispatch_if.py`` (a test checks it is current).
"""

from __future__ import annotations

from typing import Any, Callable

from multihop.dispatch import dispatch_if as M
from multihop.idl.errors import DecodeError
from multihop.idl.wire import Record

__all__ = ["M", "Record", "encode", "decode", "DecodeError", "CLIENT_KINDS"]

_ENCODERS: dict[int, Callable[..., bytes]] = {}
for _name, _number in M.MESSAGE_NUMBERS.items():
    _cls = getattr(M.messages, _name)

    def _make(name: str, fields: tuple[str, ...]) -> Callable[..., bytes]:
        def enc(*values: Any) -> bytes:
            return M.encode(name, **dict(zip(fields, values)))

        return enc

    _ENCODERS[_number] = _make(_name, _cls._fields)

CLIENT_KINDS = {
    M.client_kind.CLIENT_SOURCE: "source",
    M.client_kind.CLIENT_SINK: "sink",
    M.client_kind.CLIENT_RELAY: "relay",
    M.client_kind.CLIENT_ADMIN: "admin",
}
"""Wire client kinds by name."""


def encode(rec: Record) -> bytes:
    """The bytes of a generated record (ValueError/TypeError naming the bad field)."""
    return _ENCODERS[rec.number](*rec._values())


def decode(data: bytes) -> Record:
    """The record of received bytes; raises :class:`DecodeError` if they are not a dispatch message."""
    return M.decode(data)
