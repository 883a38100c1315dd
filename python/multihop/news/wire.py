"""The dispatch messages on the wire: the generated Flounder stubs of ``flounder-idl/dispatch.if``.

The machines build and read the generated record classes directly
(``M.news(...)``, ``rec.name``), so the Flounder interface is the one
definition of every message; the drivers turn records into bytes with
:func:`encode` and back with :func:`decode` (``DecodeError`` for anything
that is not one of these messages).  ``dispatch_if.py`` is generated, and
type checkers read its typed stub ``dispatch_if.pyi`` instead (each message's
record class with its typed fields): both are listed in
:mod:`multihop.idl.generated_files` (``multihop stubgen --all`` regenerates
them, ``multihop stubgen --check`` checks them).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar, cast

from multihop.flounder.errors import DecodeError
from multihop.flounder.wire import Record
from multihop.news import dispatch_if as M
from multihop.news.ids import Nid

__all__ = ["M", "Record", "encode", "decode", "DecodeError", "CLIENT_KINDS", "Handler", "route"]

R = TypeVar("R", bound=Record)

Handler = Callable[[Nid, Record], None]
"""What a machine's message table holds: a function of the sending node and any record."""

_ENCODERS: dict[int, Callable[..., bytes]] = {}
for _name, _number in M.MESSAGE_NUMBERS.items():
    _cls = getattr(M.messages, _name)

    def _make(name: str, fields: tuple[str, ...]) -> Callable[..., bytes]:
        def enc(*values: Any) -> bytes:
            return M.encode(name, **dict(zip(fields, values, strict=False)))

        return enc

    _ENCODERS[_number] = _make(_name, _cls._fields)

CLIENT_KINDS: dict[int, str] = {
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


def route(cls: type[R], handler: Callable[[Nid, R], None]) -> tuple[str, Handler]:
    """An entry of a message table looked up by ``rec.name``: the name of ``cls`` and its handler.

    The table may hold ``handler`` as taking any record because it is called only with records
    whose name is ``cls.name``, and the generated module has exactly one class per message name
    (records built in-process and decoded ones alike).  A type checker cannot tie a string key to
    a class, hence the cast; the alternative, an ``isinstance`` per message, costs every message
    a call through a wrapper.
    """
    return cls.name, cast(Handler, handler)
