"""asyncio for channels, services and binds, on this process's doorbell.

The coroutines behind ``await ch.recv_async()``, ``await ch.send_async(data)``,
``async for msg in ch``, ``await svc.accept_async()`` and
``await d.bind_async(...)`` (UMP and multi-hop alike).

How a task waits: every ring this process reads rings one doorbell, a futex
word (``core-rs/base/src/park.rs``).  :class:`multihop._core.AsyncBell` turns it
into one descriptor the event loop watches with ``loop.add_reader``: an
io_uring with a ``FUTEX_WAIT`` on the doorbell's word (Linux 6.7+), else one
bridge thread per bell and an eventfd (``core-rs/base/src/async_bell.rs``).  So
one descriptor per event loop serves every channel, and nothing polls: no
thread per channel, no sleeps.  A task that must wait registers what it waits
for (a channel and "a message" or "room for n bytes", a service's backlog, a
pending bind's reply) under a token and awaits a future; when the descriptor
turns readable, the bell's registry is scanned in Rust, one look per
registered item, and the futures of the tokens that may proceed are woken.
Before registering, a UMP receive spins briefly (``MULTIHOP_ASYNC_SPIN_US``,
default 20 us) with the loop held: a reply that comes within that costs no
wake-up at all.  While anything is registered, each write to this process
costs its writer one ``FUTEX_WAKE`` (as a parked blocking receiver does); with
nothing registered, nothing.

A UMP peer that dies cannot ring: for UMP channels the loop also watches the
peer process's pidfd (one per peer process, however many channels), and its
exit wakes the waiting tasks with ``ChannelClosed``.  Multi-hop ends learn of
a death from the monitors, which tear the circuit down (that rings).

Rules the coroutines keep:

* **A cancelled wait takes nothing.**  A woken future only says "look again";
  the message is taken off the ring by the task itself after it resumes, so
  a receive cancelled at any point (``asyncio.wait_for``, ``task.cancel()``)
  leaves every message in the channel for the next receive.
* **Errors arrive in the awaiting task**: ``ChannelClosed`` (the peer closed,
  died, or a monitor went away), ``Timeout`` after ``timeout`` seconds
  (None: no limit), ``MessageTooLarge``, ``BindError``.
* ``async for msg in ch`` ends (``StopAsyncIteration``) when the channel was
  closed: by the peer, by this end, or a multi-hop circuit's TEARDOWN (which
  does not say whether the peer closed or died).  A UMP peer that died and a
  monitor that went away raise ``ChannelClosed`` instead.
* A coroutine that finds its message (or room) at once returns without
  yielding to the loop, as ``asyncio.StreamReader.read`` does with buffered
  data.
* ``bind_async`` sends the bind request and waits for the reply on the
  doorbell (the dispatcher's reader thread rings it as it hands the reply
  over): the loop never blocks on the service.  Only ``transport="auto"``
  first asks the initial monitor which transport the routing table implies
  (``Dispatcher.choose_transport``, two short local exchanges), on the loop's
  default executor.

An event loop gets its own bell (normally one per process); a channel may be
awaited from one loop at a time, as it may be used from one thread at a time.
"""

from __future__ import annotations

import asyncio
import collections.abc
import functools
import math
import numbers
import os
import weakref
from typing import Any

from multihop import _core
from multihop.defaults import DEFAULT_TIMEOUT, DEFAULT_WINDOW
from multihop.errors import ChannelClosed, Timeout, TxBusy

# `recv_async` / `send_async` return a `_core.AsyncCall`: it tries once when the
# awaiting task first runs it, then waits in `recv` / `send` below.  To asyncio
# it is a coroutine (create_task, wait_for, gather take it).
collections.abc.Coroutine.register(_core.AsyncCall)

__all__ = ["recv", "send", "accept", "bind", "wait_readable", "wait_writable", "Messages", "bell_of", "stats"]

#: microseconds a UMP receive spins (the loop held) before it waits on the doorbell
SPIN_US = int(os.environ.get("MULTIHOP_ASYNC_SPIN_US", "20"))

_READABLE, _WRITABLE = 0, 1
_CLEAN_CLOSE = frozenset({"this end", "peer", "teardown"})


def _timeout(timeout: float | None) -> float | None:
    """Check a timeout argument: None or a number of seconds >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__} {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout}")
    return float(timeout)


class _Waiter:
    """One event loop's side of the doorbell: the bell, the futures by token, the peers' pidfds."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # the loop holds us (its reader callbacks), not the other way round
        self.bell = _core.AsyncBell()
        self.futures: dict[int, asyncio.Future[bool]] = {}
        #: UMP peer pid -> its pidfd, watched by the loop until the process exits
        self.peers: dict[int, int] = {}
        self.wakeups = 0
        loop.add_reader(self.bell.fileno(), self._on_ring)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop this waiter serves."""
        loop = self._loop()
        if loop is None:
            raise RuntimeError("the event loop of this waiter is gone")
        return loop

    def __del__(self) -> None:
        for fd in self.peers.values():
            os.close(fd)
        self.peers.clear()

    def _on_ring(self) -> None:
        """The doorbell rang: take the wake-up, then wake every task that may proceed."""
        self.wakeups += 1
        self.bell.consume()
        self._wake_ready(strict=False)

    def _on_peer_exit(self, pid: int) -> None:
        """A UMP peer process exited: its channels are over (looked at strictly)."""
        fd = self.peers.pop(pid, None)
        if fd is not None:
            self.loop.remove_reader(fd)
            os.close(fd)
        self._wake_ready(strict=True)

    def _wake_ready(self, strict: bool) -> None:
        if not self.futures:
            return
        self.bell.arm()  # armed before the look: a ring after it turns the descriptor readable
        for token in self.bell.ready(strict):
            fut = self.futures.pop(token, None)
            self.bell.unwatch(token)
            if fut is not None and not fut.done():
                fut.set_result(True)
        if not self.futures:
            self.bell.consume()  # nobody waits: writers stop ringing

    def _watch_peer(self, ch: Any) -> None:
        """Watch the process at the other end of UMP channel ``ch`` (once per process)."""
        pid = ch.peer_pid
        if pid in self.peers:
            return
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self.loop.call_soon(self._wake_ready, True)
            return
        self.peers[pid] = fd
        self.loop.add_reader(fd, self._on_peer_exit, pid)
        # The peer may have died (and its pid been reused) before the pidfd
        # was opened: the channel's own pidfd says so now.
        if ch.closed:
            self.loop.call_soon(self._wake_ready, True)

    async def wait(self, obj: Any, want: int, size: int, deadline: float | None) -> bool:
        """Wait until ``obj`` may proceed (True) or ``deadline`` (loop time) passes (False)."""
        token = self.bell.watch(obj, want, size)
        try:
            self.bell.arm()
            if self.bell.poll(token):
                return True
            if isinstance(obj, _core.Channel) and obj.transport == "ump":
                self._watch_peer(obj)
            fut: asyncio.Future[bool] = self.loop.create_future()
            self.futures[token] = fut
            if deadline is None:
                return await fut
            timer = self.loop.call_at(deadline, _expire, fut)
            try:
                return await fut
            finally:
                timer.cancel()
        finally:
            self.futures.pop(token, None)
            self.bell.unwatch(token)
            if not self.futures:
                self.bell.consume()


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


_waiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Waiter] = weakref.WeakKeyDictionary()


def _waiter() -> _Waiter:
    """The running loop's waiter (made at its first wait; it lives as long as the loop)."""
    loop = asyncio.get_running_loop()
    w = _waiters.get(loop)
    if w is None:
        w = _waiters[loop] = _Waiter(loop)
    return w


def bell_of(loop: asyncio.AbstractEventLoop | None = None) -> _core.AsyncBell | None:
    """The doorbell descriptor the running loop (or ``loop``) watches, once a task has waited on it; else None."""
    w = _waiters.get(loop if loop is not None else asyncio.get_running_loop())
    return None if w is None else w.bell


def stats(loop: asyncio.AbstractEventLoop | None = None) -> dict[str, Any]:
    """What the running loop's (or ``loop``'s) doorbell waiter has done: ``wakeups`` (times the
    descriptor turned readable), ``waiting`` (tasks parked now), ``peers`` (UMP peer processes
    watched), ``kind`` ("io_uring" or "bridge"); all zero / None before the loop's first wait."""
    w = _waiters.get(loop if loop is not None else asyncio.get_running_loop())
    if w is None:
        return {"wakeups": 0, "waiting": 0, "peers": 0, "kind": None}
    return {"wakeups": w.wakeups, "waiting": len(w.futures), "peers": len(w.peers), "kind": w.bell.kind}


def _deadline(w: _Waiter, timeout: float | None) -> float | None:
    return None if timeout is None else w.loop.time() + timeout


async def recv(ch: _core.Channel, timeout: float | None = None) -> bytes:
    """Receive one message from ``ch`` without blocking the loop (``Channel.recv_async``).

    Raises ``Timeout`` after ``timeout`` seconds (None: no limit) and
    ``ChannelClosed`` once the channel is over and drained.  Cancelled at
    any point, it has taken nothing off the channel.
    """
    timeout = _timeout(timeout)
    msg = ch.try_recv()
    if msg is not None:
        return msg
    if SPIN_US and ch.transport == "ump" and ch._ready(_READABLE, 0, SPIN_US):
        msg = ch.try_recv()
        if msg is not None:
            return msg
    w = _waiter()
    deadline = _deadline(w, timeout)
    while True:
        if not await w.wait(ch, _READABLE, 0, deadline):
            raise Timeout("recv timed out: no message arrived")
        msg = ch.try_recv()
        if msg is not None:
            return msg


async def send(ch: _core.Channel, data: Any, timeout: float | None = None) -> None:
    """Send one message (any bytes-like object) on ``ch`` without blocking the loop (``Channel.send_async``).

    Waits for room as ``Channel.send`` does: a UMP channel's ring room; on a
    multi-hop channel a credit (its window of unacknowledged frames), unless
    the message can be held for the next one (docs/design.md §4).  Raises
    ``Timeout`` after ``timeout`` seconds, ``ChannelClosed``, ``MessageTooLarge``.
    """
    timeout = _timeout(timeout)
    try:
        ch._send_or_hold(data)
        return
    except TxBusy:
        pass
    size = memoryview(data).nbytes
    w = _waiter()
    deadline = _deadline(w, timeout)
    while True:
        if not await w.wait(ch, _WRITABLE, size, deadline):
            raise Timeout("send timed out: the receiver did not make room")
        try:
            ch._send_or_hold(data)
            return
        except TxBusy:
            continue


async def wait_readable(ch: _core.Channel, timeout: float | None = None) -> None:
    """Wait, without blocking the loop, until ``ch`` has a message or is over; take nothing.

    Raises ``Timeout`` after ``timeout`` seconds (None: no limit).
    """
    timeout = _timeout(timeout)
    if ch._ready(_READABLE, 0, 0):
        return
    w = _waiter()
    if not await w.wait(ch, _READABLE, 0, _deadline(w, timeout)):
        raise Timeout("timed out: no message arrived")


async def wait_writable(ch: _core.Channel, size: int, timeout: float | None = None) -> None:
    """Wait, without blocking the loop, until a message of ``size`` bytes may go on ``ch`` (or it is over).

    Raises ``Timeout`` after ``timeout`` seconds (None: no limit).
    """
    timeout = _timeout(timeout)
    if ch._ready(_WRITABLE, size, 0):
        return
    w = _waiter()
    if not await w.wait(ch, _WRITABLE, size, _deadline(w, timeout)):
        raise Timeout("timed out: the receiver did not make room")


class Messages:
    """``async for msg in ch``: each message until the channel is closed (see the module text)."""

    __slots__ = ("_ch",)

    def __init__(self, ch: _core.Channel) -> None:
        self._ch = ch

    def __aiter__(self) -> "Messages":
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._ch.recv_async()
        except ChannelClosed:
            if self._ch.close_cause in _CLEAN_CLOSE:
                raise StopAsyncIteration from None
            raise


async def accept(svc: _core.Service, timeout: float | None = None) -> _core.Channel:
    """Take the next connection from ``svc``'s backlog without blocking the loop (``Service.accept_async``).

    Raises ``Timeout`` when no client bound within ``timeout`` seconds, the
    ``on_connect`` callback's exception kept for the next accept, and
    ``MonitorError`` when the monitor is gone.
    """
    timeout = _timeout(timeout)
    ch = svc.try_accept()
    if ch is not None:
        return ch
    w = _waiter()
    deadline = _deadline(w, timeout)
    while True:
        if not await w.wait(svc, 0, 0, deadline):
            raise Timeout(f"no client bound to {svc.name!r} in time")
        ch = svc.try_accept()
        if ch is not None:
            return ch


async def bind(
    d: _core.Dispatcher,
    name: Any = None,
    transport: str = "ump",
    timeout: float | None = DEFAULT_TIMEOUT,
    max_message: int | None = None,
    iref: int | None = None,
    window: int = DEFAULT_WINDOW,
) -> _core.Channel:
    """Bind ``d`` to service ``name`` (or ``iref``) without blocking the loop (``Dispatcher.bind_async``).

    The same arguments and errors as ``Dispatcher.bind``.  The request goes
    out at once; the reply is awaited on the doorbell.  Cancelled, the bind
    is given up as a timed-out one is (a channel the service set up
    meanwhile is closed).  ``transport="auto"`` asks the routing table first,
    on the loop's default executor (see the module text).
    """
    loop = asyncio.get_running_loop()
    if transport == "auto":
        target = {"name": name} if iref is None else {"iref": iref}
        if name is not None and iref is not None:
            raise TypeError("bind needs exactly one of name or iref")
        transport = await loop.run_in_executor(None, functools.partial(d.choose_transport, **target))
    pending = d._bind_start(name=name, transport=transport, timeout=timeout, max_message=max_message, iref=iref, window=window)
    try:
        w = _waiter()
        while not pending.poll():
            await w.wait(pending, 0, 0, loop.time() + pending.time_left)
        return pending.finish()
    finally:
        pending.cancel()  # after finish: nothing to do
