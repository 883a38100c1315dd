"""``multihop news up|status|down``: a dispatch domain's peers on a running runtime.

``up`` starts detached peer processes (they live until ``down`` or until the
runtime stops), ``status`` asks every peer for its state, ``down`` makes each
leave gracefully and waits for it to exit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from typing import Any

import multihop as mh
from multihop.defaults import DEFAULT_TIMEOUT
from multihop.news.admin import domain_status, shutdown_peer
from multihop.news.config import PeerConfig
from multihop.news.ids import hex_id
from multihop.news.naming import DEFAULT_SYSTEM, listed_peers
from multihop.news.system import start
from multihop.topology import parse_cores

__all__ = ["add_arguments", "run", "format_status"]

HELP = "QoS news dispatching (RE.VE.N.GE.): start, inspect and stop a domain's peers"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``news`` subcommand's arguments."""
    sub = p.add_subparsers(dest="news_cmd", required=True)
    up = sub.add_parser("up", help="start detached dispatch peers on a running runtime")
    up.add_argument("runtime", help="a runtime started with `multihop up`")
    up.add_argument("--system", default=DEFAULT_SYSTEM, help="dispatch system name (default: main)")
    up.add_argument("--peers", type=int, default=3, help="how many peers (default 3)")
    up.add_argument("--cores", default=None, help="cores for the peers, round-robin (default: the runtime's)")
    up.add_argument("--topics", default=None, help="declared topics, comma-separated (default: any topic)")
    up.add_argument("--heartbeat", type=float, default=PeerConfig.heartbeat, help="seconds between heartbeats")
    up.add_argument("--dead-after", type=float, default=PeerConfig.dead_after, help="seconds of silence before a peer is declared dead")
    up.add_argument("--window", type=int, default=PeerConfig.window, help="news in flight per sink")
    up.add_argument("--transport", default="ump", choices=("ump", "multihop"), help="channels between peers")
    st = sub.add_parser("status", help="every peer's state: members, partitions, sources, sinks, counters")
    st.add_argument("runtime")
    st.add_argument("--system", default=DEFAULT_SYSTEM)
    st.add_argument("--json", action="store_true")
    down = sub.add_parser("down", help="make every peer leave gracefully and wait for it to exit")
    down.add_argument("runtime")
    down.add_argument("--system", default=DEFAULT_SYSTEM)
    down.add_argument("--timeout", type=float, default=10.0, help="seconds before a peer is killed")


def format_status(st: dict[str, Any]) -> str:
    """Human-readable status of a domain (one block per peer)."""
    if not st:
        return "no peer"
    out = []
    for pid, s in st.items():
        if "error" in s:
            out.append(f"peer {pid}: UNREACHABLE ({s['error']})  pid {s.get('pid')}")
            continue
        state = "leaving" if s["leaving"] else ("active" if s["active"] else "joining")
        mine = s["partitions"].get(pid, 0)
        served = sum(1 for v in s["sinks"].values() if v["served_here"])
        out.append(
            f"peer {pid} ({state}) pid {s.get('pid')} core {s.get('core')}: {mine} partition(s), "
            f"serves {served} of {len(s['sinks'])} sink(s), {len(s['sources'])} source(s), "
            f"{s['stored']} news held, members {len(s['members'])} (epoch {s['epoch']})"
        )
        c = s["counters"]
        out.append(
            f"    news {c.get('news', 0)} delivered {c.get('delivered', 0)} expired {c.get('expired', 0)} "
            f"overflowed {c.get('overflowed', 0)} updates sent/received {c.get('updates_sent', 0)}/"
            f"{c.get('updates_received', 0)} rate alarms {c.get('rate_alarms', 0)} "
            f"peers dead {c.get('peers_dead', 0)} refused {c.get('refused', 0)}"
        )
        for sid, v in s["sinks"].items():
            if v["served_here"]:
                out.append(
                    f"    sink {sid[:8]} partition {v['partition']} topics {v['topics']}: queued {v['queued']} "
                    f"in flight {v['in_flight']} delivered {v['delivered']} expired {v['expired']} "
                    f"overflowed {v['overflowed']}"
                )
    return "\n".join(out)


def run(a: argparse.Namespace) -> int:
    """Run ``multihop news ...``."""
    if a.news_cmd == "up":
        topics = tuple(t for t in a.topics.split(",") if t) if a.topics else None
        config = PeerConfig(heartbeat=a.heartbeat, dead_after=a.dead_after, window=a.window, topics=topics)
        cores = parse_cores(a.cores) if a.cores else None
        s = start(a.runtime, a.peers, system=a.system, config=config, transport=a.transport, detached=True, cores=cores)
        for p in s.peers:
            print(f"peer {hex_id(p.id)} pid {p.pid} core {p.core} (log {p.log})")
        print(f"dispatch system {a.system!r} up on runtime {a.runtime!r}: {len(s.peers)} peer(s)")
        return 0
    if a.news_cmd == "status":
        st = domain_status(a.runtime, a.system)
        print(json.dumps(st, indent=2, sort_keys=True) if a.json else format_status(st))
        return 0
    if a.news_cmd == "down":
        rt = mh.Runtime.attach(a.runtime)
        listed = listed_peers(rt, a.system)
        for peer in sorted(listed):
            try:
                shutdown_peer(rt, a.system, peer, timeout=min(a.timeout, DEFAULT_TIMEOUT))
            except (mh.MultihopError, OSError):
                pass
        deadline = time.monotonic() + a.timeout
        for peer, entry in sorted(listed.items()):
            pid = int(entry["pid"])
            while _running(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
                print(f"peer {hex_id(peer)} pid {pid} did not leave in {a.timeout} s: killed")
        listed_peers(rt, a.system)  # sweeps entries of peers that did not remove theirs
        print(f"dispatch system {a.system!r} down on runtime {a.runtime!r}: {len(listed)} peer(s) stopped")
        return 0
    raise ValueError(f"unknown news command {a.news_cmd!r}")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
