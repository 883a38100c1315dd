"""GES addresses, units, contexts and gateway levels."""

from __future__ import annotations

import pytest

from multihop import ges
from multihop.ges.address import contains, parse_unit, unit_level, unit_str


def test_address_parts_units_and_text() -> None:
    a = ges.Address("1.2.3.4")
    assert str(a) == "1.2.3.4" and a.levels == 3 and a.parts == (1, 2, 3, 4)
    assert [a.unit(lvl) for lvl in range(5)] == ["1.2.3.4", "1.2.3", "1.2", "1", ""]
    assert ges.Address("63.0.63.0") == "63.0.63.0"
    assert ges.Address("1.2.3.4", levels=3) == ges.Address(" 1. 2.3.4")


def test_gateway_level_is_the_highest_level_where_contexts_differ() -> None:
    assert ges.gateway_level("1.2.3.4", "1.2.3.5") == 0  # two nodes of one cluster: a level-0 link
    assert ges.gateway_level("1.2.3.4", "1.2.9.4") == 1
    assert ges.gateway_level("1.2.3.4", "1.5.3.4") == 2
    assert ges.gateway_level("1.2.3.4", "7.2.3.4") == 3
    assert ges.gateway_level(ges.Address("1.1"), "1.2") == 0  # a one-level system


@pytest.mark.parametrize(
    "text, words",
    [
        ("1.2.64.4", ["part 3", "64", "block limit"]),
        ("1.2.x.4", ["part 3", "'x'"]),
        ("1.-2.3.4", ["part 2"]),
        ("1", ["1 part"]),
        ("", ["0 part"]),
        ("1.2.3.4.5.6.7.8.9.10.11", ["at most 10"]),
    ],
)
def test_malformed_addresses_name_what_is_wrong(text: str, words: list[str]) -> None:
    with pytest.raises(ges.AddressError) as e:
        ges.Address(text)
    for w in words:
        assert w in str(e.value)
    assert isinstance(e.value, ValueError)


def test_wrong_part_count_for_the_system_and_bad_levels() -> None:
    with pytest.raises(ges.AddressError, match="needs 4"):
        ges.Address("1.2.3", levels=3)
    a = ges.Address("1.2.3.4")
    with pytest.raises(ges.AddressError, match="level must be"):
        a.unit(5)
    with pytest.raises(ges.AddressError, match="level must be"):
        a.unit(-1)
    with pytest.raises(ges.AddressError, match="both are 1.2.3.4"):
        ges.gateway_level("1.2.3.4", "1.2.3.4")
    with pytest.raises(ges.AddressError, match="different numbers of parts"):
        ges.gateway_level("1.2.3.4", "1.2.3")
    with pytest.raises(ges.AddressError):
        ges.Address(1234)  # type: ignore[arg-type]


def test_interned_unit_ids_round_trip_and_contain() -> None:
    a = ges.Address("5.6.7.8")
    for lvl in range(5):
        uid = a.unit_id(lvl)
        assert unit_level(uid) == lvl
        assert unit_str(uid, 3) == a.unit(lvl)
        assert parse_unit(a.unit(lvl), 3) == uid
        assert contains(uid, a.code)
    assert not contains(parse_unit("5.7", 3), a.code)
    assert contains(parse_unit("", 3), a.code)  # the system holds every broker
    with pytest.raises(ges.AddressError, match="at most 4"):
        parse_unit("1.2.3.4.5", 3)
