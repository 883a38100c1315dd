"""``multihop ges``: start, inspect, draw and stop GES broker systems.

* ``multihop ges up TOPOLOGY --name NAME [--cores 0-1] [--timeout S]``: start the brokers of a
  topology file on runtime NAME (started, detached, if it is not running) and wait until
  every broker's graph converged;
* ``multihop ges status NAME [--at ADDRESS] [--json]``: each broker's gatekeeper levels,
  links, connections and routing cache;
* ``multihop ges graph [TOPOLOGY] --at ADDRESS -o graph.png [--name NAME]``: draw a broker's
  connectivity graph and unit tree (simulated from the file, or from the live system NAME);
* ``multihop ges down NAME``: stop the brokers (and the runtime, if ``up`` started it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

__all__ = ["add_arguments", "run", "format_status"]

DESCRIPTION = "GES broker hierarchy: start a topology's brokers, show their graphs and routing caches, stop them"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``ges`` subcommands."""
    sub = p.add_subparsers(dest="ges_cmd", required=True)
    up = sub.add_parser("up", help="start the brokers of a topology file and wait until they converge")
    up.add_argument("topology", help="TOML topology file (brokers with addresses and cores, gateways)")
    up.add_argument("--name", required=True, help="runtime to run on (started, detached, if not running)")
    up.add_argument("--cores", default=None, help='cores of a runtime started here, e.g. "0-1" (default: the file\'s cores, else 0-1)')
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for convergence (default 60)")
    st = sub.add_parser("status", help="each broker's gatekeeper levels, connections and routing cache")
    st.add_argument("name")
    st.add_argument("--at", default=None, metavar="ADDRESS", help="only this broker")
    st.add_argument("--json", action="store_true")
    gr = sub.add_parser("graph", help="draw a broker's connectivity graph and unit tree to a PNG file")
    gr.add_argument("topology", nargs="?", default=None, help="TOML topology file (simulated), or use --name")
    gr.add_argument("--name", default=None, help="take the graph from the live system on this runtime instead")
    gr.add_argument("--at", required=True, metavar="ADDRESS", help="the broker whose graph to draw")
    gr.add_argument("-o", "--output", default="graph.png", help="PNG file to write (default graph.png)")
    gr.add_argument("--seed", type=int, default=0, help="simulator seed (default 0)")
    dn = sub.add_parser("down", help="stop the brokers (and the runtime if ges up started it)")
    dn.add_argument("name")


def format_status(name: str, statuses: dict[str, dict[str, Any]]) -> str:
    """Human-readable status of a live system."""
    out = [f"GES system on runtime {name!r}: {len(statuses)} broker(s)"]
    for addr, st in statuses.items():
        if "error" in st:
            out.append(f"broker {addr}: UNREACHABLE ({st['error']})")
            continue
        levels = ", ".join(str(x) for x in st["gatekeeper_levels"]) or "none"
        out.append(f"broker {addr} (pid {st['pid']}, core {st['core']}): gatekeeper levels {levels}")
        links = ", ".join(f"{l['peer']} (level {l['level']})" for l in st["links"]) or "none"
        out.append(f"  gateways: {links}")
        out.append(f"  connections ({len(st['edges'])} edges):")
        for a, b, lvl, w, n in st["edges"]:
            out.append(f"    {a:>12} - {b:<12} level {lvl}  weight {w:g}  links {n}")
        cache = st["routing_cache"]
        items = [f"{u} -> {h} ({c:g})" for u, (c, h) in sorted(cache.items()) if h is not None]
        unreachable = sorted(u for u, (c, h) in cache.items() if h is None and (c is None or (isinstance(c, float) and math.isinf(c))))
        out.append("  routing cache: " + (", ".join(items) or "empty"))
        if unreachable:
            out.append("  unreachable: " + ", ".join(unreachable))
        if st["unit_partitioned"] or st["system_partitioned"]:
            out.append(f"  partitioned: unit {st['unit_partitioned']}, system {st['system_partitioned']}")
        c = st["counters"]
        out.append(f"  messages in/out {c['messages_in']}/{c['messages_out']}, records received/accepted {c['records_received']}/{c['records_accepted']}, refused {c['refused']}")
        if "events" in st:
            ev = st["events"]
            held = ", ".join(f"level {k}: {v}" for k, v in sorted(st["profiles_held"].items())) or "none"
            out.append(f"  clients {st['clients']}, subscriptions {st['subscriptions']}; decides levels {st['decided_levels'] or 'none'}; profiles held {held}")
            out.append(f"  events: published {ev['published']}, delivered {ev['delivered']}, copies in/out {ev['copies_in']}/{ev['copies_out']}, "
                       f"decisions {ev['decisions']}, duplicates dropped {ev['duplicates']}, rerouted {ev['rerouted']}, unroutable {ev['unroutable']}")
    return "\n".join(out)


def run(a: argparse.Namespace) -> int:
    """Run one ``multihop ges`` subcommand."""
    from multihop.ges.address import Address
    from multihop.ges.live.system import LiveSystem
    from multihop.ges.topology import Topology
    from multihop.topology import parse_cores

    if a.ges_cmd == "up":
        topo = Topology.load(a.topology)
        cores = parse_cores(a.cores) if a.cores else None
        system = LiveSystem.up(topo, a.name, cores=cores, detached=True, timeout=a.timeout)
        print(f"GES system up on runtime {a.name!r}: {len(topo.brokers)} brokers, {len(topo.gateways)} gateways, all graphs converged")
        return 0
    if a.ges_cmd == "status":
        system = LiveSystem.attach(a.name)
        addrs = [str(Address(a.at))] if a.at else system.addresses
        statuses: dict[str, dict[str, Any]] = {}
        for addr in addrs:
            try:
                statuses[addr] = system.status(addr)
            except Exception as e:  # one broker down does not hide the others
                statuses[addr] = {"error": str(e)}
        print(json.dumps(statuses, indent=2) if a.json else format_status(a.name, statuses))
        return 0
    if a.ges_cmd == "graph":
        from multihop.ges.picture import draw_graph
        from multihop.ges.simulator import Simulator

        if a.name:
            g = LiveSystem.attach(a.name).graph(a.at)
            title = f"connectivity graph at broker {Address(a.at)} (live system {a.name!r})"
        elif a.topology:
            sim = Simulator(Topology.load(a.topology), seed=a.seed)
            sim.run_until_quiet()
            g = sim.graph(a.at)
            title = f"connectivity graph at broker {Address(a.at)} ({a.topology})"
        else:
            raise ValueError("give a topology file or --name of a running system")
        path = draw_graph(g, a.output, title)
        print(f"wrote {path}")
        return 0
    if a.ges_cmd == "down":
        LiveSystem.attach(a.name).down()
        print(f"GES system on runtime {a.name!r} stopped")
        return 0
    print(f"unknown ges command {a.ges_cmd!r}", file=sys.stderr)
    return 2
