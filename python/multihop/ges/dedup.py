"""Duplicate detection of events (routing paper 3.6-3.7).

Events of one publisher are received in order at every broker (channels are
FIFO, and a broker resends unacknowledged events over an alternate route
before any newer one), so a broker keeps only the last event it handled per
stream and role: an event of the same stream that is not later is a duplicate
(a fork that reached the unit over two links, or a resend).  The stream is
``(publisher, incarnation)``: a publisher that roams or reconnects starts a
new incarnation, whose events are never taken for duplicates of the old ones
(Table 3).  The role separates the jobs a broker does for one event: delivering
to its clients, deciding inside a unit of some level, climbing at some level.
"""

from __future__ import annotations

from typing import Hashable

from multihop.ges.event import EventId

__all__ = ["DuplicateFilter"]


class DuplicateFilter:
    """Last ``(timestamp, sequence)`` per (stream, role); :meth:`accept` says whether an event is new."""

    __slots__ = ("last", "duplicates")

    def __init__(self) -> None:
        self.last: dict[tuple[str, int, Hashable], tuple[int, int]] = {}
        self.duplicates = 0

    def accept(self, eid: EventId, role: Hashable) -> bool:
        """True (and remembered) if ``eid`` is later than the last event of its stream in ``role``."""
        key = (eid.publisher, eid.incarnation, role)
        order = (eid.timestamp, eid.sequence)
        last = self.last.get(key)
        if last is not None and order <= last:
            self.duplicates += 1
            return False
        self.last[key] = order
        return True
