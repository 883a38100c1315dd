"""When a difference between two figures is stated: the spread rule, and when a case ran under heavy load.

Every suite measures each case several times (its *repeats*, interleaved
with its other cases: :mod:`multihop.bench.suites.common`), so each figure
of the report is a set of values, one per repeat.  The report gives the
median and the range (min-max) over the repeats, and compares two figures by
one rule (:data:`RULE`):

* **clear**: the two ranges do not overlap: every repeat of one figure is
  beyond every repeat of the other.  Equivalently, the ratio's range, from
  ``min(a) / max(b)`` to ``max(a) / min(b)``, excludes 1.  Only then is the
  difference stated (``"12x slower (9.8-14x)"``).
* **no clear difference**: the ranges overlap (the ratio's range includes 1).
* **not determined**: a figure has fewer than :data:`MIN_REPEATS` repeats, so
  it has no spread to judge by.

With *n* and *m* repeats, two figures with no difference at all (every
repeat drawn from the same distribution) pass the rule with probability
``2 n! m! / (n + m)!``: 1 in 10 with 3 repeats each (``--quick``), 1 in 126
with 5 (:func:`false_clear`).  The rule asks nothing of the size of a
difference: a clear one can be small.

Load: a case is flagged as measured under **heavy foreign load** when in any
of its repeats the CPU used by processes that are not the benchmark's
(``foreign_cpu``, :mod:`multihop.bench.load`) reached :data:`HEAVY_SHARE` of
the machine's CPUs (0.5 CPUs on a 2-CPU machine).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CLEAR",
    "HEAVY_SHARE",
    "MIN_REPEATS",
    "NO_CLEAR",
    "NOT_DETERMINED",
    "RULE",
    "Spread",
    "compare",
    "false_clear",
    "heavy",
    "heavy_text",
    "ratio_range",
]

MIN_REPEATS = 2
"""A figure needs this many repeats to have a spread (fewer: ``not determined``)."""

CLEAR = "clear"
NO_CLEAR = "no clear difference"
NOT_DETERMINED = "not determined"

HEAVY_SHARE = 0.25
"""Foreign CPU, as a share of the machine's CPUs, from which a case counts as measured under heavy load."""

RULE = (
    "Each figure is the median over the case's repeats (interleaved with the suite's other cases), with its range "
    "(min-max) over them. A difference is stated only when the ranges do not overlap: every repeat of one figure "
    "is beyond every repeat of the other (equivalently, the ratio's range, min/max to max/min, excludes 1). "
    "Otherwise the finding says 'no clear difference', and 'not determined' when a figure has fewer than "
    f"{MIN_REPEATS} repeats. Two equal figures pass this rule by chance 1 time in 10 with 3 repeats each "
    "(--quick), 1 in 126 with 5. "
    f"A case is flagged 'heavy load' when, in any repeat, processes other than the benchmark's used at least "
    f"{HEAVY_SHARE:.0%} of the machine's CPUs (foreign CPU, from /proc/stat less the benchmark's own processes)."
)
"""The rule as the report states it."""


@dataclass(frozen=True)
class Spread:
    """A figure's values over its repeats: their median, min, max and count."""

    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Spread:
        """The spread of the non-null, finite values."""
        return cls(tuple(float(v) for v in values if v is not None and math.isfinite(float(v))))

    @property
    def n(self) -> int:
        """Repeats with a value."""
        return len(self.values)

    @property
    def median(self) -> float | None:
        """Median over the repeats, or None without any."""
        return statistics.median(self.values) if self.values else None

    @property
    def low(self) -> float | None:
        """Smallest value, or None."""
        return min(self.values) if self.values else None

    @property
    def high(self) -> float | None:
        """Largest value, or None."""
        return max(self.values) if self.values else None


def compare(a: Spread, b: Spread) -> str:
    """The rule: :data:`CLEAR` when the ranges of `a` and `b` do not overlap, else :data:`NO_CLEAR`.

    :data:`NOT_DETERMINED` when either has fewer than :data:`MIN_REPEATS` values.
    """
    if a.n < MIN_REPEATS or b.n < MIN_REPEATS:
        return NOT_DETERMINED
    assert a.low is not None and a.high is not None and b.low is not None and b.high is not None
    return CLEAR if a.low > b.high or a.high < b.low else NO_CLEAR


def ratio_range(a: Spread, b: Spread) -> tuple[float, float] | None:
    """``(min(a) / max(b), max(a) / min(b))``, or None when `b` has a value <= 0 or either is empty."""
    if not a.n or not b.n:
        return None
    assert a.low is not None and a.high is not None and b.low is not None and b.high is not None
    if b.low <= 0:
        return None
    return a.low / b.high, a.high / b.low


def false_clear(n: int, m: int) -> float:
    """Chance that two figures with no difference, of `n` and `m` repeats, pass the rule: 2 n! m! / (n+m)!."""
    if n < 1 or m < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n + m, n))


def heavy(foreign_cpu: float | None, cpus: int | None) -> bool | None:
    """Whether `foreign_cpu` (CPUs) is heavy load on a machine of `cpus` CPUs; None if either is unknown."""
    if foreign_cpu is None or not cpus:
        return None
    return foreign_cpu >= HEAVY_SHARE * cpus


def heavy_text(cpus: int | None) -> str:
    """The heavy-load threshold in words for a machine of `cpus` CPUs."""
    if not cpus:
        return f"foreign CPU >= {HEAVY_SHARE:.0%} of the machine's CPUs"
    return f"foreign CPU >= {HEAVY_SHARE * cpus:.2g} of {cpus} CPUs"
