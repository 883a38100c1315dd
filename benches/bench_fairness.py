"""Fair sharing of a monitor link (issue 16 §2): a ping-pong's round trip alone and next to a flood.

    .venv/bin/python benches/bench_fairness.py [--n 3000] [--runs 3] [--window 1024]

Prints, for a runtime with fair link queues (deficit round robin, the
default) and one whose monitors serve each channel's whole backlog in turn
(``MULTIHOP_LINK_QUANTUM`` of a gigabyte: the unfair baseline, same run), the
ping-pong's median round trip alone and next to a flood over the same monitor
link, their ratio (goal: at most 2x), the flood's rate, and what the upstream
monitor's link saw (most frames queued, most frames of other channels that
went out ahead of a waiting message; the flood's batches of 16 travel as one
frame each, see docs/design.md). Medians over ``--runs`` runs. A third row
runs the fair queues with monitors that never poll (``MULTIHOP_MONITOR_POLL_US=0``):
a flood makes the monitors stop polling, so that row says what the flood costs
the ping-pong beyond the polling it switches off.
Real cores: two CPUs, one per monitor; every process pinned to its core's CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import multihop as mh  # noqa: E402
from multihop.bench import link_share  # noqa: E402


def _link(rt: mh.Runtime, core: int, peer: int) -> dict:
    for m in rt.status(limit=0)["monitors"]:
        if m.get("core") == core:
            return next(link for link in m["data"]["links"] if link["kind"] == "monitor" and link["peer"] == peer)
    raise mh.MonitorError(f"monitor {core} did not answer")


def measure(quantum: int | None, n: int, runs: int, window: int, poll_us: int | None = None) -> dict[str, float]:
    """Median round trips (us) alone and flooded, the flood's rate, and the link's counters
    (``poll_us``: the monitors' ``MULTIHOP_MONITOR_POLL_US``, None for the default)."""
    env = {"MULTIHOP_LINK_QUANTUM": quantum, "MULTIHOP_MONITOR_POLL_US": poll_us}
    old = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        if v is not None:
            os.environ[k] = str(v)
    try:
        rt = mh.Runtime.start(f"bench-fair-{os.getpid()}-{quantum or 0}-{poll_us}", cores=[0, 1])
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        alone, flooded, rates = [], [], []
        for _ in range(runs):
            alone.append(link_share.ping_pong(rt, 0, 1, n).median_us)
            with link_share.flooding(rt, 0, 1, window=window) as flood:
                flooded.append(link_share.ping_pong(rt, 0, 1, n).median_us)
            rates.append(flood.rate)
        link = _link(rt, 0, 1)
    finally:
        rt.stop()
    return {
        # The first run is on a fresh runtime; later ones follow a flood, after which the monitors
        # stop polling for up to 8 s (docs/design.md §5) and a lone ping-pong is slower: the ratio
        # is against the fresh one, the best the ping-pong does alone.
        "alone": alone[0],
        "alone_after": statistics.median(alone[1:]) if len(alone) > 1 else alone[0],
        "flooded": statistics.median(flooded),
        "rate": statistics.median(rates),
        "max_queued": link["max_queued"],
        "max_overtaken": link["max_overtaken"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000, help="round trips per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=int, default=link_share.FLOOD_WINDOW, help="the flood's credit window")
    a = ap.parse_args()
    print(
        f"ping-pong 64 B over a monitor link, alone and next to a flood (window {a.window}, 64 B, batches of 16); "
        f"real cores (2 CPUs), medians of {a.runs} runs of {a.n}"
    )
    print(
        f"{'link queues':<28}{'alone us':>10}{'(after a flood)':>16}{'flooded us':>12}{'ratio':>8}{'flood msg/s':>13}"
        f"{'max queued':>12}{'max ahead':>11}  (frames)"
    )
    cases = (
        ("fair (DRR, default)", None, None),
        ("unfair (whole backlog)", link_share.UNFAIR_QUANTUM, None),
        # what the flood costs once polling is out of the picture: a flood makes the monitors stop
        # polling (docs/design.md section 5), so "alone" above has an advantage "flooded" cannot have
        ("fair, monitors not polling", None, 0),
    )
    for label, quantum, poll_us in cases:
        r = measure(quantum, a.n, a.runs, a.window, poll_us)
        print(
            f"{label:<28}{r['alone']:>10.1f}{r['alone_after']:>16.1f}{r['flooded']:>12.1f}{r['flooded'] / r['alone']:>7.2f}x"
            f"{r['rate']:>13,.0f}{r['max_queued']:>12}{r['max_overtaken']:>11}"
        )
    print("goal: flooded / alone (fresh runtime) <= 2x with fair queues; the last row is the same ratio with the monitors never polling")
    w = wake_costs()
    if w:
        print(
            "what a wake-up costs here (benches/wake_cost.c: a futex ping-pong of two C processes, median round trip, "
            "i.e. two wake-ups of a parked process):"
        )
        print(
            f"  same CPU {w[(0, 0, 0)]:.1f} us, next to a CPU-bound process {w[(0, 0, 1)]:.1f} us;"
            f" across the two CPUs {w[(0, 1, 0)]:.1f} us (idle), {w[(0, 1, 1)]:.1f} us with both busy"
        )
        print(
            "  a flooded ping-pong's monitors cannot poll (the flood leaves no idle time), so each round trip pays two"
            f" cross-CPU and four same-CPU wake-ups, ~{w[(0, 1, 1)] + 2 * w[(0, 0, 1)]:.0f} us before any work of ours"
        )


def wake_costs() -> dict[tuple[int, int, int], float] | None:
    """Median futex round trips of benches/wake_cost.c by (cpu a, cpu b, busy), in us (None without gcc)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "wake_cost"
        subprocess.run([gcc, "-O2", str(Path(__file__).with_name("wake_cost.c")), "-o", str(exe)], check=True, capture_output=True)
        out = {}
        for case in ((0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)):
            run = subprocess.run([str(exe), *map(str, case)], check=True, capture_output=True, text=True, timeout=120)
            out[case] = float(run.stdout.strip())
    return out


if __name__ == "__main__":
    main()
