"""Progress of a benchmark run on stderr.

On a terminal, one line per suite redrawn in place::

    channels  (1/7) [########------------]  4/10  multihop 64 B  3.2 s

Elsewhere (a pipe, a log file, CI) one plain line per step, so logs stay
readable and tests can follow the run::

    [4/10] channels: multihop 64 B
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_WIDTH = 20


class Progress:
    """Reports steps of suites; ``bar`` forces (True) or disables (False) the in-place bar."""

    def __init__(self, stream: TextIO | None = None, bar: bool | None = None, suites: int = 1) -> None:
        self._out = stream if stream is not None else sys.stderr
        self._bar = self._out.isatty() if bar is None else bar
        self._suites = suites
        self._suite_no = 0
        self._name = ""
        self._steps = 0
        self._done = 0
        self._t0 = time.monotonic()
        self._open = False

    def suite(self, name: str, steps: int) -> None:
        """Start suite `name`, which will report `steps` steps."""
        self._finish_line()
        self._suite_no += 1
        self._name, self._steps, self._done = name, max(steps, 1), 0
        self._t0 = time.monotonic()

    def step(self, label: str) -> None:
        """The next step of the current suite begins: `label` says what it measures."""
        self._done = min(self._done + 1, self._steps)
        if not self._bar:
            print(f"[{self._done}/{self._steps}] {self._name}: {label}", file=self._out, flush=True)
            return
        filled = _WIDTH * (self._done - 1) // self._steps
        bar = "#" * filled + "-" * (_WIDTH - filled)
        head = f"{self._name}  ({self._suite_no}/{self._suites})" if self._suites > 1 else self._name
        line = f"{head} [{bar}] {self._done:>3}/{self._steps}  {label}  {time.monotonic() - self._t0:.1f} s"
        self._out.write("\r\x1b[K" + line)
        self._out.flush()
        self._open = True

    def message(self, text: str) -> None:
        """A line of its own (a note or warning), not lost under the bar."""
        self._finish_line()
        print(text, file=self._out, flush=True)

    def close(self) -> None:
        """End the bar's line, if one is open."""
        self._finish_line()

    def _finish_line(self) -> None:
        if self._open:
            self._out.write("\n")
            self._out.flush()
            self._open = False
