"""GES matching: one event against a broker's profile graph, next to a scan of every profile (the baseline).

Profiles and events are drawn as ``benches/bench_ges_matching.py`` draws them (a selective graph: every profile
its own destination, 10 % wildcards), from a fixed seed, so saved baselines compare across commits. The scan is
timed at the smaller size only (it is linear in the profiles; at 10,000 profiles it already takes milliseconds).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from multihop.ges.profile import chain_matches
from multihop.ges.profile_graph import ProfileGraph

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_ges_matching import events, make  # noqa: E402

EVENTS = events(256, random.Random(7))


def _profiles(n: int) -> list[tuple[tuple[tuple[str, str], ...], int]]:
    return make(n, random.Random(n), dests=0, wild=0.1)


@pytest.mark.benchmark(group="ges: match 256 events")
@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_profile_graph(benchmark: Any, n: int) -> None:
    profs = _profiles(n)
    g = ProfileGraph()
    for chain, unit in profs:
        g.add(chain, unit)
    match = g.match

    def run() -> int:
        return sum(len(match(names, vals)) for names, vals in EVENTS)

    benchmark(run)
    names, vals = EVENTS[0]
    assert match(names, vals) == {u for c, u in profs if chain_matches(c, names, vals)}


@pytest.mark.benchmark(group="ges: match 256 events")
def test_scan_baseline_1000(benchmark: Any) -> None:
    profs = _profiles(1_000)

    def run() -> int:
        return sum(1 for names, vals in EVENTS for c, _ in profs if chain_matches(c, names, vals))

    benchmark(run)
