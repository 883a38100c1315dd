"""Protocol messages to and from the generated ``ges_broker`` stubs (no hand-packed bytes).

:func:`encode` turns a :mod:`multihop.ges.messages` value into the bytes of
its Flounder message (a batch of connection records may need several
messages: :func:`encode` returns a list); :func:`decode_protocol` turns a
decoded stub record back into the protocol value.
"""

from __future__ import annotations

from typing import Any

from multihop.ges.connection import Connection
from multihop.ges.live import ges_broker_if as stub
from multihop.ges.messages import Connections, JoinReply, JoinRequest, Message

__all__ = ["KIND_BROKER", "KIND_CLIENT", "KIND_CONTROL", "encode", "decode", "decode_protocol", "service_name", "stub"]

#: ``hello.kind`` values
KIND_BROKER, KIND_CLIENT, KIND_CONTROL = 1, 2, 3

#: records per ``connections`` message (the interface's maximum)
MAX_RECORDS = 4096

_rec = stub.connection
_enc = stub.encode
decode = stub.decode


def service_name(system: str, address: str) -> str:
    """The runtime service a broker exports: ``ges/<system>/<address>``."""
    return f"ges/{system}/{address}"


def encode(msg: Message) -> list[bytes]:
    """The Flounder message(s) carrying ``msg``."""
    t = type(msg)
    if t is Connections:
        recs = [_rec(c.origin, c.peer, c.incarnation, c.version, c.cost, c.level, x, c.dead) for c, x in msg.records]
        return [_enc("connections", recs=recs[i : i + MAX_RECORDS]) for i in range(0, len(recs), MAX_RECORDS)] or [
            _enc("connections", recs=[])
        ]
    if t is JoinRequest:
        return [_enc("join_request", request=msg.request, level=msg.level, unit=msg.unit, target=msg.target, path=list(msg.path), tried=list(msg.tried))]
    if t is JoinReply:
        return [
            _enc(
                "join_reply",
                request=msg.request,
                accepted_by=msg.accepted_by,
                assigned=msg.assigned,
                gatekeepers=list(msg.gatekeepers),
                path=list(msg.path),
                reason=msg.reason,
            )
        ]
    raise TypeError(f"no Flounder message for {t.__name__}")


def decode_protocol(rec: Any) -> Message | None:
    """The protocol value of a decoded stub record (None for messages that are not protocol messages)."""
    name = rec.name
    if name == "connections":
        create = Connection.create
        return Connections(tuple((create(r.origin, r.peer, r.level, r.incarnation, r.cost, r.version, r.dead), r.near) for r in rec.recs))
    if name == "join_request":
        return JoinRequest(rec.request, rec.level, rec.unit, rec.target, tuple(rec.path), tuple(rec.tried))
    if name == "join_reply":
        return JoinReply(rec.request, rec.accepted_by, rec.assigned, tuple(rec.gatekeepers), tuple(rec.path), rec.reason)
    return None
