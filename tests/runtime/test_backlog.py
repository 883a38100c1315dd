"""A bind completes once queued in the service's backlog (issue 17 §7 first bullet).

Before the fix a bind waited until the service's thread was inside ``accept``, so the README's
first example (bind, then accept, in one thread) timed out, and ``on_connect`` ran only inside
``accept``. Now each dispatcher's acceptor thread takes connections into a bounded backlog,
asking ``on_connect`` there.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

import multihop as mh
from liveness_util import until
from parked import in_futex_wait

TRANSPORTS = ["ump", "multihop"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_bind_then_accept_in_one_thread_with_on_connect(rt: mh.Runtime, transport: str) -> None:
    seen: list[dict[str, Any]] = []
    main = threading.get_ident()
    where: list[int] = []

    def on_connect(info: dict[str, Any]) -> bool:
        seen.append(info)
        where.append(threading.get_ident())
        return True

    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("one-thread", on_connect=on_connect)
        ch = cli.bind("one-thread", transport=transport, timeout=5)  # returns without anyone in accept
        ch.send(b"ping")
        peer = svc.accept(timeout=5)
        assert peer.recv(timeout=5) == b"ping"
        assert [i["client_pid"] for i in seen] == [os.getpid()] and seen[0]["transport"] == transport
        assert where and where[0] != main, "on_connect ran on the acceptor thread, not in accept"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_refusing_on_connect_answers_without_accept(rt: mh.Runtime, transport: str) -> None:
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("picky2", on_connect=lambda info: False)
        t0 = time.monotonic()
        with pytest.raises(mh.BindError, match="refused by the service's on_connect callback"):
            cli.bind("picky2", transport=transport, timeout=10)
        assert time.monotonic() - t0 < 5, "the refusal came at once, not at the bind's timeout"
        assert svc.queued == 0


def test_an_on_connect_that_raises_refuses_and_the_next_accept_raises_it(rt: mh.Runtime) -> None:
    def on_connect(info: dict[str, Any]) -> bool:
        raise RuntimeError("policy store unreachable")

    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("raises", on_connect=on_connect)
        with pytest.raises(mh.BindError, match="policy store unreachable"):
            cli.bind("raises", timeout=5)
        with pytest.raises(RuntimeError, match="policy store unreachable"):
            svc.accept(timeout=5)
        with pytest.raises(mh.Timeout):
            svc.accept(timeout=0.1)  # raised once


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_dropping_the_service_closes_its_backlog_and_frees_the_name(rt: mh.Runtime, transport: str) -> None:
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("withdrawn", backlog=4)
        queued = [cli.bind("withdrawn", transport=transport, timeout=5) for _ in range(3)]
        until("three channels wait in the backlog", lambda s=svc: s.queued == 3)
        del svc
        for ch in queued:
            with pytest.raises(mh.ChannelClosed):
                ch.recv(timeout=5)
            assert ch.closed
        with pytest.raises(mh.BindError):
            cli.bind("withdrawn", transport=transport, timeout=5)
        again = srv.export("withdrawn")
        ch = cli.bind("withdrawn", transport=transport, timeout=5)
        ch.send(b"new")
        assert again.accept(timeout=5).recv(timeout=5) == b"new"


def test_many_clients_queue_in_order(rt: mh.Runtime) -> None:
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("fifo", backlog=64)
        clients = [cli.bind("fifo", transport="multihop", timeout=5) for _ in range(50)]
        for i, ch in enumerate(clients):
            ch.send(b"%d" % i)
        assert svc.queued == 50
        for i in range(50):
            assert svc.accept(timeout=5).recv(timeout=5) == b"%d" % i


def _switches(tid: int) -> int:
    """Voluntary context switches of thread ``tid`` of this process (each wake-up from a wait is one)."""
    with open(f"/proc/self/task/{tid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))


class _Acceptor(threading.Thread):
    """A thread blocked in ``svc.accept(timeout=None)``, as a server's accept loop is; what it got or raised."""

    def __init__(self, svc: mh.Service) -> None:
        super().__init__(daemon=True)
        self.svc = svc
        self.got: list[Any] = []
        self.entering = threading.Event()

    def run(self) -> None:
        self.entering.set()
        try:
            self.got.append(self.svc.accept(timeout=None))
        except BaseException as e:  # noqa: BLE001 - the test asserts which
            self.got.append(e)

    def until_waiting(self) -> None:
        """Until the thread is inside accept's wait (futex(2), seen twice 20 ms apart: not a GIL hand-over)."""
        assert self.entering.wait(10)
        tid = self.native_id
        assert tid is not None
        me = os.getpid()
        until("the acceptor thread waits in accept", lambda: in_futex_wait(me, tid) and (time.sleep(0.02) or in_futex_wait(me, tid)))


def test_an_accept_waiting_in_another_thread_sleeps_until_something_comes(rt: mh.Runtime) -> None:
    """Only Python's main thread runs signal handlers, so only it waits in 50 ms slices to look at them;
    an accept loop in another thread (a server's, a GES broker's) used to wake 20 times a second for
    nothing. Now it sleeps until a connection, a refusal whose on_connect raised, or a detach wakes it."""
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("sleeper")
        t = _Acceptor(svc)
        t.start()
        try:
            t.until_waiting()
            assert t.native_id is not None
            before = _switches(t.native_id)
            time.sleep(1.0)  # observing a thread that should not move: nothing to wait on
            woke = _switches(t.native_id) - before
            assert woke <= 3, f"the waiting acceptor woke {woke} times in a second with nothing to accept"
            ch = cli.bind("sleeper", transport="multihop", timeout=5)
            t.join(5)
            assert not t.is_alive() and isinstance(t.got[0], mh.Channel), t.got
            ch.send(b"hi")
            assert t.got[0].recv(timeout=5) == b"hi"
        finally:
            srv.detach()
            t.join(5)


def test_an_on_connect_error_and_a_detach_reach_an_accept_in_another_thread_at_once(rt: mh.Runtime) -> None:
    def on_connect(info: dict[str, Any]) -> bool:
        raise RuntimeError("quota exceeded")

    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("kicked", on_connect=on_connect)
        t = _Acceptor(svc)
        t.start()
        t.until_waiting()  # the refusal comes while it waits, not before it looks
        with pytest.raises(mh.BindError, match="quota exceeded"):
            cli.bind("kicked", timeout=5)
        t.join(10)  # the wait has no slice to end: only the refusal can wake it
        assert not t.is_alive() and isinstance(t.got[0], RuntimeError) and "quota exceeded" in str(t.got[0]), t.got
        t2 = _Acceptor(svc)
        t2.start()
        t2.until_waiting()
        srv.detach()
        t2.join(10)
        assert not t2.is_alive() and isinstance(t2.got[0], mh.MonitorError), t2.got
