"""Waiting on observable state, and holding a process stopped, for the hardening tests."""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager
from typing import Callable, Iterator


def until(what: str, check: Callable[[], bool], seconds: float = 10.0) -> None:
    """Wait (bounded in time) until `check()` holds; fail naming `what` otherwise."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out after {seconds} s waiting until {what}"
        time.sleep(0.005)


def _thread_states(pid: int) -> list[str]:
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                out.append(f.read().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            pass
    return out


@contextmanager
def stopped(*pids: int) -> Iterator[None]:
    """Hold processes stopped (SIGSTOP) for the block, from the moment every
    thread of each has stopped; SIGCONT them whatever happens."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        for pid in pids:
            until(f"every thread of process {pid} has stopped", lambda pid=pid: all(s in "Tt" for s in _thread_states(pid)))
        yield
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def process_gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
