"""Source and sink QoS: what each may ask for, checked when it is made.

Times are given in seconds (floats) and kept as integer nanoseconds for the
machines.  A contradictory or out-of-range QoS raises :class:`QosError`
naming the field and the value, before anything is sent.

Source QoS (RE.VE.N.GE. ``priority``, ``unit``, ``minNewsPTU``, ``maxNewsPTU``,
``reliability``):

* ``priority`` 0-255, higher first: the peers keep one queue per priority and
  deliver the highest eligible first;
* ``unit`` (seconds) with ``min_per_unit`` (monitored: the peers signal every
  unit in which the source sent fewer) and ``max_per_unit`` (enforced: news
  beyond it is held, never dropped, and released in the next unit with room);
* ``reliable``: ``send`` waits for room on every peer's channel and the peers
  acknowledge (``flush`` waits for it); best effort never waits and counts what
  it could not hand over.

Sink QoS (``maxDeliTime``, ``minDeliTime``, ``exclusive``, and what a bounded
queue needs):

* ``max_delivery_time``: a news older than this (time since it entered the
  system) is not delivered to this sink: dropped for it, counted, and the sink
  is told which;
* ``min_delivery_time``: embargo, held until it has spent that long in the system;
* ``exclusive``: per topic (a list of booleans parallel to the topics, or the
  names of the exclusive topics): if any sink flags a topic exclusive, that
  topic's news goes only to the exclusive sinks;
* ``reliable``: acknowledged delivery, exactly once across a peer's failure
  (the sink suppresses duplicates by news id); best effort is acknowledged too,
  for flow control, but the peers forget a news once sent;
* ``queue_limit`` and ``overflow``: the most news the peers keep for this sink;
  beyond it ``"drop-oldest"`` evicts the oldest news of the lowest priority
  waiting, ``"drop-newest"`` refuses the arriving one; either way the sink is
  told which news it lost, and no other sink is affected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from multihop.news.clock import seconds_to_ns
from multihop.news.errors import QosError

__all__ = ["SourceQoS", "SinkQoS", "NO_BOUND", "OVERFLOW_POLICIES", "MAX_PRIORITY", "MAX_QUEUE_LIMIT"]

NO_BOUND = (1 << 64) - 1
"""The wire value of "no bound" (no ``max_delivery_time``, no ``max_per_unit``)."""

MAX_PRIORITY = 255
"""Priorities are 0 (lowest) .. 255 (highest)."""

MAX_QUEUE_LIMIT = 1_000_000
"""The largest ``queue_limit`` a sink may ask for."""

OVERFLOW_POLICIES = ("drop-oldest", "drop-newest")
"""What a full sink queue does with one more news."""

_MAX_SECONDS = 10 * 365 * 86400.0  # ten years: anything longer is a mistake


def _fail(cls: str, name: str, value: Any, why: str) -> QosError:
    return QosError(f"{cls}.{name}={value!r}: {why}")


def _int(cls: str, name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(cls, name, value, f"expected an integer in {low}..{high}")
    if not low <= value <= high:
        raise _fail(cls, name, value, f"must be in {low}..{high}")
    return value


def _seconds(cls: str, name: str, value: Any, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(cls, name, value, "expected a number of seconds")
    v = float(value)
    if math.isnan(v) or math.isinf(v) or v > _MAX_SECONDS:
        raise _fail(cls, name, value, "must be a finite number of seconds (at most ten years)")
    if v < 0:
        raise _fail(cls, name, value, "a time cannot be negative")
    if positive and v == 0:
        raise _fail(cls, name, value, "must be more than 0 seconds")
    return v


def _bool(cls: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(cls, name, value, "expected True or False")
    return value


@dataclass(frozen=True)
class SourceQoS:
    """What a source declares when it registers (checked here; see the module docstring).

    Attributes:
        priority: 0..255; the source's news inherit it; higher is dispatched first.
        unit: the time unit (seconds, > 0) of ``min_per_unit`` and ``max_per_unit``.
        min_per_unit: the least news per unit the source promises (0: not monitored).
        max_per_unit: the most news per unit (None: no limit); excess is held until a later unit.
        reliable: acknowledged delivery into the peers (True) or best effort (False).
    """

    priority: int = 0
    unit: float = 1.0
    min_per_unit: int = 0
    max_per_unit: int | None = None
    reliable: bool = True

    def __post_init__(self) -> None:
        c = "SourceQoS"
        _int(c, "priority", self.priority, 0, MAX_PRIORITY)
        _seconds(c, "unit", self.unit, positive=True)
        if seconds_to_ns(self.unit) < 1000:
            raise _fail(c, "unit", self.unit, "must be at least 1 microsecond")
        _int(c, "min_per_unit", self.min_per_unit, 0, 2**32 - 1)
        if self.max_per_unit is not None:
            _int(c, "max_per_unit", self.max_per_unit, 1, 2**32 - 1)
            if self.min_per_unit > self.max_per_unit:
                raise QosError(
                    f"SourceQoS: min_per_unit={self.min_per_unit} is above max_per_unit={self.max_per_unit} "
                    "(contradictory: the source would break one bound or the other)"
                )
        _bool(c, "reliable", self.reliable)

    @property
    def unit_ns(self) -> int:
        """``unit`` in nanoseconds."""
        return seconds_to_ns(self.unit)

    @property
    def max_wire(self) -> int:
        """``max_per_unit`` as sent (0 for no limit)."""
        return 0 if self.max_per_unit is None else self.max_per_unit


@dataclass(frozen=True)
class SinkQoS:
    """What a sink asks for when it joins (checked here; see the module docstring).

    Attributes:
        max_delivery_time: seconds (> 0) a news may have spent in the system
            when delivered; None: no bound.
        min_delivery_time: embargo in seconds (>= 0, at most ``max_delivery_time``).
        exclusive: per topic: booleans parallel to the sink's topics, or the
            names of its exclusive topics (checked against the topics when the
            sink is made).
        reliable: acknowledged, exactly-once delivery (True) or best effort.
        queue_limit: the most news the peers keep waiting for this sink (1..1,000,000).
        overflow: ``"drop-oldest"`` or ``"drop-newest"`` (what a full queue does).
    """

    max_delivery_time: float | None = None
    min_delivery_time: float = 0.0
    exclusive: Sequence[bool] | Sequence[str] = field(default=())
    reliable: bool = True
    queue_limit: int = 10_000
    overflow: str = "drop-oldest"

    def __post_init__(self) -> None:
        c = "SinkQoS"
        if self.max_delivery_time is not None:
            _seconds(c, "max_delivery_time", self.max_delivery_time, positive=True)
        _seconds(c, "min_delivery_time", self.min_delivery_time, positive=False)
        if self.max_delivery_time is not None and self.min_delivery_time > self.max_delivery_time:
            raise QosError(
                f"SinkQoS: min_delivery_time={self.min_delivery_time} s is above "
                f"max_delivery_time={self.max_delivery_time} s (contradictory: every news would be held "
                "past the time it may be delivered)"
            )
        if isinstance(self.exclusive, (str, bytes)) or not isinstance(self.exclusive, (list, tuple, set, frozenset)):
            raise _fail(c, "exclusive", self.exclusive, "expected a list of booleans (one per topic) or of topic names")
        kinds = {type(x) for x in self.exclusive}
        if kinds and kinds != {bool} and kinds != {str}:
            raise _fail(c, "exclusive", self.exclusive, "mixes booleans and names: give one flag per topic, or names")
        object.__setattr__(
            self,
            "exclusive",
            tuple(sorted(self.exclusive)) if kinds == {str} and isinstance(self.exclusive, (set, frozenset)) else tuple(self.exclusive),
        )
        _bool(c, "reliable", self.reliable)
        _int(c, "queue_limit", self.queue_limit, 1, MAX_QUEUE_LIMIT)
        if self.overflow not in OVERFLOW_POLICIES:
            raise _fail(c, "overflow", self.overflow, f"must be one of {', '.join(OVERFLOW_POLICIES)}")

    def exclusive_topics(self, topics: Sequence[str]) -> tuple[str, ...]:
        """The names of the exclusive topics among ``topics`` (the sink's own list).

        Raises:
            QosError: booleans whose count differs from the topics'.
            UnknownTopic: a name that is not among ``topics``.
        """
        from multihop.news.errors import UnknownTopic

        flags = self.exclusive
        if flags and isinstance(flags[0], bool):
            if len(flags) != len(topics):
                raise QosError(
                    f"SinkQoS.exclusive has {len(flags)} flag(s) for {len(topics)} topic(s) {list(topics)}: "
                    "give one flag per topic, in the same order"
                )
            return tuple(t for t, f in zip(topics, flags, strict=True) if f)
        names = tuple(str(x) for x in flags)
        unknown = [t for t in names if t not in topics]
        if unknown:
            raise UnknownTopic(f"SinkQoS.exclusive names {unknown}, which the sink does not subscribe to (its topics: {list(topics)})")
        return names

    @property
    def max_delivery_ns(self) -> int:
        """``max_delivery_time`` in nanoseconds (:data:`NO_BOUND` for none)."""
        return NO_BOUND if self.max_delivery_time is None else seconds_to_ns(self.max_delivery_time)

    @property
    def min_delivery_ns(self) -> int:
        """``min_delivery_time`` in nanoseconds."""
        return seconds_to_ns(self.min_delivery_time)
