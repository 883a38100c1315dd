"""``python -m multihop.news.peer_process``: one live dispatch peer (what :func:`multihop.news.start` spawns).

SIGTERM and SIGINT make it leave gracefully (its partitions go to the other
peers, nothing is lost); it exits 0 once it has left, or when its runtime or
its owner process is gone.

Its secret (the data whose MD5 is its id, shown in its ``peer_hello``) comes
in the environment variable :data:`SECRET_ENV` as hex, not on the command line
(which every user of the machine can read); ``--id``, if given, must be the id
it proves.  Without one the peer draws a fresh identity.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from typing import Sequence

from multihop.news.config import PeerConfig
from multihop.news.driver import PeerDriver
from multihop.news.ids import hex_id, identity_of, parse_hex

__all__ = ["main", "SECRET_ENV"]

SECRET_ENV = "MULTIHOP_DISPATCH_SECRET"
"""The environment variable that hands a peer or relay process its secret (hex); the process removes it."""


def take_secret(expected_id: str | None) -> bytes | None:
    """The secret handed in :data:`SECRET_ENV` (removed from the environment), checked against ``expected_id``.

    Raises SystemExit naming the problem if the variable is not hex, or proves another id.
    """
    text = os.environ.pop(SECRET_ENV, None)
    if text is None:
        if expected_id is not None:
            raise SystemExit(f"--id {expected_id} given without its secret in {SECRET_ENV}")
        return None
    try:
        secret = bytes.fromhex(text)
        me = identity_of(secret)
    except ValueError as e:
        raise SystemExit(f"{SECRET_ENV} is not a node secret in hex: {e}") from None
    if expected_id is not None and me != parse_hex(expected_id):
        raise SystemExit(f"the secret in {SECRET_ENV} proves id {hex_id(me)}, not --id {expected_id}")
    return secret


def main(argv: Sequence[str] | None = None) -> int:
    """Run one peer until it leaves or its runtime stops."""
    p = argparse.ArgumentParser(prog="python -m multihop.news.peer_process")
    p.add_argument("--runtime", required=True)
    p.add_argument("--system", required=True)
    p.add_argument("--core", type=int, required=True)
    p.add_argument("--id", default=None, help=f"the peer id, 32 hex digits, which the secret in ${SECRET_ENV} proves (default: a fresh one)")
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
        secret=take_secret(a.id),
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
