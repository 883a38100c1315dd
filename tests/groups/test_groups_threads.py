"""Threads of one group member (issue 26 §2): no endpoint lock is held across a wait, so a ``send``
returns (or raises Timeout) on its own timeout whatever the member's other threads wait for.

Real threads against a live group; every thread's run is bounded by a join with a generous timeout
(a hang fails the test, it does not hang it); the runtime and the member processes are stopped even
when a test fails.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import multihop as mh
from group_procs import stoppable_receiver, wait_view
from multihop import groups
from procs import child
from session import unique_name
from test_groups_live import collect

CTX = mp.get_context("spawn")
HANG = 30.0  # a thread still running after this long is hung (the calls under test take at most a few seconds)


@pytest.fixture
def rt2() -> Iterator[mh.Runtime]:
    runtime = mh.Runtime.start(unique_name("gth"), cores=[0, 1])
    try:
        yield runtime
    finally:
        runtime.stop()


class Run:
    """``fn()`` in a daemon thread; what it returned or raised, and when it ended."""

    def __init__(self, fn: Callable[[], Any], name: str) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.ended: float | None = None
        self.started = time.monotonic()
        self._fn = fn
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.error = e
        finally:
            self.ended = time.monotonic()

    def join(self, timeout: float = HANG) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.thread.name} still running after {timeout} s: hung"

    @property
    def took(self) -> float:
        assert self.ended is not None
        return self.ended - self.started


def waiting_in_recv(run: Run) -> None:
    """Give ``run`` time to be inside its blocking recv (it has no other way to say so)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and run.thread.is_alive():
        time.sleep(0.05)
        if time.monotonic() - run.started > 0.5:
            break
    assert run.thread.is_alive() and run.ended is None, "the receiving thread ended before the send"


def test_send_returns_while_another_thread_waits_in_recv_without_timeout(rt2: mh.Runtime) -> None:
    groups.group(rt2, "th", order="fifo", tree="flat")
    with rt2.dispatcher(0) as d:
        g = d.join("th", timeout=30)
        rx = Run(lambda: g.recv(timeout=None), "recv-forever")
        waiting_in_recv(rx)
        tx = Run(lambda: g.send(g.broadcast, b"hello", timeout=3), "send-3s")
        tx.join()
        assert tx.error is None, tx.error
        rx.join()  # the member receives its own broadcast: the waiting recv ends with it
        assert rx.error is None, rx.error
        assert rx.result.payload == b"hello" and rx.result.sender == g.node
        # And the other way round: a recv with a timeout while another thread's recv waits with none.
        rx2 = Run(lambda: g.recv(timeout=None), "recv-forever-2")
        waiting_in_recv(rx2)
        short = Run(lambda: g.recv(timeout=0.5), "recv-short")
        short.join()
        # One of the two receivers may be the one that gets nothing; neither is stuck behind the other.
        assert isinstance(short.error, mh.Timeout), short.error
        g.send(g.broadcast, b"second", timeout=3)
        rx2.join()
        assert rx2.error is None and rx2.result.payload == b"second"


def test_send_times_out_on_a_spent_window_while_other_threads_wait_forever(rt2: mh.Runtime) -> None:
    """A stopped member downstream spends the tree's window: a send with a timeout raises Timeout in time,
    while one thread waits in recv(timeout=None) and another in send(timeout=None)."""
    groups.group(rt2, "sp", order="fifo", tree="flat", window=2)
    q, finish = CTX.Queue(), CTX.Event()
    with contextlib.ExitStack() as stack:
        p = stack.enter_context(child(stoppable_receiver, rt2.name, 1, "sp", q, finish))
        stack.callback(lambda: (os.kill(p.pid, signal.SIGCONT), finish.set()) if p.is_alive() else None)
        d = stack.enter_context(rt2.dispatcher(0))
        g = d.join("sp", timeout=30)
        collect(q, "joined", 1, 60)
        wait_view(g, 2)
        os.kill(p.pid, signal.SIGSTOP)

        def receive_all() -> list[bytes]:
            """Deliveries, each waited for without a timeout, up to the last message of the test."""
            got: list[bytes] = []
            for _ in range(3000):
                got.append(g.recv(timeout=None).payload)
                if got[-1] == b"timed":
                    break
            return got

        rx = Run(receive_all, "recv-forever")
        waiting_in_recv(rx)

        def fill() -> int:
            """Send until one send times out (the window is spent); how many went."""
            for i in range(2000):
                try:
                    g.send(g.broadcast, b"fill %d" % i, timeout=1)
                except mh.Timeout:
                    return i
            raise AssertionError("2000 sends to a stopped member all went: no window")

        filled = Run(fill, "fill")
        filled.join()
        assert filled.error is None, filled.error
        assert 0 < filled.result < 2000
        stuck = Run(lambda: g.send(g.broadcast, b"forever", timeout=None), "send-forever")
        time.sleep(0.5)
        assert stuck.thread.is_alive()  # no credit: it waits, as asked
        timed = Run(lambda: g.send(g.broadcast, b"timed", timeout=1), "send-1s")
        timed.join()
        assert isinstance(timed.error, mh.Timeout), timed.error
        assert timed.took < 10, f"send(timeout=1) took {timed.took:.1f} s"
        # The stopped member goes on: the queued messages leave, the send without a timeout returns.
        os.kill(p.pid, signal.SIGCONT)
        stuck.join()
        assert stuck.error is None, stuck.error
        rx.join()
        assert rx.error is None, rx.error
        # Every message in order, the timed-out ones too (they stay queued and leave in their place).
        assert rx.result == [b"fill %d" % i for i in range(filled.result + 1)] + [b"forever", b"timed"]
