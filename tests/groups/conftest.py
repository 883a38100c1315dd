"""Fixtures of the groups tests."""

from __future__ import annotations

from typing import Iterator

import pytest

import multihop as mh
from session import unique_name


@pytest.fixture
def rt6() -> Iterator[mh.Runtime]:
    """Six virtual cores in two declared sockets (the live group tests), stopped after the test even if it fails."""
    runtime = mh.Runtime.start(unique_name("grp"), cores=list(range(6)), topology=mh.Topology([[0, 1, 2], [3, 4, 5]]))
    try:
        yield runtime
    finally:
        runtime.stop()
