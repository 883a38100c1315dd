"""Baselines for the fabric (issue 27): messaging between two machines, in the same run.

Usage (root, iproute2; ``pip install '.[test]'`` or the ``fabric`` and ``ges-bench`` extras)::

    .venv/bin/python benches/bench_fabric.py [--repeats 5] [--peers zenoh,nats,tcp] [--quick] [--json FILE]

Two machines are two network namespaces joined by a veth pair (:mod:`multihop.bench.netns`: a at
10.213.0.1, b at 10.213.0.2, a private /30; nothing touches the host's network, and everything is
removed at the end, even on an error or Ctrl-C). Between them, each peer of
:mod:`multihop.bench.fabric_peers` (``multihop bench fabric`` runs the same peers into a trace):

* **zenoh**: zenoh-python's own publisher and subscriber (peer mode, explicit endpoints, multicast
  scouting off, Reliable + Block), one ``put`` per message;
* **nats**: ``nats-server`` in b, ``nats-py`` clients in a and b;
* **tcp**: a plain TCP socket in Python, one ``sendall`` per message;
* **bridge**: two ``multihop-bridge`` processes (the Rust zenoh crate; built with
  ``cargo build -j 1 -p multihop-fabric --features zenoh --profile bridge``) with their in-process test ends,
  one message per frame, window 16: the fabric's own cost, before the monitor hops at both ends exist.

Cases: **round trip** of 64 B (a sends, b echoes, a waits: median and p99 over ``--rt-n`` round
trips), **one-way throughput** of 64 B and 4 KiB (``--n64`` / ``--n4k`` messages, a's first send
to b's last receipt, msg/s and MB/s; "a's sends" is the rate of a's send calls alone, which says
whether the sender or the receiver sets the pace). Every case runs ``--repeats`` times, the peers
taking turns within each repeat (so a drift in the machine's load falls on all of them); the table
gives the median over the repeats (round trip: the median of each repeat's median and of its p99)
and the spread (lowest-highest over the repeats). Every message is numbered: a run that lost,
doubled or reordered one is flagged, not counted.

The bridged multi-hop channel (monitors at both ends) is the peer ``runtime``.
All figures are this machine's (2 CPUs shared by both "machines" and everything else running).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from multihop.bench import netns
from multihop.bench.fabric_peers import PEERS, FabricPeer, OneWay

HERE = Path(__file__).resolve().parent


@dataclass
class Case:
    """One peer's measurements of one case over the repeats."""

    peer: str
    case: str  # "rtt 64 B", "one-way 64 B", "one-way 4 KiB"
    size: int
    rtt_median_us: list[float] = field(default_factory=list)
    rtt_p99_us: list[float] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)  # msg/s
    mbps: list[float] = field(default_factory=list)  # MB/s
    send_rate: list[float] = field(default_factory=list)  # msg/s of a's sends alone (first send to last send returning)
    cpu_us: list[float] = field(default_factory=list)  # CPU (user + system) of every process of both machines per message
    busiest_us: list[float] = field(default_factory=list)  # CPU per message of the busiest thread of them
    busiest: list[str] = field(default_factory=list)  # which thread that was ("process/thread")
    errors: list[str] = field(default_factory=list)


def percentile(xs: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of xs."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s)) - 1))]


#: Peers whose processes live through a measurement (the ``bridge`` peer starts a client bridge per measurement,
#: whose CPU is gone with it when the measurement ends: no CPU figure for it).
CPU_PEERS = ("zenoh", "nats", "tcp", "runtime")


def machines_cpu(machines: list[netns.Namespace]) -> dict[tuple[int, int], tuple[str, float]]:
    """CPU seconds (user + system) used so far by every thread of every process inside ``machines`` (those alive
    now), by (pid, thread id): the thread's "process/thread" name and its CPU."""
    out: dict[tuple[int, int], tuple[str, float]] = {}
    for ns in machines:
        for pid in ns.pids():
            try:
                proc = psutil.Process(pid)
                pname = proc.name()
                for t in proc.threads():
                    try:
                        tname = Path(f"/proc/{pid}/task/{t.id}/comm").read_text().strip()
                    except OSError:
                        tname = str(t.id)
                    out[pid, t.id] = (f"{pname}/{tname}", t.user_time + t.system_time)
            except psutil.Error:
                continue
    return out


def cpu_delta(case: Case, before: dict[tuple[int, int], tuple[str, float]], machines: list[netns.Namespace], n: int) -> None:
    """Record the CPU per message of all threads together, and of the busiest one, since ``before``."""
    after = machines_cpu(machines)
    deltas = {k: (name, cpu - before.get(k, (name, 0.0))[1]) for k, (name, cpu) in after.items()}
    case.cpu_us.append(sum(d for _, d in deltas.values()) / n * 1e6)
    name, top = max(deltas.values(), key=lambda x: x[1], default=("-", 0.0))
    case.busiest_us.append(top / n * 1e6)
    case.busiest.append(name)


def measure_rtt(peer: FabricPeer, case: Case, n: int, warmup: int, machines: list[netns.Namespace]) -> None:
    """One repeat of the round-trip case: `warmup` round trips not counted, then `n`."""
    peer.roundtrip(warmup, case.size)
    c0 = machines_cpu(machines)
    rtts = [t * 1e6 for t in peer.roundtrip(n, case.size)]
    if peer.name in CPU_PEERS:
        cpu_delta(case, c0, machines, n)
    case.rtt_median_us.append(statistics.median(rtts))
    case.rtt_p99_us.append(percentile(rtts, 99))


def measure_oneway(peer: FabricPeer, case: Case, n: int, machines: list[netns.Namespace]) -> None:
    """One repeat of a one-way case."""
    c0 = machines_cpu(machines)
    r: OneWay = peer.oneway(n, case.size)
    if r.errors or r.received != n:
        case.errors.append(r.errors or f"{r.received} of {n} received")
        return
    if peer.name in CPU_PEERS:
        cpu_delta(case, c0, machines, n)
    case.rate.append(r.rate)
    case.mbps.append(r.mbps)
    case.send_rate.append(n / r.send_seconds if r.send_seconds > 0 else 0.0)


#: The one-way wake-ups of parked threads or processes a bridged round trip pays beyond zenoh-python's own (whose
#: subscriber callback echoes on Zenoh's receiving thread and whose reader is woken once): on machine a, the
#: program's monitor (out and back), a's bridge loop (woken by its monitor, and by Zenoh's receiving thread); on
#: machine b, b's bridge loop (woken by Zenoh's receiving thread, and by the service's reply) and the service (woken
#: by the bridge); the monitor waking a's program replaces zenoh-python's own reader wake-up.
EXTRA_WAKEUPS = 7


def wake_round_trip() -> float | None:
    """benches/wake_cost.c's median futex round trip between two parked processes on CPUs 0 and 1, in us (None
    without gcc): two one-way wake-ups of a parked process on another CPU."""
    gcc = shutil.which("gcc")
    if gcc is None or (os.cpu_count() or 1) < 2:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "wake_cost"
        subprocess.run([gcc, "-O2", str(HERE / "wake_cost.c"), "-o", str(exe)], check=True, capture_output=True)
        run = subprocess.run([str(exe), "0", "1", "0"], check=True, capture_output=True, text=True, timeout=120)
    return float(run.stdout.strip())


def spread(xs: list[float], fmt: str) -> str:
    """'low-high' over the repeats."""
    return f"{format(min(xs), fmt)}-{format(max(xs), fmt)}" if xs else "-"


def table(cases: list[Case], repeats: int) -> str:
    """The results as a text table."""
    rows = [("peer", "case", "median", "p99", "spread of medians", "MB/s", "a's sends", "CPU/msg", "repeats")]
    for c in cases:
        ok = len(c.rtt_median_us) if c.case.startswith("rtt") else len(c.rate)
        note = f"{ok}/{repeats}" + (f" ({len(c.errors)} failed: {c.errors[0]})" if c.errors else "")
        cpu = f"{statistics.median(c.cpu_us):,.1f} us" if c.cpu_us else "-"
        if c.case.startswith("rtt"):
            if c.rtt_median_us:
                rows.append(
                    (
                        c.peer,
                        c.case,
                        f"{statistics.median(c.rtt_median_us):,.1f} us",
                        f"{statistics.median(c.rtt_p99_us):,.1f} us",
                        spread(c.rtt_median_us, ",.1f") + " us",
                        "",
                        "",
                        cpu,
                        note,
                    )
                )
            else:
                rows.append((c.peer, c.case, "-", "-", "-", "", "", "-", note))
        elif c.rate:
            rows.append(
                (
                    c.peer,
                    c.case,
                    f"{statistics.median(c.rate):,.0f} msg/s",
                    "",
                    spread(c.rate, ",.0f") + " msg/s",
                    f"{statistics.median(c.mbps):,.1f}",
                    f"{statistics.median(c.send_rate):,.0f} msg/s",
                    cpu,
                    note,
                )
            )
        else:
            rows.append((c.peer, c.case, "-", "", "-", "-", "-", "-", note))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for k, r in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=True))).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def most(names: list[str]) -> str:
    """The name that comes up most often."""
    return max(set(names), key=names.count) if names else "-"


def floor_text(cases: dict[tuple[str, str], Case], wake: float | None) -> None:
    """What the bridged design's extra hops cost on this machine (a model, not a floor: a hop that finds the next
    process still awake pays no wake-up), and the one-way rates next to the CPU each path used per message."""
    zen, run = cases.get(("zenoh", "rtt 64 B")), cases.get(("runtime", "rtt 64 B"))
    if wake is None or zen is None or run is None or not zen.rtt_median_us or not run.rtt_median_us:
        return
    z, r = statistics.median(zen.rtt_median_us), statistics.median(run.rtt_median_us)
    model = z + EXTRA_WAKEUPS * wake / 2
    print(f"a wake-up of a parked process on the other CPU (benches/wake_cost.c, futex round trip / 2): {wake / 2:.1f} us")
    print(
        f"round trip, the bridged design's hops each paying a wake-up: zenoh-python {z:.1f} us + {EXTRA_WAKEUPS} x {wake / 2:.1f} us "
        f"= {model:.1f} us; measured runtime {r:.1f} us ({r / model:.2f}x the model), {r / z:.2f}x zenoh-python; the goal 1.2x "
        f"leaves room for {0.2 * z / (wake / 2):.1f} wake-ups beyond zenoh-python's"
    )
    for size in ("64 B", "4 KiB"):
        zc, rc = cases.get(("zenoh", f"one-way {size}")), cases.get(("runtime", f"one-way {size}"))
        if zc and rc and zc.rate and rc.rate and zc.cpu_us and rc.cpu_us:
            print(
                f"one way {size}: runtime/zenoh-python rate {statistics.median(rc.rate) / statistics.median(zc.rate):.2f}x; CPU per message "
                f"{statistics.median(rc.cpu_us):.1f} vs {statistics.median(zc.cpu_us):.1f} us ({statistics.median(zc.cpu_us) / statistics.median(rc.cpu_us):.2f}x: "
                "with both paths using the machine's CPUs, the rate ratio follows the inverse CPU ratio)"
            )
            rb, zb = statistics.median(rc.busiest_us), statistics.median(zc.busiest_us)
            if rb > 0 and zb > 0:
                print(
                    f"  projection, a core for every thread (not measured: this machine has {os.cpu_count()} CPUs): the busiest "
                    f"thread bounds the rate: runtime {1e6 / rb:,.0f} msg/s ({rb:.1f} us/msg in {most(rc.busiest)}) vs zenoh-python "
                    f"{1e6 / zb:,.0f} ({zb:.1f} us/msg in {most(zc.busiest)}): {zb / rb:.2f}x"
                )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default=",".join(PEERS), help=f"peers to run, comma separated (default: {','.join(PEERS)})")
    ap.add_argument("--repeats", type=int, default=5, help="times each case runs, peers taking turns (default: 5)")
    ap.add_argument("--rt-n", type=int, default=5000, help="round trips per repeat (default: 5000, after 500 not counted)")
    ap.add_argument("--n64", type=int, default=200_000, help="64 B messages per one-way repeat (default: 200000)")
    ap.add_argument("--n4k", type=int, default=50_000, help="4 KiB messages per one-way repeat (default: 50000)")
    ap.add_argument("--quick", action="store_true", help="a tenth of the counts (a smoke run)")
    ap.add_argument("--json", type=Path, help="also write the raw figures to this file")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    scale = 10 if args.quick else 1
    rt_n, n64, n4k = max(10, args.rt_n // scale), max(100, args.n64 // scale), max(100, args.n4k // scale)
    names = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in names if p not in PEERS]
    if unknown:
        ap.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)}")
    reason = netns.unavailable()
    if reason:
        print(f"bench_fabric: {reason}", file=sys.stderr)
        return 1

    peers: list[FabricPeer] = []
    for name in names:
        peer = PEERS[name]()
        why = peer.available()
        if why:
            print(f"skipping {name}: {why}", file=sys.stderr)
        else:
            peers.append(peer)
    if not peers:
        print("bench_fabric: no peer can run", file=sys.stderr)
        return 1

    cases = {(p.name, c): Case(p.name, c, size) for p in peers for c, size in (("rtt 64 B", 64), ("one-way 64 B", 64), ("one-way 4 KiB", 4096))}
    load = os.getloadavg()
    t_start = time.monotonic()
    with netns.Network() as net:
        a, b = net.machine("a"), net.machine("b")
        link = net.link(a, b)
        print(f"machines: {a.name} ({link.addr_a}) and {b.name} ({link.addr_b}), veth, /30", file=sys.stderr)
        ready: list[FabricPeer] = []
        try:
            for peer in peers:
                print(f"setting up {peer.name}: {peer.description}", file=sys.stderr)
                peer.setup(a, b)
                ready.append(peer)
            for r in range(args.repeats):
                for peer in ready:
                    print(f"repeat {r + 1}/{args.repeats}: {peer.name}", file=sys.stderr)
                    measure_rtt(peer, cases[peer.name, "rtt 64 B"], rt_n, max(1, rt_n // 10), [a, b])
                    measure_oneway(peer, cases[peer.name, "one-way 64 B"], n64, [a, b])
                    measure_oneway(peer, cases[peer.name, "one-way 4 KiB"], n4k, [a, b])
        finally:
            for peer in ready:
                peer.teardown()
    wake = wake_round_trip()
    elapsed = time.monotonic() - t_start
    print()
    print(f"fabric baselines: 2 network namespaces over a veth pair, {args.repeats} repeats, peers taking turns")
    print(f"round trip: {rt_n} x 64 B per repeat; one-way: {n64} x 64 B, {n4k} x 4 KiB per repeat (first send to last receipt)")
    print()
    print(table(list(cases.values()), args.repeats))
    print()
    print(f"load average before: {load[0]:.2f}, after: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs; {elapsed:.0f} s")
    for p in peers:
        print(f"  {p.name}: {p.description}")
    print("  CPU/msg: CPU (user + system) of every process of both machines over the case, per message (round trip: per")
    print("  round trip); n/a for bridge, whose client bridge of each case is gone before it can be read")
    print()
    floor_text(cases, wake)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "counts": {"rt_n": rt_n, "n64": n64, "n4k": n4k, "repeats": args.repeats},
                    "load": {"before": load[0], "after": os.getloadavg()[0]},
                    "cases": [asdict(c) for c in cases.values()],
                },
                indent=1,
            )
        )
    failed = [c for c in cases.values() if c.errors]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
