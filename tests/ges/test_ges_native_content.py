"""A publisher's event texts made natively (``multihop._ges.event_texts``) against the Python reference
(``multihop.ges.event.checked_event``): equal, character for character, on random contents of every
value type, and ``None`` (the Python code decides and names the error) for everything it does not take."""

from __future__ import annotations

import enum
import math
import random
from typing import Any

import pytest

from multihop import _ges
from multihop.ges.event import EventId, checked_event, make_event

ID = EventId("p", 1, 2, 3)


def _value(rng: random.Random) -> Any:
    kind = rng.randrange(9)
    if kind == 0:
        return rng.random() < 0.5
    if kind == 1:
        return rng.randint(-(2**63), 2**63 - 1)
    if kind == 2:
        return rng.randint(-1000, 1000)
    if kind == 3:
        return rng.choice([0.0, -0.0, 0.1, 1e16, 1e-5, 123456789.125, -2.5e-300, math.inf, -math.inf, 1.0, 5e-324])
    if kind == 4:
        return rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-20, 20)
    if kind == 5:
        return "".join(rng.choice("ab:é漢 \t*\\'\"🙂") for _ in range(rng.randint(0, 12)))
    if kind == 6:
        return ""
    if kind == 7:
        return "x" * rng.randint(1, 300)
    return rng.choice(["*", "i5", "s", "0"])


def test_native_texts_equal_the_python_reference_on_random_contents() -> None:
    rng = random.Random(28)
    taken = 0
    for _ in range(3000):
        names = rng.sample(["a", "b", "long_attribute_name", "é", "漢字", "x y", "A1", "_"], rng.randint(1, 8))
        content = {n: _value(rng) for n in names}
        ref = checked_event(ID, content)
        texts = _ges.event_texts(content)
        assert texts is not None, content  # every value above is one the native path takes
        assert texts == (ref.signature, ref.values), content
        assert make_event(ID, content, b"pay") == ref._replace(payload=b"pay")
        taken += 1
    assert taken == 3000


class Level(enum.IntEnum):
    LOW = 1


class Text(str):
    pass


@pytest.mark.parametrize(
    "content",
    [
        {},
        {"a": 2**63},  # beyond i64: Python's text
        {"a": -(2**63) - 1},
        {"a": math.nan},  # refused, by the Python code
        {"a": Level.LOW},  # subclasses: Python's rules
        {"a": Text("x")},
        {Text("a"): 1},
        {"a": None},
        {"a": b"bytes"},
        {"": 1},
        {"a:b": 1},
        {"a\x1f": 1},
        {"a": "x\x00y"},
        {"a": "x\x1cy"},
        {"a": "\ud800"},  # a lone surrogate: not UTF-8
        {1: 1},
    ],
    ids=repr,
)
def test_what_the_native_path_does_not_take_the_python_code_decides(content: dict[Any, Any]) -> None:
    assert _ges.event_texts(content) is None
    try:
        ref: Any = checked_event(ID, content)
    except (ValueError, TypeError) as e:
        with pytest.raises(type(e)) as got:
            make_event(ID, content)
        assert str(got.value) == str(e)
    else:
        assert make_event(ID, content) == ref


def test_a_mapping_that_is_not_a_dict_and_a_bytearray_payload_take_the_python_path() -> None:
    from collections import OrderedDict
    from types import MappingProxyType

    assert _ges.event_texts(MappingProxyType({"a": 1})) is None
    assert _ges.event_texts(OrderedDict(a=1)) is None
    assert make_event(ID, MappingProxyType({"a": 1, "b": "x"})) == checked_event(ID, {"a": 1, "b": "x"})
    ev = make_event(ID, {"a": 1}, bytearray(b"pl"))
    assert ev.payload == b"pl" and type(ev.payload) is bytes
