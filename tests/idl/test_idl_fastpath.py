"""The generated stubs' native fast path for messages of scalars.

A message whose arguments are all integers, bools or enums is sent by a
native callable of the channel (``Channel._fast_sender``, called through
vectorcall): it matches the arguments to the message's names, encodes them
with the message's ``FixedLayout`` and sends.  It must send exactly the bytes
the Python encoder makes, and hand every call it is not sure of to the Python
encoder, so that errors (and acceptance) do not depend on which path ran.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import multihop as mh
from chanpair import runtime_pair
from multihop import idl

SOURCE = """
interface scalars "every scalar the fast path takes" {
    typedef enum { red, green, blue } colour;
    message all(uint8 a, uint16 b, uint32 c, uint64 d, int8 e, int16 f, int32 g, int64 h,
                bool i, size j, iref k, errval l, colour m, intptr n, uintptr o);
    message one(int8 x);
    message none();
    message mixed(uint32 x, char c);
    message dynamic(uint32 x, uint8 buf[len, 16]);
};
"""

NAMES = "abcdefghijklmno"
RANGES = {
    "a": (0, 2**8 - 1),
    "b": (0, 2**16 - 1),
    "c": (0, 2**32 - 1),
    "d": (0, 2**64 - 1),
    "e": (-(2**7), 2**7 - 1),
    "f": (-(2**15), 2**15 - 1),
    "g": (-(2**31), 2**31 - 1),
    "h": (-(2**63), 2**63 - 1),
    "j": (0, 2**64 - 1),
    "k": (0, 2**64 - 1),
    "l": (0, 2**64 - 1),
    "m": (0, 2),
    "n": (-(2**63), 2**63 - 1),
    "o": (0, 2**64 - 1),
}


@pytest.fixture(scope="module")
def mod() -> Any:
    return idl.load(SOURCE)


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[mh.Channel, mh.Channel]]:
    with runtime_pair("idl-fast") as p:
        yield p


def _value(name: str) -> st.SearchStrategy[Any]:
    lo, hi = RANGES.get(name, (0, 1))
    if name == "i":
        good: st.SearchStrategy[Any] = st.booleans()
    else:
        good = st.integers(lo, hi)
    bad = st.one_of(
        st.integers(lo - 2**70, lo - 1),
        st.integers(hi + 1, hi + 2**70),  # out of range, some beyond 64 bits
        st.booleans(),
        st.floats(allow_nan=False),
        st.none(),
        st.text(max_size=2),
        st.binary(max_size=2),
    )
    return st.one_of(good, good, good, bad)


def _outcome(f: Any) -> tuple[str, Any]:
    try:
        return "ok", f()
    except Exception as e:  # noqa: BLE001 - the outcome itself is compared
        return type(e).__name__, str(e)


def _call(values: dict[str, Any], style: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The same call spelled by keyword, by position, or mixed, with or without a timeout."""
    ordered = [values[n] for n in NAMES]
    if style == "keywords":
        return (), dict(values)
    if style == "positional":
        return tuple(ordered), {}
    if style == "mixed":
        return tuple(ordered[:5]), {n: values[n] for n in NAMES[5:]}
    return (), {**values, "timeout": 5.0}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.fixed_dictionaries({n: _value(n) for n in NAMES}), style=st.sampled_from(["keywords", "positional", "mixed", "timeout"]))
def test_the_fast_path_sends_what_the_encoder_makes_and_fails_alike(
    mod: Any, pair: tuple[mh.Channel, mh.Channel], values: dict[str, Any], style: str
) -> None:
    a, b = pair
    tx = mod.Binding(a).tx
    args, kwargs = _call(values, style)
    expected = _outcome(lambda: mod.encode("all", **values))
    got = _outcome(lambda: tx.all(*args, **kwargs))
    if expected[0] == "ok":
        assert got == ("ok", None)
        assert b.recv(timeout=5) == expected[1]
    else:
        assert got == expected, values  # same exception type and message, whichever path
    assert b.try_recv() is None, "nothing more was sent"


def test_the_native_sender_takes_plain_calls_and_passes_the_rest_on_unchanged(mod: Any, pair: tuple[mh.Channel, mh.Channel]) -> None:
    a, b = pair
    layout = mod._mhL_1
    assert layout.size == 2 + 1 + 2 + 4 + 8 + 1 + 2 + 4 + 8 + 1 + 8 + 8 + 8 + 4 + 8 + 8
    passed: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    send = a._fast_sender(layout, list(NAMES), lambda *args, **kw: passed.append((args, kw)))
    plain = [1, 2, 3, 4, -5, -6, -7, -8, True, 9, 10, 11, 2, -12, 13]
    send(*plain)
    send(**dict(zip(NAMES, plain, strict=True)), timeout=1)
    assert b.recv(timeout=5) == b.recv(timeout=5) == mod.encode("all", **dict(zip(NAMES, plain, strict=True)))
    assert passed == []
    # What the Python encoder owns: an int subclass (an IntEnum member), a bool
    # where an int goes, an int out of range, a missing, repeated or unknown
    # argument, a bad timeout.
    odd: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((*plain[:12], mod.colour.blue, *plain[13:]), {}),
        ((True, *plain[1:]), {}),
        ((256, *plain[1:]), {}),
        (tuple(plain[:-1]), {}),
        (tuple(plain), {"a": 1}),
        (tuple(plain), {"colour": 1}),
        (tuple(plain), {"timeout": -1.0}),
        (tuple(plain), {"timeout": "soon"}),
    ]
    for args, kw in odd:
        send(*args, **kw)
    assert passed == odd
    assert b.try_recv() is None


def test_the_stubs_use_it_and_the_encoder_explains(mod: Any, pair: tuple[mh.Channel, mh.Channel]) -> None:
    a, b = pair
    tx = mod.Binding(a).tx
    assert type(tx.all).__name__ == "builtin_function_or_method"
    plain = dict(zip(NAMES, [1, 2, 3, 4, -5, -6, -7, -8, True, 9, 10, 11, 2, -12, 13], strict=True))
    tx.all(**{**plain, "m": mod.colour.blue})  # an IntEnum member: the Python encoder sends it
    assert mod.decode(b.recv(timeout=5)).m == mod.colour.blue
    with pytest.raises(ValueError, match="'a'"):
        tx.all(**{**plain, "a": 256})
    with pytest.raises(TypeError):
        tx.all(**plain, colour=1)
    with pytest.raises(ValueError, match="timeout"):
        tx.all(**plain, timeout=-1.0)
    assert b.try_recv() is None


def test_only_messages_of_scalars_get_a_layout(mod: Any) -> None:
    numbers = mod.MESSAGE_NUMBERS
    assert hasattr(mod, f"_mhL_{numbers['all']}") and hasattr(mod, f"_mhL_{numbers['one']}")
    for name in ("none", "mixed", "dynamic"):
        assert not hasattr(mod, f"_mhL_{numbers[name]}"), name


def test_a_channel_without_the_fast_path_still_works(mod: Any, pair: tuple[mh.Channel, mh.Channel]) -> None:
    a, b = pair

    class Wrapped:
        """A user's channel wrapper with only the documented channel methods."""

        def send(self, data: bytes, timeout: float | None = None) -> None:
            a.send(data, timeout)

        def recv(self, timeout: float | None = None) -> bytes:
            return a.recv(timeout)

        def try_recv(self) -> bytes | None:
            return a.try_recv()

    tx = mod.Binding(Wrapped()).tx
    tx.one(x=-3)
    tx.one(-4, timeout=1.0)
    assert [mod.decode(b.recv(timeout=5)).x for _ in range(2)] == [-3, -4]
    with pytest.raises(ValueError, match="'x'"):
        tx.one(x=128)
