"""The node organization protocol (NAP, routing paper 3.1), member side and newcomer side, sans-IO.

**Adding a node** (3.1.1).  A newcomer asks a member for a level-0
connection.  A member below its connection threshold for level-0 gateways
takes it: it gives the newcomer an address in its cluster (the lowest node
id it knows to be free) and the two are joined by a level-0 gateway.  A
member at its threshold forwards the request inside the cluster to the
nearest member not yet asked; when every member it knows of is full, the
answer is the list of the cluster's level-1 gatekeepers, and the newcomer
"proceeds with the same process" through them: it asks a gatekeeper to pass
its request over its level-1 gateway into the neighbouring cluster.

**Adding a unit** (3.1.2).  One broker of a level-``l`` unit asks a member for
a level-``l`` gateway.  A member below its level-``l`` threshold gives the unit
a new level-``l`` address under its own level-``l + 1`` unit (the lowest unit
id it knows to be free); the unit's inner addresses are kept, only the prefix
changes; the gateway is then brought up and the two systems exchange their
connections by the GPP rules (3.2.9).  A full member forwards inside its
cluster, as for a node.

Thresholds per level are configuration (:attr:`Topology.thresholds`).  A
member reserves what it assigned, so two newcomers never get one address
from it; the driver brings the gateway up once the newcomer has the answer.
"""

from __future__ import annotations

import math
from typing import Iterable

from multihop.ges.address import BLOCK_LIMIT, unit_id, unit_level
from multihop.ges.broker_view import BrokerView
from multihop.ges.messages import JoinReply, JoinRequest

__all__ = ["NodeOrganization", "Joiner", "ANY_NEIGHBOUR"]

#: ``JoinRequest.unit`` meaning "a cluster next to the target"
ANY_NEIGHBOUR = 0


class NodeOrganization:
    """The member side of NAP inside one broker core."""

    def __init__(self, core: BrokerView) -> None:
        self.core = core
        #: unit ids / codes this member gave away (not yet visible in its graph)
        self.reserved: set[int] = set()
        self.accepted = 0
        self.forwarded = 0

    # ---- helpers --------------------------------------------------------------

    def threshold(self, level: int) -> int:
        """This broker's connection threshold for gateways of ``level`` (the last configured value repeats)."""
        th = self.core.thresholds
        return th[min(level, len(th) - 1)]

    def links_at(self, level: int) -> int:
        """How many live gateways of ``level`` this broker holds."""
        return sum(1 for link in self.core.gpp.links.values() if link.level == level)

    def _cluster_members(self) -> list[int]:
        g = self.core.graph()
        return sorted(u for u, lvl in g.node_level.items() if lvl == 0 and u != self.core.code)

    def _reply(self, req: JoinRequest, accepted_by: int, assigned: int, gatekeepers: Iterable[int] = (), reason: str = "") -> None:
        path = req.path
        self.core.send(path[-1], JoinReply(req.request, accepted_by, assigned, tuple(gatekeepers), path[:-1], reason))

    def _forward(self, req: JoinRequest, target: int) -> bool:
        hop = target if target in self.core.gpp.links else self.core.graph().cache.hop(target)
        if hop is None:
            return False
        self.core.send(hop, req._replace(target=target, path=req.path + (self.core.code,)))
        self.forwarded += 1
        return True

    # ---- inputs -------------------------------------------------------------------

    def on_request(self, peer: int, req: JoinRequest) -> None:
        """A join request arrived (from a newcomer or relayed by a member)."""
        core = self.core
        if req.target != core.code:
            if not self._forward(req, req.target):
                self._reply(req, -1, -1, reason="no route inside the unit toward the member asked")
            return
        if req.level == 0 and req.unit == ANY_NEIGHBOUR:
            self._into_neighbour(req)
            return
        if self.links_at(req.level) < self.threshold(req.level):
            assigned = self._free_node() if req.level == 0 else self._free_unit(req.level)
            if assigned is None:
                self._reply(req, -1, -1, reason="no free address left under the block limit")
                return
            self.reserved.add(assigned)
            self.accepted += 1
            self._reply(req, core.code, assigned)
            return
        tried = req.tried + (core.code,)
        g = core.graph()
        left = [m for m in self._cluster_members() if m not in tried and not math.isinf(g.cache.cost(m))]
        if left:
            nxt = min(left, key=lambda m: (g.cache.cost(m), m))
            self._forward(req._replace(tried=tried), nxt)
            return
        level_up = req.level + 1
        gks = [m for m in [core.code, *self._cluster_members()] if self._has_gateway(m, level_up)]
        self._reply(req, -1, -1, gks, reason=f"every member asked is at its threshold for level-{req.level} gateways")

    def _has_gateway(self, member: int, level: int) -> bool:
        gpp = self.core.gpp
        if member == self.core.code:
            return any(link.level >= level for link in gpp.links.values())
        return any(c.origin == member and x == 0 and c.level >= level and not c.dead for c, x in gpp.table.values())

    def _into_neighbour(self, req: JoinRequest) -> None:
        """The newcomer asks this gatekeeper to pass its request into a cluster next to it."""
        core = self.core
        for peer, link in sorted(core.gpp.links.items()):
            if link.level == 1 and peer not in req.tried:
                cluster = unit_id(peer, 1, core.levels)
                core.send(peer, req._replace(unit=cluster, target=peer, path=req.path + (core.code,)))
                self.forwarded += 1
                return
        self._reply(req, -1, -1, reason="this gatekeeper has no level-1 gateway left to try")

    def _free_node(self) -> int | None:
        core = self.core
        cluster = unit_id(core.code, 1, core.levels)
        used = set(self._cluster_members()) | {core.code} | self.reserved
        for i in range(BLOCK_LIMIT):
            code = cluster & ((1 << 60) - 1) | i
            if code not in used:
                return code
        return None

    def _free_unit(self, level: int) -> int | None:
        core = self.core
        g = core.graph()
        used = {u for u, lvl in g.node_level.items() if lvl == level} | {unit_id(core.code, level, core.levels)} | self.reserved
        used |= {u for u in g.own if unit_level(u) == level}
        parent = unit_id(core.code, level + 1, core.levels) & ((1 << 60) - 1)
        for i in range(BLOCK_LIMIT):
            uid = unit_id(parent | (i << (6 * level)), level, core.levels)
            if uid not in used:
                return uid
        return None

    def on_reply(self, peer: int, reply: JoinReply) -> None:
        """A reply on its way back to the newcomer: pass it on."""
        if not reply.path:
            self.core.refused += 1
            return
        self.core.send(reply.path[-1], reply._replace(path=reply.path[:-1]))


class Joiner:
    """The newcomer side of NAP: asks, follows "everyone is full" answers, ends with an address or a refusal.

    ``me`` is the newcomer's temporary id (it has no address yet); requests go
    to the member the driver connected it to.  Outputs are ``(member, request)``
    pairs in :attr:`outbox`; :attr:`result` is set when done.
    """

    def __init__(self, me: int, level: int, entry: int, cluster: int, serial: int = 0) -> None:
        self.me = me
        self.level = level
        self.entry = entry
        self.request = (me << 20) | serial
        self.outbox: list[tuple[int, JoinRequest]] = []
        self.result: JoinReply | None = None
        self.asked: list[int] = []
        self._pending: list[int] = []
        self._send(entry, cluster, entry, ())

    def _send(self, first: int, unit: int, target: int, tried: tuple[int, ...]) -> None:
        self.asked.append(target)
        self.outbox.append((first, JoinRequest(self.request, self.level, unit, target, (self.me,), tried)))

    def take(self) -> list[tuple[int, JoinRequest]]:
        """The requests to send, each to the member named first (the driver's link to it)."""
        out, self.outbox = self.outbox, []
        return out

    def on_reply(self, reply: JoinReply) -> None:
        """The answer came back."""
        if reply.accepted_by >= 0 or self.level != 0:
            self.result = reply
            return
        # every member was full: go through the cluster's level-1 gatekeepers into a neighbouring cluster
        self._pending.extend(g for g in reply.gatekeepers if g not in self.asked and g not in self._pending)
        if not self._pending:
            self.result = reply
            return
        gk = self._pending.pop(0)
        self._send(self.entry, ANY_NEIGHBOUR, gk, ())

    @property
    def done(self) -> bool:
        """Whether the join ended (accepted or refused)."""
        return self.result is not None
