"""What tracing costs: the same round-trip loop traced and untraced, in the same run.

Usage::

    .venv/bin/python benches/bench_tracing.py [--n 50000] [--rounds 7] [--transport ump]

Over one channel between two processes (client pinned to the CPU of core 0,
echo server on core 1, as the bench suites do) it alternates rounds of

* **off**: ``send``/``recv`` n times, the loop timed as a whole;
* **on**: :func:`multihop.bench.suites.common.rtt_trace` at the suites'
  default sampling (one round trip in 16 timed) plus handing the samples to a
  :class:`~multihop.bench.trace.TraceWriter`, as a suite case does;
* **on, every message**: the same with every round trip timed (``--trace-every 1``).

and prints the median per-round-trip time of each and the ratios to *off*
(goal: tracing on within 10% of off).  UMP is the hardest case: its round
trip is the shortest, so a fixed per-message cost weighs most.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Callable

import multihop as mh
from multihop.bench.peers import PeerBench
from multihop.bench.suites.common import TRACE_EVERY, rtt_trace
from multihop.bench.trace import TraceWriter


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000, help="round trips per round (default 50000)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of each kind (default 7)")
    ap.add_argument("--transport", default="ump", choices=("ump", "multihop"))
    args = ap.parse_args(argv)
    n, rounds = args.n, args.rounds
    kinds = ("off", f"on (1 in {TRACE_EVERY})", "on (every message)")
    per_rt: dict[str, list[float]] = {k: [] for k in kinds}

    with mh.Runtime.start(f"bench-tracing-{os.getpid()}", cores=[0, 1]) as rt, tempfile.TemporaryDirectory() as tmp:
        writer = TraceWriter(tmp, suite="tracing")
        bench = PeerBench(rt, 0, 1, transport=args.transport, window=16)
        total = n * (1 + len(kinds) * rounds)

        def body(ch: mh.Channel) -> float:
            send, recv = ch.send, ch.recv
            msg = b"x" * 64

            def off() -> None:
                for _ in range(n):
                    send(msg)
                    recv()

            def traced(every: int, case: str) -> Callable[[], None]:
                def go() -> None:
                    seq, s, r = rtt_trace(send, recv, n, 64, every)
                    writer.add_messages(case, {"size": 64}, s, r, seq=seq, every=1)

                return go

            runs = {kinds[0]: off, kinds[1]: traced(TRACE_EVERY, "sampled"), kinds[2]: traced(1, "every")}
            off()  # warm-up
            for i in range(rounds):
                order = list(kinds) if i % 2 == 0 else list(reversed(kinds))  # no kind always goes first
                for kind in order:
                    t0 = time.perf_counter_ns()
                    runs[kind]()
                    per_rt[kind].append((time.perf_counter_ns() - t0) / n)
            return 0.0

        bench.channel_case("rtt", total, 64, body)
        writer.close()

    base = statistics.median(per_rt[kinds[0]])
    print(f"round trip 64 B over {args.transport}, {n} per round, {rounds} rounds of each, CPUs {rt.cpu_of(0)} -> {rt.cpu_of(1)}")
    for kind in kinds:
        med = statistics.median(per_rt[kind])
        extra = "" if kind == kinds[0] else f"   ratio to off {med / base:5.3f}x"
        print(f"  tracing {kind:<20} {med:8.1f} ns per round trip{extra}   (rounds: {', '.join(f'{x:.0f}' for x in per_rt[kind])})")
    sampled = statistics.median(per_rt[kinds[1]]) / base
    print(f"  goal: tracing on within 10% of off: {'met' if sampled <= 1.10 else 'NOT met'} ({(sampled - 1) * 100:+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
