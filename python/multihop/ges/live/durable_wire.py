"""Durability messages to and from the generated stubs (``ges_broker.durable``, ``event_ack_also`` and the
durable messages of ``ges_client.if``); :mod:`multihop.ges.live.wire` calls these.

A relayed message (:class:`~multihop.ges.messages.Relay`) is one ``durable`` record: ``kind`` says which
body it carries, ``a``/``b``/``text`` its scalar fields, ``heads``/``data`` its events or event ids.
A delivery larger than a channel message is cut into several, each chained to the one before.
"""

from __future__ import annotations

from typing import Any

from multihop.errors import ProtocolError
from multihop.ges.event import EventData, EventId, validate_event
from multihop.ges.live import ges_broker_if as stub
from multihop.ges.live import ges_client_if as client_stub
from multihop.ges.messages import (
    AttachRefused,
    DurableAck,
    DurableAttach,
    DurableDeliver,
    DurableNak,
    EventAck,
    NotStored,
    Publish,
    Relay,
    SAck,
    SActive,
    SDeliver,
    SDetach,
    SNotStored,
    SPublish,
    SRefuse,
    SRegister,
    SStored,
    SSubAck,
    SSubscribe,
    Stored,
    SWelcome,
    Welcome,
)
from multihop.ges.profile import chain_text, parse_chain

__all__ = [
    "encode_relay",
    "decode_relay",
    "encode_ack",
    "encode_durable_for_client",
    "decode_durable_for_client",
    "decode_durable_from_client",
    "durable_attach",
    "decode_attach",
    "encode_publish",
    "encode_client_ack",
]

#: ``durable.kind`` of each relayed body
KINDS = (SRegister, SWelcome, SRefuse, SSubscribe, SSubAck, SPublish, SStored, SDeliver, SAck, SDetach, SActive, SNotStored)
_KIND = {t: i for i, t in enumerate(KINDS)}
#: a delivery is cut when its bytes would pass this
CUT = 256 << 10
_sh = stub.stored_head
_dh = client_stub.delivery_head


def _pack(items: list[tuple[int, EventData | EventId]]) -> tuple[list[stub.stored_head], bytes]:
    heads: list[stub.stored_head] = []
    data: list[bytes] = []
    for entry, x in items:
        if isinstance(x, EventData):
            i, sig, val, pl = x.id, x.signature.encode(), x.values.encode(), x.payload
        else:
            i, sig, val, pl = x, b"", b"", b""
        pub = i.publisher.encode()
        heads.append(_sh(entry, i.timestamp, i.sequence, i.incarnation, len(pub), len(sig), len(val), len(pl)))
        data += (pub, sig, val, pl)
    return heads, b"".join(data)


def _unpack(heads: Any, data: bytes, what: str) -> list[tuple[int, EventData]]:
    out, ti = [], 0
    try:
        for h in heads:
            p1 = ti + h.publisher_len
            p2 = p1 + h.signature_len
            p3 = p2 + h.values_len
            p4 = p3 + h.payload_len
            if p4 > len(data):
                raise ValueError("lengths run past the data")
            out.append(
                (
                    h.entry,
                    EventData(
                        EventId(data[ti:p1].decode(), h.timestamp, h.sequence, h.incarnation), data[p1:p2].decode(), data[p2:p3].decode(), data[p3:p4]
                    ),
                )
            )
            ti = p4
        if ti != len(data):
            raise ValueError("bytes left over")
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"{what}: malformed events: {e}") from None
    return out


def _cuts(entries: tuple[tuple[int, EventData], ...]) -> list[tuple[tuple[int, EventData], ...]]:
    out: list[tuple[tuple[int, EventData], ...]] = []
    batch: list[tuple[int, EventData]] = []
    size = 0
    for e in entries:
        n = len(e[1].payload) + len(e[1].values) + 64
        if batch and (size + n > CUT or len(batch) == 4096):
            out.append(tuple(batch))
            batch, size = [], 0
        batch.append(e)
        size += n
    out.append(tuple(batch))
    return out


def encode_ack(msg: EventAck) -> bytes:
    """A selective ERP acknowledgement."""
    return stub.encode("event_ack_also", upto=msg.upto & 0xFFFF_FFFF_FFFF_FFFF, also=list(msg.also))  # -1: none yet


def encode_relay(msg: Relay) -> list[bytes]:
    """The ``durable`` record(s) of a relayed message."""
    body = msg.body
    t = type(body)
    if t is SDeliver:
        out, prev = [], body.prev
        for part in _cuts(body.entries):
            out += _one(msg, body._replace(prev=prev, entries=part))
            if part:
                prev = part[-1][0]
        return out
    if t is SPublish:
        out, prev = [], body.prev
        for part in _cuts(tuple((0, ev) for ev in body.events)):
            out += _one(msg, body._replace(prev=prev, events=tuple(ev for _, ev in part)))
            prev = part[-1][1].id
        return out
    return _one(msg, body)


def _one(msg: Relay, body: Any) -> list[bytes]:
    t = type(body)
    inc, a, b, text, items = 0, 0, 0, "", []
    if t is SRegister:
        inc, a, b, items, text = body.incarnation, int(body.resume), body.previous, [(0, i) for i in body.last], body.credential
    elif t is SWelcome:
        inc, a = body.incarnation, body.replay
    elif t is SRefuse:
        inc, a, text = body.incarnation, body.kind, body.reason[:60000]
    elif t is SSubscribe:
        a, b, text = body.sub, int(body.chain is not None), chain_text(body.chain) if body.chain is not None else ""
    elif t is SSubAck:
        a = body.sub
    elif t is SPublish:
        items = [(0, ev) for ev in body.events] + ([(1, body.prev)] if body.prev is not None else [])
    elif t is SStored:
        items = [(0, body.event)]
    elif t is SDeliver:
        inc, a, items = body.incarnation, body.prev, list(body.entries)
    elif t is SAck:
        inc, a, b = body.incarnation, body.upto, int(body.nak)
    elif t is SDetach:
        inc = body.incarnation
    elif t is SActive:
        a, b = body.sub, body.level
    elif t is SNotStored:
        items, text = [(0, body.event)], body.reason[:60000]
    else:
        raise TypeError(f"no durable record for {t.__name__}")
    heads, data = _pack(items)
    return [
        stub.encode(
            "durable",
            dst=msg.dst,
            src=msg.src,
            left=list(msg.left),
            kind=_KIND[t],
            client=body.client,
            incarnation=inc,
            a=a,
            b=b,
            text=text,
            heads=heads,
            data=data,
        )
    ]


def decode_relay(rec: Any) -> Relay:
    """The relayed message of a ``durable`` record (ProtocolError if malformed)."""
    if rec.kind >= len(KINDS):
        raise ProtocolError(f"ges_broker.durable: unknown kind {rec.kind}")
    t = KINDS[rec.kind]
    items = _unpack(rec.heads, rec.data, "ges_broker.durable")
    c, inc, a, b = rec.client, rec.incarnation, rec.a, rec.b
    try:
        if t is SRegister:
            body: Any = SRegister(c, inc, bool(a), tuple(ev.id for _, ev in items), b, rec.text)
        elif t is SWelcome:
            body = SWelcome(c, inc, a)
        elif t is SRefuse:
            body = SRefuse(c, inc, rec.text, a)
        elif t is SSubscribe:
            body = SSubscribe(c, a, parse_chain(rec.text) if b else None)
        elif t is SSubAck:
            body = SSubAck(c, a)
        elif t is SPublish:
            evs = tuple(ev for e, ev in items if e == 0)
            prevs = [ev.id for e, ev in items if e == 1]
            if not evs or len(prevs) > 1:
                raise ValueError("no event, or two previous ones")
            for ev in evs:
                validate_event(ev)
            body = SPublish(c, evs, prevs[0] if prevs else None)
        elif t is SStored:
            body = SStored(c, items[0][1].id)
        elif t is SDeliver:
            body = SDeliver(c, inc, a, tuple(items))
        elif t is SAck:
            body = SAck(c, inc, a, bool(b))
        elif t is SDetach:
            body = SDetach(c, inc)
        elif t is SNotStored:
            body = SNotStored(c, items[0][1].id, rec.text)
        else:
            body = SActive(c, a, b)
    except (ValueError, IndexError) as e:
        raise ProtocolError(f"ges_broker.durable ({t.__name__}): {e}") from None
    return Relay(rec.dst, rec.src, body, tuple(rec.left))


# ---- clients ---------------------------------------------------------------------------------


def _client_heads(ids: list[EventData]) -> tuple[list[client_stub.delivery_head], bytes]:
    heads: list[client_stub.delivery_head] = []
    text: list[bytes] = []
    for ev in ids:
        i = ev.id
        pub, sig, val = i.publisher.encode(), ev.signature.encode(), ev.values.encode()
        heads.append(_dh(i.timestamp, i.sequence, i.incarnation, len(pub), len(sig), len(val), len(ev.payload)))
        text += (pub, sig, val, ev.payload)
    return heads, b"".join(text)


def durable_attach(msg: DurableAttach) -> bytes:
    """The client's first message."""
    heads, text = _client_heads([EventData(i, "", "", b"") for i in msg.last])
    return client_stub.encode(
        "durable_attach",
        client=msg.client,
        incarnation=msg.incarnation,
        home=msg.home,
        previous=msg.previous,
        resume=msg.resume,
        last=heads,
        text=text,
        credential=msg.credential,
    )


def decode_attach(rec: Any) -> DurableAttach:
    """A ``durable_attach`` record (ProtocolError if its lengths do not add up)."""
    text, ti, last = rec.text, 0, []
    try:
        for h in rec.last:
            p1 = ti + h.publisher_len
            if p1 > len(text) or h.signature_len or h.values_len or h.payload_len:
                raise ValueError("bad lengths")
            last.append(EventId(text[ti:p1].decode(), h.timestamp, h.sequence, h.incarnation))
            ti = p1
        if ti != len(text):
            raise ValueError("bytes left over")
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"ges_client.durable_attach: {e}") from None
    return DurableAttach(rec.client, rec.incarnation, rec.home, rec.previous, tuple(last), rec.resume, rec.credential)


def encode_durable_for_client(msg: Any) -> list[bytes] | None:
    """Broker -> client durability messages (None: not one of them)."""
    t = type(msg)
    if t is Welcome:
        return [client_stub.encode("welcome", home=msg.home, replay=msg.replay)]
    if t is Stored:
        return [client_stub.encode("stored", timestamp=i.timestamp, sequence=i.sequence, incarnation=i.incarnation) for i in msg.ids]
    if t is AttachRefused:
        return [client_stub.encode("attach_refused", kind=msg.kind, reason=msg.reason.encode()[:512].decode(errors="ignore"))]
    if t is NotStored:
        reason = msg.reason.encode()[:512].decode(errors="ignore")
        return [
            client_stub.encode("not_stored", timestamp=i.timestamp, sequence=i.sequence, incarnation=i.incarnation, reason=reason) for i in msg.ids
        ]
    if t is DurableDeliver:
        out, prev = [], msg.prev
        for part in _cuts(msg.entries):
            heads, text = _client_heads([ev for _, ev in part])
            out.append(client_stub.encode("durable_deliver", prev=prev, entries=[e for e, _ in part], heads=heads, text=text))
            if part:
                prev = part[-1][0]
        return out
    return None


def decode_durable_for_client(rec: Any, decode_deliveries: Any) -> Any:
    """The value of a broker -> client durability record (None: not one of them)."""
    name = rec.name
    if name == "welcome":
        return Welcome(rec.home, rec.replay)
    if name == "stored":
        return ("stored", rec.timestamp, rec.sequence, rec.incarnation)
    if name == "attach_refused":
        return AttachRefused(rec.kind, rec.reason)
    if name == "not_stored":
        return ("not_stored", rec.timestamp, rec.sequence, rec.incarnation, rec.reason)
    if name == "durable_deliver":
        evs = decode_deliveries(rec)
        if len(evs) != len(rec.entries):
            raise ProtocolError("ges_client.durable_deliver: entries and events differ in number")
        return DurableDeliver(rec.prev, tuple(zip(rec.entries, evs, strict=True)))
    return None


def encode_publish(msg: Publish) -> bytes:
    """A durable client's publication (with the event it published before)."""
    ev, p = msg.event, msg.prev
    i = ev.id
    return client_stub.encode(
        "publish_durable",
        timestamp=i.timestamp,
        sequence=i.sequence,
        incarnation=i.incarnation,
        has_prev=p is not None,
        prev_timestamp=p.timestamp if p else 0,
        prev_sequence=p.sequence if p else 0,
        prev_incarnation=p.incarnation if p else 0,
        signature=ev.signature,
        values=ev.values,
        payload=ev.payload,
    )


def encode_client_ack(msg: DurableAck | DurableNak) -> bytes:
    """A durable client's acknowledgement (or request to send again)."""
    if isinstance(msg, DurableAck):
        return client_stub.encode("durable_ack", upto=msg.upto, nak=False)
    return client_stub.encode("durable_ack", upto=msg.after, nak=True)


def decode_durable_from_client(rec: Any, client: str) -> Any:
    """Client -> broker durability records (None: not one of them); ValueError if malformed."""
    name = rec.name
    if name == "publish_durable":
        ev = EventData(EventId(client, rec.timestamp, rec.sequence, rec.incarnation), rec.signature, rec.values, rec.payload)
        validate_event(ev)
        prev = EventId(client, rec.prev_timestamp, rec.prev_sequence, rec.prev_incarnation) if rec.has_prev else None
        return Publish(ev, prev)
    if name == "durable_ack":
        return DurableNak(rec.upto) if rec.nak else DurableAck(rec.upto)
    return None
