"""Multi-hop channels vs UMP vs multiprocessing.Pipe, in one run.

Run: .venv/bin/python benches/bench_multihop.py [--scale 1.0]
- two monitors (client on core 0, service on core 1): round trip and 64 B
  streaming with window 16, multi-hop against UMP and Pipe;
- ring mode on virtual cores: 1, 2, 4, 8 monitor hops;
- window 1, 4, 16, 64;
- memory: a multi-hop channel's state per monitor vs a UMP channel's rings;
- monitor-to-monitor links per routing mode for 4, 16 and 64 cores.
Goals (issue 3): multi-hop round trip no slower than Pipe's; streaming 64 B
with window 16 at least 5x Pipe's. The per-message forwarding cost is in
`cargo bench -p multihop-core --bench pingpong`.
"""

from __future__ import annotations

import argparse
import os

import multihop as mh
from multihop import rts
from multihop.bench import peers


def row(label: str, value: float, unit: str, base: float | None = None, lower: bool = False) -> str:
    ratio = ""
    if base:
        ratio = f"{(base / value if lower else value / base):8.2f}x Pipe"
    return f"  {label:<44} {value:>14,.2f} {unit:<6} {ratio}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args()
    n_rtt, n_stream = int(20_000 * a.scale), int(200_000 * a.scale)
    pid = os.getpid()
    with mh.Runtime.start(f"bench-mh-{pid}", cores=[0, 1]) as rt:
        mhb = peers.PeerBench(rt, 0, 1, transport="multihop", window=16)
        ump = peers.PeerBench(rt, 0, 1, transport="ump")
        pipe_rtt, pipe_stream = mhb.rtt_peer(n_rtt), mhb.stream_peer(n_stream)
        print("client core 0, service core 1 (two monitors on the multi-hop path)")
        print(row("round trip 64 B, Pipe (median)", pipe_rtt, "us"))
        print(row("round trip 64 B, UMP (median)", ump.rtt_ours(n_rtt), "us", pipe_rtt, lower=True))
        print(row("round trip 64 B, multi-hop (median)", mhb.rtt_ours(n_rtt), "us", pipe_rtt, lower=True))
        print(row("one-way 64 B, Pipe", pipe_stream, "msg/s"))
        print(row("one-way 64 B, UMP", ump.stream_ours(n_stream), "msg/s", pipe_stream))
        print(row("one-way 64 B, multi-hop window 16", mhb.stream_ours(n_stream), "msg/s", pipe_stream))
        print("window (multi-hop, 2 monitors, one-way 64 B)")
        for w in (1, 4, 16, 64):
            b = peers.PeerBench(rt, 0, 1, transport="multihop", window=w)
            print(row(f"window {w}", b.stream_ours(n_stream // (8 if w == 1 else 2)), "msg/s", pipe_stream))
    print("hops (ring mode, 8 virtual cores on this machine's CPUs)")
    with mh.Runtime.start(f"bench-hops-{pid}", cores=list(range(8)), routing="ring") as rt:
        for hops, dst in ((1, 0), (2, 1), (4, 3), (8, 7)):
            b = peers.PeerBench(rt, 0, dst, transport="multihop", window=16)
            r = b.rtt_ours(max(n_rtt // 10, 500))
            s = b.stream_ours(max(n_stream // 10, 5000))
            print(f"  {hops} monitor hop(s): round trip {r:10.1f} us   one-way {s:12,.0f} msg/s")
    print("memory")
    from multihop import _core  # noqa: F401  (figures below come from the layouts in core-rs)

    entry = 2 * (16 + 48)  # two (link, VCI) -> entry records per monitor per channel
    ump_rings = 256 + 2 * (128 + 32768 * 64)
    print(f"  multi-hop channel state per monitor: ~{entry} B (two forwarding entries) + at most window x message in queues")
    print(f"  UMP channel rings (1 MiB max message): {ump_rings:,} B of mapping, touched as used")
    print("monitor-to-monitor links per routing mode")
    for n in (4, 16, 64):
        topo = mh.Topology.chunked(range(n), max(n // 4, 1))
        counts = {m: len(rts.links(rts.routing_table(topo, m))) for m in rts.MODES}
        print(f"  {n:3} cores (4 sockets): " + ", ".join(f"{m} {c}" for m, c in counts.items()))


if __name__ == "__main__":
    main()
