"""Waiting on what another thread is doing: blocked in the runtime's futex wait, or asleep.

A test that must act while a receiver or sender *waits* (wake it, interrupt
it, let it find the ring full) looks at the thread's system call in
``/proc/<pid>/task/<tid>/syscall`` instead of sleeping for a while and
hoping: on a slow machine a sleep can end before the thread even started
waiting, and the test then passes without exercising the wait.
"""

from __future__ import annotations

import os
import platform
import time

__all__ = ["in_futex_wait", "all_threads_asleep", "until_parked"]

# futex(2) by architecture (the runtime parks with FUTEX_WAIT on its doorbell word).
_FUTEX = {"x86_64": 202, "aarch64": 98, "riscv64": 98, "i686": 240, "ppc64le": 221, "s390x": 238}


def in_futex_wait(pid: int, tid: int) -> bool:
    """Whether thread ``tid`` of process ``pid`` is blocked in futex(2) right now."""
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            first = f.read().split()[0]
    except (OSError, IndexError):
        return False
    return first.isdigit() and int(first) == _FUTEX.get(platform.machine(), 202)


def all_threads_asleep(pid: int) -> bool:
    """Whether every thread of process ``pid`` is sleeping (state S or D: none runnable)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread ended
        if state not in ("S", "D"):
            return False
    return True


def until_parked(pid: int, tid: int, seconds: float = 30.0) -> None:
    """Wait (bounded) until thread ``tid`` of ``pid`` is blocked in its futex wait; fail the test if it never is."""
    deadline = time.monotonic() + seconds
    while not in_futex_wait(pid, tid):
        assert time.monotonic() < deadline, f"thread {tid} of process {pid} never parked within {seconds} s"
        time.sleep(0.001)
