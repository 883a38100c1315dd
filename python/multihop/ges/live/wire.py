"""Protocol messages to and from the generated stubs of ``ges_broker.if`` and ``ges_client.if``.

:func:`encode` turns a :mod:`multihop.ges.messages` value a broker sends to a
neighbour into the bytes of its Flounder message(s) (a large batch is split);
:func:`decode_protocol` turns a decoded ``ges_broker`` record back into the
protocol value; :func:`encode_for_client` and :func:`decode_from_client` do the
same for the client interface.  A batch of events is one message of typed
arrays: per event a head of fixed fields, its unit lists one after another in
``units`` and its strings and payload one after another in ``text`` (the head
gives the lengths).  No message is packed by hand in Python: the stubs pack them, and the
brokers' hot path, the ``events`` batches and the clients' ``deliver`` messages, is encoded (and the
batches decoded) natively (``encode_events``, ``decode_events``, ``encode_deliver`` of ``multihop._ges``,
the GES native module (crate ``core-rs/ges``), the same bytes as the stubs;
``MULTIHOP_GES_NATIVE=0`` in a broker's environment uses the stub and the Python loops here,
which the tests keep as the reference).
"""

from __future__ import annotations

import os
from typing import Any

from multihop import _ges
from multihop.errors import ProtocolError
from multihop.ges.connection import Connection
from multihop.ges.event import EventData, EventId, validate_event
from multihop.ges.live import durable_wire
from multihop.ges.live import ges_broker_if as stub
from multihop.ges.live import ges_client_if as client_stub
from multihop.ges.messages import (
    DOWN,
    UP,
    ActiveQuery,
    ActiveReply,
    Connections,
    Deliver,
    EventAck,
    EventCopy,
    Events,
    JoinReply,
    JoinRequest,
    ProfileAck,
    ProfileResync,
    ProfileUpdate,
    Publish,
    Refused,
    Relay,
    Subscribe,
    Unsubscribe,
)
from multihop.ges.profile import chain_text, parse_chain

__all__ = [
    "KIND_BROKER",
    "KIND_CLIENT",
    "KIND_CONTROL",
    "KIND_JOINER",
    "MAX_MESSAGE",
    "encode",
    "decode",
    "decode_protocol",
    "encode_for_client",
    "decode_from_client",
    "service_name",
    "transport_of",
    "TRANSPORTS",
    "stub",
    "client_stub",
]

#: ``hello.kind`` values
KIND_BROKER, KIND_CLIENT, KIND_CONTROL = 1, 2, 3
#: a broker not yet in the system asking for an address (NAP): it may send ``join_request`` only
KIND_JOINER = 4
#: records per ``connections`` message (the interface's maximum)
MAX_RECORDS = 4096
#: the largest channel message brokers and clients bind for (the most a multi-hop channel carries)
MAX_MESSAGE = 1 << 20
#: a batch of events is split when its text would pass this (an event's payload is at most 512 KiB)
BATCH_TEXT = 256 << 10
#: what may carry a system's events on a runtime (``LiveSystem.up(transport=...)``, ``ges up --transport``):
#: direct UMP channels between the processes (the default), or multi-hop channels through the monitors
TRANSPORTS = ("ump", "multihop")


def transport_of(config: dict[str, Any]) -> str:
    """The transport a system's brokers and clients bind their channels with, from its ``ges.json``
    (``"multihop"`` for a file written before there was a choice)."""
    t = config.get("transport", "multihop")
    if t not in TRANSPORTS:
        raise ValueError(f"ges.json: transport must be one of {', '.join(TRANSPORTS)}, got {t!r}")
    return str(t)


_rec = stub.connection
# heads are built and read as plain tuples in these field orders: a changed interface must change this code too
_HEAD_FIELDS = (
    "origin",
    "timestamp",
    "sequence",
    "incarnation",
    "hops",
    "mode",
    "level",
    "ntargets",
    "nreached",
    "nleft",
    "publisher_len",
    "signature_len",
    "values_len",
    "payload_len",
)
_DHEAD_FIELDS = ("timestamp", "sequence", "incarnation", "publisher_len", "signature_len", "values_len", "payload_len")
if stub.event_head._fields != _HEAD_FIELDS or client_stub.delivery_head._fields != _DHEAD_FIELDS:
    raise ImportError("ges_broker.event_head / ges_client.delivery_head changed: update multihop.ges.live.wire")
_enc = stub.encode
_cenc = client_stub.encode
decode = stub.decode
_LIST = "\x1c"
#: builds a NamedTuple from its fields in order without the Python-level ``__new__`` (half the cost per event)
_new = tuple.__new__
#: event batches through the native codec (``multihop._ges``) (``MULTIHOP_GES_NATIVE=0``: the stub and the loops below)
NATIVE = os.environ.get("MULTIHOP_GES_NATIVE", "1") != "0"
_EVENTS_NUMBER = stub.MESSAGE_NUMBERS["events"].to_bytes(2, "little")


def service_name(system: str, address: str) -> str:
    """The runtime service a broker exports: ``ges/<system>/<address>``."""
    return f"ges/{system}/{address}"


def _chains(chains: Any) -> str:
    return _LIST.join(chain_text(c) for c in chains)


def _parse_chains(text: str) -> tuple[Any, ...]:
    return tuple(parse_chain(t) for t in text.split(_LIST)) if text else ()


#: id(event) -> (event, its publisher, signature, values and payload lengths, its text: publisher, signature,
#: values and payload one after another); an event's text is made once per flush for every neighbour and client
#: it goes to
Memo = dict[int, tuple[EventData, int, int, int, int, bytes]]


def _text(ev: EventData, memo: Memo | None) -> tuple[EventData, int, int, int, int, bytes]:
    if memo is not None:
        hit = memo.get(id(ev))
        if hit is not None:
            return hit
    eid, sig, val, payload = ev
    p, s, v = eid[0].encode(), sig.encode(), val.encode()
    t = (ev, len(p), len(s), len(v), len(payload), b"".join((p, s, v, payload)))  # (ev keeps its id unique)
    if memo is not None:
        memo[id(ev)] = t
    return t


def _events(first: int, copies: tuple[EventCopy, ...], memo: Memo | None) -> list[bytes]:
    """``events`` messages for the copies numbered from ``first``: a new message when the text would pass
    ``BATCH_TEXT`` or the heads 4096."""
    out: list[bytes] = []
    heads: list[tuple[int, ...]] = []
    units: list[int] = []
    text: list[bytes] = []
    size = 0
    for ev, origin, mode, level, targets, reached, hops, left in copies:
        _, plen, slen, vlen, ylen, blob = _text(ev, memo)
        if heads and (size + len(blob) + 64 > BATCH_TEXT or len(heads) == 4096):
            out.append(_enc("events", first_seq=first, heads=heads, units=units, text=b"".join(text)))
            first += len(heads)
            heads, units, text, size = [], [], [], 0
        eid = ev[0]
        # a plain tuple in ``event_head``'s field order (the stub packs any sequence of its fields)
        heads.append((origin, eid[1], eid[2], eid[3], hops, mode, level, len(targets), len(reached), len(left), plen, slen, vlen, ylen))
        units += targets
        units += reached
        units += left
        text.append(blob)
        size += len(blob) + 64
    out.append(_enc("events", first_seq=first, heads=heads, units=units, text=b"".join(text)))
    return out


def encode(msg: Any, memo: Memo | None = None) -> list[bytes]:
    """The Flounder message(s) carrying ``msg`` to a neighbour broker (``memo``: events' texts already
    made in this flush, see :data:`Memo`)."""
    t = type(msg)
    if t is Events:
        if NATIVE:
            return _ges.encode_events(msg.first_seq, msg.copies, BATCH_TEXT)
        return _events(msg.first_seq, msg.copies, memo)
    if t is EventAck:
        if msg.also or msg.upto < 0:
            return [durable_wire.encode_ack(msg)]
        return [_enc("event_ack", upto=msg.upto)]
    if t is Relay:
        return durable_wire.encode_relay(msg)
    if t is Connections:
        recs = [_rec(c.origin, c.peer, c.incarnation, c.version, c.cost, c.level, x, c.dead) for c, x in msg.records]
        return [_enc("connections", recs=recs[i : i + MAX_RECORDS]) for i in range(0, len(recs), MAX_RECORDS)] or [_enc("connections", recs=[])]
    if t is ProfileUpdate:
        return [
            _enc(
                "profile_update",
                origin=msg.origin,
                version=msg.version,
                full=msg.full,
                added=_chains(msg.added),
                removed=_chains(msg.removed),
                dests=list(msg.dests),
                left=list(msg.left),
            )
        ]
    if t is ProfileAck:
        return [_enc("profile_ack", origin=msg.origin, decider=msg.decider, version=msg.version, left=list(msg.left))]
    if t is ProfileResync:
        return [_enc("profile_resync", origin=msg.origin, decider=msg.decider, left=list(msg.left))]
    if t is JoinRequest:
        return [
            _enc(
                "join_request",
                request=_u64(msg.request),
                level=msg.level,
                unit=msg.unit,
                target=msg.target,
                path=[_u64(p) for p in msg.path],
                tried=list(msg.tried),
            )
        ]
    if t is JoinReply:
        return [
            _enc(
                "join_reply",
                request=_u64(msg.request),
                accepted_by=msg.accepted_by,
                assigned=msg.assigned,
                gatekeepers=list(msg.gatekeepers),
                path=[_u64(p) for p in msg.path],
                reason=msg.reason,
            )
        ]
    raise TypeError(f"no Flounder message for {t.__name__}")


def _decode_events(rec: Any) -> Events:
    units, text = rec.units, rec.text
    ui = ti = 0
    copies: list[EventCopy] = []
    append = copies.append
    nu, nt = len(units), len(text)
    try:
        # heads unpacked as tuples (field order of ``event_head``): no attribute lookup per field
        for origin, ts, seq, inc, hops, mode, level, ntargets, nreached, nleft, plen, slen, vlen, ylen in rec.heads:
            if mode != UP and mode != DOWN:
                raise ValueError(f"mode {mode}")
            a = ui + ntargets
            b = a + nreached
            c = b + nleft
            p1 = ti + plen
            p2 = p1 + slen
            p3 = p2 + vlen
            p4 = p3 + ylen
            if c > nu or p4 > nt:
                raise ValueError("lengths run past the arrays")
            ev = _new(EventData, (_new(EventId, (text[ti:p1].decode(), ts, seq, inc)), text[p1:p2].decode(), text[p2:p3].decode(), text[p3:p4]))
            append(_new(EventCopy, (ev, origin, mode, level, tuple(units[ui:a]), tuple(units[a:b]), hops, tuple(units[b:c]) if nleft else ())))
            ui, ti = c, p4
        if ui != nu or ti != nt:
            raise ValueError("bytes left over after the last event")
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"ges_broker.events: malformed batch: {e}") from None
    return Events(rec.first_seq, tuple(copies))


def _u64(x: int) -> int:
    """A NAP request id or path entry on the wire: a newcomer has a negative id in a broker (its
    channel's); the interface's fields are uint64, so they travel in two's complement."""
    return x & 0xFFFF_FFFF_FFFF_FFFF


def _s64(x: int) -> int:
    """The inverse of :func:`_u64` (broker codes stay below 2**63: levels below 8 in their top bits)."""
    return x - (1 << 64) if x >= 1 << 63 else x


def decode_events(data: bytes) -> Events | None:
    """The ``events`` batch in ``data`` decoded natively, or None if ``data`` is another message (or
    the native codec is off): then :func:`decode` and :func:`decode_protocol` do it.

    Raises ProtocolError naming what is malformed, as they do.
    """
    if not NATIVE or data[:2] != _EVENTS_NUMBER:
        return None
    try:
        first, copies = _ges.decode_events(data, EventId, EventData, EventCopy)
    except ValueError as e:
        raise ProtocolError(f"ges_broker.events: malformed batch: {e}") from None
    return Events(first, copies)


def decode_protocol(rec: Any) -> Any:
    """The protocol value of a decoded ``ges_broker`` record (None for control messages).

    Raises ProtocolError for a message whose typed fields decode but whose content does not.
    """
    name = rec.name
    if name == "events":
        return _decode_events(rec)
    if name == "event_ack":
        return EventAck(rec.upto)
    if name == "event_ack_also":
        return EventAck(_s64(rec.upto), tuple(rec.also))
    if name == "durable":
        return durable_wire.decode_relay(rec)
    if name == "connections":
        create = Connection.create
        return Connections(tuple((create(r.origin, r.peer, r.level, r.incarnation, r.cost, r.version, r.dead), r.near) for r in rec.recs))
    try:
        if name == "profile_update":
            return ProfileUpdate(
                rec.origin, rec.version, rec.full, _parse_chains(rec.added), _parse_chains(rec.removed), tuple(rec.dests), tuple(rec.left)
            )
    except ValueError as e:
        raise ProtocolError(f"ges_broker.profile_update: {e}") from None
    if name == "profile_ack":
        return ProfileAck(rec.origin, rec.decider, rec.version, tuple(rec.left))
    if name == "profile_resync":
        return ProfileResync(rec.origin, rec.decider, tuple(rec.left))
    if name == "join_request":
        return JoinRequest(_s64(rec.request), rec.level, rec.unit, rec.target, tuple(map(_s64, rec.path)), tuple(rec.tried))
    if name == "join_reply":
        return JoinReply(_s64(rec.request), rec.accepted_by, rec.assigned, tuple(rec.gatekeepers), tuple(map(_s64, rec.path)), rec.reason)
    return None


# ---- clients ------------------------------------------------------------------------------------


def _deliver(events: tuple[EventData, ...], memo: Memo | None) -> list[bytes]:
    """``deliver`` messages for the events, cut as :func:`_events` cuts."""
    out: list[bytes] = []
    heads: list[tuple[int, ...]] = []
    text: list[bytes] = []
    size = 0
    for ev in events:
        _, plen, slen, vlen, ylen, blob = _text(ev, memo)
        if heads and (size + len(blob) + 64 > BATCH_TEXT or len(heads) == 4096):
            out.append(_cenc("deliver", heads=heads, text=b"".join(text)))
            heads, text, size = [], [], 0
        eid = ev[0]
        heads.append((eid[1], eid[2], eid[3], plen, slen, vlen, ylen))  # ``delivery_head``'s field order
        text.append(blob)
        size += len(blob) + 64
    out.append(_cenc("deliver", heads=heads, text=b"".join(text)))
    return out


def encode_for_client(msg: Any, memo: Memo | None = None) -> list[bytes]:
    """The ``ges_client`` message(s) carrying a broker's message to a client (a large delivery is split;
    ``memo`` as for :func:`encode`)."""
    t = type(msg)
    if t is Deliver:
        if NATIVE:
            return _ges.encode_deliver(msg.events, BATCH_TEXT)
        return _deliver(msg.events, memo)
    if t is ActiveReply:
        return [_cenc("active_response", level=msg.level)]
    if t is Refused:
        return [_cenc("refused", what=msg.what[:64], reason=msg.reason[:500])]
    out = durable_wire.encode_durable_for_client(msg)
    if out is not None:
        return out
    raise TypeError(f"no client message for {t.__name__}")


def decode_deliveries(rec: Any) -> list[EventData]:
    """The events of a ``deliver`` record, in order (raises ProtocolError if its lengths do not add up)."""
    text = rec.text
    ti = 0
    out: list[EventData] = []
    append = out.append
    try:
        # heads unpacked as tuples (field order of ``delivery_head``)
        for ts, seq, inc, plen, slen, vlen, ylen in rec.heads:
            p1 = ti + plen
            p2 = p1 + slen
            p3 = p2 + vlen
            p4 = p3 + ylen
            append(_new(EventData, (_new(EventId, (text[ti:p1].decode(), ts, seq, inc)), text[p1:p2].decode(), text[p2:p3].decode(), text[p3:p4])))
            ti = p4
        if ti != len(text):
            raise ValueError("bytes left over")
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"ges_client.deliver: malformed batch: {e}") from None
    return out


def decode_from_client(rec: Any, client: str, incarnation: int) -> Any:
    """The protocol value of a decoded ``ges_client`` record from client ``client``; ValueError if malformed."""
    name = rec.name
    if name == "publish":
        ev = EventData(EventId(client, rec.timestamp, rec.sequence, incarnation), rec.signature, rec.values, rec.payload)
        validate_event(ev)
        return Publish(ev)
    if name == "subscribe":
        return Subscribe(rec.sub, parse_chain(rec.chain))
    if name == "unsubscribe":
        return Unsubscribe(rec.sub)
    if name == "active_call":
        return ActiveQuery(rec.sub)
    msg = durable_wire.decode_durable_from_client(rec, client)
    if msg is not None:
        return msg
    raise ValueError(f"a client cannot send {name}")
