"""Random GES hierarchies, seeded: for property tests and benchmarks.

:func:`random_topology` builds a connected hierarchy of about ``brokers``
brokers: units at every level get a random number of children around the
level's fan-out, the children of every unit are joined by a random spanning
tree plus ``extra`` more links per child, and each link between two sibling
units is a gateway between a random broker of each.  Same seed, same topology.
"""

from __future__ import annotations

import math
import random
from typing import Sequence

from multihop.ges.address import BLOCK_LIMIT, Address
from multihop.ges.topology import Topology

__all__ = ["random_topology", "fanouts_for"]


def fanouts_for(brokers: int, levels: int) -> list[int]:
    """Children per unit, level 0 (brokers per cluster) first, for about ``brokers`` brokers in all."""
    per = max(2, min(BLOCK_LIMIT - 1, round(brokers ** (1.0 / (levels + 1)))))
    return [per] * (levels + 1)


def random_topology(
    brokers: int,
    seed: int = 0,
    levels: int = 3,
    *,
    fanouts: Sequence[int] | None = None,
    extra: float = 0.5,
    spread: float = 0.4,
) -> Topology:
    """A random connected hierarchy of about ``brokers`` brokers (see the module docstring).

    ``fanouts[l]`` is the mean number of children of a level-``l + 1`` unit
    (``fanouts[0]``: brokers per cluster); each unit draws its own count within
    ``± spread`` of the mean.  ``extra`` is the number of links beyond a spanning
    tree, per child, inside each unit.
    """
    rng = random.Random(seed)
    fo = list(fanouts) if fanouts is not None else fanouts_for(brokers, levels)
    if len(fo) != levels + 1:
        raise ValueError(f"fanouts needs {levels + 1} values (level 0 first), got {fo}")
    topo = Topology(levels)

    def count(level: int) -> int:
        mean = fo[level]
        lo, hi = max(1, math.floor(mean * (1 - spread))), min(BLOCK_LIMIT - 1, math.ceil(mean * (1 + spread)))
        return rng.randint(lo, hi)

    # build the unit tree top-down: a unit is its tuple of parts; returns its brokers
    def build(prefix: tuple[int, ...], level: int) -> list[Address]:
        if level == 0:
            addr = topo.add_broker(".".join(str(p) for p in prefix))
            return [addr]
        if level <= levels:
            ids = rng.sample(range(BLOCK_LIMIT), count(level - 1))
            children = [build(prefix + (i,), level - 1) for i in ids]
        else:  # the system: add top-level units until there are enough brokers
            pool = list(range(BLOCK_LIMIT))
            rng.shuffle(pool)
            children = []
            while pool and (len(children) < 1 or sum(len(c) for c in children) < brokers):
                children.append(build((pool.pop(),), level - 1))
        _join(children)
        return [b for c in children for b in c]

    def _join(children: list[list[Address]]) -> None:
        n = len(children)
        if n < 2:
            return
        pairs: set[tuple[int, int]] = set()
        order = list(range(n))
        rng.shuffle(order)
        for k in range(1, n):
            pairs.add((order[rng.randrange(k)], order[k]))
        for _ in range(int(extra * n)):
            i, j = rng.sample(range(n), 2)
            pairs.add((min(i, j), max(i, j)) if (max(i, j), min(i, j)) not in pairs else (max(i, j), min(i, j)))
        for i, j in sorted(pairs):
            for _ in range(8):  # a few tries to find a pair of brokers not joined yet
                a, b = rng.choice(children[i]), rng.choice(children[j])
                key = (a, b) if a < b else (b, a)
                if key not in topo.gateways:
                    topo.add_gateway(a, b)
                    break

    build((), levels + 1)
    return topo
