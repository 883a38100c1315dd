"""The gateway propagation protocol (GPP) of one broker, as a sans-IO state machine.

Inputs: :meth:`GatewayPropagation.link_up` / :meth:`link_down` (a gateway of
this broker came up or was lost: closed, or its peer died) and
:meth:`receive` (connection records from a neighbour).  Outputs: records to
send, collected per neighbour in :attr:`outbox` until the driver takes them
(:meth:`take_outbox`), so one batch per neighbour leaves per round of input.
No I/O, no clock: the simulator and the live broker drive the same object.

The rules (routing paper 3.2.3-3.2.9, gateways paper 2-4):

* a gateway of level ``l`` makes each of its two gatekeepers create a
  :class:`~multihop.ges.connection.Connection` (far end in its level-``l``
  context, near end the gatekeeper as a level-0 node), with a unique id;
* a record of a level-``l_c`` connection travels only over gateways of level
  ``<= l_c`` (never across a gateway of higher level), so it stays in the
  level-``l_c + 1`` context; crossing a level-``p`` gateway rewrites a near end
  of level ``x < p`` to the sender's level-``p`` unit (:func:`rewritten`);
* a broker keeps, per connection id, the best record it received (dead beats
  alive, then the newer version, then the finer near end) and forwards a record
  to its other neighbours only when it improved what it held, so flooding ends;
* when a gateway comes up, each end sends the new neighbour every record that
  may cross it (3.2.9: the two systems exchange their connections);
* a lost gateway is disseminated like an addition: each end marks both of the
  gateway's connections dead (the far end's notice cannot cross the lost link).

The broker's :class:`~multihop.ges.graph.ConnectivityGraph` is rebuilt from the
records on demand, and its routing cache is invalidated for levels ``>= l``
whenever a level-``l`` record changes.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from multihop.ges.address import level_of_difference, unit_id, unit_level
from multihop.ges.connection import Connection, better
from multihop.ges.costs import CostMatrix
from multihop.ges.graph import ConnectivityGraph
from multihop.ges.routing_cache import RoutingCache, constrained_hop

__all__ = ["GatewayPropagation", "Link", "Record"]

#: What travels: a connection and the level of its near end as the sender rewrote it.
Record = tuple[Connection, int]


class Link(NamedTuple):
    """One live gateway of this broker."""

    peer: int
    level: int
    incarnation: int
    cost: int


class GatewayPropagation:
    """GPP state of broker ``code`` in a system of ``levels`` levels (see the module docstring)."""

    def __init__(self, code: int, levels: int, costs: CostMatrix | None = None) -> None:
        self.code = code
        self.levels = levels
        self.costs = costs or CostMatrix(levels)
        #: connection key -> (connection, near-end level x) as held here (dead ones are tombstones)
        self.table: dict[int, Record] = {}
        #: peer broker -> its live gateway
        self.links: dict[int, Link] = {}
        #: peer broker -> {connection key: record} waiting to be sent
        self.outbox: dict[int, dict[int, Record]] = {}
        self._graph: ConnectivityGraph | None = None
        self._cache: RoutingCache | None = None
        #: the records changed since the graph was last built (the graph rebuilds itself when queried)
        self.graph_dirty = True
        #: raised by every change of the records or the links (other machines cache on it)
        self.version = 0
        self._avoid_cache: dict[tuple[int, frozenset[int]], int | None] = {}
        self._avoid_at = -1
        self._hops: dict[object, int | None] = {}
        self._hops_at = -1
        #: counters: records received, accepted (improved the table), refused as malformed
        self.received = 0
        self.accepted = 0
        self.malformed = 0
        #: called with the lowest level whose routing changed, after each change (PPP/ERP listen)
        self.on_change: Callable[[int], None] | None = None

    # ---- inputs -------------------------------------------------------------

    def link_up(self, peer: int, incarnation: int = 0, cost: int = 0) -> None:
        """A gateway to ``peer`` came up: create this side's connection, exchange records with the new neighbour."""
        if peer == self.code:
            raise ValueError("a gateway joins two different brokers")
        if peer in self.links:
            raise ValueError(f"there is already a gateway to that peer (incarnation {self.links[peer].incarnation})")
        if self.was_lost(peer, incarnation):
            raise ValueError(f"incarnation {incarnation} of the gateway to that peer was lost before: a gateway that comes back needs a new one")
        level = level_of_difference(self.code, peer, self.levels)
        self.links[peer] = Link(peer, level, incarnation, cost)
        box = self.outbox.setdefault(peer, {})
        for key, (c, x) in self.table.items():
            if c.level >= level:
                box[key] = (c, x if x > level else level)
        self._accept(Connection.create(self.code, peer, level, incarnation, cost), 0, None)

    def was_lost(self, peer: int, incarnation: int) -> bool:
        """Whether this broker holds the gateway to ``peer`` of this incarnation as lost (a tombstone: a gateway
        brought up again with it would be dead from birth, here and wherever the tombstone went)."""
        key = Connection.create(self.code, peer, 0, incarnation).key
        return any((held := self.table.get(k)) is not None and held[0].dead for k in (key, key ^ 1))

    def link_down(self, peer: int) -> None:
        """The gateway to ``peer`` is lost: disseminate both of its connections as dead."""
        link = self.links.pop(peer, None)
        if link is None:
            return
        self.outbox.pop(peer, None)
        mine = Connection.create(self.code, peer, link.level, link.incarnation, link.cost)
        held = self.table.get(mine.key)
        self._accept((held[0] if held else mine).killed(), 0, None)
        held = self.table.get(mine.key ^ 1)
        self._accept((held[0] if held else mine.other_side()).killed(), link.level, None)

    def set_cost(self, peer: int, cost: int) -> None:
        """Change the extra cost of the gateway to ``peer`` (a new version of this side's connection)."""
        link = self.links[peer]
        self.links[peer] = link._replace(cost=cost)
        mine = self.table[Connection.create(self.code, peer, link.level, link.incarnation).key][0]
        self._accept(mine.with_cost(cost), 0, None)

    def receive(self, peer: int, records: list[Record] | tuple[Record, ...]) -> None:
        """Records from neighbour ``peer``. Records that could not have crossed that gateway are refused and counted."""
        link = self.links.get(peer)
        if link is None:
            self.malformed += len(records)  # a neighbour we hold no gateway to (lost meanwhile)
            return
        p = link.level
        top = self.levels
        self.received += len(records)
        for c, x in records:
            if not (p <= c.level <= top and p <= x <= c.level):  # (a tombstone travels as x >= p too)
                self.malformed += 1
                continue
            self._accept(c, x, peer)

    # ---- outputs -------------------------------------------------------------

    def take_outbox(self) -> dict[int, list[Record]]:
        """The records to send, per neighbour; empties the outbox."""
        out = {peer: list(box.values()) for peer, box in self.outbox.items() if box}
        self.outbox = {}
        return out

    # ---- state ----------------------------------------------------------------

    def _accept(self, c: Connection, x: int, src: int | None) -> bool:
        held = self.table.get(c.key)
        if held is not None and not better(c, x, held[0], held[1]):
            return False
        if c.dead:
            # a tombstone keeps the form this broker knew the connection in (its graph keeps those
            # nodes, now maybe partitioned); one never seen alive here is kept as x = -1: no node
            x = held[1] if held is not None else -1
        self.table[c.key] = (c, x)
        self.accepted += 1
        self.version += 1
        lvl = c.level
        self.graph_dirty = True
        if self._cache is not None:
            self._cache.invalidate(lvl)
        outbox = self.outbox
        for peer, link in self.links.items():
            if peer != src and link.level <= lvl:
                box = outbox.get(peer)
                if box is None:
                    box = outbox[peer] = {}
                box[c.key] = (c, x if x > link.level else link.level)
        if self.on_change is not None:
            self.on_change(lvl)
        return True

    def graph(self) -> ConnectivityGraph:
        """This broker's connectivity graph: a live view that catches up with the records when queried."""
        g = self._graph
        if g is None:
            self.graph_dirty = False
            g = self._graph = ConnectivityGraph(self.code, self.levels, self.costs, self.table.values(), source=self)
            self._cache = g.cache
        else:
            g.refresh()
        return g

    def hop_to(self, code: int, avoid: tuple[int, ...] = ()) -> int | None:
        """The neighbour to send to for broker or unit ``code`` (a unit id); None if unreachable or it is here.

        ``avoid``: units the message already left (its routing information); a
        hop into one of them is replaced by the best path around them.
        """
        link = self.links.get(code)
        if link is not None:
            return code
        if self._hops_at != self.version:
            self._hops.clear()
            self._hops_at = self.version
        key = (code, avoid) if avoid else code
        hop = self._hops.get(key, -1)
        if hop != -1:
            return hop
        hop = self._hops[key] = self._hop_to(code, avoid)
        return hop

    def _hop_to(self, code: int, avoid: tuple[int, ...]) -> int | None:
        g = self.graph()
        node = g.node_for(code)
        if node is None:
            return None
        if avoid:
            # level-0 entries (the publisher's broker) are no units left: a message never "leaves" over a level-0 link
            nodes = frozenset(n for n in map(g.node_for, (u for u in avoid if unit_level(u) > 0)) if n is not None and n in g.node_level)
            if nodes:
                if self._avoid_at != self.version:
                    self._avoid_cache.clear()
                    self._avoid_at = self.version
                key = (node, nodes)
                hop = self._avoid_cache.get(key, -1)
                if hop == -1:
                    hop = self._avoid_cache[key] = constrained_hop(g, node, nodes)
                return hop
        return g.cache.hop(node)

    def leaving(self, peer: int, left: tuple[int, ...]) -> tuple[int, ...]:
        """Routing information for a message crossing the gateway to ``peer``: drop what only made sense
        below that gateway's level, and add the unit being left."""
        link = self.links.get(peer)
        if link is None:  # a hop of a stale route (the gateway just went): the message is dropped anyway
            return left
        p = link.level
        if p == 0:
            return left
        kept = tuple(u for u in left if unit_level(u) >= p)
        mine = unit_id(self.code, p, self.levels)
        return kept if mine in kept else kept + (mine,)

    def cost_to(self, code: int) -> float:
        """The routing cost to broker or unit ``code`` (0 here, inf if unreachable)."""
        g = self.graph()
        node = g.node_for(code)
        return 0.0 if node is None else g.cache.cost(node)

    def gatekeepers_of_my_units(self, include_dead: bool = False) -> dict[int, set[int]]:
        """Level l (1..N+1) -> the brokers of this broker's level-l unit holding a gateway of level >= l - 1.

        Those brokers keep the profiles of the unit's children and decide where
        events go inside it (they are the unit's entry points).  Every broker knows
        them exactly: the records of such gateways are disseminated in contexts
        that contain the unit.  ``include_dead`` also counts the ends of lost gateways
        (a unit that had gatekeepers has a level above it to climb to).
        """
        n1 = self.levels + 1
        me = self.code
        out: dict[int, set[int]] = {lvl: set() for lvl in range(1, n1 + 1)}
        for c, _ in self.table.values():
            if c.dead and not include_dead:
                continue
            top = min(c.level + 1, n1)
            for b in (c.origin, c.peer):
                d = ((b ^ me).bit_length() - 1) // 6 if b != me else -1
                for lvl in range(max(d + 1, 1), top + 1):
                    out[lvl].add(b)
        return out

    def gatekeeper_levels(self) -> set[int]:
        """Levels of this broker's live gateways (every broker with a link is a level-0 gatekeeper)."""
        return {link.level for link in self.links.values()}

    def live_records(self) -> list[Record]:
        """The live (not dead) records held."""
        return [r for r in self.table.values() if not r[0].dead]
