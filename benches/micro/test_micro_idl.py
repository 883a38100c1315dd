"""Flounder encode and decode: the generated Python codec, and a stub send on the native fast path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import multihop as mh
import multihop.idl as idl

SHIPPED = Path(__file__).resolve().parents[2] / "flounder-idl"
echo = idl.load(SHIPPED / "echo.if")
kv = idl.load(SHIPPED / "kvstore.if")
# structs, enums and arrays of structs (the first draft of ges_broker.if, kept for the codec tests)
composite = idl.load(Path(__file__).resolve().parents[2] / "tests" / "idl_data" / "composite_types.if")
bench = idl.load(SHIPPED / "bench.if", [SHIPPED / "types.if"])

CASES: dict[str, tuple[Any, str, dict[str, Any]]] = {
    "three scalars": (bench, "three", {"a": 1, "b": 2, "c": 3}),
    "ping 64 B": (echo, "ping", {"seq": 7, "data": b"d" * 64}),
    "kv put (string, bytes, bool)": (kv, "put_call", {"key": "some/key", "value": b"v" * 256, "overwrite": True}),
    "event (structs, arrays)": (
        composite,
        "event",
        {
            "id": ((1, 2, 3, 4), 5, 6, 7),
            "lvl": 2,
            "visited": [(0, 0, i, 0) for i in range(8)],
            "topic": "news/sport",
            "body": b"b" * 512,
        },
    ),
}


@pytest.mark.benchmark(group="idl: encode")
@pytest.mark.parametrize("case", sorted(CASES))
def test_encode(benchmark: Any, case: str) -> None:
    mod, name, args = CASES[case]
    data = benchmark(mod.encode, name, **args)
    assert mod.decode(data).name == name


@pytest.mark.benchmark(group="idl: decode")
@pytest.mark.parametrize("case", sorted(CASES))
def test_decode(benchmark: Any, case: str) -> None:
    mod, name, args = CASES[case]
    data = mod.encode(name, **args)
    rec = benchmark(mod.decode, data)
    assert rec.name == name


@pytest.mark.benchmark(group="idl: stub send")
def test_stub_tx_three_native_fast_path(benchmark: Any, ump: tuple[mh.Channel, mh.Channel]) -> None:
    c, s = ump
    b = bench.BenchBinding(c)

    def step() -> bytes | None:
        b.tx.three(a=1, b=2, c=3)
        return s.try_recv()

    assert bench.decode(benchmark(step)).name == "three"


@pytest.mark.benchmark(group="idl: stub send")
def test_raw_send_of_the_same_bytes(benchmark: Any, ump: tuple[mh.Channel, mh.Channel]) -> None:
    c, s = ump
    data = bench.encode("three", a=1, b=2, c=3)

    def step() -> bytes | None:
        c.send(data)
        return s.try_recv()

    assert benchmark(step) == data
