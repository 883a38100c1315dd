"""The native profile graph (``multihop._ges.ProfileGraph``, crate ``core-rs/ges``) against the Python one
(``multihop.ges.profile_graph``, the reference): the same random scenarios of adds, removes (some of what is
not held), wildcards and events drive both, and every answer must be the same: what ``add`` and ``remove``
return or raise, what each event matches, the counters, and what the graphs hold."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multihop import _ges
from multihop.ges.profile import chain_matches
from multihop.ges.profile_graph import ProfileGraph

NAMES = ("a", "b", "c", "d")
VALUES = ("i1", "i2", "sx", "sy", "b1", "f0.5")


def _chain(rng: random.Random, names: tuple[str, ...] = NAMES) -> tuple[tuple[str, str], ...]:
    k = rng.randint(1, len(names))
    start = 0 if rng.random() < 0.9 else rng.randrange(len(names) - k + 1)  # now and then a chain of another signature
    return tuple((names[start + i], "*" if rng.random() < 0.3 else rng.choice(VALUES)) for i in range(k))


def _event(rng: random.Random) -> tuple[tuple[str, ...], list[str]]:
    n = rng.randint(1, len(NAMES))
    names = NAMES[:n] if rng.random() < 0.8 else tuple(rng.sample(NAMES, n))
    return names, [rng.choice(VALUES) for _ in range(n)]


def _dest(rng: random.Random) -> int:
    # unit ids (some with the top bit set: levels >= 8) and negative client peer ids
    return rng.choice([rng.randrange(6), -1 - rng.randrange(4), (9 << 60) | rng.randrange(3), (1 << 64) - 1])


def _same(a: Any, b: Any, what: str) -> None:
    assert a == b, f"{what}: python {a!r}, native {b!r}"


def _outcome(f: Any, *args: Any) -> Any:
    try:
        return ("ok", f(*args))
    except KeyError:
        return ("KeyError", None)


def _run(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    py: ProfileGraph[int] = ProfileGraph()
    nat = _ges.ProfileGraph()
    held: list[tuple[tuple[tuple[str, str], ...], int]] = []
    for step in range(steps):
        r = rng.random()
        if r < 0.4 or not held:
            chain, unit, count = _chain(rng), _dest(rng), rng.choice([1, 1, 2])
            _same(py.add(chain, unit, count), nat.add(chain, unit, count), f"step {step}: add {chain} {unit}")
            held += [(chain, unit)] * count
        elif r < 0.65:
            chain, unit = held.pop(rng.randrange(len(held)))
            _same(_outcome(py.remove, chain, unit), _outcome(nat.remove, chain, unit), f"step {step}: remove {chain} {unit}")
        elif r < 0.7:  # what is not held (or not that often): KeyError, nothing changed
            chain, unit, count = _chain(rng), _dest(rng), rng.choice([1, 5])
            got = _outcome(py.remove, chain, unit, count), _outcome(nat.remove, chain, unit, count)
            _same(got[0], got[1], f"step {step}: remove what may not be held {chain} {unit} x{count}")
            if got[0][0] == "ok":
                for _ in range(count):
                    held.remove((chain, unit))
        else:
            names, values = _event(rng)
            want = {u for c, u in held if chain_matches(c, names, values)}
            _same(py.match(names, values), nat.match(names, values), f"step {step}: match {names} {values}")
            assert nat.match(names, values) == want
        _same((py.profiles, py.edges), (nat.profiles, nat.edges), f"step {step}: profiles, edges")
    _same(sorted(py.chains()), sorted(nat.chains()), "chains")
    _same(py.units(), nat.units(), "units")


@pytest.mark.parametrize("seed", range(40))
def test_random_scenarios_give_the_same_answers(seed: int) -> None:
    _run(seed, 600)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32))
def test_hypothesis_scenarios_give_the_same_answers(seed: int) -> None:
    _run(seed, 150)


def test_many_destinations_and_values_grow_the_maps_and_shrink_back() -> None:
    rng = random.Random(7)
    py: ProfileGraph[int] = ProfileGraph()
    nat = _ges.ProfileGraph()
    items = [((("a", f"i{rng.randrange(40)}"), ("b", rng.choice(["*", "sx"]))), rng.randrange(300)) for _ in range(3000)]
    for chain, unit in items:
        assert py.add(chain, unit) == nat.add(chain, unit)
    for v in range(40):
        for w in ("sx", "sy"):
            assert py.match(("a", "b"), [f"i{v}", w]) == nat.match(("a", "b"), [f"i{v}", w])
    rng.shuffle(items)
    for chain, unit in items:
        assert py.remove(chain, unit) == nat.remove(chain, unit)
    assert (nat.profiles, nat.edges, nat.chains(), nat.units()) == (0, 0, [], set())


def test_of_clear_and_bad_input() -> None:
    nat = _ges.ProfileGraph.of([((("a", "i1"),), 3), ((("a", "*"), ("b", "sx")), 4)])
    assert nat.match(("a", "b"), ["i1", "sx"]) == {3, 4} and nat.profiles == 2
    nat.clear()
    assert (nat.profiles, nat.edges, nat.match(("a",), ["i1"])) == (0, 0, set())
    with pytest.raises(ValueError, match="at least one attribute"):
        nat.add((), 1)
    with pytest.raises(ValueError, match="count"):
        nat.add((("a", "i1"),), 1, 0)
    with pytest.raises(ValueError, match="destination"):
        nat.add((("a", "i1"),), 1 << 64)
    with pytest.raises(KeyError):
        nat.remove((("a", "i1"),), 1)


def test_a_batch_is_matched_natively_as_one_by_one() -> None:
    rng = random.Random(3)
    nat = _ges.ProfileGraph()
    for _ in range(500):
        nat.add(_chain(rng), _dest(rng))
    events = [_event(rng) for _ in range(300)]
    assert nat.match_batch(_ges.MatchBatch(events)) == sum(len(nat.match(n, v)) for n, v in events)
