"""Multi-hop channels against UMP and multiprocessing.Pipe, in one run.

Run: .venv/bin/python benches/bench_multihop.py [--scale 1.0] [--repeat 3]

- client core 0, service core 1 (two monitors on the multi-hop path): median
  round trip and one-way 64 B throughput, multi-hop against UMP and Pipe,
  per message and in batches of 16 (``send_batch`` / ``recv_records``); per
  message with the sender holding what finds no credit (the default,
  ``core-rs/dispatcher/src/multihop/held.rs``) and with ``MULTIHOP_HOLD=0`` (one message a frame),
  both between fresh processes;
- credit windows 1, 4, 16, 64;
- every process layout (``multihop.bench.layouts``: ends in the starter's session,
  in sessions of their own, a detached runtime, daemons as cron starts them):
  round trip and one-way window 16 against Pipe between ends started the same way;
- ring mode on 8 virtual cores: 1, 2, 4 and 8 monitors on the path;
- the monitors' own forwarding cost in the live runtime: their CPU time over
  the messages they forwarded during a stream (the Rust bench
  ``cargo bench -p multihop-monitor --bench pingpong`` measures the bare step);
- memory: a multi-hop channel's state in the monitors (measured as their RSS
  growth over many open channels) against a UMP channel's rings;
- monitor-to-monitor links per routing mode for 4, 16 and 64 cores;
- the bound that scheduling alone puts on a window: ``window_bound.c``, the same
  four processes on two CPUs with counters for rings and no Python, one message
  a frame and with held frames.

Each figure is the median of ``--repeat`` runs; Pipe is measured in the same
run, and every ratio is against it. Goals (issue 3): multi-hop round trip no
slower than Pipe's; one-way 64 B with window 16 at least 5x Pipe's; the
forwarding step at most 100 ns per message.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Callable

import psutil

import multihop as mh
from multihop import rts
from multihop.bench import layouts, peers


def med(f: Callable[[], float], repeat: int) -> float:
    return statistics.median(f() for _ in range(repeat))


def row(label: str, value: float, unit: str, base: float | None = None, lower: bool = False) -> str:
    ratio = ""
    if base:
        ratio = f"{(base / value if lower else value / base):8.2f}x Pipe"
    return f"  {label:<48} {value:>14,.2f} {unit:<6} {ratio}"


def batched_stream(b: peers.PeerBench, n: int, size: int = 64, batch: int = 16) -> float:
    """One-way messages per second sending `batch` messages per call (the server takes them in record batches)."""
    msgs = [b"x" * size] * batch

    def body(ch: mh.Channel) -> float:
        t0 = time.perf_counter()
        sent = 0
        while sent < n:
            sent += ch.send_batch(msgs[: n - sent], timeout=60)
        ch.recv(timeout=60)
        return sent / (time.perf_counter() - t0)

    return b.channel_case("records", n, size, body)


def monitor_cpu(rt: mh.Runtime) -> float:
    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in rt.monitor_pids.values())


def forwarded(rt: mh.Runtime) -> int:
    """Data messages the monitors forwarded (a batch frame counts its messages)."""
    return sum(m["data"]["forwarded_messages"] for m in rt.status(limit=0)["monitors"])


def window_bound(window: int, work_ns: int, batch: bool, hold: bool = False) -> float | None:
    """Messages per second of benches/window_bound.c, the scheduling-only model of this path (None without gcc);
    `hold`: the sender holds what finds no credit for the next one (frames of up to 64, core-rs/dispatcher/src/multihop/held.rs)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    src = Path(__file__).with_name("window_bound.c")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "window_bound"
        subprocess.run([gcc, "-O2", str(src), "-o", str(exe)], check=True, capture_output=True)
        args = [str(window), str(work_ns), "1" if batch else "0", "1" if hold else "0"]
        out = subprocess.run([str(exe), *args], check=True, capture_output=True, text=True, timeout=300)
    return float(out.stdout.strip())


def sampled(rt: mh.Runtime) -> tuple[int, int]:
    st = [m["data"] for m in rt.status()["monitors"]]
    return sum(d["sampled_cpu_ns"] for d in st), sum(d["sampled_messages"] for d in st)


def forwarding_cost_ns(rt: mh.Runtime, b: peers.PeerBench, n: int) -> tuple[float, float]:
    """Per forwarded message during a batched stream, in ns: (the monitors' CPU time in
    steps that moved messages, sampled: lookup, rewrite, ring writes, wake-ups; the
    monitors' whole CPU time, idle-priority polling included)."""
    cpu0, fwd0, (s_cpu0, s_msgs0) = monitor_cpu(rt), forwarded(rt), sampled(rt)
    batched_stream(b, n)
    s_cpu1, s_msgs1 = sampled(rt)
    step = (s_cpu1 - s_cpu0) / max(s_msgs1 - s_msgs0, 1)
    return step, (monitor_cpu(rt) - cpu0) / max(forwarded(rt) - fwd0, 1) * 1e9


def channel_memory(rt: mh.Runtime, transport: str, count: int) -> tuple[float, float]:
    """(bytes per channel added to the monitors' RSS, to this process's RSS) over `count` open channels."""
    me = psutil.Process()
    mons = [psutil.Process(p) for p in rt.monitor_pids.values()]
    srv, cli = rt.dispatcher(1), rt.dispatcher(0)
    svc = srv.export(f"mem-{transport}")
    accepted: list[mh.Channel] = []
    mon0, me0 = sum(p.memory_info().rss for p in mons), me.memory_info().rss
    t = threading.Thread(target=lambda: accepted.extend(svc.accept(timeout=30) for _ in range(count)))
    t.start()
    bound = [cli.bind(f"mem-{transport}", transport=transport, timeout=30) for _ in range(count)]
    t.join(60)
    for c in bound:
        c.send(b"x" * 64)  # touch the rings as a small-message user does
    for c in accepted:
        c.recv(timeout=5)
    mon1, me1 = sum(p.memory_info().rss for p in mons), me.memory_info().rss
    for c in bound + accepted:
        c.close()
    srv.detach()
    cli.detach()
    return (mon1 - mon0) / count, (me1 - me0) / count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    n_rtt, n_stream, rep = int(20_000 * a.scale), int(200_000 * a.scale), a.repeat
    pid = os.getpid()
    with mh.Runtime.start(f"bench-mh-{pid}", cores=[0, 1]) as rt:
        mhb = peers.PeerBench(rt, 0, 1, transport="multihop", window=16)
        ump = peers.PeerBench(rt, 0, 1, transport="ump")
        pipe_rtt = med(lambda: mhb.rtt_peer(n_rtt), rep)
        pipe_stream = med(lambda: mhb.stream_peer(n_stream), rep)
        mh_rtt = med(lambda: mhb.rtt_ours(n_rtt), rep)
        mh_stream = med(lambda: mhb.stream_ours(n_stream), rep)
        mh_batched = med(lambda: batched_stream(mhb, n_stream * 2), rep)
        print(f"client core 0, service core 1 (two monitors on the multi-hop path); median of {rep} runs")
        print(row("round trip 64 B, Pipe", pipe_rtt, "us"))
        print(row("round trip 64 B, UMP", med(lambda: ump.rtt_ours(n_rtt), rep), "us", pipe_rtt, lower=True))
        print(row("round trip 64 B, multi-hop", mh_rtt, "us", pipe_rtt, lower=True))
        print(row("one-way 64 B, Pipe", pipe_stream, "msg/s"))
        print(row("one-way 64 B, UMP", med(lambda: ump.stream_ours(n_stream), rep), "msg/s", pipe_stream))
        print(row("one-way 64 B, multi-hop window 16", mh_stream, "msg/s", pipe_stream))
        print(row("one-way 64 B, multi-hop window 16, batches of 16", mh_batched, "msg/s", pipe_stream))
        # Holding (core-rs/dispatcher/src/multihop/held.rs) against the strict send it replaced, both ends fresh processes, same run.
        with layouts.running("same-session") as run:
            held = med(lambda: run.case("multihop", "stream", n_stream), rep)
            strict = med(lambda: run.case("multihop", "stream", n_stream, env={"MULTIHOP_HOLD": "0"}), rep)
        print(row("one-way w16, fresh ends, send holds (default)", held, "msg/s", pipe_stream))
        print(row("one-way w16, fresh ends, MULTIHOP_HOLD=0 (one message a frame)", strict, "msg/s", pipe_stream))
        print("window (multi-hop, 2 monitors, one-way 64 B; per message | batches of 16)")
        for w in (1, 4, 16, 64):
            b = peers.PeerBench(rt, 0, 1, transport="multihop", window=w)
            k = n_stream // (8 if w == 1 else 2)
            per, bat = med(partial(b.stream_ours, k), rep), med(partial(batched_stream, b, k), rep)
            print(f"  window {w:<3} {per:12,.0f} msg/s {per / pipe_stream:6.2f}x Pipe | {bat:12,.0f} msg/s {bat / pipe_stream:6.2f}x Pipe")
        bounds = [(w, work, window_bound(w, work, False)) for w in (16, 64) for work in (0, 100, 300)]
        hold_bounds = [(16, work, window_bound(16, work, False, hold=True)) for work in (0, 100, 300)]
        if bounds[0][2] is not None:
            print("the same path with nothing but its scheduling (benches/window_bound.c: counters for rings, no Python;")
            print("  WORK ns of busy work per message at each end), one message at a time, one message a frame | held frames:")
            for w, work, b in bounds:
                hb = next((h for hw, hwork, h in hold_bounds if (hw, hwork) == (w, work)), None)
                held_part = f" | {hb:12,.0f} msg/s {hb / pipe_stream:6.2f}x Pipe" if hb else ""
                print(f"  window {w:<3} work {work:3} ns {b:12,.0f} msg/s {b / pipe_stream:6.2f}x Pipe{held_part}")
        fwd_after, cpu_after = forwarding_cost_ns(rt, mhb, n_stream * 2)
        mh_mon, mh_me = channel_memory(rt, "multihop", 500)
        ump_mon, ump_me = channel_memory(rt, "ump", 100)
    # On a fresh runtime: the streams above (per message at a million a second, since sends hold) starve the
    # monitors' idle-priority polling, whose guard then returns their group to its fair share and probes back
    # later (docs/design.md §5); at that share a monitor does not poll and pays a wake-up per frame.
    with mh.Runtime.start(f"bench-fwd-{pid}", cores=[0, 1]) as rt2:
        fwd_ns, cpu_ns = forwarding_cost_ns(rt2, peers.PeerBench(rt2, 0, 1, transport="multihop", window=16), n_stream * 2)
    print(row("forwarding step CPU per message (live, sampled; fresh runtime)", fwd_ns, "ns"))
    print(row("monitor CPU per message (live, with idle polling; fresh runtime)", cpu_ns, "ns"))
    print(row("the same after the streams above (monitors at their fair share)", cpu_after, "ns"))
    print(row("  forwarding step after the streams above", fwd_after, "ns"))
    print("process layouts (issue 17 §1; real cores: client core 0, service core 1; Pipe between ends started alike):", flush=True)
    lays = [layouts.measure(lay.name, max(n_rtt // 4, 1000), max(n_stream // 4, 5000), rep) for lay in layouts.LAYOUTS]
    for f in lays:
        print(f.line(), flush=True)
    print("hops (ring mode, 8 virtual cores on this machine's CPUs)", flush=True)
    with mh.Runtime.start(f"bench-hops-{pid}", cores=list(range(8)), routing="ring") as rt:
        for hops, dst in ((1, 0), (2, 1), (4, 3), (8, 7)):
            b = peers.PeerBench(rt, 0, dst, transport="multihop", window=16)
            r = med(partial(b.rtt_ours, max(n_rtt // 10, 500)), rep)
            s = med(partial(b.stream_ours, max(n_stream // 10, 5000)), rep)
            print(f"  {hops} monitor(s) on the path: round trip {r:8.1f} us   one-way {s:12,.0f} msg/s")
    print("memory per open channel (measured RSS growth)")
    print(f"  multi-hop: monitors {mh_mon:10,.0f} B (forwarding entries; queues hold at most window x message)   both ends' process {mh_me:10,.0f} B")
    print(f"  UMP:       monitors {ump_mon:10,.0f} B   both ends' process {ump_me:10,.0f} B (two rings sized for the 1 MiB maximum, touched as used)")
    print("monitor-to-monitor links per routing mode (4 sockets)")
    for n in (4, 16, 64):
        topo = mh.Topology.chunked(range(n), max(n // 4, 1))
        counts = {m: len(rts.links(rts.routing_table(topo, m))) for m in rts.MODES}
        print(f"  {n:3} cores: " + ", ".join(f"{m} {c}" for m, c in counts.items()))
    print("goals")
    print(f"  round trip no slower than Pipe: {pipe_rtt / mh_rtt:.2f}x Pipe -> {'met' if mh_rtt <= pipe_rtt else 'NOT met'}")
    best = max(mh_stream, mh_batched)
    print(
        f"  one-way window 16 >= 5x Pipe: {mh_stream / pipe_stream:.2f}x per message, {mh_batched / pipe_stream:.2f}x batched -> {'met' if best >= 5 * pipe_stream else 'NOT met'}"
    )
    worst_rtt = max(f.rtt_us / f.pipe_rtt_us for f in lays)
    worst_stream = min(f.stream / f.pipe_stream for f in lays)
    print(
        f"  every layout: round trip <= 0.5x Pipe: worst {worst_rtt:.2f}x -> {'met' if worst_rtt <= 0.5 else 'NOT met'};"
        f" one-way window 16 >= 5x Pipe: worst {worst_stream:.2f}x -> {'met' if worst_stream >= 5 else 'NOT met'}"
    )
    if bounds[0][2] is not None:
        bound16 = bounds[0][2]
        worst = min(min(f.stream for f in lays), mh_stream)
        print(
            f"  one-way window 16 >= 90 % of window_bound.c (work 0, one message a frame): {mh_stream / bound16:.0%} per message,"
            f" {mh_batched / bound16:.0%} batched, worst layout {min(f.stream for f in lays) / bound16:.0%}"
            f" -> {'met' if worst >= 0.9 * bound16 else 'NOT met'}; holding off: {strict / bound16:.0%}"
        )
    print(
        f"  send_batch of 16 >= 2x one send per message, one message a frame (window 16, MULTIHOP_HOLD=0): {mh_batched / strict:.2f}x"
        f" -> {'met' if mh_batched >= 2 * strict else 'NOT met'} (against a send that holds: {mh_batched / mh_stream:.2f}x)"
    )
    print(
        f"  monitor CPU per message in a stream < 200 ns (issue 17 §2): {cpu_ns:.0f} ns -> {'met' if cpu_ns < 200 else 'NOT met'}"
        f" (fresh runtime; {cpu_after:.0f} ns with the monitors at their fair share after the streams above)"
    )
    print(
        f"  forwarding step <= 100 ns per message (live, CPU time): {fwd_ns:.0f} ns -> {'met' if fwd_ns <= 100 else 'NOT met'}"
        " (the bare step: cargo bench -p multihop-monitor --bench pingpong)"
    )


if __name__ == "__main__":
    main()
