"""What "auto" costs a generated binding's bind: the same UMP bind named explicitly and left to "auto".

The service is exported once (served by a handler thread); each round binds,
checks the transport and closes.  ``choose_transport`` alone is the decision
(one look at ``runtime.json`` and one status call to the initial monitor).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import multihop as mh
import multihop.idl as idl
from multihop.flounder.connect import choose_transport

greeter = idl.load('interface greeter "" { rpc greet(in String name[64], out String greeting[80]); };')


class Greeter:
    def greet(self, name: str) -> str:
        return name


@pytest.fixture(scope="module")
def served(runtime: mh.Runtime) -> Iterator[mh.Dispatcher]:
    """The greeter service on core 1 (ring neighbour of core 0: "auto" picks UMP); yields a client dispatcher on core 0."""
    with runtime.dispatcher(1) as srv, greeter.GreeterBinding.export(srv, "micro-greeter", Greeter()), runtime.dispatcher(0) as cli:
        yield cli


@pytest.mark.benchmark(group="bind: explicit vs auto")
@pytest.mark.parametrize("transport", ["ump", "auto"])
def test_bind_and_close(benchmark: Any, served: mh.Dispatcher, transport: str) -> None:
    def step() -> str:
        b = greeter.GreeterBinding.bind(served, "micro-greeter", transport=transport)
        t = b.channel.transport
        b.channel.close()
        return t

    assert benchmark(step) == "ump"


@pytest.mark.benchmark(group="bind: explicit vs auto")
def test_choose_transport_alone(benchmark: Any, served: mh.Dispatcher) -> None:
    assert benchmark(choose_transport, served, "micro-greeter") == "ump"
