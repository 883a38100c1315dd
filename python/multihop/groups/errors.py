"""The errors of group communication: one class, under :class:`multihop.MultihopError`.

A :class:`GroupError` is a :class:`ValueError` too (bad input: an unknown
group, a second join, a send to a group one is not in, an unknown tree mode or
ordering), so ``except ValueError`` catches it the way it catches
:class:`multihop.RoutingError`.  Every machine that raises it leaves its state
exactly as it was before the call.
"""

from __future__ import annotations

from multihop.errors import MultihopError

__all__ = ["GroupError", "ModelError"]


class GroupError(MultihopError, ValueError):
    """A group request that cannot be carried out; the message names what was wrong."""


class ModelError(MultihopError, ValueError):
    """A machine model (or model file) that is not sound; the message names the field."""
