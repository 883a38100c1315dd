"""Fixtures of the pytest-benchmark micro-benchmarks: a private runtime root, one runtime, channel pairs.

Run them with ``pytest benches/micro --benchmark-only`` (they are outside
``testpaths``, so the test suite never runs them); see the README's
"Benchmarks" section for saving and comparing baselines across commits.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

_ROOT = tempfile.mkdtemp(prefix="mh-micro-root-")
os.environ["MULTIHOP_RUNTIME_ROOT"] = _ROOT  # before multihop is imported; spawned monitors inherit it

import multihop as mh  # noqa: E402

_names = itertools.count()


@pytest.fixture(scope="session")
def runtime() -> Iterator[mh.Runtime]:
    """Three cores, ring routing: 0 -> 1 is one link, 0 -> 2 goes through monitor 1 (virtual core 2 on 2 CPUs)."""
    rt = mh.Runtime.start(f"micro-{os.getpid()}", cores=[0, 1, 2], routing="ring")
    try:
        yield rt
    finally:
        rt.stop()
        shutil.rmtree(_ROOT, ignore_errors=True)


@contextmanager
def pair(rt: mh.Runtime, transport: str, server_core: int, **bind: Any) -> Iterator[tuple[mh.Channel, mh.Channel]]:
    """(client end on core 0, service end on ``server_core``) of a fresh channel in this process."""
    with ExitStack() as stack:
        srv = stack.enter_context(rt.dispatcher(server_core))
        cli = stack.enter_context(rt.dispatcher(0))
        # A fresh name per pair: a closed dispatcher's name is withdrawn once its monitor has seen it go, which
        # can be after the next fixture exports again (that raced: "already exported").
        name = f"micro-{transport}-{server_core}-{next(_names)}"
        svc = srv.export(name)
        box: list[mh.Channel] = []
        t = threading.Thread(target=lambda: box.append(svc.accept(timeout=10)), daemon=True)
        t.start()
        client = stack.enter_context(cli.bind(name, transport=transport, timeout=10, **bind))
        t.join(10)
        assert box, f"{name} was not accepted"
        yield client, stack.enter_context(box[0])


@pytest.fixture
def ump(runtime: mh.Runtime) -> Iterator[tuple[mh.Channel, mh.Channel]]:
    """A UMP channel: client on core 0, service on core 1."""
    with pair(runtime, "ump", 1) as p:
        yield p


@pytest.fixture
def multihop_2(runtime: mh.Runtime) -> Iterator[tuple[mh.Channel, mh.Channel]]:
    """A multi-hop channel from core 0 to core 1 (two monitors on the path)."""
    with pair(runtime, "multihop", 1, window=64) as p:
        yield p


@pytest.fixture
def multihop_3(runtime: mh.Runtime) -> Iterator[tuple[mh.Channel, mh.Channel]]:
    """A multi-hop channel from core 0 to core 2 (three monitors: 0, 1, 2 on the ring)."""
    with pair(runtime, "multihop", 2, window=64) as p:
        yield p
