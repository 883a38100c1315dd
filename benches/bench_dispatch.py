"""RE.VE.N.GE. dispatching, live: the paper's macro-sink benchmark, take-over time, and saturation against a plain broker.

    .venv/bin/python benches/bench_dispatch.py [--quick] [--compress 30] [--size 1024] [--max-sinks 64]

1. **Macro-sinks** (the paper's only benchmark), for 1, 2 and 3 peers: each
   peer processes a constant 65 news/s and a macro-sink (every topic, its own
   channel to every peer) joins every 15 s, until deliveries start to be late
   (older than 3 s) or dropped.  The schedule is compressed ``--compress``
   times (default 30: 1,950 news/s, a sink every 0.5 s, late after 0.1 s).
   Printed: the sinks served before the threshold and the bandwidth delivered
   then (wall clock, and divided by the compression: the paper's time).
2. **Take-over**: 3 peers, 6 sinks at 2,000 news/s; the peer serving sink 0 is
   SIGKILLed (its channels close) or SIGSTOPped (only heartbeats tell): time
   from the kill to each orphaned sink's first news from its new peer.
3. **Saturation**: one reliable source as fast as it can, 1, 10 and 100 sinks,
   one peer: news/s, deliveries/s, latency p50/p99; next to a plain broker (one
   process copying each message to every subscriber over the same channels:
   the floor of any broker path) and the GES path (3 brokers of one cluster,
   every subscriber matching), all measured in the same run, with the ratio
   of each to the plain broker.

Every process shares this machine's CPUs: peers, sources and sink hosts are
processes on 2 real CPUs (the runtime's cores are real, not virtual).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import multihop as mh  # noqa: E402
from multihop.bench.news import measure  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 and 2 peers, 1 and 10 sinks, shorter runs")
    p.add_argument("--compress", type=float, default=30.0, help="time compression of the macro-sink schedule")
    p.add_argument("--size", type=int, default=1024, help="news payload bytes of the macro-sink benchmark")
    p.add_argument("--max-sinks", type=int, default=64)
    p.add_argument("--skip", default="", help="comma-separated parts to skip: macro, takeover, saturation")
    a = p.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    os.environ.setdefault("MULTIHOP_RUNTIME_ROOT", tempfile.mkdtemp(prefix="mh-bench-dispatch-"))
    cpus = len(os.sched_getaffinity(0))
    print(f"machine: {cpus} CPU(s); every peer, source and sink host is a process on them (real cores)")
    with mh.Runtime.start(f"bench-dispatch-{os.getpid()}", cores=[0, 1] if cpus > 1 else [0]) as rt:
        if "macro" not in skip:
            _macro(rt.name, a)
        if "takeover" not in skip:
            _takeover(rt.name)
        if "saturation" not in skip:
            _saturation(rt.name, a.quick)
    return 0


def _macro(runtime: str, a: argparse.Namespace) -> None:
    k = a.compress
    print(
        f"\n== macro-sinks: 65 news/s per peer and a macro-sink every 15 s, compressed {k:g}x "
        f"({65 * k:,.0f} news/s, a sink every {15 / k:.3f} s, late after {3 / k * 1e3:.0f} ms); news of {a.size} B =="
    )
    base = measure.plain_saturation(runtime, 10, size=a.size, seconds=1.5)
    print(f"baseline (same run): plain broker, 10 sinks, {a.size} B: {base.deliveries_per_s * a.size / 1e6:,.1f} MB/s delivered")
    print("delivered = sinks x news/s x size, sustained before the threshold; paper time = wall / compression")
    print(f"{'peers':>5} {'sinks ok':>8} {'threshold at':>12} {'delivered MB/s':>14} {'paper-time Mbit/s':>17} {'p99 ms':>7} {'vs plain':>8}  why")
    for peers in (1, 2) if a.quick else (1, 2, 3):
        r = measure.macro_sinks(runtime, peers, compress=k, size=a.size, max_sinks=a.max_sinks, progress=lambda s: print(f"   {s}", file=sys.stderr))
        good = r.last_good
        th = r.threshold
        why = (
            "not reached"
            if th is None
            else (
                f"{th.late} late, {th.dropped} dropped of {th.expected}"
                if th.bad > 0.01
                else f"{th.short:.0%} short of {th.expected}"
                if th.short > 0.1
                else f"source at {th.offered:.0%} of its rate: the CPUs are saturated"
            )
        )
        if good is None:
            print(f"{peers:>5} {0:>8} {th.sinks if th else '-':>12}  (late from the first sink)  {why}")
            continue
        mbs = good.sinks * r.rate * good.offered * a.size / 1e6  # every sink got every news, none late or dropped
        lat = sorted(good.latencies)
        p99 = lat[int(0.99 * (len(lat) - 1))] / 1e6 if lat else float("nan")
        ratio = mbs * 1e6 / (base.deliveries_per_s * a.size)
        print(f"{peers:>5} {good.sinks:>8} {th.sinks if th else '-':>12} {mbs:>14.2f} {mbs * 8 / k:>17.2f} {p99:>7.1f} {ratio:>7.2f}x  {why}")


def _takeover(runtime: str) -> None:
    print("\n== take-over: 3 peers, 6 sinks at 2,000 news/s; the peer serving sink 0 fails ==")
    for how in ("kill", "stop"):
        t = measure.takeover(runtime, how=how)
        ms = sorted(x / 1e6 for x in t.times_ns)
        shown = ", ".join(f"{x:.1f}" for x in ms) or "none"
        print(f"SIG{how.upper():<5} ({t.detect}): {len(ms)}/{t.sinks} orphaned sink(s) served again after {shown} ms")


def _saturation(runtime: str, quick: bool) -> None:
    print(
        "\n== saturation: one reliable source as fast as it can, 64 B news, 1 peer; the plain broker and the GES path "
        "(3 brokers of one cluster, 100 % matching) in the same run; ratios are against the plain broker =="
    )
    print(f"{'sinks':>5} {'path':<16} {'news/s':>10} {'deliveries/s':>13} {'p50 ms':>8} {'p99 ms':>8} {'ratio':>7}")
    for sinks in (1, 10) if quick else (1, 10, 100):
        secs = 1.5 if quick else 3.0
        d = measure.saturation(runtime, sinks, seconds=secs)
        b = measure.plain_saturation(runtime, sinks, seconds=secs)
        g = measure.ges_saturation(sinks, count=5_000 if quick else 20_000)
        for x in (d, g, b):
            ratio = "" if x is b else f"{x.deliveries_per_s / b.deliveries_per_s:.3f}x"
            print(
                f"{sinks:>5} {x.path:<16} {x.news_per_s:>10,.0f} {x.deliveries_per_s:>13,.0f} "
                f"{x.percentile(50) / 1e3:>8.2f} {x.percentile(99) / 1e3:>8.2f} {ratio:>7}"
            )


if __name__ == "__main__":
    sys.exit(main())
