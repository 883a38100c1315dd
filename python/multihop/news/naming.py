"""Where a domain's peers are found: service names and the peer directory.

A peer of system ``S`` exports the service ``dispatch.S.peer.<id>`` on its
runtime and writes ``<runtime dir>/dispatch-S/<id>.json`` (its pid and core).
Clients list that directory to find the peers, then bind to their services
(a file left by a killed peer only makes one bind fail: the registry freed
its name).  The directory lives inside the runtime's directory (mode 0700), so
it goes away with the runtime.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import multihop as mh
from multihop.news.ids import Nid, hex_id, parse_hex

__all__ = ["DEFAULT_SYSTEM", "check_system", "peer_service", "relay_service", "peer_dir", "register_peer", "unregister_peer", "listed_peers"]

DEFAULT_SYSTEM = "main"
"""The system name when none is given (a runtime may hold several dispatch systems)."""

_SYSTEM = re.compile(r"[A-Za-z0-9_-]{1,32}")


def check_system(system: str) -> str:
    """Return ``system`` if it is a valid system name, else raise ValueError."""
    if not isinstance(system, str) or not _SYSTEM.fullmatch(system):
        raise ValueError(f"invalid dispatch system name {system!r}: 1-32 characters from A-Z a-z 0-9 _ -")
    return system


def peer_service(system: str, peer: Nid) -> str:
    """The service a peer exports."""
    return f"dispatch.{system}.peer.{hex_id(peer)}"


def relay_service(system: str, relay: Nid) -> str:
    """The service a relay exports on its relay domain."""
    return f"dispatch.{system}.relay.{hex_id(relay)}"


def peer_dir(rt: mh.Runtime, system: str, kind: str = "peer") -> Path:
    """The directory listing the peers (or relays) of ``system`` on ``rt``."""
    return rt.dir / f"dispatch-{check_system(system)}" / kind


def register_peer(rt: mh.Runtime, system: str, peer: Nid, info: dict[str, Any], kind: str = "peer") -> Path:
    """Write a peer's (or relay's) entry; return its path."""
    d = peer_dir(rt, system, kind)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = d / f"{hex_id(peer)}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, path)
    return path


def unregister_peer(rt: mh.Runtime, system: str, peer: Nid, kind: str = "peer") -> None:
    """Remove a peer's (or relay's) entry, if present."""
    try:
        (peer_dir(rt, system, kind) / f"{hex_id(peer)}.json").unlink()
    except FileNotFoundError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def listed_peers(rt: mh.Runtime, system: str, kind: str = "peer") -> dict[Nid, dict[str, Any]]:
    """The peers (or relays) listed for ``system``: id -> entry; entries of dead processes are removed."""
    out: dict[Nid, dict[str, Any]] = {}
    d = peer_dir(rt, system, kind)
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        path = d / name
        try:
            entry = json.loads(path.read_text())
            peer = parse_hex(name[:-5])
        except (OSError, ValueError):
            continue
        if not _alive(int(entry.get("pid", -1))):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            continue
        out[peer] = entry
    return out
