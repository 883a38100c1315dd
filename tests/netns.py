"""Machines as network namespaces for the tests: :mod:`multihop.bench.netns` (in the package, so that
``multihop bench fabric`` has it too), and the pytest fixture :func:`network`."""

from __future__ import annotations

from typing import Iterator

import pytest

from multihop.bench.netns import *  # noqa: F403  (the tests say netns.Network, netns.tool, ...)
from multihop.bench.netns import NETNS_DIR, Network, unavailable  # noqa: F401  (named for the checkers)


@pytest.fixture
def network() -> Iterator[Network]:
    """A fresh :class:`Network`, removed after the test whatever happens (skips without root/iproute2)."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with Network() as net:
        yield net
