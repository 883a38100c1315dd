"""What a test of machines joined into a fabric needs, as pytest marks: root and iproute2 (tests/netns.py) and the
bridge binary (the ``fabric`` extra, or ``MULTIHOP_BRIDGE``). CI has both, so nothing is skipped there."""

from __future__ import annotations

import pytest

import multihop as mh
import netns


def bridge_missing() -> str | None:
    """Why the fabric's bridge cannot be found (None: it can)."""
    try:
        from multihop.fabric import bridge_binary

        bridge_binary()
    except mh.MultihopError as e:
        return str(e)
    return None


def needs_fabric(timeout: float) -> list[pytest.MarkDecorator]:
    """A module's ``pytestmark``: skip without network namespaces or the bridge (saying why); ``timeout`` per test."""
    return [
        pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable())),
        pytest.mark.skipif(bridge_missing() is not None, reason=str(bridge_missing())),
        pytest.mark.timeout(timeout),
    ]
