"""A blocking multi-hop send holds what cannot leave yet (issue 17 §1; core-rs/dispatcher/src/multihop/held.rs).

When a blocking ``send`` finds the credit window used up, the message goes into
the channel's held frames (up to 4 frames of 64 messages, each at most the
maximum message size) and ``send`` returns; the held messages leave as frames,
oldest first, as credits come back, sent by whoever pumps the link: the
sender's next call, or the dispatcher's flusher thread if the program makes none. Real runtime,
real monitors: client core 0, service core 1, two monitors on the path.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

import multihop as mh
from liveness_util import stopped, until
from test_batch_frames import data_counters, mh_pair

_CTX = mp.get_context("spawn")


def _drain(ch: mh.Channel, n: int) -> list[bytes]:
    """Receive exactly n messages (each recv bounded by its timeout)."""
    return [ch.recv(timeout=10) for _ in range(n)]


def test_a_send_with_no_credit_holds_four_frames_then_waits(rt: mh.Runtime) -> None:
    with mh_pair(rt, window=4) as (_, client, _, server):
        sent = 0
        with pytest.raises(mh.Timeout):
            for _ in range(4 + 256 + 1):  # bounded: the window, four full held frames, one more
                client.send(sent.to_bytes(4, "little"), timeout=0.5)
                sent += 1
        assert sent == 4 + 256, "the window's 4 frames, then four held frames of 64 messages"
        st = client.stats()
        assert (st["in_flight"], st["held"]) == (4, 256)
        assert client.unconsumed == 260, "held messages count as sent and not consumed"
        with pytest.raises(mh.TxBusy, match="held"):
            client.try_send(b"may not overtake what is held")
        # The receiver reads the window; its ack returns credit, and the held frame leaves (this
        # process's flusher thread sends it: the test thread makes no call on the client end).
        assert _drain(server, 260) == [i.to_bytes(4, "little") for i in range(260)]
        until("the held frame left", lambda: client.stats()["held"] == 0)
        # A flush asks the receiver to ack at once: it does while its library runs (here: waiting to receive).
        waiting = threading.Thread(target=lambda: pytest.raises(mh.Timeout, server.recv, timeout=5), daemon=True)
        waiting.start()
        client.flush(timeout=10)
        assert client.unconsumed == 0
        waiting.join(10)


def test_single_sends_stream_in_frames_and_keep_their_order(rt: mh.Runtime) -> None:
    n = 20_000
    with mh_pair(rt, window=16) as (_, client, _, server):
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.extend(_drain(server, n)), daemon=True)
        f0, m0 = data_counters(rt)
        reader.start()
        for i in range(n):
            client.send(i.to_bytes(4, "little"), timeout=10)
        reader.join(60)
        assert not reader.is_alive(), "the receiver did not get every message within 60 s"
        assert got == [i.to_bytes(4, "little") for i in range(n)]
        until("every frame has crossed both monitors", lambda: data_counters(rt)[1] - m0 >= 2 * n)
        frames = (data_counters(rt)[0] - f0) // 2
        # One message per frame would be 20,000 frames: the sender outran its window and held.
        assert frames <= n // 4, f"{frames} frames for {n} messages"


def test_try_send_send_batch_and_held_sends_keep_one_order(rt: mh.Runtime) -> None:
    with mh_pair(rt, window=2) as (_, client, _, server):
        total = 6_000
        got: list[bytes] = []

        def slow_reader() -> None:
            while len(got) < total:  # bounded by the recv timeout
                got.extend(server.recv_batch(7, timeout=10))

        reader = threading.Thread(target=slow_reader, daemon=True)
        reader.start()
        i = 0
        while i < total:  # each turn sends at least one message
            kind = i % 3
            if kind == 0:
                client.send(i.to_bytes(4, "little"), timeout=10)
                i += 1
            elif kind == 1:
                try:
                    client.try_send(i.to_bytes(4, "little"))
                    i += 1
                except mh.TxBusy:  # no credit, or held messages go first: send it the blocking way
                    client.send(i.to_bytes(4, "little"), timeout=10)
                    i += 1
            else:
                k = min(5, total - i)
                assert client.send_batch([j.to_bytes(4, "little") for j in range(i, i + k)], timeout=10) == k
                i += k
        reader.join(60)
        assert not reader.is_alive()
        assert got == [j.to_bytes(4, "little") for j in range(total)]


def test_close_sends_what_is_held_before_the_teardown(rt: mh.Runtime) -> None:
    with mh_pair(rt, window=2) as (_, client, _, server):
        for i in range(2 + 30):
            client.send(bytes([i]) * 100, timeout=5)
        assert client.stats()["held"] == 30
        client.close()
        assert _drain(server, 32) == [bytes([i]) * 100 for i in range(32)]
        with pytest.raises(mh.ChannelClosed):
            server.recv(timeout=5)


def test_a_flush_waits_for_held_messages_and_reports_them(rt: mh.Runtime) -> None:
    with mh_pair(rt, window=2) as (_, client, _, server):
        for i in range(40):
            client.send(bytes([i]), timeout=5)
        assert client.stats()["held"] == 38
        with pytest.raises(mh.Timeout) as e:
            client.flush(timeout=0.3)  # the receiver reads nothing yet
        assert e.value.unconsumed == 40
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.extend(_drain(server, 40)), daemon=True)
        reader.start()
        client.flush(timeout=10)
        reader.join(10)
        assert got == [bytes([i]) for i in range(40)]
        assert client.unconsumed == 0


def _send_then_idle(name: str, n: int, done: Any, release: Any) -> None:
    """Bind, send n messages (the window is 2: most are held), say so, then make no call on the
    runtime until told to go: only the flusher thread can send what is held."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(0)
    ch = d.bind("held-idle", transport="multihop", window=2, timeout=10)
    for i in range(n):
        ch.send(i.to_bytes(4, "little"), timeout=10)
    done.send(ch.stats()["held"])
    release.recv()  # blocks in a pipe read, not in the runtime
    ch.close()
    d.detach()


def test_the_flusher_sends_what_is_held_when_the_program_makes_no_call(rt: mh.Runtime) -> None:
    srv = rt.dispatcher(1)
    svc = srv.export("held-idle")
    done_r, done_w = _CTX.Pipe(duplex=False)
    release_r, release_w = _CTX.Pipe(duplex=False)
    p = _CTX.Process(target=_send_then_idle, args=(rt.name, 50, done_w, release_r), daemon=True)
    p.start()
    try:
        server = svc.accept(timeout=20)
        assert done_r.poll(20), "the sender did not finish sending"
        assert done_r.recv() == 48, "the window's 2 frames, then 48 messages held"
        assert _drain(server, 50) == [i.to_bytes(4, "little") for i in range(50)]
        release_w.send("go")
        with pytest.raises(mh.ChannelClosed):
            server.recv(timeout=10)
    finally:
        if p.is_alive():
            release_w.send("go")
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join(5)
        srv.detach()


def test_a_receiver_that_dies_ends_the_held_sender_with_channel_closed(rt: mh.Runtime) -> None:
    # The child binds to us, says it is ready, then never reads: what we send fills its window and is held.
    code = (
        "import sys, multihop as mh\n"
        "rt = mh.Runtime.attach(sys.argv[1]); d = rt.dispatcher(0)\n"
        "ch = d.bind('held-dies', transport='multihop', window=2, timeout=10)\n"
        "ch.send(b'ready', timeout=10); sys.stdin.read()\n"
    )
    srv = rt.dispatcher(1)
    svc = srv.export("held-dies")
    child = subprocess.Popen([sys.executable, "-c", code, rt.name], stdin=subprocess.PIPE, cwd=Path(__file__).parents[1])
    try:
        ours = svc.accept(timeout=20)
        assert ours.recv(timeout=10) == b"ready"
        for i in range(2 + 20):
            ours.send(bytes([i]), timeout=5)
        assert ours.stats()["held"] == 20
        child.kill()
        child.wait(10)
        t0 = time.monotonic()
        with pytest.raises(mh.ChannelClosed):
            for _ in range(1000):  # bounded: the death is seen within a second or two
                ours.send(b"after", timeout=5)
                time.sleep(0.01)
        assert time.monotonic() - t0 < 10
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        srv.detach()


def test_what_is_held_leaves_when_the_process_exits_without_closing(rt: mh.Runtime) -> None:
    # The sender holds 100 messages, and exits normally with its channel still referenced by a daemon
    # thread (never closed, never dropped): the exit hook sends what is held before the process goes.
    code = (
        "import sys, threading, multihop as mh\n"
        "rt = mh.Runtime.attach(sys.argv[1]); d = rt.dispatcher(0)\n"
        "ch = d.bind('held-exit', transport='multihop', window=2, timeout=10)\n"
        "for i in range(102):\n"
        "    ch.send(i.to_bytes(4, 'little'), timeout=10)\n"
        "assert ch.stats()['held'] == 100, ch.stats()['held']\n"
        "threading.Thread(target=lambda c=ch: threading.Event().wait(), daemon=True).start()\n"
        "print('sent', flush=True)\n"
    )
    srv = rt.dispatcher(1)
    svc = srv.export("held-exit")
    try:
        out = subprocess.run([sys.executable, "-c", code, rt.name], capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[1])
        assert out.returncode == 0 and out.stdout.split() == ["sent"], out.stderr
        server = svc.accept(timeout=10)
        assert _drain(server, 102) == [i.to_bytes(4, "little") for i in range(102)]
    finally:
        srv.detach()


def test_with_holding_off_a_blocking_send_waits_at_the_window(rt: mh.Runtime) -> None:
    code = (
        "import sys, multihop as mh\n"
        "rt = mh.Runtime.attach(sys.argv[1]); d = rt.dispatcher(0)\n"
        "ch = d.bind('strict', transport='multihop', window=4, timeout=10)\n"
        "sent = 0\n"
        "try:\n"
        "    for _ in range(10):\n"
        "        ch.send(b'x', timeout=0.3); sent += 1\n"
        "except mh.Timeout:\n"
        "    pass\n"
        "print(sent, ch.stats()['held'])\n"
    )
    srv = rt.dispatcher(1)
    _svc = srv.export("strict")  # kept: dropping the Service withdraws the name
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, rt.name],
            env={**os.environ, "MULTIHOP_HOLD": "0"},
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).parents[1],
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["4", "0"], out.stdout
    finally:
        srv.detach()


# ---- a close that cannot hand what it holds to a stopped monitor (issue 26 §1) --------------------


def _fill_link(filler: Any) -> int:
    """Send on `filler` until the link to its (stopped) monitor has no room even for an empty
    message (64 KiB messages, then smaller ones); how many went."""
    sent = 0
    for size in (65536, 4096, 256, 0):
        for _ in range(10_000):  # bounded: a link's ring holds under 2 MiB
            try:
                filler.try_send(b"f" * size)
                sent += 1
            except mh.TxBusy as e:
                assert "link to the monitor is full" in str(e), e
                break
        else:
            raise AssertionError("the link to the monitor never filled")
    return sent


@contextmanager
def _held_and_filler(rt: mh.Runtime) -> Iterator[tuple[mh.Channel, mh.Channel, mh.Channel]]:
    """(held end, filler end, held's service end): two multi-hop channels of one client dispatcher on
    core 0 (one link to monitor 0) to services on core 1; the held one has a window of 16, the filler
    one of 4096 (its sends fill the link, not the window). Closed and detached on exit."""
    with ExitStack() as stack:
        srv = stack.enter_context(rt.dispatcher(1))
        cli = stack.enter_context(rt.dispatcher(0))
        tag = f"{os.getpid()}-{time.monotonic_ns()}"
        svc_h, svc_f = srv.export(f"held-{tag}"), srv.export(f"fill-{tag}")
        held = stack.enter_context(cli.bind(f"held-{tag}", transport="multihop", window=16, timeout=10))
        filler = stack.enter_context(cli.bind(f"fill-{tag}", transport="multihop", window=4096, timeout=10))
        server = stack.enter_context(svc_h.accept(timeout=10))
        stack.enter_context(svc_f.accept(timeout=10))
        yield held, filler, server


def test_a_close_that_cannot_hand_held_messages_to_the_monitor_raises_held_lost(rt: mh.Runtime) -> None:
    # The client's first-hop monitor is stopped: the window's 16 messages wait in the link, 256 more
    # are held, and the filler channel fills the link. close() cannot hand anything on: it must say
    # how many accepted messages are lost (it returned None, held_lost=256, before).
    with _held_and_filler(rt) as (held, filler, server):
        with stopped(rt.monitor_pids[0]):
            for i in range(16 + 256):
                held.send(i.to_bytes(4, "little"), timeout=5)
            assert held.stats()["held"] == 256
            assert _fill_link(filler) > 0
            with pytest.raises(mh.HeldLost) as e:
                held.close(timeout=0.3)
            assert e.value.count == 256 and "256 held message(s) did not leave" in str(e.value)
            assert isinstance(e.value, mh.MultihopError)
            assert held.closed and held.stats()["held_lost"] == 256 and held.stats()["held"] == 0
            held.close(timeout=0.3)  # idempotent: already closed, nothing more to say
        # The monitor runs again: the window's 16 arrive, then the end of the channel.
        assert _drain(server, 16) == [i.to_bytes(4, "little") for i in range(16)]
        with pytest.raises(mh.ChannelClosed):
            server.recv(timeout=10)


def test_a_with_block_that_raised_gets_held_lost_as_a_warning(rt: mh.Runtime) -> None:
    with _held_and_filler(rt) as (held, filler, _server):
        with stopped(rt.monitor_pids[0]):
            for i in range(16 + 10):
                held.send(bytes([i]), timeout=5)
            _fill_link(filler)
            with pytest.warns(RuntimeWarning, match="10 held message"), pytest.raises(KeyError):
                with held:
                    raise KeyError("the block's own error goes on")
            assert held.closed and held.stats()["held_lost"] == 10


def test_close_timeout_is_checked(rt: mh.Runtime) -> None:
    with mh_pair(rt) as (_, client, _, _server):
        with pytest.raises(ValueError, match="timeout must be >= 0"):
            client.close(timeout=-1)
        assert not client.closed
        client.close(timeout=None)  # no limit: a live monitor takes everything at once
        assert client.closed


_LOSER = (
    "import gc, sys, threading, multihop as mh\n"
    "rt = mh.Runtime.attach(sys.argv[1]); d = rt.dispatcher(0)\n"
    "held = d.bind(sys.argv[2], transport='multihop', window=2, timeout=10)\n"
    "filler = d.bind(sys.argv[3], transport='multihop', window=4096, timeout=10)\n"
    "print('bound', flush=True); sys.stdin.readline()\n"  # the parent stops monitor 0 meanwhile
    "for i in range(2 + 256):\n"
    "    held.send(i.to_bytes(4, 'little'), timeout=5)\n"
    "for size in (65536, 4096, 256, 0):\n"
    "    for _ in range(10_000):\n"
    "        try:\n"
    "            filler.try_send(b'f' * size)\n"
    "        except mh.TxBusy:\n"
    "            break\n"
    "print('held', held.stats()['held'], flush=True)\n"
    "if sys.argv[4] == 'drop':\n"
    "    del held; gc.collect()\n"
    "else:\n"  # never closed nor dropped: a daemon thread keeps it
    "    threading.Thread(target=lambda c=held: threading.Event().wait(), daemon=True).start()\n"
    "print('done', flush=True)\n"
)


@pytest.mark.parametrize("how", ["exit", "drop"])
def test_held_messages_lost_without_a_close_are_said_on_stderr(rt: mh.Runtime, how: str) -> None:
    # Nobody can be told with an exception at exit (the atexit hook) or when an unclosed end is
    # collected: the loss is said on stderr, with the count.
    tag = f"{os.getpid()}-{how}"
    srv = rt.dispatcher(1)
    svcs = [srv.export(f"lost-{tag}"), srv.export(f"fill-{tag}")]
    child = subprocess.Popen(
        [sys.executable, "-c", _LOSER, rt.name, f"lost-{tag}", f"fill-{tag}", how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    try:
        ends = [svc.accept(timeout=20) for svc in svcs]
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().split() == ["bound"]
        with stopped(rt.monitor_pids[0]):
            child.stdin.write("go\n")
            child.stdin.flush()
            out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        assert out.split() == ["held", "256", "done"], out
        assert "multihop: warning:" in err and "256" in err and "lost" in err, err
        del ends
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        srv.detach()


def test_detach_sends_what_its_channels_hold_and_says_what_it_could_not(rt: mh.Runtime, capfd: Any) -> None:
    # A dispatcher's multi-hop channels end with its detach: what they held for their next credit
    # goes first (it was lost quietly), and what cannot go (the monitor stopped) is said on stderr.
    srv = rt.dispatcher(1)
    try:
        svc = srv.export(f"detach-held-{os.getpid()}")
        cli = rt.dispatcher(0)
        ch = cli.bind(svc.name, transport="multihop", window=2, timeout=10)
        server = svc.accept(timeout=10)
        for i in range(2 + 50):
            ch.send(i.to_bytes(4, "little"), timeout=5)
        assert ch.stats()["held"] == 50
        cli.detach()
        assert _drain(server, 52) == [i.to_bytes(4, "little") for i in range(52)]
        with pytest.raises(mh.ChannelClosed):
            server.recv(timeout=10)
        capfd.readouterr()
        # The same with the monitor stopped and the link full: nothing can go, and it is said.
        cli2 = rt.dispatcher(0)
        held = cli2.bind(svc.name, transport="multihop", window=2, timeout=10)
        filler = cli2.bind(svc.name, transport="multihop", window=4096, timeout=10)
        ends = [svc.accept(timeout=10), svc.accept(timeout=10)]
        with stopped(rt.monitor_pids[0]):
            for i in range(2 + 30):
                held.send(bytes([i]), timeout=5)
            _fill_link(filler)
            cli2.detach()
        err = capfd.readouterr().err
        assert "multihop: warning: detaching from monitor 0: 30 message(s) held" in err, err
        del ends
    finally:
        srv.detach()
