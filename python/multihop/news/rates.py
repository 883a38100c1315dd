"""Rate units: ``max_per_unit`` enforced by holding, ``min_per_unit`` monitored.

Both count by the time a news *entered* the system (stamped by its source),
in units counted from the source's registration time, so every peer, fed the
same news, computes the same schedule and the same alarms: no peer's local
clock decides which unit a news belongs to.

:class:`RateSchedule` gives each news its release time: a news fits in the
unit it entered if that unit has room, else in the first later unit that has
(held, never dropped), released at that unit's start.  :class:`RateMonitor`
reports every unit, once it is over, in which the source sent fewer than
``min_per_unit``; a run of empty units is reported as one alarm covering them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RateSchedule", "RateMonitor", "Alarm"]


class RateSchedule:
    """Release times under ``max_per_unit`` (None: every news is released when it enters)."""

    __slots__ = ("origin_ns", "unit_ns", "max_per_unit", "_unit", "_count", "held")

    def __init__(self, origin_ns: int, unit_ns: int, max_per_unit: int | None) -> None:
        if unit_ns <= 0:
            raise ValueError(f"unit_ns must be positive, got {unit_ns}")
        self.origin_ns = origin_ns
        self.unit_ns = unit_ns
        self.max_per_unit = max_per_unit
        self._unit = 0  # the latest unit given out so far
        self._count = 0  # news given out in that unit
        self.held = 0  # news released later than they entered

    def unit_of(self, entry_ns: int) -> int:
        """The unit a news entered in (0 for anything before the origin)."""
        return max(0, (entry_ns - self.origin_ns) // self.unit_ns)

    def release(self, entry_ns: int) -> int:
        """The time the news entering at ``entry_ns`` may be dispatched (call once per news, in sequence order)."""
        if self.max_per_unit is None:
            return entry_ns
        u = self.unit_of(entry_ns)
        if u > self._unit:
            self._unit, self._count = u, 0
        if self._count >= self.max_per_unit:
            self._unit, self._count = self._unit + 1, 0
        self._count += 1
        start = self.origin_ns + self._unit * self.unit_ns
        if start > entry_ns:
            self.held += 1
            return start
        return entry_ns


@dataclass(frozen=True)
class Alarm:
    """A source sent ``count`` news in each of ``units`` units from ``unit`` on, fewer than ``min_per_unit``."""

    unit: int
    units: int
    count: int
    min_per_unit: int


class RateMonitor:
    """Alarms for the units in which a source sent fewer than ``min_per_unit`` (0: never)."""

    __slots__ = ("origin_ns", "unit_ns", "min_per_unit", "grace_ns", "_next", "_counts", "late", "alarms", "below_units")

    def __init__(self, origin_ns: int, unit_ns: int, min_per_unit: int, grace_ns: int = 0) -> None:
        self.origin_ns = origin_ns
        self.unit_ns = unit_ns
        self.min_per_unit = min_per_unit
        self.grace_ns = grace_ns
        self._next = 0  # the first unit not yet judged
        self._counts: dict[int, int] = {}
        self.late = 0  # news that arrived after their unit was judged
        self.alarms = 0  # alarms raised
        self.below_units = 0  # units judged below the minimum

    def count(self, entry_ns: int) -> None:
        """Count one news that entered at ``entry_ns``."""
        u = max(0, (entry_ns - self.origin_ns) // self.unit_ns)
        if u < self._next:
            self.late += 1
            return
        self._counts[u] = self._counts.get(u, 0) + 1

    def deadline(self) -> int | None:
        """When the next unit is judged (None if not monitored)."""
        if self.min_per_unit <= 0:
            return None
        return self.origin_ns + (self._next + 1) * self.unit_ns + self.grace_ns

    def due(self, now_ns: int) -> list[Alarm]:
        """Judge every unit over by ``now_ns`` (plus the grace); return the alarms, oldest first."""
        out: list[Alarm] = []
        if self.min_per_unit <= 0:
            return out
        over = (now_ns - self.grace_ns - self.origin_ns) // self.unit_ns  # units [0, over) are over
        while self._next < over:
            u = self._next
            n = self._counts.pop(u, 0)
            if n >= self.min_per_unit:
                self._next += 1
                continue
            if n == 0:
                # a run of empty units: one alarm up to the next unit that has news (or the present)
                nxt = min((k for k in self._counts if k > u), default=over)
                span = min(nxt, over) - u
            else:
                span = 1
            out.append(Alarm(u, span, n, self.min_per_unit))
            self.alarms += 1
            self.below_units += span
            self._next = u + span
        return out
