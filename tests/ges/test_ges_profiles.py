"""Profiles, the Gryphon-style profile graph, event values and duplicate detection."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multihop import ges
from multihop.ges import event as event_module
from multihop.ges.dedup import DuplicateFilter
from multihop.ges.event import EventId, canonical, decode_value, make_event, names_and_values, validate_event
from multihop.ges.profile import WILDCARD, chain_matches, chain_text, make_chain, parse_chain
from multihop.ges.profile_graph import ProfileGraph

NAMES = ["a", "b", "c", "d"]
VALUES = [1, 2, "x", True]


def test_profiles_are_chains_of_typed_constraints() -> None:
    chain = make_chain([("sport", "football"), ("team", "*"), ("score", 3)])
    assert chain == (("sport", "sfootball"), ("team", WILDCARD), ("score", "i3"))
    assert parse_chain(chain_text(chain)) == chain
    assert chain_matches(chain, ("sport", "team", "score", "x"), ("sfootball", "sA", "i3", "b1"))
    assert not chain_matches(chain, ("sport", "team", "score"), ("sfootball", "sA", "s3"))  # 3 is not "3"
    assert not chain_matches(chain, ("sport", "team"), ("sfootball", "sA"))  # too short
    assert not chain_matches(chain, ("sport", "club", "score"), ("sfootball", "sA", "i3"))  # another signature


@pytest.mark.parametrize(
    "profile, error, words",
    [
        ([], ValueError, "at least one"),
        ("sport=football", TypeError, "list of"),
        ([("sport",)], ValueError, "item 0"),
        ([("", 1)], ValueError, "attribute name"),
        ([("a:b", 1)], ValueError, "attribute name"),
        ([("a", [1])], TypeError, "int, str, bool or float"),
        ([("a", "x\x1fy")], ValueError, "may not contain"),
        ([("a", float("nan"))], ValueError, "NaN"),
    ],
)
def test_bad_profiles_say_what_is_wrong(profile: object, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        make_chain(profile)  # type: ignore[arg-type]


def test_values_round_trip() -> None:
    for v in (0, -5, 2**70, "", "é", True, False, 0.1, -1e300):
        assert decode_value(canonical(v)) == v and type(decode_value(canonical(v))) is type(v)


def test_profile_graph_counts_and_removal() -> None:
    g = ProfileGraph()
    a = make_chain([("sport", "football"), ("team", "*")])
    b = make_chain([("sport", "*")])
    assert g.add(a, "u1") and g.add(a, "u2") and not g.add(a, "u1")  # u1 now counts 2 predicates
    g.add(b, "u2")
    assert g.edges == 3 and g.profiles == 4
    names, vals = ("sport", "team"), ("sfootball", "sx")
    assert g.match(names, vals) == {"u1", "u2"}
    assert not g.remove(a, "u1")  # one predicate of u1 left
    assert g.match(names, vals) == {"u1", "u2"}
    assert g.remove(a, "u1") and g.remove(a, "u2")
    assert g.match(names, vals) == {"u2"} and g.edges == 1  # the football edges went with their last predicate
    with pytest.raises(KeyError):
        g.remove(a, "u1")
    g.remove(b, "u2")
    assert g.edges == 0 and g.roots == {} and g.profiles == 0


profiles = st.lists(
    st.tuples(st.lists(st.tuples(st.sampled_from(VALUES + ["*"])), min_size=1, max_size=4), st.integers(0, 5)),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(items=profiles, seed=st.integers(0, 2**31))
def test_profile_graph_matches_like_the_reference(items: list, seed: int) -> None:
    """Destinations from the graph = units with a profile the reference matcher accepts; after random removals too."""
    rng = random.Random(seed)
    g = ProfileGraph()
    held: list[tuple[tuple, int]] = []
    for vals, unit in items:
        chain = make_chain([(NAMES[i], v[0]) for i, v in enumerate(vals)])
        g.add(chain, unit)
        held.append((chain, unit))
    for _ in range(len(held) // 3):
        chain, unit = held.pop(rng.randrange(len(held)))
        g.remove(chain, unit)
    for _ in range(30):
        k = rng.randint(1, 4)
        names = tuple(NAMES[:k]) if rng.random() < 0.9 else tuple(rng.sample(NAMES, k))
        values = tuple(canonical(rng.choice(VALUES)) for _ in range(k))
        expect = {u for c, u in held if chain_matches(c, names, values)}
        assert g.match(names, values) == expect


def test_duplicate_detection_table2_two_links() -> None:
    """Routing paper Table 2: e1..e5 reach C over links from A and B, each in order; each is taken once."""
    f = DuplicateFilter()
    e = [EventId("p", 100, i, 0) for i in range(1, 6)]
    arrivals = [("A", e[0]), ("B", e[0]), ("B", e[1]), ("A", e[1]), ("A", e[2]), ("B", e[2]), ("A", e[3]), ("A", e[4]), ("B", e[3]), ("B", e[4])]
    taken = [(link, ev.sequence) for link, ev in arrivals if f.accept(ev, "deliver")]
    assert [s for _, s in taken] == [1, 2, 3, 4, 5] and f.duplicates == 5


def test_incarnations_keep_a_roaming_publisher_apart_table3() -> None:
    """Table 3: after a roam, e4 and e5 of the new incarnation arrive before e1..e3 of the old one: none is a duplicate."""
    f = DuplicateFilter()
    new = [EventId("c", 5, s, 1) for s in (3, 4)]
    old = [EventId("c", 5, s, 0) for s in (0, 1, 2)]
    assert all(f.accept(x, 0) for x in new + old)
    assert not f.accept(old[1], 0)  # a true duplicate still is one


def test_event_ids_timestamps_and_errors() -> None:
    ev = make_event(EventId("p", 1, 2, 3), {"sport": "football", "n": 7, "ok": True, "r": 0.5}, b"x")
    names, vals = names_and_values(ev)
    assert names == ("sport", "n", "ok", "r") and vals == ["sfootball", "i7", "b1", "f0.5"]
    e = ges.Event(ev)
    assert e.content == {"sport": "football", "n": 7, "ok": True, "r": 0.5} and e.publisher == "p" and e.payload == b"x"
    with pytest.raises(ValueError, match="non-empty dict"):
        make_event(EventId("p", 1, 2, 3), {})
    with pytest.raises(TypeError, match="payload must be bytes"):
        make_event(EventId("p", 1, 2, 3), {"a": 1}, "text")  # type: ignore[arg-type]


def test_validation_remembers_only_valid_events() -> None:
    """validate_event keeps the (signature, values) pairs it passed; a bad event is refused every time."""
    good = make_event(EventId("p", 1, 1, 1), {"a": 1, "b": "x"})
    bad = good._replace(values="i1\x1fix")  # b declared str, value tagged int and malformed
    for _ in range(2):
        validate_event(good)
        with pytest.raises(ValueError, match="attribute 'b' is declared str"):
            validate_event(bad)
    assert (good.signature, good.values) in event_module._VALID
    assert (bad.signature, bad.values) not in event_module._VALID
