"""The options of a ``multihop bench`` run, and the error raised when they do not fit a suite.

``cores`` and ``routing`` are ``None`` when the command line did not give
them: each suite then uses its own default (the suites sharing one runtime
run on cores 0-1 with direct routing; ``hops``, ``routing`` and
``resources`` start runtimes on virtual cores).  When given, every suite
honours them (see each suite's docstring).  ``attach`` names a runtime
started with ``multihop up``: every suite then runs on it, as it is, and
``cores`` / ``routing`` must not be given.
"""

from __future__ import annotations

from dataclasses import dataclass

from multihop.errors import MultihopError
from multihop.rts import MODES

__all__ = ["BenchOptions", "OptionError", "QUICK_REPEATS", "REPEATS", "SHARED_CORES", "SHARED_ROUTING", "TRACE_EVERY"]

TRACE_EVERY = 16
"""Default: one round trip in this many is timed and written to the trace."""

REPEATS = 5
"""Default: each case is measured this many times (interleaved with the suite's other cases)."""

QUICK_REPEATS = 3
"""Default repeats with ``--quick``: the fewest that give a spread (each repeat is a short run)."""

SHARED_CORES = (0, 1)
"""Cores of the runtime shared by channels, window, fanout and peers when ``--cores`` is not given."""

SHARED_ROUTING = "direct"
"""Routing of that runtime when ``--routing`` is not given."""


class OptionError(MultihopError, ValueError):
    """The options of a bench run are inconsistent, or do not fit a suite (the message names it)."""


@dataclass(frozen=True)
class BenchOptions:
    """What ``multihop bench`` was asked for, beyond the suite and the output directory.

    Attributes:
        quick: a few tens of seconds per suite (small cases, each measured :data:`QUICK_REPEATS` times).
        cores: ``--cores`` as given, or ``None`` (each suite's default).
        routing: ``--routing`` as given, or ``None`` (each suite's default).
        attach: name of a running runtime to use instead of starting any, or ``None``.
        every: trace one round trip in this many.
        repeats: measure each case this many times, or ``None``: :data:`QUICK_REPEATS`
            with ``quick``, else :data:`REPEATS` (see :attr:`repeat_count`).
    """

    quick: bool = False
    cores: tuple[int, ...] | None = None
    routing: str | None = None
    attach: str | None = None
    every: int = TRACE_EVERY
    repeats: int | None = None

    @property
    def repeat_count(self) -> int:
        """How many times each case is measured."""
        if self.repeats is not None:
            return self.repeats
        return QUICK_REPEATS if self.quick else REPEATS

    def check(self) -> None:
        """Check the options on their own (suites check what they need separately).

        Raises:
            OptionError: a bad sampling interval or repeat count, an empty or repeated core
                list, an unknown routing mode, or ``attach`` with ``cores`` or ``routing``.
        """
        every = self.every
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise OptionError(f"the trace sampling interval must be a positive integer, got {every!r}")
        reps = self.repeats
        if reps is not None and (isinstance(reps, bool) or not isinstance(reps, int) or reps < 1):
            raise OptionError(f"the number of repeats must be a positive integer, got {reps!r}")
        if self.cores is not None:
            if not self.cores:
                raise OptionError("--cores names no core; a benchmark needs at least one")
            if len(set(self.cores)) != len(self.cores) or any(c < 0 for c in self.cores):
                raise OptionError(f"--cores must be distinct non-negative core ids, got {list(self.cores)}")
        if self.routing is not None and self.routing not in MODES:
            raise OptionError(f"unknown routing mode {self.routing!r}; available: {', '.join(MODES)}")
        if self.attach is not None and (self.cores is not None or self.routing is not None):
            given = " and ".join(o for o, v in (("--cores", self.cores), ("--routing", self.routing)) if v is not None)
            raise OptionError(f"--attach {self.attach} runs every suite on that runtime as it is (its own cores and routing): leave out {given}")
