"""An in-process channel pair with the runtime Channel's API, for tests and examples.

It moves bytes between two Python objects in one process: no shared memory,
no monitors.  It is a stand-in for codec-level tests of generated bindings,
not a model of the runtime's timing or flow control.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from multihop.errors import ChannelClosed, MessageTooLarge, Timeout

__all__ = ["LoopbackChannel", "loopback_pair"]


class _Queue:
    def __init__(self) -> None:
        self.items: deque[bytes] = deque()
        self.cond = threading.Condition()
        self.closed = False


class LoopbackChannel:
    """One end of a loopback pair: ``send`` / ``recv`` / ``try_recv`` / ``close``."""

    def __init__(self, inbox: _Queue, outbox: _Queue, max_message: int | None) -> None:
        self._in = inbox
        self._out = outbox
        self.max_message = max_message

    def send(self, data: bytes, timeout: float | None = None) -> None:
        """Queue one message for the other end (never blocks; ``timeout`` is accepted for API parity)."""
        data = bytes(data)
        if self.max_message is not None and len(data) > self.max_message:
            raise MessageTooLarge(f"message of {len(data)} bytes exceeds the maximum {self.max_message}")
        with self._out.cond:
            if self._out.closed:
                raise ChannelClosed("loopback channel is closed")
            self._out.items.append(data)
            self._out.cond.notify()

    def recv(self, timeout: float | None = None) -> bytes:
        """Take the next message, waiting up to ``timeout`` seconds (None: forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._in.cond:
            while not self._in.items:
                if self._in.closed:
                    raise ChannelClosed("loopback channel is closed")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise Timeout(f"no message within {timeout} s")
                self._in.cond.wait(left)
            return self._in.items.popleft()

    def try_recv(self) -> bytes | None:
        """The next message if one is queued, else None."""
        with self._in.cond:
            if self._in.items:
                return self._in.items.popleft()
            if self._in.closed:
                raise ChannelClosed("loopback channel is closed")
            return None

    def close(self) -> None:
        """Close both directions; the other end's next call raises ChannelClosed once drained."""
        for q in (self._in, self._out):
            with q.cond:
                q.closed = True
                q.cond.notify_all()


def loopback_pair(max_message: int | None = None) -> tuple[LoopbackChannel, LoopbackChannel]:
    """Two connected ends: what one sends, the other receives, in order."""
    a, b = _Queue(), _Queue()
    return LoopbackChannel(a, b, max_message), LoopbackChannel(b, a, max_message)
