"""Matching events against one broker's profile graph: events/s against 1,000 ... 1,000,000 profiles, memory per profile.

Usage::

    .venv/bin/python benches/bench_ges_matching.py [--sizes 1000,10000,100000,1000000] [--events 20000] [--seed 1]

Profiles are random chains over an event signature of 6 attributes (domains of
10-1000 values, as a content-based system sees them: subjects, regions, ids):
each profile constrains its first 1-6 attributes, each to a value or, with
probability 0.3, to ``*``; destinations are 64 units (a gatekeeper's children).
A second table makes every profile its own destination with 10 % wildcards
(a selective graph: a broker's clients), where nothing saturates.  Events draw
values from the same domains, so some match and most do not.

Ours: :meth:`ProfileGraph.match` (the Gryphon-style tree: the cost follows the
edges an event can traverse, not the number of profiles).  Baseline, same run,
same profiles and events: testing every profile with the reference matcher
(:func:`multihop.ges.profile.chain_matches`), on a sample of the events (it is
slow), checked to give the same destinations.  Memory per profile: the bytes
``tracemalloc`` sees allocated while the graph is built, over the profiles.
Goal: 100,000 events/s against 100,000 profiles.  Single core, in process.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc

from multihop.ges.event import canonical
from multihop.ges.profile import chain_matches
from multihop.ges.profile_graph import ProfileGraph

NAMES = ("topic", "region", "source", "kind", "id", "extra")
DOMAINS = (20, 50, 200, 10, 1000, 30)


def make(n: int, rng: random.Random, dests: int, wild: float) -> list[tuple[tuple[tuple[str, str], ...], int]]:
    out = []
    for j in range(n):
        k = rng.randint(1, len(NAMES))
        chain = tuple((NAMES[i], "*" if rng.random() < wild else canonical(rng.randrange(DOMAINS[i]))) for i in range(k))
        out.append((chain, rng.randrange(dests) if dests else j))
    return out


def events(n: int, rng: random.Random) -> list[tuple[tuple[str, ...], list[str]]]:
    return [(NAMES, [canonical(rng.randrange(d)) for d in DOMAINS]) for _ in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    print("== a gatekeeper's graph: destinations are its 64 child units, 30 % wildcards ==")
    table(sizes, a.events, a.seed, dests=64, wild=0.3)
    print("== a selective graph: every profile its own destination (a broker's clients), 10 % wildcards ==")
    table(sizes, a.events, a.seed, dests=0, wild=0.1)
    return 0


def table(sizes: list[int], n_events: int, seed: int, dests: int, wild: float) -> None:
    rng = random.Random(seed)
    evs = events(n_events, rng)
    print(f"{'profiles':>10} {'ours ev/s':>12} {'scan ev/s':>12} {'ours/scan':>10} {'B/profile':>10} {'edges':>10} {'dests/ev':>9}")
    for n in sizes:
        profs = make(n, rng, dests, wild)
        gc.collect()
        tracemalloc.start()
        g = ProfileGraph()
        for chain, unit in profs:
            g.add(chain, unit)
        mem, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        match = g.match
        t0 = time.perf_counter()
        hits = 0
        for names, vals in evs:
            hits += len(match(names, vals))
        ours = len(evs) / (time.perf_counter() - t0)
        sample = evs[: max(3, min(len(evs), 2_000_000 // n))]  # the scan is slow: a few events at 1M
        t0 = time.perf_counter()
        for names, vals in sample:
            ref = {u for c, u in profs if chain_matches(c, names, vals)}
        scan = len(sample) / (time.perf_counter() - t0)
        for names, vals in sample[:20]:
            assert match(names, vals) == {u for c, u in profs if chain_matches(c, names, vals)}
        print(f"{n:>10} {ours:>12.0f} {scan:>12.1f} {ours / scan:>10.0f} {mem / n:>10.0f} {g.edges:>10} {hits / len(evs):>9.1f}")
        if n == 100_000:
            print(f"{'':>10} goal 100,000 events/s against 100,000 profiles: {'met' if ours >= 100_000 else 'MISSED'} ({ours:.0f})")
        del g, profs


if __name__ == "__main__":
    sys.exit(main())
