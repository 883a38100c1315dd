"""UMP channel vs multiprocessing.Pipe, two processes pinned to CPUs 0 and 1.

Run: .venv/bin/python benches/bench_ump_vs_pipe.py [--scale 1.0]
Prints each figure, Pipe's, and the ratio, plus the CPU an idle receiver
parked in recv() uses. Goals (issue 2): round trip >= 40x, one-way 64 B
>= 10x, records >= 100x, 4 KiB >= 5x, idle < 1 % of a core.
"""

from __future__ import annotations

import argparse
import os

import multihop as mh
from multihop.bench import peers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args()
    with mh.Runtime.start(f"bench-ump-{os.getpid()}", cores=[0, 1]) as rt:
        figs = peers.run(rt, scale=a.scale, progress=lambda s: print(f"running: {s}", flush=True))
        print(peers.format_table(figs))
        idle = peers.PeerBench(rt, 0, 1).idle_cpu(3.0)
        print(f"idle receiver parked in recv(): {idle:.2f} % of a core")


if __name__ == "__main__":
    main()
