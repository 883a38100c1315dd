"""The ``multihop`` command: ``up``, ``down``, ``status``, ``demo``, ``stubgen``, ``analyze``, ``news``, ``ges``,
``groups``.

The top layer: it registers each application's subcommand (its arguments and what it runs are the
application's own ``command`` module). ``multihop dispatch ...`` is the old name of ``multihop news
...``, kept for one release with a warning on stderr.

Every subcommand exits 0 on success and 1 with a one-line error (naming what
was wrong) on failure; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

import multihop as mh
from multihop import fabric as fabric_options
from multihop.rts import MODES
from multihop.topology import parse_cores


def _cmd_up(a: argparse.Namespace) -> int:
    fabric = fabric_options.from_arguments(a, "multihop up")
    rt = mh.Runtime.start(a.name, cores=parse_cores(a.cores) if a.cores else None, routing=a.routing, detached=True, fabric=fabric)
    joined = f", fabric {fabric.name!r} (listen {list(fabric.listen)}, connect {list(fabric.connect)})" if fabric else ""
    print(f"runtime {rt.name!r} up: cores {rt.cores}, routing {rt.routing}, directory {rt.dir}{joined}")
    return 0


def _cmd_down(a: argparse.Namespace) -> int:
    from multihop.groups.gsd import stop_service

    rt = mh.Runtime.attach(a.name)
    try:
        gsd = stop_service(rt.dir, rt.name)  # first, and waited for: it would otherwise outlive the monitors a while
    finally:
        rt.stop()  # the monitors go whatever became of it
    also = f"; its group service (pid {gsd}) stopped first" if gsd is not None else ""
    print(f"runtime {a.name!r} stopped{also}")
    return 0


def format_status(st: dict[str, Any]) -> str:
    """Human-readable status of a runtime (monitors, dispatchers, services, channels)."""
    live = "" if st.get("live", True) else "  (NOT LIVE: no monitor holds its lock)"
    out = [f"runtime {st['name']!r}  routing={st['routing']}  cores={st['cores']}  dir={st['dir']}{live}"]
    for cpu, cores in (st.get("shared_cpus") or {}).items():
        out.append(f"  cores {', '.join(map(str, cores))} share CPU {cpu} (their monitors take turns on it)")
    out.append("monitors:")
    for m in st["monitors"]:
        if "error" in m:
            out.append(f"  core {m['core']}: UNREACHABLE ({m['error']})")
            continue
        role = " (initial: registry)" if m.get("initial") else ""
        counts = m.get("counts") or {k: len(m[k]) for k in ("dispatchers", "services", "channels")}
        out.append(
            f"  core {m['core']}: pid {m['pid']} cpu {m['cpu']}{role}  dispatchers={counts['dispatchers']}"
            f" services={counts['services']} channels={counts['channels']} binds ok/failed={m['binds_ok']}/{m['binds_failed']}"
        )
        data = m.get("data", {})
        row = ", ".join(f"{d}->{n}" for d, n in sorted(m.get("routing_row", {}).items(), key=lambda kv: int(kv[0])))
        out.append(
            f"    routing row: {row or '(none)'}; monitor links: {sorted(m.get('monitor_links_up', []))} (expected {sorted(m.get('neighbours', []))})"
        )
        out.append(
            f"    forwarding entries={data.get('forwarding_entries', 0)} forwarded={data.get('forwarded', 0)}"
            f" dropped={data.get('dropped', 0)} malformed={data.get('malformed', 0)} max queue={data.get('max_queue', 0)}"
        )
        sampled = data.get("sampled_messages", 0)
        step = f"{data.get('sampled_cpu_ns', 0) / sampled:.0f} ns CPU per message" if sampled else "no sample yet"
        out.append(
            f"    forwarder: parked {data.get('parks', 0)}x, polled {data.get('polls', 0)}x"
            f" (promoted {data.get('poll_promotions', 0)}x); forwarding step {step}"
        )
        for d in m["dispatchers"]:
            out.append(f"    dispatcher {d['id']}: pid {d['pid']}, {d['channels']} channel(s)")
        for s in m["services"]:
            out.append(f"    service {s['name']!r}: iref {s['iref']:#x}")
        for c in m["channels"]:
            out.append(
                f"    channel {c['id']:#x} {c['transport']} {c['service']!r} ({c['side']} side): "
                f"client pid {c['client_pid']} <-> server pid {c['server_pid']}"
            )
        for kind in ("dispatchers", "services", "channels"):
            more = counts[kind] - len(m[kind])
            if more > 0:
                out.append(f"    ... and {more:,} more {kind} (--limit N or --json --limit -1 to see them)")
    return "\n".join(out)


#: The largest ``status --limit`` (entries per list per monitor); -1 lists every one.
MAX_STATUS_LIMIT = 0xFFFF_FFFF


def status_limit(text: str) -> int:
    """``--limit``'s value: -1 (all) or 0..:data:`MAX_STATUS_LIMIT`; argparse's error (naming it) otherwise."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, -1 (all) or 0..{MAX_STATUS_LIMIT}, got {text!r}") from None
    if n != -1 and not 0 <= n <= MAX_STATUS_LIMIT:
        raise argparse.ArgumentTypeError(f"must be -1 (all) or 0..{MAX_STATUS_LIMIT}, got {text}")
    return n


def format_fabric(fs: dict[str, Any]) -> str:
    """Human-readable view of a runtime's fabric bridge (peers, their services, bridged channels)."""
    out = [f"fabric {fs['fabric']!r}: this runtime {fs['runtime']!r} (incarnation {fs['incarnation']}), exports {fs['exports'] or '(none)'}"]
    for p in fs["peers"]:
        state = "alive" if p["alive"] else "DEAD"
        out.append(f"  peer {p['runtime']!r}: {state}, heard {p['silent_ms']} ms ago, services {p['services'] or '(none)'}")
    for c in fs["channels"]:
        side = "client here" if c["opened_here"] else "server here"
        out.append(
            f"  channel {c['chan']} with {c['peer']!r} ({side}) {c['state']}: frames out/in {c['frames_out']}/{c['frames_in']},"
            f" bytes out/in {c['bytes_out']}/{c['bytes_in']}, in flight {c['in_flight']}, seq out/in {c['seq_out']}/{c['seq_in']}"
        )
    out.append(f"  puts out/in {fs['puts_out']}/{fs['puts_in']}, refused inputs {fs['bad_inputs']}, dropped puts {fs['dropped_puts']}")
    return "\n".join(out)


def _cmd_status(a: argparse.Namespace) -> int:
    rt = mh.Runtime.attach(a.name)
    st = rt.status(limit=None if a.limit < 0 else a.limit)
    fs = None
    if rt.fabric is not None:
        from multihop.fabric import status as fabric_status

        try:
            fs = fabric_status(rt.dir)
        except mh.MultihopError as e:
            fs = {"error": str(e)}
        st["fabric"] = fs
    if a.json:
        print(json.dumps(st, indent=2))
    else:
        print(format_status(st))
        if fs is not None:
            print(format_fabric(fs) if "error" not in fs else f"fabric: UNREACHABLE ({fs['error']})")
    return 0


#: The demo's cases: (what, PeerBench method, messages at scale 1, message size): those of ``peers.run``.
DEMO_CASES: tuple[tuple[str, str, int, int], ...] = (
    ("round trip 64 B", "rtt", 50_000, 64),
    ("one-way 64 B", "stream", 500_000, 64),
    ("records 64 B", "records", 5_000_000, 64),
    ("one-way 4 KiB", "stream", 200_000, 4096),
)

#: How the demo's table names each transport.
TRANSPORT_LABELS = {"ump": "UMP", "multihop": "multi-hop"}


def _cmd_demo(a: argparse.Namespace) -> int:
    from multihop.bench import peers

    name = a.name
    label = TRANSPORT_LABELS[a.transport]
    print(f"starting runtime {name!r} on cores {a.cores}: {label} channels against multiprocessing.Pipe ...", file=sys.stderr)
    with mh.Runtime.start(name, cores=parse_cores(a.cores)) as rt:
        bench = peers.PeerBench(rt, rt.cores[0], rt.cores[1 % len(rt.cores)], transport=a.transport)
        figs = []
        for what, method, n, size in DEMO_CASES:
            print(f"  running: {what}", file=sys.stderr)
            figs.append(getattr(bench, method)(max(1, int(n * a.scale)), size))
        print(format_demo(figs, a.transport))
    return 0


def _figure(value: float, unit: str) -> str:
    """A measured figure as the demo prints it: rates whole, with thousands separators; times to 0.1."""
    return f"{value:,.0f}" if unit.endswith("/s") else f"{value:,.1f}"


def format_demo(figures: list[Any], transport: str) -> str:
    """The demo's table: each case's figure over ``transport``'s channel (its column named after it), over
    ``multiprocessing.Pipe``, and how many times faster (or slower) the channel is."""
    label = TRANSPORT_LABELS.get(transport, transport)
    rows = [("case", label, "Pipe", "unit", f"{label} vs Pipe")]
    for f in figures:
        r = float(f.ratio)
        versus = "no figure" if r in (0.0, float("inf")) else (f"{r:,.1f}x faster" if r >= 1 else f"{1 / r:,.1f}x slower")
        rows.append((f.case, _figure(f.ours, f.unit), _figure(f.pipe, f.unit), f.unit, versus))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) if i in (0, 3) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def positive_scale(text: str) -> float:
    """``demo --scale``'s value: a number > 0 (and at most 100); argparse's error otherwise."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not 0 < x <= 100:
        raise argparse.ArgumentTypeError(f"must be > 0 and at most 100, got {text}")
    return x


def _cmd_bench(a: argparse.Namespace) -> int:
    from multihop.extras import require

    require("bench", "multihop bench")  # before the suites import pyarrow
    from multihop.bench import suites

    cores = tuple(parse_cores(a.cores)) if a.cores is not None else None
    options = suites.BenchOptions(quick=a.quick, cores=cores, routing=a.routing, attach=a.attach, every=a.trace_every, repeats=a.repeats)
    run_dir = suites.run(a.suite, a.out, options)
    print(f"trace written to {run_dir}")
    return 0


def _cmd_stubgen(a: argparse.Namespace) -> int:
    from multihop.idl import command

    return command.run(a)


def _cmd_ges(a: argparse.Namespace) -> int:
    from multihop.ges import command

    return command.run(a)


def _cmd_analyze(a: argparse.Namespace) -> int:
    from multihop.analysis.command import run_args

    return run_args(a)


def _cmd_news(a: argparse.Namespace) -> int:
    from multihop.news import command

    return command.run(a)


def _cmd_dispatch(a: argparse.Namespace) -> int:
    print("multihop dispatch: deprecated, use `multihop news` (the same command; this name goes in the next release)", file=sys.stderr)
    return _cmd_news(a)


def _cmd_groups(a: argparse.Namespace) -> int:
    if a.groups_cmd == "calibrate":  # a measurement run: the benchmarks' part of `multihop groups`
        from multihop.bench.groups import command as calibrate_command

        return calibrate_command.run(a)
    from multihop.groups import command

    return command.run(a)


def suites_names() -> tuple[str, ...]:
    """Names ``multihop bench`` accepts (known without the bench extra)."""
    from multihop.bench.suite_names import SUITES

    return SUITES


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``multihop`` command."""
    p = argparse.ArgumentParser(
        prog="multihop",
        description="Barrelfish-style multi-hop messaging runtime",
        epilog="In Python: multihop.Runtime, dispatchers, services and channels, blocking or with asyncio "
        "(await ch.recv_async(), ch.send_async(data), svc.accept_async(), d.bind_async(...); multihop.aio).",
    )
    p.add_argument("--debug", action="store_true", help="show a failure's traceback instead of its one-line error")
    sub = p.add_subparsers(dest="cmd", required=True)

    up = sub.add_parser(
        "up",
        help="start a detached runtime (--fabric: joined to runtimes on other machines)",
        description="Start a detached runtime: it runs until `multihop down NAME`. With --fabric it joins a fabric of runtimes on "
        "other machines over Zenoh (docs/fabric.md).",
    )
    up.add_argument("name", help="the runtime's name (1-64 of A-Z a-z 0-9 _ . -); other commands and programs attach to it by it")
    up.add_argument("--cores", default=None, help='cores, e.g. "0-3,6", one monitor on each (default: all CPUs)')
    up.add_argument(
        "--routing",
        default="direct",
        choices=MODES,
        help="routing tables between the monitors: direct (every pair linked), ring (each core to the next), fat-tree "
        "(direct within a socket, socket leaders linked) (default: direct)",
    )
    fabric_options.add_arguments(up)
    up.set_defaults(func=_cmd_up)

    down = sub.add_parser("down", help="stop a runtime (its group service first) and remove its directory")
    down.add_argument("name", help="the runtime to stop (started with `multihop up NAME`)")
    down.set_defaults(func=_cmd_down)

    status = sub.add_parser("status", help="show monitors, dispatchers, services and channels")
    status.add_argument("name", help="the runtime to show")
    status.add_argument("--json", action="store_true", help="print the whole status as JSON instead of the table (default: the table)")
    status.add_argument(
        "--limit",
        type=status_limit,
        default=20,
        metavar="N",
        help="list at most N dispatchers, services and channels per monitor (counts are always whole; -1: all of them) (default: 20)",
    )
    status.set_defaults(func=_cmd_status)

    demo = sub.add_parser("demo", help="ping-pong and throughput between two processes, against multiprocessing.Pipe")
    demo.add_argument("--name", default="multihop-demo", help="name of the runtime the demo starts, and stops at the end (default: multihop-demo)")
    demo.add_argument(
        "--cores",
        default="0-1",
        help='the runtime\'s cores, e.g. "2-3": the client runs on the first, the server on the second (default: 0-1)',
    )
    demo.add_argument(
        "--transport",
        choices=tuple(TRANSPORT_LABELS),
        default="ump",
        help="channels to measure: ump (a ring pair between the two processes) or multihop (through the monitors) (default: ump)",
    )
    demo.add_argument(
        "--scale", type=positive_scale, default=0.2, help="work per case relative to the full benchmark, > 0 (default: 0.2, a few seconds)"
    )
    demo.set_defaults(func=_cmd_demo)

    bench = sub.add_parser("bench", help="run a benchmark suite and write its Parquet trace")
    bench.add_argument("suite", help=f"suite to run: {', '.join(suites_names())}")
    bench.add_argument(
        "--quick",
        action="store_true",
        help="short cases, each measured 3 times (the whole 'all' run takes a few minutes) (default: the full suite, 5 repeats per case)",
    )
    bench.add_argument(
        "--repeats",
        type=int,
        default=None,
        metavar="N",
        help="measure each case N times, interleaved with the suite's other cases; findings need 2 or more (default: 3 with --quick, else 5)",
    )
    bench.add_argument("--out", default="bench-out", help="trace directory (default: bench-out)")
    bench.add_argument(
        "--cores",
        default=None,
        metavar="CORES",
        help='cores to run on, e.g. "0-3,6": the runtime of channels, window, fanout and peers '
        "(default 0-1), the ring of hops, the two sockets of routing and resources (their default: "
        "virtual cores 0-3, or 0-7 without --quick)",
    )
    bench.add_argument("--routing", default=None, choices=MODES, help="routing mode (default: direct; hops: ring; routing and resources: all three)")
    bench.add_argument(
        "--attach",
        default=None,
        metavar="NAME",
        help="run on the runtime NAME started with `multihop up` instead of starting any (not with --cores or --routing) "
        "(default: start and stop runtimes of its own)",
    )
    bench.add_argument("--trace-every", type=int, default=16, metavar="N", help="time one round trip in N and trace it (default 16; 1 traces all)")
    bench.set_defaults(func=_cmd_bench)

    from multihop.idl import command as stubgen_command

    sg = sub.add_parser("stubgen", help="generate bindings from a Flounder interface file")
    stubgen_command.add_arguments(sg)
    sg.set_defaults(func=_cmd_stubgen)

    from multihop.analysis import command as analyze_command

    an = sub.add_parser("analyze", help="analyze benchmark traces with PySpark into a report", description=analyze_command.DESCRIPTION)
    analyze_command.add_arguments(an)
    an.set_defaults(func=_cmd_analyze)

    from multihop.news import command as news_command

    nw = sub.add_parser("news", help=news_command.HELP, description=news_command.HELP)
    news_command.add_arguments(nw)
    nw.set_defaults(func=_cmd_news)
    old = sub.add_parser("dispatch", help="deprecated: the old name of `multihop news`", description=news_command.HELP)
    news_command.add_arguments(old)
    old.set_defaults(func=_cmd_dispatch)

    from multihop.ges import command as ges_command

    gs = sub.add_parser(
        "ges",
        help="GES broker hierarchy, publish/subscribe and durability (stable storage, roaming): up [--durable], status, graph, join, crash, restart, down",
        description=ges_command.DESCRIPTION,
    )
    ges_command.add_arguments(gs)
    gs.set_defaults(func=_cmd_ges)

    from multihop.groups import command as groups_command

    gr = sub.add_parser(
        "groups",
        help="group communication: live groups through the monitors (rt.group, d.join), machine models, trees, simulated shoot-down, calibration",
        description=groups_command.DESCRIPTION,
    )
    from multihop.bench.groups import command as calibrate_command

    calibrate_command.add_arguments(groups_command.add_arguments(gr))
    gr.set_defaults(func=_cmd_groups)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``multihop`` console script."""
    a = build_parser().parse_args(argv)
    try:
        return int(a.func(a) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (mh.MultihopError, ValueError, OSError) as e:
        if a.debug:
            raise
        print(f"multihop {a.cmd}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
