"""Peers of a domain: who is there, who is active, who went silent.

Each peer sends a heartbeat every ``heartbeat_ns``; any message counts as a
sign of life.  A peer not heard for ``dead_after_ns`` is declared dead (a
closed channel declares it dead at once).  ``active`` peers serve partitions;
a joining peer is a member (it receives every update) but not yet active.
``epoch`` counts the changes, so clients can tell a newer list from an older.
"""

from __future__ import annotations

from dataclasses import dataclass

from multihop.news.ids import Nid

__all__ = ["Membership", "Member"]


@dataclass
class Member:
    """What a peer knows of another peer."""

    active: bool
    last_heard_ns: int
    load: int = 0


class Membership:
    """This peer's view of the domain's peers (itself included)."""

    def __init__(self, me: Nid, active: bool, heartbeat_ns: int, dead_after_ns: int, now_ns: int) -> None:
        if dead_after_ns <= heartbeat_ns:
            raise ValueError(f"dead_after ({dead_after_ns} ns) must be longer than the heartbeat ({heartbeat_ns} ns)")
        self.me = me
        self.me_active = active
        self.heartbeat_ns = heartbeat_ns
        self.dead_after_ns = dead_after_ns
        self.others: dict[Nid, Member] = {}
        self.epoch = 1
        self.next_beat_ns = now_ns

    def heard(self, peer: Nid, now_ns: int, active: bool | None = None, load: int | None = None) -> bool:
        """Note a sign of life (and its active flag, if the message says); True if membership changed."""
        m = self.others.get(peer)
        if m is None:
            self.others[peer] = Member(bool(active), now_ns, load or 0)
            self.epoch += 1
            return True
        m.last_heard_ns = now_ns
        if load is not None:
            m.load = load
        if active is not None and active != m.active:
            m.active = active
            self.epoch += 1
            return True
        return False

    def remove(self, peer: Nid) -> bool:
        """Forget ``peer`` (dead or gone); True if it was a member."""
        if self.others.pop(peer, None) is None:
            return False
        self.epoch += 1
        return True

    def set_active(self, active: bool) -> None:
        """Set this peer's own active flag."""
        if active != self.me_active:
            self.me_active = active
            self.epoch += 1

    def silent(self, now_ns: int) -> list[Nid]:
        """Peers not heard for ``dead_after_ns``."""
        limit = now_ns - self.dead_after_ns
        return [p for p, m in self.others.items() if m.last_heard_ns <= limit]

    def active_ids(self) -> list[Nid]:
        """The active peers, this one included if active, sorted."""
        ids = [p for p, m in self.others.items() if m.active]
        if self.me_active:
            ids.append(self.me)
        return sorted(ids)

    def all_ids(self) -> list[Nid]:
        """Every member, this one included, sorted."""
        return sorted([*self.others, self.me])

    def listing(self) -> list[tuple[Nid, bool]]:
        """(id, active) of every member, this one included, sorted by id."""
        out = [(p, m.active) for p, m in self.others.items()]
        out.append((self.me, self.me_active))
        return sorted(out)

    def next_deadline(self) -> int:
        """The next heartbeat, or the next time a silent peer would be declared dead."""
        t = self.next_beat_ns
        for m in self.others.values():
            t = min(t, m.last_heard_ns + self.dead_after_ns)
        return t
