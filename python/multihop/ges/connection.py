"""A connection (routing paper 3.2.3): one gatekeeper's record of one gateway.

A gateway at level ``l`` between gatekeepers ``a`` and ``b`` gives two
connections, one created at each end exactly as written in the paper: the far
end in its level-``l`` context (``b``'s level-``l`` unit, seen from ``a``), the
near end as the level-0 node ``a`` itself, and the level ``l``.  Each has a
unique id (the gateway's id and the side), a version that its own
gatekeeper raises when it changes the gateway's extra cost, and a dead flag
(a lost gateway is disseminated like an addition; dead is final: a gateway
that comes back is a new gateway with a new incarnation).

A connection is immutable and shared: a broker holds ``(connection, x)``, the
connection plus the level ``x`` of its near end as this broker sees it
(the near end is ``unit(origin, x)``).  Dissemination only ever rewrites
``x`` (:func:`rewritten`), so records travel without copies.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["GatewayId", "Connection", "rewritten", "better"]


class GatewayId(NamedTuple):
    """A gateway's identity: its two brokers (``lo`` < ``hi`` as codes) and the pair's incarnation."""

    lo: int
    hi: int
    incarnation: int

    @property
    def key(self) -> int:
        """One int naming the gateway (for dicts and sets)."""
        return (((self.lo << 64) | self.hi) << 32) | self.incarnation


class Connection(NamedTuple):
    """``<n_origin^0, n_far^level, level>`` as created at gatekeeper ``origin`` (see the module docstring)."""

    key: int  #: gateway key * 2 + side (side 1 when origin is the gateway's ``hi`` broker)
    gateway: int  #: the gateway's key (shared by both sides)
    origin: int  #: the gatekeeper that created it (broker code)
    peer: int  #: the gatekeeper at the other end (broker code); the far end is ``peer``'s level-``level`` unit
    level: int  #: the gateway level l_c
    incarnation: int  #: the gateway's incarnation (part of its id)
    version: int  #: raised by ``origin`` on each change of ``cost``
    cost: int  #: the gateway's extra cost, added to the link cost matrix
    dead: bool  #: the gateway is lost

    @classmethod
    def create(cls, origin: int, peer: int, level: int, incarnation: int, cost: int = 0, version: int = 0, dead: bool = False) -> "Connection":
        """The connection gatekeeper ``origin`` creates for its gateway to ``peer``."""
        lo, hi = (origin, peer) if origin < peer else (peer, origin)
        gw = GatewayId(lo, hi, incarnation).key
        return cls(gw * 2 + (origin > peer), gw, origin, peer, level, incarnation, version, cost, dead)

    def killed(self) -> "Connection":
        """The same connection, dead."""
        return self._replace(dead=True)

    def with_cost(self, cost: int) -> "Connection":
        """The next version, with a new extra cost."""
        return self._replace(cost=cost, version=self.version + 1)

    def other_side(self) -> "Connection":
        """The connection the gatekeeper at the other end created for the same gateway (same version and state)."""
        return self._replace(key=self.key ^ 1, origin=self.peer, peer=self.origin)


def rewritten(x: int, link_level: int) -> int:
    """The near-end level after crossing a level-``link_level`` gateway (``link_level`` <= the connection's level).

    The paper's rule: a gatekeeper g^p, p <= l_c, rewrites a node n^x with
    x < l_c and p > x as its own level-p context.  Since p <= l_c, that is
    ``max(x, p)``; the near end stays the origin's level-``x`` unit.
    """
    return link_level if link_level > x else x


def better(new: Connection, new_x: int, old: Connection, old_x: int) -> bool:
    """Whether ``(new, new_x)`` replaces ``(old, old_x)`` for one connection id.

    Dead is final; then the higher version; then, for the same version, the
    finer form (lower near-end level: the form that travelled the fewest levels).
    """
    if old.dead:
        return False
    if new.dead:
        return True
    if new.version != old.version:
        return new.version > old.version
    return new_x < old_x
