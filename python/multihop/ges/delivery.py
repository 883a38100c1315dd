"""A Jepsen-style delivery checker for GES publish/subscribe histories.

Record what happened in a :class:`History` (subscriptions with the time they
became active and the time they were removed, publications with their
content, deliveries per subscriber in arrival order), then
:func:`check_delivery` classifies every (event, subscriber) pair:

* **delivered**: expected (the content matches a profile of the subscriber that was
  active when the event was published) and delivered exactly once;
* **lost**: expected, never delivered;
* **duplicated**: delivered more than once;
* **unexpected**: delivered but not matching any profile of the subscriber;
* **out of order**: delivered after a later event of the same publisher stream
  (with ``History(across_incarnations=True)``: of the same publisher, ordered by
  incarnation, then timestamp and sequence);
* **replayed** (durable clients): delivered, and published while the subscriber was
  disconnected (:meth:`History.disconnected`), so it came from stable storage;
* **lost while disconnected**: expected, never delivered, published while the
  subscriber was disconnected (counted apart from **lost**).

An event published while a matching subscription was being set up or torn down
(between ``subscribe`` and ``active``, or ``unsubscribe`` and its completion) may
be delivered or not: it is counted as **optional** when delivered once, never
as lost or unexpected.  Matching uses the reference matcher
(:func:`multihop.ges.profile.chain_matches`), not the brokers' profile graphs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Mapping

from multihop.ges.event import EventId, canonical
from multihop.ges.profile import Chain, chain_matches, make_chain

__all__ = ["History", "DeliveryReport", "check_delivery", "check_unit_entries"]

_INF = float("inf")


@dataclass
class _Sub:
    chain: Chain
    subscribed: float
    active: float = _INF
    unsubscribed: float = _INF
    removed: float = _INF


@dataclass
class History:
    """What happened, as the test or benchmark saw it (times in any one clock)."""

    subs: dict[Hashable, dict[int, _Sub]] = field(default_factory=dict)
    published: dict[EventId, tuple[float, tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    delivered: dict[Hashable, list[EventId]] = field(default_factory=dict)
    #: order events per publisher across incarnations (durable clients), not per (publisher, incarnation)
    across_incarnations: bool = False
    away: dict[Hashable, list[tuple[float, float]]] = field(default_factory=dict)

    def disconnected(self, client: Hashable, t0: float, t1: float = _INF) -> None:
        """``client`` was disconnected from ``t0`` until ``t1`` (when it resumed)."""
        self.away.setdefault(client, []).append((t0, t1))

    def subscribe(self, client: Hashable, sub: int, profile: Iterable[Any], t: float) -> None:
        """``client`` asked for subscription ``sub`` at ``t``."""
        self.subs.setdefault(client, {})[sub] = _Sub(make_chain(list(profile)), t)
        self.delivered.setdefault(client, [])

    def active(self, client: Hashable, sub: int, t: float) -> None:
        """From ``t`` on the subscription is active in the whole system."""
        self.subs[client][sub].active = t

    def unsubscribe(self, client: Hashable, sub: int, t: float, done: float | None = None) -> None:
        """``client`` removed ``sub`` at ``t``; from ``done`` on no broker holds it any more."""
        s = self.subs[client][sub]
        s.unsubscribed = t
        s.removed = t if done is None else done

    def publish(self, eid: EventId, content: Mapping[str, Any], t: float) -> None:
        """Event ``eid`` was published at ``t`` with ``content``."""
        self.published[eid] = (t, tuple(content), tuple(canonical(v, k) for k, v in content.items()))

    def deliver(self, client: Hashable, eid: EventId) -> None:
        """``client`` received ``eid`` (call in arrival order)."""
        self.delivered.setdefault(client, []).append(eid)


@dataclass
class DeliveryReport:
    """The classification of every (event, subscriber) pair."""

    delivered: int = 0
    optional: int = 0
    lost: list[tuple[EventId, Hashable]] = field(default_factory=list)
    duplicated: list[tuple[EventId, Hashable]] = field(default_factory=list)
    unexpected: list[tuple[EventId, Hashable]] = field(default_factory=list)
    out_of_order: list[tuple[EventId, Hashable]] = field(default_factory=list)
    unknown: list[tuple[EventId, Hashable]] = field(default_factory=list)
    replayed: int = 0
    lost_while_disconnected: list[tuple[EventId, Hashable]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing lost (connected or not), duplicated, unexpected, out of order or never published."""
        return not (self.lost or self.lost_while_disconnected or self.duplicated or self.unexpected or self.out_of_order or self.unknown)

    def summary(self) -> str:
        """One line of counts (and the first problems)."""
        parts = [f"delivered {self.delivered}", f"optional {self.optional}", f"replayed {self.replayed}"]
        for name in ("lost", "lost_while_disconnected", "duplicated", "unexpected", "out_of_order", "unknown"):
            items = getattr(self, name)
            parts.append(f"{name.replace('_', ' ')} {len(items)}" + (f" (e.g. {items[0]})" if items else ""))
        return ", ".join(parts)


def check_delivery(history: History) -> DeliveryReport:
    """Classify every (event, subscriber) pair of ``history`` (see the module docstring)."""
    r = DeliveryReport()
    for client, subs in history.subs.items():
        got = history.delivered.get(client, [])
        counts: dict[EventId, int] = {}
        for eid in got:
            counts[eid] = counts.get(eid, 0) + 1
        # order: within each stream, deliveries must be increasing
        last: dict[Any, tuple[int, ...]] = {}
        across = history.across_incarnations
        away = history.away.get(client, [])
        for eid in got:
            if eid not in history.published:
                r.unknown.append((eid, client))
                continue
            if across:
                key: Any = eid.publisher
                order: tuple[int, ...] = (eid.incarnation, eid.timestamp, eid.sequence)
            else:
                key, order = eid.stream, eid.order
            if key in last and order < last[key]:
                r.out_of_order.append((eid, client))
            elif key not in last or order > last[key]:
                last[key] = order
        for eid, (t, names, values) in history.published.items():
            must = may = False
            for s in subs.values():
                if not chain_matches(s.chain, names, values):
                    continue
                if s.active <= t < s.unsubscribed:
                    must = True
                elif s.subscribed <= t < s.removed:
                    may = True
            n = counts.get(eid, 0)
            if n > 1:
                r.duplicated.append((eid, client))
            elif must:
                gone = any(a <= t < b for a, b in away)
                if n == 1:
                    r.delivered += 1
                    r.replayed += gone
                elif gone:
                    r.lost_while_disconnected.append((eid, client))
                else:
                    r.lost.append((eid, client))
            elif n == 1:
                if may:
                    r.optional += 1
                else:
                    r.unexpected.append((eid, client))
    return r


def check_unit_entries(trace: Iterable[tuple[int, int, Any]], interested: Mapping[EventId, set[int]], levels: int) -> list[str]:
    """Check where event copies went (a simulator ``event_trace``); returns the violations.

    ``interested[eid]`` are the brokers with a client that must get ``eid``.  A copy
    sent *down* over a level-``p`` gateway enters the receiver's level-``p`` unit;
    that unit must hold an interested broker, or hold the publisher's broker, or
    be transit (some copy of the event leaves it again).  A copy *climbing* to a
    decider of the publisher's level-``l`` unit must stay inside the publisher's
    level-``l - 1`` unit.
    """
    from multihop.ges.address import contains, level_of_difference, unit_id
    from multihop.ges.messages import UP

    crossings: dict[EventId, list[tuple[int, int, Any]]] = {}
    for src, dst, copy in trace:
        crossings.setdefault(copy.event.id, []).append((src, dst, copy))
    bad = []
    for eid, hops in crossings.items():
        want = interested.get(eid, set())
        for src, dst, copy in hops:
            if copy.mode == UP:
                if not contains(unit_id(copy.origin, copy.level - 1, levels), dst):
                    bad.append(f"{eid}: a climbing copy left the publisher's level-{copy.level - 1} unit")
                continue
            p = level_of_difference(src, dst, levels)
            entered = unit_id(dst, p, levels)
            if contains(entered, copy.origin) or any(contains(entered, b) for b in want):
                continue
            if any(contains(entered, s) and not contains(entered, d) for s, d, _ in hops):
                continue  # transit: the event passes through on its way elsewhere
            bad.append(f"{eid}: entered unit {entered:#x} (level {p}) with no interested client and left it nowhere")
    return bad
