"""What a channel end knows and keeps: closed, its dispatcher, batches, flush.

Issue 18 §2-§4 and §6. Each test fails on the code before the fix: ``closed`` stayed False after
the peer died (and the monitor kept the circuit until the object was dropped), a multi-hop end
died with its temporary dispatcher, a batch sent what came before a bad message, and nothing told
a sender whether its messages were consumed.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from typing import Any

import pytest

import multihop as mh
import procs
from chanpair import channel_pair
from liveness_util import until

TRANSPORTS = ["ump", "multihop"]


def _monitor_channels(rt: mh.Runtime, core: int) -> int:
    (m,) = [m for m in rt.status(limit=0)["monitors"] if m["core"] == core]
    return int(m["counts"]["channels"])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_closed_turns_true_when_the_peer_dies_and_the_monitor_forgets_the_channel(rt: mh.Runtime, transport: str) -> None:
    ready = procs.CTX.Event()
    with rt.dispatcher(1) as srv:
        svc = srv.export(f"dies-{transport}")
        with procs.child(procs.bind_send_and_sleep, rt.name, 0, f"dies-{transport}", transport, ready, b"before the end") as p:
            peer = svc.accept(timeout=30)
            assert ready.wait(30)
            assert not peer.closed
            assert _monitor_channels(rt, 1) == 1
            os.kill(p.pid, signal.SIGKILL)
            p.join(10)
            # The library knows through the pidfd (UMP) or the path's TEARDOWN (multi-hop).
            until("closed is true", lambda: peer.closed)
            assert peer.stats()["closed"]
            # ... and its monitor forgets the circuit now, while the object lives on.
            until("the service's monitor forgets the channel", lambda: _monitor_channels(rt, 1) == 0)
            assert peer.recv(timeout=5) == b"before the end", "what came before is still read"
            with pytest.raises(mh.ChannelClosed):
                peer.recv(timeout=5)
            assert peer.closed


def test_closed_is_true_at_the_latest_when_a_call_raises_channel_closed(rt: mh.Runtime) -> None:
    with channel_pair(rt, "ump") as (client, server):
        client.close()
        with pytest.raises(mh.ChannelClosed):
            server.try_recv()
        assert server.closed


def test_a_multihop_channel_keeps_its_dispatcher_connection_alive(rt: mh.Runtime) -> None:
    with rt.dispatcher(1) as srv:
        svc = srv.export("keeps")
        for i in range(3):
            ch = rt.dispatcher(0).bind("keeps", transport="multihop", timeout=10)  # the dispatcher is a temporary
            gc.collect()
            peer = svc.accept(timeout=10)
            ch.send(b"ping %d" % i)
            assert peer.recv(timeout=5) == b"ping %d" % i
            peer.send(b"pong")
            assert ch.recv(timeout=5) == b"pong"
            ch.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_batch_with_a_message_too_large_sends_nothing(rt: mh.Runtime, transport: str) -> None:
    with channel_pair(rt, transport, max_message=1000) as (client, server):
        limit = client.max_message
        with pytest.raises(mh.MessageTooLarge, match="message 2 of the batch"):
            client.send_batch([b"a", b"b", b"x" * (limit + 1), b"c"], timeout=5)
        with pytest.raises(TypeError):
            client.send_batch([b"a", "not bytes"], timeout=5)
        import numpy as np

        with pytest.raises(mh.MessageTooLarge):
            client.send_records(np.zeros((3, limit + 1), dtype=np.uint8), timeout=5)
        client.send(b"marker")
        assert server.recv(timeout=5) == b"marker", "nothing of the refused batches was delivered"
        assert server.try_recv() is None


def test_a_batch_cut_short_by_a_close_says_how_many_went(rt: mh.Runtime) -> None:
    # A batch goes in frames of up to 64 messages, one credit each: a window
    # of 4 lets 4 x 64 of these 400 messages go before the peer takes any.
    with channel_pair(rt, "multihop", window=4) as (client, server):
        box: list[BaseException] = []

        def send() -> None:
            try:
                client.send_batch([b"m%d" % i for i in range(400)], timeout=30)
            except BaseException as e:
                box.append(e)

        t = threading.Thread(target=send)
        t.start()
        until("the window of 4 is used up", lambda: client.stats()["in_flight"] == 4)
        server.close()
        t.join(30)
        assert box and isinstance(box[0], mh.ChannelClosed), box
        assert box[0].sent == 4 * 64 == client.stats()["sent"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_flush_returns_once_the_peer_consumed_everything(rt: mh.Runtime, transport: str) -> None:
    with channel_pair(rt, transport) as (client, server):
        client.send_batch([b"one", b"two", b"three"], timeout=5)  # fewer than window/2: no ack would come on its own
        assert client.unconsumed == 3
        box: list[Any] = []
        # A server loop: it keeps receiving (so its library runs and acks).
        t = threading.Thread(target=lambda: box.append([server.recv(timeout=10) for _ in range(4)]))
        t.start()
        client.flush(timeout=10)
        assert client.unconsumed == 0
        client.send(b"after the flush")
        t.join(10)
        assert box == [[b"one", b"two", b"three", b"after the flush"]]
        if transport == "ump":
            client.flush(timeout=0)  # read means consumed: nothing outstanding, returns at once


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_flush_times_out_saying_how_many_were_not_consumed(rt: mh.Runtime, transport: str) -> None:
    with channel_pair(rt, transport) as (client, server):
        for i in range(5):
            client.send(b"%d" % i)
        assert server.recv(timeout=5) == b"0"
        t0 = time.monotonic()
        with pytest.raises(mh.Timeout) as e:
            client.flush(timeout=0.3)
        assert time.monotonic() - t0 < 5
        if transport == "ump":
            assert e.value.unconsumed == 4  # type: ignore[attr-defined]  # exactly: it read one
            assert "4 of the messages" in str(e.value)
        else:
            # Multi-hop knows what the peer acknowledged: an idle peer's library has not
            # run since the flush asked. Once it runs (any call), it acks what it consumed.
            assert e.value.unconsumed == 5  # type: ignore[attr-defined]
            assert not server.closed  # a call into the peer's library: it reads the request
            until("the peer acks the one it consumed", lambda: client.unconsumed == 4)


def test_flush_raises_channel_closed_with_the_count_when_the_peer_dies(rt: mh.Runtime) -> None:
    ready = procs.CTX.Event()
    with rt.dispatcher(1) as srv:
        svc = srv.export("flush-dies")
        with procs.child(procs.bind_send_and_sleep, rt.name, 0, "flush-dies", "multihop", ready) as p:
            peer_pid = p.pid
            assert ready.wait(30)
            ch = svc.accept(timeout=30)
            for i in range(3):
                ch.send(b"%d" % i)
            os.kill(peer_pid, signal.SIGKILL)
            with pytest.raises(mh.ChannelClosed) as e:
                ch.flush(timeout=10)
            assert e.value.unconsumed == 3  # type: ignore[attr-defined]


def test_a_thousand_channels_are_released_soon_after_their_dispatcher_dies(rt: mh.Runtime) -> None:
    """What held (issue 18): 1,000 channels bound fast, released within seconds of their dispatcher's death."""
    k = 1000
    ready = procs.CTX.Event()
    with rt.dispatcher(1) as srv:
        svc = srv.export("thousand", backlog=k)
        with procs.child(procs.bind_many_and_sleep, rt.name, 0, "thousand", k, ready) as p:
            assert ready.wait(60)
            peers = [svc.accept(timeout=10) for _ in range(k)]
            assert {m["core"]: m["data"]["forwarding_entries"] for m in rt.status(limit=0)["monitors"]} == {0: 2 * k, 1: 2 * k}
            os.kill(p.pid, signal.SIGKILL)
            p.join(10)
            t0 = time.monotonic()
            until("every forwarding entry is gone", lambda: all(m["data"]["forwarding_entries"] == 0 for m in rt.status(limit=0)["monitors"]))
            until("the dead dispatcher's monitor forgot its ends", lambda: _monitor_channels(rt, 0) == 0)
            until("every service end knows", lambda: all(ch.closed for ch in peers))
            until("the service's monitor forgot them", lambda: _monitor_channels(rt, 1) == 0)
            assert time.monotonic() - t0 < 10
