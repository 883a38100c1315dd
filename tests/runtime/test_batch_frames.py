"""A multi-hop batch crosses every ring and monitor as one unit (issue 17 §2).

`send_batch` packs consecutive messages into BATCH frames (core-rs/base/src/wire/mod.rs)
of up to 64 messages and the channel's maximum message size; each frame takes
one credit; monitors forward it with one lookup; the receiving end unpacks it
into separate messages, in order, and returns the frame's credit with its last
message. Real runtime, two monitors on the path (client core 0, service core 1).
"""

from __future__ import annotations

import os
import struct
import threading
from contextlib import ExitStack, contextmanager
from itertools import count
from typing import Any, Iterator

import multihop as mh
from liveness_util import until

FLAG_BATCH = 4
_names = count()


@contextmanager
def mh_pair(rt: mh.Runtime, **bind: Any) -> Iterator[tuple[mh.Dispatcher, mh.Channel, mh.Dispatcher, mh.Channel]]:
    """(client dispatcher, client end, service dispatcher, service end) of a fresh multi-hop
    channel from core 0 to core 1; closed and detached on exit, even if the body fails."""
    with ExitStack() as stack:
        srv = stack.enter_context(rt.dispatcher(1))
        cli = stack.enter_context(rt.dispatcher(0))
        name = f"batch-{os.getpid()}-{next(_names)}"
        svc = srv.export(name)
        box: list[Any] = []
        t = threading.Thread(target=lambda: box.append(svc.accept(timeout=10)), daemon=True)
        t.start()
        client = stack.enter_context(cli.bind(name, transport="multihop", timeout=10, **bind))
        t.join(10)
        assert box, "the service end did not accept within 10 s"
        server = stack.enter_context(box[0])
        yield cli, client, srv, server


def data_counters(rt: mh.Runtime) -> tuple[int, int]:
    """(frames, data messages) both monitors have forwarded so far."""
    mons = [m["data"] for m in rt.status(limit=0)["monitors"]]
    return sum(m["forwarded"] for m in mons), sum(m["forwarded_messages"] for m in mons)


def _flush(ch: mh.Channel) -> BaseException | None:
    try:
        ch.flush(timeout=10)
    except BaseException as e:  # reported by the caller
        return e
    return None


def recv_all(ch: mh.Channel, n: int) -> list[bytes]:
    got: list[bytes] = []
    for _ in range(n):  # bounded: one call per message at most
        got.extend(ch.recv_batch(n - len(got), timeout=10))
        if len(got) >= n:
            break
    return got


def test_a_batch_goes_as_frames_of_up_to_64_messages_through_every_monitor(rt: mh.Runtime) -> None:
    # Window 64: the 1,000 messages fit in flight before the service reads any,
    # so the monitors see data frames only (no acks yet).
    msgs = [bytes([i % 251]) * (i % 300) for i in range(1000)]
    with mh_pair(rt, window=64) as (_, client, _, server):
        f0, m0 = data_counters(rt)
        assert client.send_batch(msgs, timeout=10) == 1000
        assert client.unconsumed == 1000
        until("every message has reached the service's monitor", lambda: data_counters(rt)[1] - m0 == 2 * 1000)
        frames = -(-1000 // 64)  # 16: fifteen of 64 and one of 40
        assert data_counters(rt)[0] - f0 == 2 * frames
        assert client.stats()["in_flight"] == frames
        assert recv_all(server, 1000) == msgs
        assert server.stats()["received"] == client.stats()["sent"] == 1000
        assert server.stats()["bytes_received"] == sum(map(len, msgs))
        # 16 frames consumed, fewer than window/2: no ack of its own; a flush asks for one,
        # which the service's end sends when its library next runs.
        flushed: list[BaseException | None] = []
        t = threading.Thread(target=lambda: flushed.append(_flush(client)), daemon=True)
        t.start()
        until("the flush returned", lambda: (server.try_recv(), bool(flushed))[1])
        t.join(10)
        assert flushed == [None] and client.unconsumed == 0


def test_a_batch_of_large_messages_is_split_by_size() -> None:
    # Messages of 300 KiB: three fit in a frame of at most 1 MiB, a fourth does not.
    big = [bytes([i]) * (300 * 1024) for i in range(10)]
    with mh.Runtime.start(f"batch-big-{os.getpid()}", cores=[0, 1]) as rt, mh_pair(rt, window=16) as (_, client, _, server):
        f0, m0 = data_counters(rt)
        got: list[bytes] = []
        t = threading.Thread(target=lambda: got.extend(recv_all(server, 10)), daemon=True)
        t.start()
        assert client.send_batch(big, timeout=10) == 10
        t.join(30)
        assert got == big
        until("the monitors counted every message", lambda: data_counters(rt)[1] - m0 == 2 * 10)
        # Frames of 3, 3, 3 and 1, each crossing two monitors (4 frames taken, fewer than window/2: no ack yet).
        assert server.stats()["dummies_sent"] == 0
        until("the monitors counted every frame", lambda: data_counters(rt)[0] - f0 == 2 * 4)


def test_credits_count_frames_and_unconsumed_counts_messages(rt: mh.Runtime) -> None:
    with mh_pair(rt, window=2) as (_, client, _, server):
        # The service reads nothing yet: two frames of 64 (the window) go, then the timeout passes.
        assert client.send_batch([b"%d" % i for i in range(200)], timeout=1.0) == 128
        assert client.unconsumed == 128
        assert client.stats()["in_flight"] == 2
        first = recv_all(server, 63)
        assert first == [b"%d" % i for i in range(63)]
        # 63 of the first frame's 64 are taken: its credit has not come back.
        assert server.stats()["acks_sent"] == 0 and server.stats()["dummies_sent"] == 0
        assert client.stats()["in_flight"] == 2
        assert recv_all(server, 1) == [b"63"]  # the frame's last message returns its credit
        until("the first frame's credit came back", lambda: client.unconsumed == 64)
        assert client.stats()["in_flight"] == 1
        got: list[bytes] = []
        t = threading.Thread(target=lambda: got.extend(recv_all(server, 136)), daemon=True)
        t.start()
        assert client.send_batch([b"%d" % i for i in range(128, 200)], timeout=10) == 72
        t.join(10)
        assert got == [b"%d" % i for i in range(64, 200)]
        until("every credit came back", lambda: (server.try_recv(), client.unconsumed)[1] == 0)


def test_a_malformed_batch_frame_is_dropped_counted_and_harmless(rt: mh.Runtime) -> None:
    with mh_pair(rt, window=16) as (cli, client, srv, server):
        vci_out = client._vcis()[1]  # type: ignore[attr-defined]
        client.send_batch([b"before", b"the", b"forgery"], timeout=5)
        assert recv_all(server, 3) == [b"before", b"the", b"forgery"]
        dropped = srv.link_dropped
        bad = [
            struct.pack("<I", 3) + struct.pack("<I", 2) + b"ab",  # three announced, one there
            struct.pack("<I", 1) + struct.pack("<I", 1) + b"x",  # a batch of one
            struct.pack("<I", 2) + struct.pack("<I", 99) + b"short",  # a length past the end
        ]
        for payload in bad:  # on the client's own link, with its own VCI: it reaches the service's end
            cli._inject_raw(struct.pack("<QBBHI", vci_out, 1, 1, FLAG_BATCH, 0) + payload)  # type: ignore[attr-defined]
        until("the service's link counted the forged frames", lambda: (server.try_recv(), srv.link_dropped)[1] == dropped + 3)
        assert server.try_recv() is None
        client.send_batch([b"after", b"it"], timeout=5)
        assert recv_all(server, 2) == [b"after", b"it"]
        server.send_batch([b"both", b"ways"], timeout=5)
        assert recv_all(client, 2) == [b"both", b"ways"]
        assert rt.alive
