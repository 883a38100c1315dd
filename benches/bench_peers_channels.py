"""Why the peers suite's multi-hop round trip was 5x the channels suite's in one run (issue 26 §3).

    .venv/bin/python benches/bench_peers_channels.py [--repeats 8] [--n 2000] [--no-poll]

Runs, alternately, the channels suite's and the peers suite's multi-hop
64-byte round-trip case (:func:`multihop.bench.suites.common.channel_rtt`:
one code path, so the same server process, pinning, size, count, warm-up,
blocking receive and clock) and Pipe's, ``--repeats`` times each, on one
runtime, recording for every repeat the foreign CPU (CPUs used by processes
that are not this benchmark's) and the share of forwarded frames on which the
monitors parked (slept, so the next hop needed a wake-up) with their
scheduling weight (:mod:`multihop.bench.load`).  Prints one line per repeat
and then the medians of the repeats in which the monitors polled (parked on
under 10 % of the frames) and in which they parked (over 50 %), per case.

What it shows: the two suites' figures do not differ by suite; the multi-hop
round trip is bimodal, fast while the monitors poll and several times slower
once foreign load stops them polling (their autogroup goes to nice 0:
``sched/weight.rs``, ``docs/design.md`` §5), while Pipe's two wake-ups per
round trip change little.  ``--no-poll`` starts the runtime with
``MULTIHOP_MONITOR_POLL_US=0`` (monitors that never poll): every repeat then
gives the parked figure, whatever the load.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import multihop as mh  # noqa: E402
from multihop.bench.peers import PeerBench  # noqa: E402
from multihop.bench.progress import Progress  # noqa: E402
from multihop.bench.suites.common import SuiteContext, channel_rtt, peer_rtt  # noqa: E402
from multihop.bench.suites.options import BenchOptions  # noqa: E402
from multihop.bench.trace import TraceWriter  # noqa: E402

CASES = ("channels", "peers", "pipe")


def run(repeats: int, n: int, no_poll: bool) -> list[dict[str, object]]:
    """Every repeat of the three cases, in turn; one dict per (case, repeat) with p50 and load."""
    if no_poll:
        os.environ["MULTIHOP_MONITOR_POLL_US"] = "0"
    out = Path(tempfile.mkdtemp(prefix="mh-peers-channels-"))
    opts = BenchOptions(quick=True, repeats=repeats)
    with mh.Runtime.start(f"bench-pc-{os.getpid()}", cores=[0, 1]) as rt:
        with TraceWriter(out, suite="adhoc") as w:
            ctx = SuiteContext(w, opts, Progress(stream=io.StringIO(), bar=False), attached=rt)
            for rep in range(repeats):
                for case in CASES:
                    params: dict[str, object] = {"suite": case if case != "pipe" else "peers", "routing": rt.routing, "size": 64,
                                                 "src_core": 0, "dst_core": 1}  # fmt: skip
                    if case == "pipe":
                        bench = PeerBench(rt, 0, 1, transport="ump", window=16)
                        peer_rtt(ctx, bench, "pipe", dict(params, transport="pipe", routing=None, window=-1), n, 64, rep)
                    else:
                        bench = PeerBench(rt, 0, 1, transport="multihop", window=16)
                        channel_rtt(ctx, bench, dict(params, transport="multihop", window=16), n, 64, rep)
    msgs = pq.read_table(w.run_dir / "messages.parquet", columns=["suite", "transport", "repeat", "send_ns", "recv_ns"]).to_pylist()
    cases = pq.read_table(w.run_dir / "cases.parquet").to_pylist()
    rows = []
    for c in cases:
        lat = [m["recv_ns"] - m["send_ns"] for m in msgs if (m["suite"], m["transport"], m["repeat"]) == (c["suite"], c["transport"], c["repeat"])]
        name = "pipe" if c["transport"] == "pipe" else c["suite"]
        parks = c["monitor_parks"] / c["monitor_forwarded"] if c["transport"] != "pipe" and c["monitor_forwarded"] else None
        rows.append({"case": name, "repeat": c["repeat"], "p50_us": float(np.median(lat)) / 1000, "foreign": c["foreign_cpu"],
                     "parks": parks, "weight": c["monitor_weight"] if c["transport"] != "pipe" else ""})  # fmt: skip
    return sorted(rows, key=lambda r: (r["repeat"], CASES.index(str(r["case"]))))


def main() -> None:
    """Run and print the table and the medians per monitor state."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=8, help="repeats of each case (default 8)")
    ap.add_argument("--n", type=int, default=2000, help="round trips per repeat (default 2000, as --quick)")
    ap.add_argument("--no-poll", action="store_true", help="monitors that never poll (MULTIHOP_MONITOR_POLL_US=0)")
    a = ap.parse_args()
    rows = run(a.repeats, a.n, a.no_poll)
    print(f"{'case':9s} {'repeat':>6s} {'p50':>9s} {'foreign CPU':>12s} {'parked':>7s}  weight")
    for r in rows:
        parks = f"{r['parks']:.0%}" if r["parks"] is not None else ""
        print(f"{r['case']:9s} {r['repeat']:>6} {r['p50_us']:>6.1f} us {r['foreign']:>12.2f} {parks:>7s}  {r['weight']}")
    print()
    for case in ("channels", "peers"):
        mine = [r for r in rows if r["case"] == case]
        for state, pick in (("polling (parked < 10 %)", lambda r: r["parks"] < 0.1), ("parking (parked > 50 %)", lambda r: r["parks"] > 0.5)):
            got = [float(r["p50_us"]) for r in mine if r["parks"] is not None and pick(r)]
            text = f"median {statistics.median(got):.1f} us over {len(got)} repeat(s)" if got else "no repeat"
            print(f"multi-hop, {case:8s} suite's case, monitors {state}: {text}")
    pipe = [float(r["p50_us"]) for r in rows if r["case"] == "pipe"]
    print(f"Pipe: median {statistics.median(pipe):.1f} us, {min(pipe):.1f}-{max(pipe):.1f} us over {len(pipe)} repeats")


if __name__ == "__main__":
    main()
