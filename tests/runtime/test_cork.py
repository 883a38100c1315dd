"""A corked burst of multi-hop sends wakes the monitor once (core-rs/dispatcher/src/multihop/cork.rs).

``with d.corked():`` lets a thread write to many channels (a broker's round) and
wake its core's monitor once, at the block's end. The test keeps the monitor of
the senders' core parked and then stopped (SIGSTOP): its waiter count stays up,
so every send that rings it is counted in ``d.monitor_wakeups``, uncorked sends
one each, a corked burst once. Real runtime, real monitors.
"""

from __future__ import annotations

import os
import threading
from contextlib import ExitStack, contextmanager
from typing import Iterator

import pytest

import multihop as mh
from liveness_util import stopped
from parked import until_parked

N = 20


def _forwarder(pid: int) -> int:
    """The thread id of a monitor's forwarding loop (named ``forward``)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip() == "forward":
                return int(tid)
    raise AssertionError(f"monitor {pid} has no 'forward' thread")


@contextmanager
def monitor_parked_and_stopped(rt: mh.Runtime) -> Iterator[None]:
    """Core 0's monitor, once its forwarder is parked, held stopped (SIGSTOP) for the block: every ring counts."""
    mon = rt.monitor_pids[0]
    until_parked(mon, _forwarder(mon))
    with stopped(mon):
        yield


@pytest.fixture
def chans(rt: mh.Runtime) -> Iterator[tuple[mh.Dispatcher, list[mh.Channel], list[mh.Channel]]]:
    """N multi-hop channels from core 0 to core 1: (client dispatcher, client ends, service ends)."""
    with ExitStack() as stack:
        srv = stack.enter_context(rt.dispatcher(1))
        cli = stack.enter_context(rt.dispatcher(0))
        svc = srv.export("corked")
        ours, theirs = [], []
        for _ in range(N):
            ours.append(stack.enter_context(cli.bind("corked", transport="multihop", timeout=10)))
            theirs.append(stack.enter_context(svc.accept(timeout=10)))
        yield cli, ours, theirs


def test_a_corked_burst_wakes_the_parked_monitor_once(rt: mh.Runtime, chans: tuple[mh.Dispatcher, list[mh.Channel], list[mh.Channel]]) -> None:
    cli, ours, theirs = chans
    with monitor_parked_and_stopped(rt):
        w0 = cli.monitor_wakeups
        for ch in ours:
            ch.send(b"loose", timeout=5)
        w1 = cli.monitor_wakeups
        with cli.corked():
            for ch in ours:
                ch.send(b"corked", timeout=5)
            assert cli.monitor_wakeups == w1, "inside the cork nothing rings"
        w2 = cli.monitor_wakeups
    assert (w1 - w0, w2 - w1) == (N, 1), "each loose send rang the parked monitor; the corked burst once"
    for ch in theirs:
        assert ch.recv(timeout=10) == b"loose" and ch.recv(timeout=10) == b"corked"


def test_corks_nest_and_belong_to_their_thread(rt: mh.Runtime, chans: tuple[mh.Dispatcher, list[mh.Channel], list[mh.Channel]]) -> None:
    cli, ours, theirs = chans
    with monitor_parked_and_stopped(rt):
        w0 = cli.monitor_wakeups
        with cli.corked():
            with cli.corked():
                ours[0].send(b"inner", timeout=5)
            assert cli.monitor_wakeups == w0, "the inner end does not ring"
            # Another thread's sends ring as usual while this thread holds a cork.
            t = threading.Thread(target=lambda: ours[1].send(b"other thread", timeout=5))
            t.start()
            t.join(10)
            assert cli.monitor_wakeups == w0 + 1
        assert cli.monitor_wakeups == w0 + 2, "the outermost end rang for the deferred send"
    assert theirs[0].recv(timeout=10) == b"inner"
    assert theirs[1].recv(timeout=10) == b"other thread"


def test_a_cork_left_on_another_thread_still_ends_and_a_cork_is_entered_once(
    rt: mh.Runtime, chans: tuple[mh.Dispatcher, list[mh.Channel], list[mh.Channel]]
) -> None:
    cli, ours, theirs = chans
    with monitor_parked_and_stopped(rt):
        w0 = cli.monitor_wakeups
        cork = cli.corked()
        cork.__enter__()
        ours[0].send(b"deferred", timeout=5)
        with pytest.raises(RuntimeError, match="already entered"):
            cork.__enter__()
        t = threading.Thread(target=lambda: cork.__exit__(None, None, None))
        t.start()
        t.join(10)
        assert cli.monitor_wakeups == w0 + 1, "left on another thread, the cork still rang"
        ours[1].send(b"after", timeout=5)
        assert cli.monitor_wakeups == w0 + 2, "and is gone: this thread's sends ring again"
        with pytest.raises(RuntimeError, match="not entered"):
            cork.__exit__(None, None, None)
    assert theirs[0].recv(timeout=10) == b"deferred"
    assert theirs[1].recv(timeout=10) == b"after"
