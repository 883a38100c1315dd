"""Group communication, phase 1: the machine model's trees in simulation, and the model against this machine.

Run: .venv/bin/python benches/bench_groups_model.py [--quick] [--virtual 8] [--rounds 300]

1. **Simulated** (the shipped 2x8, 4x8 and 8x8 models, root core 0, every core a
   member, acks up the tree): the shoot-down of ``flat`` unicast, ``radix`` 2/4/8,
   ``numa`` and the machine-aware tree, each with its ratio to flat, and how the
   machine-aware tree compares with the best fixed one.  Goals (issue 14): on 4x8
   and 8x8, machine-aware at most half of flat, and no worse than the best fixed tree.
   Then, on the 8x8 model, the same against the number of members: where trees
   start to beat flat unicast (the crossover).
2. **Measured here** (today's channels: the root process sends to one process per
   member core over UMP, each member acknowledges, the root waits for all): a
   calibration of the runtime's own channels gives the model, the model predicts the
   flat shoot-down (simulation, direct acks), and the live median is the baseline
   the prediction is compared with.  On 2 real cores, and on ``--virtual`` virtual
   cores (more monitors and member processes than CPUs: scheduling dominates, and
   the model's switch cost is what it learns from that).  Goal: within 25 %.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import multihop as mh
from multihop.bench.groups.calibrate import calibrate
from multihop.bench.groups.live import measure_shootdown
from multihop.groups import build_tree, load_model, machine_tree, simulate
from multihop.groups.simulate import Workload
from multihop.groups.trees import flat

FIXED = ("flat", "radix:2", "radix:4", "radix:8", "numa")


def simulated(name: str) -> tuple[float, float, float]:
    """Print one model's table; return (flat, best fixed, machine) in ns."""
    m = load_model(name)
    cores = list(m.cores)
    print(f"\n  model {name} ({m.description}); root 0, {len(cores) - 1} members  [simulated]")
    print(f"    {'tree':<10} {'shoot-down':>12} {'x flat':>8}")
    figures = {mode: simulate(m, build_tree(mode, 0, cores, model=m)).shootdown for mode in FIXED}
    t0 = time.perf_counter()
    mt = machine_tree(m, 0, cores)
    built = time.perf_counter() - t0
    figures["machine"] = mt.result.shootdown
    for mode, ns in figures.items():
        note = f"   ({mt.candidate}; built in {built:.1f} s)" if mode == "machine" else ""
        print(f"    {mode:<10} {ns:>9,.0f} ns {ns / figures['flat']:>8.2f}{note}")
    best = min(v for k, v in figures.items() if k in FIXED[1:])
    return figures["flat"], best, figures["machine"]


def crossover(name: str) -> None:
    m = load_model(name)
    print(f"\n  members against shoot-down on {name}, root 0, members the lowest cores  [simulated]")
    print(f"    {'members':>7} {'flat':>9} {'numa':>9} {'machine':>9} {'numa/flat':>10} {'machine/flat':>13}")
    for n in (1, 2, 4, 8, 12, 16, 24, 32, 48, 63):
        members = list(m.cores[1 : n + 1])
        f = simulate(m, flat(0, members)).shootdown
        nu = simulate(m, build_tree("numa", 0, members, model=m)).shootdown
        ma = machine_tree(m, 0, members, budget=800).result.shootdown
        print(f"    {n:>7} {f:>9,.0f} {nu:>9,.0f} {ma:>9,.0f} {nu / f:>10.2f} {ma / f:>13.2f}")


def measured(cores: list[int], label: str, rounds: int, counts: list[int]) -> list[float]:
    """Calibrate a runtime on ``cores``, then for each member count: live flat shoot-down vs prediction."""
    name = f"bench-groups-{os.getpid()}-{len(cores)}"
    errors = []
    with mh.Runtime.start(name, cores=cores) as rt:
        t0 = time.perf_counter()
        model = calibrate(rt, pairs="from", rounds=rounds)
        print(
            f"\n  {label}: cores {cores} on CPUs {sorted({rt.cpu_of(c) for c in cores})}; calibrated in "
            f"{time.perf_counter() - t0:.1f} s (switch {model.switch:,.0f} ns)"
        )
        print(f"    {'members':>7} {'measured median':>16} {'p10-p90':>19} {'predicted':>11} {'error':>7}")
        for k in counts:
            members = cores[1 : k + 1]
            live = measure_shootdown(rt, cores[0], members, rounds=rounds)
            pred = simulate(model, flat(cores[0], members), Workload("direct")).shootdown
            err = (pred - live.median) / live.median
            errors.append(err)
            print(f"    {k:>7} {live.median:>13,.0f} ns {live.p10:>8,.0f}-{live.p90:<8,.0f} {pred:>8,.0f} ns {err:>+7.0%}")
    return errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds and member counts")
    ap.add_argument("--virtual", type=int, default=8, help="virtual cores for the second measurement (default 8)")
    ap.add_argument("--rounds", type=int, default=None, help="shoot-downs (and calibration round trips) per case")
    a = ap.parse_args()
    rounds = a.rounds or (100 if a.quick else 300)
    print("1. simulation on the shipped models (figures in simulated ns)")
    verdicts = []
    for name in ("2x8", "4x8", "8x8"):
        f, best, mach = simulated(name)
        if name != "2x8":
            verdicts.append((name, mach / f, mach / best))
    if not a.quick:
        crossover("8x8")
    print("\n  goals (4x8, 8x8; simulated): machine-aware <= 0.5 x flat, and <= the best fixed tree")
    for name, vs_flat, vs_best in verdicts:
        ok = vs_flat <= 0.5 and vs_best <= 1.0
        print(f"    {name}: machine / flat = {vs_flat:.2f}, machine / best fixed = {vs_best:.2f}  {'met' if ok else 'NOT MET'}")

    print("\n2. the model against this machine: flat unicast shoot-down over UMP, measured vs predicted")
    real = measured([0, 1], "real cores", rounds, [1])
    n = max(2, a.virtual)
    counts = [1, 2, 4, n - 1] if a.quick else list(range(1, n))
    virt = measured(list(range(n)), f"virtual cores ({n} on {len(os.sched_getaffinity(0))} CPUs)", rounds, sorted(set(counts)))
    print("\n  goal: the prediction within 25 % of the measured shoot-down")
    for label, errs in (("real cores", real), ("virtual cores", virt)):
        worst = max(abs(e) for e in errs)
        print(
            f"    {label}: median |error| {statistics.median(abs(e) for e in errs):.0%}, worst {worst:.0%}  {'met' if worst <= 0.25 else 'NOT MET'}"
        )


if __name__ == "__main__":
    main()
