"""The live brokers' wire for event batches (``ges/live/wire.py``): batches are cut where they must be, every
copy and delivery comes back as it went, and an event's text made once per flush (``wire.Memo``) gives the
same bytes as making it for each message."""

from __future__ import annotations

import random
from typing import Any, NamedTuple

import pytest

from multihop import _ges
from multihop.errors import ProtocolError
from multihop.ges.event import EventData, EventId
from multihop.ges.live import wire
from multihop.ges.messages import DOWN, UP, Deliver, EventAck, EventCopy, Events


def _event(k: int, payload: int = 10) -> EventData:
    return EventData(EventId(f"pub{k % 3}", 1_000 + k, k, 7), "a:int\x1fb:str", f"i{k}\x1fsx{k}", bytes([k % 251]) * payload)


def _copies(n: int, payload: int = 10) -> tuple[EventCopy, ...]:
    return tuple(EventCopy(_event(k, payload), 99, (UP, DOWN)[k % 2], k % 4, (5, 6)[: k % 3], (k,), k % 255, (8,) * (k % 2)) for k in range(n))


def _decoded(parts: list[bytes]) -> list[Events]:
    return [wire.decode_protocol(wire.decode(p)) for p in parts]


def test_a_batch_of_many_copies_is_cut_and_numbered_on() -> None:
    copies = _copies(9000)
    parts = wire.encode(Events(40, copies))
    got = _decoded(parts)
    assert len(got) > 1 and all(0 < len(m.copies) <= 4096 for m in got)
    assert all(len(wire.decode(p).text) <= wire.BATCH_TEXT for p in parts)
    firsts = [40]
    for m in got[:-1]:
        firsts.append(firsts[-1] + len(m.copies))
    assert [m.first_seq for m in got] == firsts  # the gateway's numbering goes on across the messages
    assert tuple(c for m in got for c in m.copies) == copies


def test_large_events_are_cut_by_text_size() -> None:
    copies = _copies(5, payload=100_000)  # ~100 KB each: at most 2 fit under BATCH_TEXT (256 KiB)
    got = _decoded(wire.encode(Events(0, copies)))
    assert [len(m.copies) for m in got] == [2, 2, 1]
    assert tuple(c for m in got for c in m.copies) == copies
    deliveries = [wire.decode_deliveries(wire.client_stub.decode(p)) for p in wire.encode_for_client(Deliver(tuple(c.event for c in copies)))]
    assert [len(d) for d in deliveries] == [2, 2, 1]
    assert [e for d in deliveries for e in d] == [c.event for c in copies]


def test_a_memo_gives_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "NATIVE", False)  # the Python path (MULTIHOP_GES_NATIVE=0), where the memo is used
    copies = _copies(300)
    memo: wire.Memo = {}
    with_memo = (
        wire.encode(Events(3, copies), memo),
        wire.encode(Events(3, copies[::2]), memo),
        wire.encode_for_client(Deliver(tuple(c.event for c in copies)), memo),
    )
    assert len(memo) == 300  # each event's text made once for the three messages
    without = (wire.encode(Events(3, copies)), wire.encode(Events(3, copies[::2])), wire.encode_for_client(Deliver(tuple(c.event for c in copies))))
    assert with_memo == without


# ---- the native codec of event batches against the stub and the Python loops (the reference) ----


def _reference_encode(msg: Events) -> list[bytes]:
    return wire._events(msg.first_seq, msg.copies, None)


def _reference_decode(data: bytes) -> Events:
    return wire.decode_protocol(wire.decode(data))  # type: ignore[no-any-return]


def _random_copies(rng: random.Random, n: int) -> tuple[EventCopy, ...]:
    out = []
    for _k in range(n):
        ev = EventData(
            EventId(rng.choice(["p", "publisher-é", "x" * 300]), rng.randrange(1 << 64), rng.randrange(1 << 64), rng.randrange(1 << 64)),
            rng.choice(["", "a:int", "a:int\x1fb:str\x1fcafé:str"]),
            rng.choice(["", "i1", "i-5\x1fsπ\x1fs"]),
            bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 50, 3000]))),
        )
        units = lambda: tuple(rng.randrange(1 << 64) for _ in range(rng.choice([0, 1, 3])))  # noqa: E731
        out.append(
            EventCopy(ev, rng.randrange(1 << 64), rng.choice([UP, DOWN]), rng.randrange(256), units(), units(), rng.randrange(1 << 16), units())
        )
    return tuple(out)


@pytest.mark.parametrize("seed", range(20))
def test_the_native_codec_gives_the_stubs_bytes_and_values(seed: int) -> None:
    rng = random.Random(seed)
    copies = _random_copies(rng, rng.choice([0, 1, 7, 300]))
    msg = Events(rng.randrange(1 << 40), copies)
    native = _ges.encode_events(msg.first_seq, msg.copies, wire.BATCH_TEXT)
    assert native == _reference_encode(msg)
    for part in native:
        got = wire.decode_events(part)
        assert got == _reference_decode(part)
        assert got is not None and all(type(c) is EventCopy and type(c.event) is EventData and type(c.event.id) is EventId for c in got.copies)
    assert tuple(c for part in native for c in _reference_decode(part).copies) == copies


def test_the_native_codec_cuts_batches_where_the_stub_path_does() -> None:
    for copies in (_copies(9000), _copies(5, payload=100_000)):
        assert _ges.encode_events(40, copies, wire.BATCH_TEXT) == _reference_encode(Events(40, copies))


def test_malformed_batches_are_refused_natively_with_a_reason() -> None:
    good = wire.encode(Events(5, _copies(3)))[0]
    assert wire.decode_events(good) == _reference_decode(good)
    head = 18  # number, first_seq, count
    cases = {
        "truncated": good[:10],
        "runs past the end": good[:-1],
        "bytes after the last argument": good + b"\0",
        "more than its maximum 4096": good[:10] + (5000).to_bytes(8, "little") + good[18:],
        "mode 7": good[: head + 34] + bytes([7]) + good[head + 35 :],
        "lengths run past the arrays": good[: head + 52] + (1 << 20).to_bytes(4, "little") + good[head + 56 :],
        "not valid UTF-8": good[:-13] + b"\xff" + good[-12:],  # inside the last event's text
    }
    for why, data in cases.items():
        with pytest.raises(ProtocolError, match=why if why != "not valid UTF-8" else "UTF-8|lengths"):
            wire.decode_events(data)
    assert wire.decode_events(wire.encode(EventAck(3))[0]) is None  # another message: the stub's path


def test_the_native_encoder_names_a_value_that_does_not_fit() -> None:
    copy = _copies(1)[0]
    with pytest.raises(ValueError, match="hops"):
        _ges.encode_events(0, [copy._replace(hops=1 << 16)], wire.BATCH_TEXT)
    with pytest.raises(TypeError, match="not a str"):
        _ges.encode_events(0, [copy._replace(event=copy.event._replace(signature=b"a:int"))], wire.BATCH_TEXT)
    with pytest.raises(TypeError, match="NamedTuple"):
        _ges.decode_events(wire.encode(Events(0, (copy,)))[0], EventId, dict, EventCopy)


def test_the_decoder_refuses_a_class_with_extra_fields_every_time_though_it_remembers_plain_ones() -> None:
    """The decoder remembers which classes it checked as plain tuples (a cold decode asked each class for its
    layout twice); a class that is not one is refused on every call, before and after more than the 16 it
    remembers, and every plain class decodes the same values."""
    data = wire.encode(Events(0, _copies(3)))[0]
    want = _ges.decode_events(data, EventId, EventData, EventCopy)

    class WithDict(tuple):  # a tuple subclass with a __dict__: not laid out as a tuple
        pass

    for _ in range(2):
        with pytest.raises(TypeError, match="WithDict is not a NamedTuple"):
            _ges.decode_events(data, EventId, WithDict, EventCopy)
    for k in range(20):  # more plain classes than the decoder remembers
        plain = NamedTuple(f"Plain{k}", [(f, Any) for f in EventData._fields])
        first, copies = _ges.decode_events(data, EventId, plain, EventCopy)
        assert type(copies[0].event) is plain and (first, tuple(c._replace(event=EventData(*c.event)) for c in copies)) == want
    with pytest.raises(TypeError, match="WithDict is not a NamedTuple"):
        _ges.decode_events(data, EventId, WithDict, EventCopy)


@pytest.mark.parametrize("seed", range(10))
def test_the_native_delivery_encoder_gives_the_stubs_bytes(seed: int) -> None:
    rng = random.Random(100 + seed)
    events = tuple(c.event for c in _random_copies(rng, rng.choice([0, 1, 9, 500])))
    native = _ges.encode_deliver(events, wire.BATCH_TEXT)
    assert native == wire._deliver(events, None)
    assert tuple(e for part in native for e in wire.decode_deliveries(wire.client_stub.decode(part))) == events
    big = tuple(c.event for c in _copies(5, payload=100_000))
    assert _ges.encode_deliver(big, wire.BATCH_TEXT) == wire._deliver(big, None)  # cut by text size: 2, 2, 1
