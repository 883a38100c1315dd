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

from multihop.ges.address import level_of_difference
from multihop.ges.connection import Connection, better
from multihop.ges.costs import CostMatrix
from multihop.ges.graph import ConnectivityGraph
from multihop.ges.routing_cache import RoutingCache

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
        level = level_of_difference(self.code, peer, self.levels)
        self.links[peer] = Link(peer, level, incarnation, cost)
        box = self.outbox.setdefault(peer, {})
        for key, (c, x) in self.table.items():
            if c.level >= level:
                box[key] = (c, x if x > level else level)
        self._accept(Connection.create(self.code, peer, level, incarnation, cost), 0, None)

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

    def gatekeeper_levels(self) -> set[int]:
        """Levels of this broker's live gateways (every broker with a link is a level-0 gatekeeper)."""
        return {link.level for link in self.links.values()}

    def live_records(self) -> list[Record]:
        """The live (not dead) records held."""
        return [r for r in self.table.values() if not r[0].dead]
