"""Run a monitor that cannot start a thread: as root, drop to UID, cap RLIMIT_NPROC, run it.

Usage: python monitor_without_threads.py UID GID RUNTIME_DIR

RLIMIT_NPROC does not bind root, so this gives up root first; then the limit is set to the number
of tasks the user has now, so the monitor's first thread (its forwarding thread) cannot be
created. ``python -m multihop.monitor``'s own main() runs; its exit code is this process's.
"""

from __future__ import annotations

import os
import resource
import sys

from multihop import monitor

uid, gid, rdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.setgroups([])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)


def tasks_of(user: int) -> int:
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[1]) == user:
                n += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            pass
    return n


limit = tasks_of(uid)
resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
sys.exit(monitor.main(["--dir", rdir, "--core", "0", "--initial-core", "0"]))
