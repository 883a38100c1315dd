"""The profile propagation protocol (PPP, routing paper 3.3.5-3.3.7) of one broker, sans-IO.

**Local profiles.**  A client's subscription goes to its broker, whose local
profile graph has the broker's clients as destinations.  The broker's own
profile (its *node profile*: the set of chains with at least one local
subscription) changes only when a chain's first subscription comes or its
last goes (equations 8.1-8.4: a change that leaves the unit's profile as it was
is not propagated).

**Deciders.**  A unit ``U`` of level ``l`` is decided by its gatekeepers: the
brokers of ``U`` holding a gateway of level ``>= l - 1`` (every broker of ``U``
with a gateway to another child of ``U`` or out of ``U``; these are the brokers
events enter ``U`` and its children by).  Each keeps the profile graph of ``U``
(destinations: ``U``'s children, with the count of their brokers interested,
the paper's delta-omega) and decides which children get an event.  The system
(level N + 1) is decided by the holders of level-N gateways.  Every broker knows
the deciders of its own units exactly, from its connection records.

**Propagation.**  A change of a broker's node profile goes, as a numbered
version (unique id: origin and version, so a change delivered twice is counted
once), to every decider of every unit of the broker, level by level up to the
system, multicast along best hops.  Each decider applies it (for each of its
decided units that holds the broker, with the broker's child of that unit as
destination) and acknowledges.  A decider that appears (a new gateway, a unit
joining: 3.3.6) gets a snapshot of the whole node profile; one that finds a
gap asks for a snapshot.  Counting brokers (not relaying a cluster's change
through one of its gatekeepers) keeps every count exact whatever order the
changes of different brokers arrive in.

**Active profiles** (3.3.7): a subscription is active at level ``l`` once every
decider of the subscriber's units of levels 1..l acknowledged the version of
the node profile that brought its chain (level 0: at once, on its broker).
"""

from __future__ import annotations

from typing import Callable

from multihop.ges.address import contains, unit_id
from multihop.ges.broker_view import BrokerView
from multihop.ges.messages import ProfileAck, ProfileResync, ProfileUpdate
from multihop.ges.profile import Chain
from multihop.ges.profile_graph import GraphLike, ProfileGraph

__all__ = ["ProfilePropagation"]


class ProfilePropagation:
    """PPP state of one broker (see the module docstring)."""

    def __init__(self, core: BrokerView, graph_factory: Callable[[], GraphLike] = ProfileGraph) -> None:
        """``graph_factory`` makes the profile graphs (the native engine's when the broker runs it)."""
        self.core = core
        self._new_graph = graph_factory
        self.code = core.code
        self.levels = core.levels
        #: level-0 profile graph: destinations are client peer ids
        self.local: GraphLike = graph_factory()
        #: (client peer, subscription id) -> chain
        self.subs: dict[tuple[int, int], Chain] = {}
        #: local subscriptions per chain (the node profile is the chains counted here)
        self.chain_count: dict[Chain, int] = {}
        #: version of the node profile that brought each chain
        self.chain_version: dict[Chain, int] = {}
        self.version = 0
        self._added: set[Chain] = set()
        self._removed: set[Chain] = set()
        # sending side: decider -> last version sent / acknowledged
        self.sent: dict[int, int] = {}
        #: (GPP version, profile version) after a flush that left every decider in sync: until one of them
        #: changes, or a decider asks for a snapshot, a flush has nothing to do
        self._quiet: tuple[int, int] | None = None
        self.acked: dict[int, int] = {}
        self._deciders: dict[int, set[int]] = {}
        self._deciders_at = -1
        # deciding side: origin broker -> (version, its chains)
        self.origins: dict[int, tuple[int, frozenset[Chain]]] = {}
        #: level -> profile graph of this broker's unit of that level (levels it decides)
        self.graphs: dict[int, GraphLike] = {}
        self.decided: frozenset[int] = frozenset()
        self.counters = {"updates_sent": 0, "updates_applied": 0, "acks": 0, "resyncs": 0, "forwarded": 0}

    # ---- local subscriptions ---------------------------------------------------------------

    def subscribe(self, peer: int, sub: int, chain: Chain) -> None:
        """A local client added subscription ``sub``."""
        key = (peer, sub)
        if key in self.subs:
            raise ValueError(f"subscription {sub} exists already")
        self.subs[key] = chain
        self.local.add(chain, peer)
        n = self.chain_count.get(chain, 0)
        self.chain_count[chain] = n + 1
        if n == 0:
            if chain in self._removed:
                self._removed.discard(chain)
            else:
                self._added.add(chain)

    def unsubscribe(self, peer: int, sub: int) -> None:
        """A local client removed subscription ``sub`` (KeyError if it has none)."""
        chain = self.subs.pop((peer, sub))
        self.local.remove(chain, peer)
        n = self.chain_count[chain] - 1
        if n:
            self.chain_count[chain] = n
        else:
            del self.chain_count[chain]
            if chain in self._added:
                self._added.discard(chain)
            else:
                self._removed.add(chain)

    def client_gone(self, peer: int) -> None:
        """A client detached: its subscriptions go."""
        for p, sub in [k for k in self.subs if k[0] == peer]:
            self.unsubscribe(p, sub)

    def active_level(self, peer: int, sub: int) -> int:
        """The highest level l such that the subscription is active in this broker's units of levels 1..l."""
        chain = self.subs[(peer, sub)]
        v = self.chain_version.get(chain)
        if v is None or chain in self._added:
            return 0  # its version is not out yet
        deciders = self.deciders()
        for lvl in range(1, self.levels + 2):
            for d in deciders[lvl]:
                if d != self.code and self.acked.get(d, -1) < v:
                    return lvl - 1
        return self.levels + 1

    # ---- deciders ------------------------------------------------------------------------------

    def deciders(self) -> dict[int, set[int]]:
        """Level -> deciders of this broker's unit of that level (cached on the GPP version)."""
        gpp = self.core.gpp
        if self._deciders_at != gpp.version:
            self._deciders = gpp.gatekeepers_of_my_units()
            self._deciders_at = gpp.version
            self._recompute_decided()
        return self._deciders

    def _recompute_decided(self) -> None:
        links = self.core.gpp.links
        top = max((link.level for link in links.values()), default=-1)
        decided = frozenset(range(1, min(top + 1, self.levels + 1) + 1)) if top >= 0 else frozenset()
        if decided != self.decided:
            self.decided = decided
            self.graphs = {lvl: self._new_graph() for lvl in decided}
            for origin, (_, chains) in self.origins.items():
                self._apply(origin, chains, (), levels=decided)

    # ---- propagation (output) --------------------------------------------------------------------

    def flush(self) -> None:
        """Send what changed since the last flush; snapshots to new deciders (called before the outbox is taken)."""
        if self.version == 0 and not self._added:
            return  # no profile ever: deciders assume an empty one
        if not self._added and not self._removed and self._quiet == (self.core.gpp.version, self.version):
            return  # every decider has this version, and the deciders are the same
        deciders = self.deciders()
        everyone = set().union(*deciders.values()) if deciders else set()
        everyone.discard(self.code)
        if self._added or self._removed:
            self.version += 1
            for c in self._added:
                self.chain_version[c] = self.version
            for c in self._removed:
                # gone from the node profile: the version that once brought it proves nothing for a
                # later subscription to it (that one waits for the version that brings it back)
                self.chain_version.pop(c, None)
            added, removed = tuple(self._added), tuple(self._removed)
            self._added, self._removed = set(), set()
            self.origins[self.code] = (self.version, frozenset(self.chain_count))
            self._apply(self.code, added, removed, levels=self.decided)
            in_sync = tuple(d for d in everyone if self.sent.get(d) == self.version - 1)
            if in_sync:
                self._multicast(ProfileUpdate(self.code, self.version, False, added, removed, in_sync))
                for d in in_sync:
                    self.sent[d] = self.version
        stale = tuple(d for d in everyone if self.sent.get(d) != self.version)
        if stale:
            snap = tuple(self.chain_count)
            self._multicast(ProfileUpdate(self.code, self.version, True, snap, (), stale))
            for d in stale:
                self.sent[d] = self.version
        for d in [d for d in self.sent if d not in everyone]:
            del self.sent[d]  # no longer a decider of any of this broker's units
        self._quiet = (self.core.gpp.version, self.version)

    def _multicast(self, msg: ProfileUpdate) -> None:
        """Send ``msg`` toward its ``dests``, one copy per next hop."""
        groups: dict[int, list[int]] = {}
        gpp = self.core.gpp
        for d in msg.dests:
            hop = gpp.hop_to(d, msg.left)
            if hop is not None:
                groups.setdefault(hop, []).append(d)
        for hop, ds in groups.items():
            self.core.send(hop, msg._replace(dests=tuple(ds), left=gpp.leaving(hop, msg.left)))
            self.counters["updates_sent"] += 1

    # ---- propagation (input) ----------------------------------------------------------------------

    def on_update(self, msg: ProfileUpdate) -> None:
        """A profile update arrived: apply it if this broker is a destination, pass the rest on."""
        rest = tuple(d for d in msg.dests if d != self.code)
        if len(rest) != len(msg.dests):
            self._receive(msg)
        if rest:
            self.counters["forwarded"] += 1
            self._multicast(msg._replace(dests=rest))

    def _receive(self, msg: ProfileUpdate) -> None:
        origin = msg.origin
        held = self.origins.get(origin)
        if msg.full:
            new = frozenset(msg.added)
            if held is not None and held[0] > msg.version:
                return  # an old snapshot overtaken
            old = held[1] if held else frozenset()
            self.origins[origin] = (msg.version, new)
            self._apply(origin, tuple(new - old), tuple(old - new), levels=self.decided)
        else:
            if held is None or msg.version != held[0] + 1:
                if held is not None and msg.version <= held[0]:
                    return  # delivered twice: counted once
                self.counters["resyncs"] += 1
                self._route(origin, ProfileResync(origin, self.code))
                return
            chains = (held[1] | frozenset(msg.added)) - frozenset(msg.removed)
            self.origins[origin] = (msg.version, chains)
            self._apply(origin, msg.added, msg.removed, levels=self.decided)
        self.counters["updates_applied"] += 1
        self._route(origin, ProfileAck(origin, self.code, msg.version))

    def _apply(self, origin: int, added: tuple[Chain, ...] | frozenset[Chain], removed: tuple[Chain, ...], levels: frozenset[int]) -> None:
        """Count ``origin``'s chains in this broker's decided units that hold it (destination: its child there)."""
        n = self.levels
        for lvl in levels:
            me_unit = unit_id(self.code, lvl, n)
            if not contains(me_unit, origin):
                continue
            child = unit_id(origin, lvl - 1, n)
            g = self.graphs[lvl]
            for c in removed:
                g.remove(c, child)
            for c in added:
                g.add(c, child)

    def _route(self, origin: int, msg: ProfileAck | ProfileResync) -> None:
        if origin == self.code:
            self.on_control(msg)
            return
        gpp = self.core.gpp
        hop = gpp.hop_to(origin, msg.left)
        if hop is not None:
            self.core.send(hop, msg._replace(left=gpp.leaving(hop, msg.left)))

    def on_control(self, msg: ProfileAck | ProfileResync) -> None:
        """An ack or a resync request on its way to (or at) its origin broker."""
        if msg.origin != self.code:
            self._route(msg.origin, msg)
            return
        if type(msg) is ProfileAck:
            self.counters["acks"] += 1
            if self.acked.get(msg.decider, -1) < msg.version:
                self.acked[msg.decider] = msg.version
        else:
            self.sent.pop(msg.decider, None)  # the next flush sends it a snapshot
            self._quiet = None

    # ---- queries ---------------------------------------------------------------------------------

    def interested(self, level: int, names: tuple[str, ...], values: list[str]) -> set[int] | None:
        """The children of this broker's level-``level`` unit interested in an event; None if it does not decide it."""
        self.deciders()  # keeps ``decided`` current
        g = self.graphs.get(level)
        if g is None:
            return None
        return g.match(names, values)
