"""Group communication, phase 2: one-to-all shoot-downs through the monitors against core count, Pipes as baseline.

Run: .venv/bin/python benches/bench_groups.py [--quick] [--max-cores 32] [--rounds 200]

For N = 2, 4, 8, 16, 32 cores (virtual cores on this machine's CPUs, declared as
4 sockets once N >= 8; root core 0, one member process on each other core), in
one run, the median shoot-down (the root sends, every member acknowledges, the
root has every ack; :mod:`multihop.bench.groups.shootdown`) of:

* ``unicast``: the root's dispatcher sends one message per member, each member
  acknowledges straight back to the root (``convergecast(unicast=True)``);
* ``broadcast``: one message, the root's monitor copies it to every member core;
* ``radix`` (k = 2) and ``numa``: the monitors forward copies down those trees;
* ``pipe``: the same round over ``multiprocessing`` Pipes (the baseline);

(in the three tree modes the monitors aggregate the acknowledgements back up the
tree: each sends its parent one merged report; docs/groups.md §8)

with ns and cycles per member, the crossover (the smallest N where a tree beats
unicast); from 8 cores on, radix and numa again with every ack straight back to
the root (``aggregate=False``: what the monitors' aggregation is measured
against, in the same run); then on 2 real and 4 and 8 virtual cores the machine
model's prediction against the measured ``unicast`` (goal: within 25 %): a calibration of the live
group path from the root (:mod:`multihop.bench.groups.calibrate_group`: UMP latency and
switch, a parked receiver's wake-up, the monitors' forward cost per frame, the
endpoints' CPU per request from one- and two-member reference rounds), simulated
flat unicast with direct acks through the monitors; and total-order throughput
against FIFO (one sender, 3 members; goal >= 1/2).  ``--model-only`` runs only the
model part.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import multihop as mh
from multihop.bench.groups.calibrate_group import calibrate_group_path
from multihop.bench.groups.shootdown import (
    MODES,
    measure_group_shootdown,
    measure_pipe_shootdown,
    measure_throughput,
)
from multihop.groups import simulate
from multihop.groups.trees import flat


def topology(n: int) -> mh.Topology:
    """n virtual cores: one socket below 8 cores, else 4 sockets of n/4."""
    if n < 8:
        return mh.Topology([list(range(n))])
    per = n // 4
    return mh.Topology([list(range(s * per, (s + 1) * per)) for s in range(4)])


def cpu_ghz() -> float:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1000.0
    except OSError:
        pass
    return 1.0


def load() -> str:
    """The 1-minute load average and the processes runnable now (the average lags a burst by minutes)."""
    with open("/proc/loadavg") as f:
        fields = f.read().split()
    return f"{float(fields[0]):.1f}/{fields[3].split('/')[0]}"


def model_part(sizes: list[int], rounds: int, repeats: int = 3) -> None:
    """The model's prediction of the flat unicast shoot-down against the measured one, per core count: ``repeats``
    times a calibration, its prediction, and a measurement (median of ``rounds`` rounds) right after it; the
    medians of the predictions and of the measurements are compared (the machine is shared: a calibration and
    a measurement taken minutes apart can see different loads)."""
    cpus = len(os.sched_getaffinity(0))
    print(
        f"\n  the model against the live flat unicast shoot-down ({repeats} x calibrate, predict, measure the median of "
        f"{rounds} rounds; medians of those; load before-after: 1-minute average/processes runnable now; parts in us, last repeat)"
    )
    print(
        f"  {'cores':>5} {'kind':>7} {'calib.':>6} {'wake':>5} {'fwd':>4} {'hand':>5} {'send':>5} {'ack':>4} {'root':>5} {'sw':>4} {'crowd':>8} {'c.root':>6} "
        f"{'predicted':>10} {'measured':>10} {'error':>6} {'load':>11}"
    )
    for n in sizes:
        with mh.Runtime.start(f"bgrp-model-{n}-{os.getpid()}", cores=list(range(n)), topology=topology(n)) as rt:
            load0 = load()
            preds, runs = [], []
            t0 = time.monotonic()
            for _ in range(repeats):
                model, costs, workload = calibrate_group_path(rt, 0, rounds=rounds)
                preds.append(simulate(model, flat(0, list(range(n))), workload).shootdown)
                runs.append(measure_group_shootdown(rt, 0, list(range(1, n)), "unicast", rounds=rounds).median)
            took = (time.monotonic() - t0) / repeats
            predicted, measured = statistics.median(preds), statistics.median(runs)
            err = (predicted - measured) / measured
            parts = (costs.wake, costs.forward, costs.handle, costs.send, costs.ack, costs.root_work, model.switch)
            print(
                f"  {n:>5} {'real' if n <= cpus else 'virtual':>7} {took:>5.0f}s "
                + " ".join(f"{v / 1000:>{w}.1f}" for v, w in zip(parts, (5, 4, 5, 5, 4, 5, 4), strict=True))
                + f" {'/'.join(f'{v / 1000:.0f}' for v in costs.crowd):>8} {'/'.join(f'{v / 1000:.0f}' for v in costs.crowd_root):>6}"
                + f" {predicted / 1000:>7.1f} us {measured / 1000:>7.1f} us {err * 100:>+5.0f}% {load0}-{load()}"
                + f"  {'met' if abs(err) <= 0.25 else 'NOT MET'}",
                flush=True,
            )
            print(
                "         each repeat, predicted / measured us: "
                + ", ".join(f"{p / 1000:.1f} / {m / 1000:.1f} ({(p - m) / m * 100:+.0f}%)" for p, m in zip(preds, runs, strict=True)),
                flush=True,
            )
    print(
        "  (parts: wake-up, monitor per frame, member per request alone on its CPU, root per send, per reply, per round, switch,"
        " what a member's request costs more with 1/2/... others on its CPU, the root's round with 1/2/... members on its CPU)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="up to 8 cores, 60 rounds")
    p.add_argument("--max-cores", type=int, default=32)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--model-only", action="store_true", help="only the model against the measured unicast shoot-down")
    p.add_argument("--model-sizes", default="2,4,8", help="core counts of the model part (default 2,4,8)")
    p.add_argument("--model-repeats", type=int, default=3, help="measurements per core count in the model part (median)")
    a = p.parse_args()
    sizes = [n for n in (2, 4, 8, 16, 32) if n <= (8 if a.quick else a.max_cores)]
    rounds = 60 if a.quick else a.rounds
    ghz = cpu_ghz()
    if a.model_only:
        model_part([int(n) for n in a.model_sizes.split(",")], rounds, a.model_repeats)
        return
    print(
        f"group shoot-downs through the monitors; {len(os.sched_getaffinity(0))} CPUs at {ghz:.2f} GHz, "
        f"virtual cores beyond them; {rounds} rounds per case (medians)"
    )
    print(
        f"\n  {'cores':>5} {'members':>7} "
        + " ".join(f"{m:>11}" for m in (*MODES, "pipe"))
        + f" {'best tree':>10} {'tree/uni':>8} {'ns/member':>10} {'cyc/member':>10}"
    )
    crossover = None
    direct: dict[int, dict[str, tuple[float, float]]] = {}
    for n in sizes:
        with mh.Runtime.start(f"bgrp-{n}-{os.getpid()}", cores=list(range(n)), topology=topology(n)) as rt:
            members = list(range(1, n))
            med = {m: measure_group_shootdown(rt, 0, members, m, rounds=rounds).median for m in MODES}
            med["pipe"] = measure_pipe_shootdown(rt, 0, members, rounds=rounds).median
            if n >= 8:
                direct[n] = {
                    m: (med[m], measure_group_shootdown(rt, 0, members, m, rounds=rounds, aggregate=False).median) for m in ("radix", "numa")
                }
        best = min(("broadcast", "radix", "numa"), key=lambda m: med[m])
        ratio = med[best] / med["unicast"]
        if crossover is None and len(members) > 1 and ratio < 0.9:
            crossover = n  # one member: every mode is the same path
        per = med[best] / len(members)
        print(
            f"  {n:>5} {len(members):>7} "
            + " ".join(f"{med[m] / 1000:>8.1f} us" for m in (*MODES, "pipe"))
            + f" {best:>10} {ratio:>8.2f} {per:>10,.0f} {per * ghz:>10,.0f}",
            flush=True,
        )
    print(
        f"\n  crossover: a tree beats unicast by more than 10 % from {crossover} cores on"
        if crossover
        else "\n  crossover: no tree beat unicast by more than 10 % at these sizes"
    )

    if direct:
        print("\n  acks merged up the tree by the monitors against acks straight back to the root (same trees, same run):")
        print(f"  {'cores':>5} {'radix merged':>13} {'radix direct':>13} {'numa merged':>12} {'numa direct':>12} {'merged/direct':>14}")
        for n, d in direct.items():
            ratios = " / ".join(f"{d[m][0] / d[m][1]:.2f}" for m in ("radix", "numa"))
            print(
                f"  {n:>5} {d['radix'][0] / 1000:>10.1f} us {d['radix'][1] / 1000:>10.1f} us "
                f"{d['numa'][0] / 1000:>9.1f} us {d['numa'][1] / 1000:>9.1f} us {ratios:>14}",
                flush=True,
            )

    model_part([int(n) for n in a.model_sizes.split(",") if int(n) <= max(sizes)], rounds, a.model_repeats)
    with mh.Runtime.start(f"bgrp-tp-{os.getpid()}", cores=[0, 1, 2, 3], topology=topology(4)) as rt:
        k = 3
        count = 5_000 if a.quick else 20_000
        rates = {}
        for order in ("fifo", "total"):
            deliveries, ns = measure_throughput(rt, 0, [1, 2, 3], order, n=count)
            rates[order] = deliveries / (ns / 1e9)
    ratio = rates["total"] / rates["fifo"]
    print(
        f"\n  throughput, 1 sender, {k} members, {count} x 64 B: fifo {rates['fifo']:,.0f} deliveries/s, "
        f"total {rates['total']:,.0f}: total/fifo {ratio:.2f} (goal >= 0.5: {'met' if ratio >= 0.5 else 'not met'})"
    )


if __name__ == "__main__":
    main()
