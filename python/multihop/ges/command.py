"""``multihop ges``: start, inspect, draw and stop GES broker systems.

* ``multihop ges up TOPOLOGY --name NAME [--cores 0-1] [--timeout S] [--durable] [--transport multihop]``: start the brokers of a
  topology file on runtime NAME (started, detached, if it is not running) and wait until
  every broker's graph converged; ``--durable``: with stable storage (a storage broker per
  cluster on an SQLite file, durable clients); a topology whose brokers name runtimes starts
  NAME's share of them (NAME in a fabric: ``multihop up NAME --fabric F ...`` first, or
  ``--fabric F --listen E --connect E`` here), run on every machine of the fabric; ``--transport multihop``:
  the events go over multi-hop channels through the monitors instead of direct UMP channels;
* ``multihop ges status NAME [--at ADDRESS] [--json]``: each broker's gatekeeper levels,
  links, connections and routing cache; with stable storage, per storage broker the stored
  events, bytes, the oldest unacknowledged event and for whom, and per client its
  incarnation and replay progress;
* ``multihop ges crash NAME ADDRESS`` / ``multihop ges restart NAME ADDRESS [--accept-empty-store]``: SIGKILL
  a broker of a durable system / start it again on its storage file (a storage file that lost what it
  held is refused unless the loss is accepted);
* ``multihop ges graph [TOPOLOGY] --at ADDRESS -o graph.png [--name NAME]``: draw a broker's
  connectivity graph and unit tree (simulated from the file, or from the live system NAME);
* ``multihop ges pub NAME [EVENT ...]`` / ``multihop ges sub NAME --profile ATTR=VALUE,...``: publish
  events / print matching events as they come, from the shell (:mod:`multihop.ges.pubsub_command`);
* ``multihop ges down NAME``: stop the brokers (and the runtime, if ``up`` started it).

A TOPOLOGY argument is a file, or the name of a shipped topology (``quickstart``, ``paper_fig5``, ...).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from multihop import fabric as fabric_options

__all__ = ["add_arguments", "run", "format_status", "format_durability", "load_topology", "require_matplotlib"]

DESCRIPTION = (
    "GES broker hierarchy: start a topology's brokers (with stable storage: --durable), publish and subscribe from the shell, "
    "show their graphs, routing caches and stores, crash and restart brokers, stop them"
)


PUB_DESCRIPTION = (
    "Publish events to the GES system on runtime NAME. Each EVENT is a JSON object of its attributes in signature order, "
    'e.g. \'{"sport": "football", "score": 3}\'; without EVENT arguments, one object per line of stdin. Every event is '
    "checked before anything is sent; with stable storage the command returns once every event is stored."
)
SUB_DESCRIPTION = (
    "Subscribe to the GES system on runtime NAME with a profile and print each matching event as one JSON line (its content; "
    "--full: its id, content and payload) as it comes, until Ctrl-C, --count events or --timeout seconds. A line on stderr says "
    "when the subscription is active in the whole system: what is published after it is printed. With stable storage, "
    "--state FILE keeps the subscriber across runs: while it is away its home stores what matches, and the next run prints it."
)


class _Parser(argparse.ArgumentParser):
    """A ``ges`` subcommand's parser: options and positionals may come in any order
    (``ges pub NAME --at 1.2.2 EVENT EVENT`` as well as ``ges pub --at 1.2.2 NAME EVENT EVENT``)."""

    _inside = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """``parse_known_intermixed_args`` (which calls this again: then the plain parse)."""
        if self._inside:
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return super().parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``ges`` subcommands."""
    sub = p.add_subparsers(dest="ges_cmd", required=True, parser_class=_Parser)
    up = sub.add_parser("up", help="start the brokers of a topology file and wait until they converge")
    up.add_argument(
        "topology",
        help="TOML topology file (brokers with addresses and cores, gateways), or the name of a shipped one "
        "(quickstart: 4 brokers in 2 clusters; paper_fig3, paper_fig5, paper_fig14, paper_fig20)",
    )
    up.add_argument("--name", required=True, help="runtime to run on (started, detached, if not running)")
    up.add_argument("--cores", default=None, help='cores of a runtime started here, e.g. "0-1" (default: the file\'s cores, else 0-1)')
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for convergence (default 60)")
    up.add_argument("--durable", action="store_true", help="stable storage: a storage broker per cluster (SQLite), durable clients")
    up.add_argument(
        "--storage-dir",
        default=None,
        metavar="DIR",
        help="with --durable: keep the storage files in DIR, an existing directory (default: the runtime's directory, removed with the runtime)",
    )
    accept_help = (
        "start a storage broker even though its storage file lost what its marker says it held (missing, empty, another "
        "store's or an older copy): the loss of its events and clients is accepted (default: refuse, naming the file)"
    )
    up.add_argument("--accept-empty-store", action="store_true", help=accept_help)
    up.add_argument(
        "--transport",
        default="ump",  # (checked by LiveSystem.up before anything starts: the CLI does not import the live modules)
        help="what carries the events between this runtime's processes: ump (direct channels, the default) or multihop "
        "(channels through the monitors: less CPU in the brokers, a longer path)",
    )
    up.add_argument(
        "--client-queue-limit",
        type=int,
        default=None,
        metavar="BYTES",
        help="bytes of events that may wait in a broker for one client beyond what its channel holds before the client is "
        "given up as a slow consumer (default 64 MiB, at least 1 MiB)",
    )
    fabric_options.add_arguments(up)  # a topology spread over runtimes: the fabric a runtime started here joins
    for what, helptext in (
        ("crash", "SIGKILL a broker of a durable system (it stays in the system)"),
        ("restart", "start a crashed broker of a durable system again on its storage file"),
    ):
        cr = sub.add_parser(what, help=helptext)
        cr.add_argument("name", help="the runtime the GES system runs on")
        cr.add_argument("address", help="the broker's address, e.g. 1.1.1")
        if what == "restart":
            cr.add_argument("--accept-empty-store", action="store_true", help=accept_help)
    st = sub.add_parser("status", help="each broker's gatekeeper levels, connections and routing cache")
    st.add_argument("name")
    st.add_argument("--at", default=None, metavar="ADDRESS", help="only this broker")
    st.add_argument("--json", action="store_true")
    gr = sub.add_parser("graph", help="draw a broker's connectivity graph and unit tree to a PNG file")
    gr.add_argument("topology", nargs="?", default=None, help="TOML topology file or shipped topology name (simulated), or use --name")
    gr.add_argument("--name", default=None, help="take the graph from the live system on this runtime instead")
    gr.add_argument("--at", required=True, metavar="ADDRESS", help="the broker whose graph to draw")
    gr.add_argument("-o", "--output", default="graph.png", help="PNG file to write (default graph.png)")
    gr.add_argument("--seed", type=int, default=0, help="simulator seed (default 0)")
    jn = sub.add_parser("join", help="start a new broker that gets its address by the node organization protocol")
    jn.add_argument("name")
    jn.add_argument("--via", required=True, metavar="ADDRESS", help="the member the newcomer asks first")
    jn.add_argument("--core", type=int, default=None, help="core of the new broker (default: round-robin)")
    jn.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the answer and the broker (default 30)")
    dn = sub.add_parser("down", help="stop the brokers (and the runtime if ges up started it)")
    dn.add_argument("name")
    from multihop.ges import pubsub_command

    pubsub_command.add_pub_arguments(
        sub.add_parser(
            "pub", help="publish events (JSON objects, as arguments or lines of stdin) to a running GES system", description=PUB_DESCRIPTION
        )
    )
    pubsub_command.add_sub_arguments(
        sub.add_parser(
            "sub",
            help="subscribe with a profile and print matching events as they come (until Ctrl-C, --count or --timeout)",
            description=SUB_DESCRIPTION,
        )
    )


def load_topology(arg: str) -> Any:
    """A topology file, or the name of a shipped topology (``quickstart``, ``paper_fig5``, ...) when no such file exists."""
    from pathlib import Path

    from multihop.ges.errors import TopologyError
    from multihop.ges.topology import EXAMPLES, Topology

    if Path(arg).exists() or arg.endswith(".toml") or "/" in arg:
        return Topology.load(arg)
    try:
        return Topology.example(arg)
    except TopologyError:
        shipped = ", ".join(sorted(p.stem for p in EXAMPLES.glob("*.toml")))
        raise TopologyError(f"no topology file {arg!r}, and no shipped topology of that name (shipped: {shipped})") from None


def require_matplotlib(command: str) -> None:
    """Raise ExtraMissing (one line: the extra and how to install it) unless matplotlib imports; drawing needs it alone."""
    import importlib

    from multihop.extras import ExtraMissing, install_hint

    try:
        importlib.import_module("matplotlib")
    except ImportError as e:
        raise ExtraMissing(f"{command} needs the analysis extra; missing: matplotlib ({e}). Install it with {install_hint('analysis')}") from None


def format_status(name: str, statuses: dict[str, dict[str, Any]]) -> str:
    """Human-readable status of a live system."""
    out = [f"GES system on runtime {name!r}: {len(statuses)} broker(s)"]
    for addr, st in statuses.items():
        if "error" in st:
            out.append(f"broker {addr}: UNREACHABLE ({st['error']})")
            continue
        levels = ", ".join(str(x) for x in st["gatekeeper_levels"]) or "none"
        out.append(f"broker {addr} (pid {st['pid']}, core {st['core']}): gatekeeper levels {levels}")
        links = ", ".join(f"{link['peer']} (level {link['level']})" for link in st["links"]) or "none"
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
        out.append(
            f"  messages in/out {c['messages_in']}/{c['messages_out']}, records received/accepted {c['records_received']}/{c['records_accepted']}, refused {c['refused']}"
        )
        if "events" in st:
            ev = st["events"]
            held = ", ".join(f"level {k}: {v}" for k, v in sorted(st["profiles_held"].items())) or "none"
            out.append(
                f"  clients {st['clients']}, subscriptions {st['subscriptions']}; decides levels {st['decided_levels'] or 'none'}; profiles held {held}"
            )
            out.append(
                f"  events: published {ev['published']}, delivered {ev['delivered']}, copies in/out {ev['copies_in']}/{ev['copies_out']}, "
                f"decisions {ev['decisions']}, duplicates dropped {ev['duplicates']}, rerouted {ev['rerouted']}, unroutable {ev['unroutable']}"
            )
        if st.get("durability"):
            out += format_durability(st["durability"])
    return "\n".join(out)


def format_durability(d: dict[str, Any]) -> list[str]:
    """The durability lines of one broker's status: its store (if it is a storage broker) and its durable clients."""
    out = []
    store = d.get("store")
    if store is not None:
        f = store.get("file") or {}
        out.append(
            f"  storage broker ({store['location']}): {store['events']} stored events, {store['bytes']} bytes"
            + (f" (file {f['file_bytes']} bytes)" if f else "")
            + f"; stored {store['stored']}, collected {store['collected']}, sent {store['sent']}, resent {store['resent']}, refused {store['refused']}"
        )
        if store.get("write_error"):
            out.append(
                f"    cannot write its store ({store['write_errors']} failed commits): {store['write_error']}; publications are answered "
                f"'not stored' ({store['not_stored']} so far), {store['held_messages']} answers and the hop acknowledgements wait for a commit"
            )
        old = store["oldest"]
        if old is not None:
            pub, ts, seq, inc = old["event"]
            out.append(
                f"    oldest unacknowledged: entry {old['entry']} ({pub} #{seq}, incarnation {inc}), waiting for {', '.join(old['waiting_for'])}"
            )
        for name, c in sorted(store["clients"].items()):
            out.append(
                f"    client {name}: incarnation {c['incarnation']} at {c['broker']}, {'connected' if c['connected'] else 'away'}, "
                f"{c['pending']} pending, replayed {c['replayed']} of {c['replay']}"
            )
    for name, c in sorted(d.get("attached", {}).items()):
        out.append(f"  durable client {name}: incarnation {c['incarnation']}, home {c['home']}")
    return out


def run(a: argparse.Namespace) -> int:
    """Run one ``multihop ges`` subcommand."""
    from multihop.ges.address import Address
    from multihop.ges.live.system import LiveSystem
    from multihop.topology import parse_cores

    if a.ges_cmd in ("pub", "sub"):
        from multihop.ges import pubsub_command

        return pubsub_command.run_pub(a) if a.ges_cmd == "pub" else pubsub_command.run_sub(a)
    if a.ges_cmd == "up":
        topo = load_topology(a.topology)
        cores = parse_cores(a.cores) if a.cores else None
        system = LiveSystem.up(
            topo,
            a.name,
            cores=cores,
            detached=True,
            timeout=a.timeout,
            durable=a.durable,
            storage_dir=a.storage_dir,
            accept_empty_store=a.accept_empty_store,
            fabric=fabric_options.from_arguments(a, "multihop ges up"),
            transport=a.transport,
            client_queue_limit=a.client_queue_limit,
        )
        share = len(system.addresses)
        print(
            f"GES system {system.config['system']!r} up on runtime {a.name!r}: "
            + (f"{share} of {len(topo.brokers)} brokers here (runtimes {', '.join(topo.runtimes())}), " if topo.placed else f"{share} brokers, ")
            + f"{len(topo.gateways)} gateways, all graphs converged"
            + (f"; storage brokers {', '.join(system.storage_brokers())}" if a.durable else "")
        )
        return 0
    if a.ges_cmd in ("crash", "restart"):
        system = LiveSystem.attach(a.name)
        if a.ges_cmd == "crash":
            system.crash(a.address)
            print(f"broker {Address(a.address)} killed (restart it with multihop ges restart {a.name} {Address(a.address)})")
        else:
            system.restart(a.address, accept_empty_store=a.accept_empty_store)
            print(f"broker {Address(a.address)} restarted on its storage file" + (" (a lost store accepted)" if a.accept_empty_store else ""))
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
        require_matplotlib("multihop ges graph")  # before anything starts: one line naming the extra, not a traceback
        from multihop.ges.picture import draw_graph
        from multihop.ges.simulator import Simulator

        if a.name:
            g = LiveSystem.attach(a.name).graph(a.at)
            title = f"connectivity graph at broker {Address(a.at)} (live system {a.name!r})"
        elif a.topology:
            sim = Simulator(load_topology(a.topology), seed=a.seed)
            sim.run_until_quiet()
            g = sim.graph(a.at)
            title = f"connectivity graph at broker {Address(a.at)} ({a.topology})"
        else:
            raise ValueError("give a topology file or --name of a running system")
        path = draw_graph(g, a.output, title)
        print(f"wrote {path}")
        return 0
    if a.ges_cmd == "join":
        system = LiveSystem.attach(a.name)
        addr = system.join_node(a.via, core=a.core, timeout=a.timeout)
        print(f"broker {addr} joined GES system {a.name!r} (gateway up; see multihop ges status {a.name} --at {addr})")
        return 0
    if a.ges_cmd == "down":
        LiveSystem.attach(a.name).down()
        print(f"GES system on runtime {a.name!r} stopped")
        return 0
    print(f"unknown ges command {a.ges_cmd!r}", file=sys.stderr)
    return 2
