"""``python -m multihop.dispatch.peer_process``: one live dispatch peer (what :func:`multihop.dispatch.start` spawns).

SIGTERM and SIGINT make it leave gracefully (its partitions go to the other
peers, nothing is lost); it exits 0 once it has left, or when its runtime or
its owner process is gone.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from typing import Sequence

from multihop.dispatch.config import PeerConfig
from multihop.dispatch.driver import PeerDriver
from multihop.dispatch.ids import parse_hex

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one peer until it leaves or its runtime stops."""
    p = argparse.ArgumentParser(prog="python -m multihop.dispatch.peer_process")
    p.add_argument("--runtime", required=True)
    p.add_argument("--system", required=True)
    p.add_argument("--core", type=int, required=True)
    p.add_argument("--id", default=None, help="the peer id, 32 hex digits (default: a fresh one)")
    p.add_argument("--config", default="{}", help="PeerConfig as JSON")
    p.add_argument("--transport", default="ump", choices=("ump", "multihop"))
    p.add_argument("--owner-pid", type=int, default=None)
    p.add_argument("--log-level", default="INFO")
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    driver = PeerDriver(
        a.runtime,
        a.system,
        a.core,
        PeerConfig.from_dict(json.loads(a.config)),
        me=parse_hex(a.id) if a.id else None,
        transport=a.transport,
        owner_pid=a.owner_pid,
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: driver.stop())
    print(f"ready {driver.me.hi:016x}{driver.me.lo:016x}", flush=True)
    driver.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
