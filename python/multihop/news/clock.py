"""Clocks: every time-based rule of the dispatch machines reads one passed in.

Times are integer nanoseconds of ``CLOCK_MONOTONIC``, which every process of
one machine shares, so a news stamped by its source and checked by a peer or
a sink in another process compares correctly.  Tests drive the machines with
a :class:`VirtualClock` instead of sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "MonotonicClock", "VirtualClock", "NS", "seconds_to_ns"]

NS = 1_000_000_000
"""Nanoseconds per second."""


def seconds_to_ns(seconds: float) -> int:
    """``seconds`` as integer nanoseconds (rounded to the nearest)."""
    return int(round(seconds * NS))


class Clock(Protocol):
    """Anything with ``now_ns()``."""

    def now_ns(self) -> int:
        """The current time in nanoseconds."""
        ...


class MonotonicClock:
    """The machine's ``CLOCK_MONOTONIC`` (the live drivers' clock)."""

    def now_ns(self) -> int:
        """``time.monotonic_ns()``."""
        return time.monotonic_ns()


class VirtualClock:
    """A clock that moves only when told to (tests and the simulator)."""

    def __init__(self, start_ns: int = 1_000 * NS) -> None:
        self._now = int(start_ns)

    def now_ns(self) -> int:
        """The current virtual time."""
        return self._now

    def advance(self, seconds: float) -> int:
        """Move forward by ``seconds`` (>= 0); return the new time."""
        if seconds < 0:
            raise ValueError(f"a virtual clock only moves forward; got {seconds} s")
        self._now += seconds_to_ns(seconds)
        return self._now

    def set(self, now_ns: int) -> None:
        """Move to ``now_ns`` (not before the current time)."""
        if now_ns < self._now:
            raise ValueError(f"a virtual clock only moves forward: {now_ns} < {self._now}")
        self._now = int(now_ns)
