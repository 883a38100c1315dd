"""``python -m multihop.monitor``: run one monitor (the loop is Rust).

Started by :meth:`multihop.Runtime.start`, one process per core.  The
process pins itself to ``--cpu``, listens on ``mon-<core>.sock`` in
``--dir`` and runs until shut down, signalled (SIGTERM/SIGINT/SIGHUP), or,
when ``--owner-pid`` is given, until that process exits.  ``--lock-fd`` is
the runtime lock the starter took and passed down (an inherited
descriptor): the monitor holds it for its whole life, which is what makes
the runtime live (see ``core-rs/base/src/liveness.rs``).  The GIL is released for
the whole life of the loop.
"""

from __future__ import annotations

import argparse
import sys

from multihop import _core


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run the monitor loop; returns its exit code."""
    p = argparse.ArgumentParser(prog="python -m multihop.monitor", description=__doc__)
    p.add_argument("--dir", required=True, help="runtime directory")
    p.add_argument("--core", type=int, required=True, help="core this monitor serves")
    p.add_argument("--initial-core", type=int, required=True, help="core of the initial monitor (registry)")
    p.add_argument("--cpu", type=int, default=None, help="real CPU to pin to")
    p.add_argument("--owner-pid", type=int, default=None, help="exit when this process exits")
    p.add_argument("--lock-fd", type=int, default=None, help="inherited descriptor of the runtime lock")
    a = p.parse_args(argv)
    try:
        return _core.run_monitor(a.dir, a.core, a.initial_core, cpu=a.cpu, owner_pid=a.owner_pid, lock_fd=a.lock_fd)
    except Exception as e:  # a monitor that cannot start says why, in its log
        print(f"monitor {a.core}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
