"""A process that reports JSON lines on stdout, read by a thread: the fabric tests' bridges and agents.

Each line is an event (``{"event": NAME, ...}``); :meth:`JsonEvents.wait` takes the next one of a name, each event
at most once, within a bounded time, and fails naming what was seen and the process's stderr.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from typing import Any, Callable


class JsonEvents:
    """The events of ``proc`` (stdout and stderr pipes, text mode), read by two threads."""

    def __init__(self, proc: subprocess.Popen[str], name: str, *, fail_on_error: bool = False) -> None:
        self.proc = proc
        self.name = name
        #: an ``error`` event fails any wait for another event at once
        self.fail_on_error = fail_on_error
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:
                self.events.put({"event": "garbage", "line": line})
        self.events.put({"event": "eof"})

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip())

    def wait(self, event: str, timeout: float, pred: Callable[[dict[str, Any]], bool] = lambda e: True) -> dict[str, Any]:
        """The next event named `event` (and matching `pred`) within `timeout` seconds, each event returned once;
        earlier ones are kept in ``seen``. Fails naming what was seen if it does not come (or the process ended)."""
        for e in self.seen:
            if e["event"] == event and pred(e) and not e.get("_taken"):
                e["_taken"] = True
                return e
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                e = self.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            self.seen.append(e)
            if e["event"] == event and pred(e):
                e["_taken"] = True
                return e
            if self.fail_on_error and e["event"] == "error":
                raise AssertionError(f"{self.name}: {e}; stderr:\n" + "\n".join(self.stderr[-30:]))
            if e["event"] == "eof":
                break
        tail = "\n".join(self.stderr[-20:])
        raise AssertionError(f"{self.name}: no {event!r} event within {timeout} s; seen {self.seen[-8:]}; stderr:\n{tail}")

    def drain(self) -> list[dict[str, Any]]:
        """Every event so far (what ``wait`` has not read yet too)."""
        while True:
            try:
                self.seen.append(self.events.get_nowait())
            except queue.Empty:
                return self.seen
