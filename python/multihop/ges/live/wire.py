"""Protocol messages to and from the generated stubs of ``ges_broker.if`` and ``ges_client.if``.

:func:`encode` turns a :mod:`multihop.ges.messages` value a broker sends to a
neighbour into the bytes of its Flounder message(s) (a large batch is split);
:func:`decode_protocol` turns a decoded ``ges_broker`` record back into the
protocol value; :func:`encode_for_client` and :func:`decode_from_client` do the
same for the client interface.  A batch of events is one message of typed
arrays: per event a head of fixed fields, its unit lists one after another in
``units`` and its strings and payload one after another in ``text`` (the head
gives the lengths).  No message is packed by hand.
"""

from __future__ import annotations

from typing import Any

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
    "KIND_BROKER", "KIND_CLIENT", "KIND_CONTROL", "KIND_JOINER", "MAX_MESSAGE",
    "encode", "decode", "decode_protocol", "encode_for_client", "decode_from_client",
    "service_name", "stub", "client_stub",
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

_rec = stub.connection
_head = stub.event_head
_dhead = client_stub.delivery_head
_enc = stub.encode
_cenc = client_stub.encode
decode = stub.decode
_LIST = "\x1c"


def service_name(system: str, address: str) -> str:
    """The runtime service a broker exports: ``ges/<system>/<address>``."""
    return f"ges/{system}/{address}"


def _chains(chains: Any) -> str:
    return _LIST.join(chain_text(c) for c in chains)


def _parse_chains(text: str) -> tuple[Any, ...]:
    return tuple(parse_chain(t) for t in text.split(_LIST)) if text else ()


def _events(first: int, copies: list[EventCopy]) -> bytes:
    heads, units, text = [], [], []
    for c in copies:
        ev = c.event
        eid = ev.id
        pub, sig, val = eid.publisher.encode(), ev.signature.encode(), ev.values.encode()
        heads.append(_head(c.origin, eid.timestamp, eid.sequence, eid.incarnation, c.hops, c.mode, c.level,
                           len(c.targets), len(c.reached), len(c.left), len(pub), len(sig), len(val), len(ev.payload)))
        units += c.targets
        units += c.reached
        units += c.left
        text += (pub, sig, val, ev.payload)
    return _enc("events", first_seq=first, heads=heads, units=units, text=b"".join(text))


def encode(msg: Any) -> list[bytes]:
    """The Flounder message(s) carrying ``msg`` to a neighbour broker."""
    t = type(msg)
    if t is Events:
        out, batch, size, first = [], [], 0, msg.first_seq
        for c in msg.copies:
            n = len(c.event.payload) + len(c.event.values) + 64
            if batch and (size + n > BATCH_TEXT or len(batch) == 4096):
                out.append(_events(first, batch))
                first += len(batch)
                batch, size = [], 0
            batch.append(c)
            size += n
        out.append(_events(first, batch))
        return out
    if t is EventAck:
        if msg.also or msg.upto < 0:
            return [durable_wire.encode_ack(msg)]
        return [_enc("event_ack", upto=msg.upto)]
    if t is Relay:
        return durable_wire.encode_relay(msg)
    if t is Connections:
        recs = [_rec(c.origin, c.peer, c.incarnation, c.version, c.cost, c.level, x, c.dead) for c, x in msg.records]
        return [_enc("connections", recs=recs[i : i + MAX_RECORDS]) for i in range(0, len(recs), MAX_RECORDS)] or [
            _enc("connections", recs=[])
        ]
    if t is ProfileUpdate:
        return [_enc("profile_update", origin=msg.origin, version=msg.version, full=msg.full, added=_chains(msg.added),
                     removed=_chains(msg.removed), dests=list(msg.dests), left=list(msg.left))]
    if t is ProfileAck:
        return [_enc("profile_ack", origin=msg.origin, decider=msg.decider, version=msg.version, left=list(msg.left))]
    if t is ProfileResync:
        return [_enc("profile_resync", origin=msg.origin, decider=msg.decider, left=list(msg.left))]
    if t is JoinRequest:
        return [_enc("join_request", request=_u64(msg.request), level=msg.level, unit=msg.unit, target=msg.target,
                     path=[_u64(p) for p in msg.path], tried=list(msg.tried))]
    if t is JoinReply:
        return [_enc("join_reply", request=_u64(msg.request), accepted_by=msg.accepted_by, assigned=msg.assigned,
                     gatekeepers=list(msg.gatekeepers), path=[_u64(p) for p in msg.path], reason=msg.reason)]
    raise TypeError(f"no Flounder message for {t.__name__}")


def _decode_events(rec: Any) -> Events:
    units, text = rec.units, rec.text
    ui = ti = 0
    copies = []
    try:
        for h in rec.heads:
            if h.mode not in (UP, DOWN):
                raise ValueError(f"mode {h.mode}")
            a = ui + h.ntargets
            b = a + h.nreached
            c = b + h.nleft
            p1 = ti + h.publisher_len
            p2 = p1 + h.signature_len
            p3 = p2 + h.values_len
            p4 = p3 + h.payload_len
            if c > len(units) or p4 > len(text):
                raise ValueError("lengths run past the arrays")
            ev = EventData(EventId(text[ti:p1].decode(), h.timestamp, h.sequence, h.incarnation),
                           text[p1:p2].decode(), text[p2:p3].decode(), text[p3:p4])
            copies.append(EventCopy(ev, h.origin, h.mode, h.level, tuple(units[ui:a]), tuple(units[a:b]), h.hops, tuple(units[b:c])))
            ui, ti = c, p4
        if ui != len(units) or ti != len(text):
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
            return ProfileUpdate(rec.origin, rec.version, rec.full, _parse_chains(rec.added), _parse_chains(rec.removed), tuple(rec.dests), tuple(rec.left))
    except ValueError as e:
        raise ProtocolError(f"ges_broker.profile_update: {e}") from None
    if name == "profile_ack":
        return ProfileAck(rec.origin, rec.decider, rec.version, tuple(rec.left))
    if name == "profile_resync":
        return ProfileResync(rec.origin, rec.decider, tuple(rec.left))
    if name == "join_request":
        return JoinRequest(_s64(rec.request), rec.level, rec.unit, rec.target, tuple(map(_s64, rec.path)), tuple(rec.tried))
    if name == "join_reply":
        return JoinReply(_s64(rec.request), rec.accepted_by, rec.assigned, tuple(rec.gatekeepers),
                         tuple(map(_s64, rec.path)), rec.reason)
    return None


# ---- clients ------------------------------------------------------------------------------------


def _deliver(events: list[EventData]) -> bytes:
    heads, text = [], []
    for ev in events:
        eid = ev.id
        pub, sig, val = eid.publisher.encode(), ev.signature.encode(), ev.values.encode()
        heads.append(_dhead(eid.timestamp, eid.sequence, eid.incarnation, len(pub), len(sig), len(val), len(ev.payload)))
        text += (pub, sig, val, ev.payload)
    return _cenc("deliver", heads=heads, text=b"".join(text))


def encode_for_client(msg: Any) -> list[bytes]:
    """The ``ges_client`` message(s) carrying a broker's message to a client (a large delivery is split)."""
    t = type(msg)
    if t is Deliver:
        out, batch, size = [], [], 0
        for ev in msg.events:
            n = len(ev.payload) + len(ev.values) + 64
            if batch and (size + n > BATCH_TEXT or len(batch) == 4096):
                out.append(_deliver(batch))
                batch, size = [], 0
            batch.append(ev)
            size += n
        out.append(_deliver(batch))
        return out
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
    out = []
    try:
        for h in rec.heads:
            p1 = ti + h.publisher_len
            p2 = p1 + h.signature_len
            p3 = p2 + h.values_len
            p4 = p3 + h.payload_len
            out.append(EventData(EventId(text[ti:p1].decode(), h.timestamp, h.sequence, h.incarnation),
                                 text[p1:p2].decode(), text[p2:p3].decode(), text[p3:p4]))
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
