"""The live brokers' wire for event batches (``ges/live/wire.py``): batches are cut where they must be, every
copy and delivery comes back as it went, and an event's text made once per flush (``wire.Memo``) gives the
same bytes as making it for each message."""

from __future__ import annotations

from multihop.ges.event import EventData, EventId
from multihop.ges.live import wire
from multihop.ges.messages import DOWN, UP, Deliver, EventCopy, Events


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


def test_a_memo_gives_the_same_bytes() -> None:
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
