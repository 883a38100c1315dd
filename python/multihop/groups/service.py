"""The membership service: application groups, node ids, multicast groups and views (sans-IO).

In phase 2 this machine runs in the initial monitor, beside the name
registry; here it is a value that takes messages and returns messages, so
the in-memory network (:mod:`multihop.groups.simnet`) and the tests drive
it.  It never reads a clock and never touches a socket.

Inputs (:meth:`MembershipService.handle`): the requests of
:mod:`multihop.groups.messages`, :class:`Flushed` reports, and :class:`Died`
notices from a dead endpoint's monitor.  Outputs: ``(endpoint, message)``
pairs, every one a :class:`Reply`, a :class:`Prepare` or an :class:`Install`.

**View changes** (how the view rule is kept):

1. requests that change membership (join, leave, a death, multicast
   create/join/leave) queue up; when no change is under way, the queued ones
   become the next view together;
2. if the current view has members, each live one gets :class:`Prepare` and
   stops sending in it; each answers :class:`Flushed` with the last ``seq``
   of every stream it sent to (a sequencer: its last stamp and how far it
   stamped each sender).  A dead member's report comes from its monitor in
   :class:`Died` (what its link carried before the death);
3. with every report in, the service installs the next view: one
   :class:`Install` (the view, the closing marks, who joined, left, died) to
   every member of the new view and to every member that left, then the
   replies.  A member installs the view only once it has delivered every
   message of the old view up to the marks that was addressed to it.

Requests that are wrong get an error :class:`Reply` at once and change
nothing: an unknown group, a second join, a leave by a non-member, an unknown
multicast id, an unknown ordering or tree mode.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from multihop.errors import ProtocolError
from multihop.groups.errors import GroupError
from multihop.groups.ids import multicast_id, node_id
from multihop.groups.messages import (
    CreateGroup,
    CreateMulticast,
    Died,
    Flushed,
    Install,
    Join,
    JoinMulticast,
    Leave,
    LeaveMulticast,
    Prepare,
    Reply,
    Request,
)
from multihop.groups.trees import parse_tree
from multihop.groups.view import ORDERS, Endpoint, View

__all__ = ["MembershipService", "Outgoing"]

Outgoing = tuple[Endpoint, "Reply | Prepare | Install"]


@dataclass
class _Change:
    """One queued membership change and the request (if any) to answer when it is installed."""

    kind: str  # join | leave | died | mcreate | mjoin | mleave | noop (a dead endpoint's batched request)
    endpoint: Endpoint
    req: Request | None = None
    mcast: int = 0


@dataclass
class _Group:
    """The service's state of one application group."""

    name: str
    group_id: int
    view: View
    next_node: int = 1
    next_mcast: int = 1
    queued: list[_Change] = field(default_factory=list)
    batch: list[_Change] = field(default_factory=list)
    waiting: set[int] = field(default_factory=set)  # node ids whose Flushed is awaited
    reports: dict[int, Flushed] = field(default_factory=dict)
    dead: set[Endpoint] = field(default_factory=set)

    @property
    def changing(self) -> bool:
        return bool(self.batch)


class MembershipService:
    """Every application group of one universe (one runtime), and their views."""

    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}
        self._next_group_id = 1

    # ---- queries -----------------------------------------------------------

    def groups(self) -> dict[str, View]:
        """Every group's installed view, by name."""
        return {name: g.view for name, g in self._groups.items()}

    def view(self, group: str) -> View:
        """The installed view of ``group``; GroupError if there is no such group."""
        return self._group(group).view

    def group_id(self, group: str) -> int:
        """The universe-unique id of ``group`` (TN-006's group ID)."""
        return self._group(group).group_id

    def changing(self, group: str) -> bool:
        """Whether a view change of ``group`` is under way."""
        return self._group(group).changing

    def _group(self, name: str) -> _Group:
        g = self._groups.get(name)
        if g is None:
            known = ", ".join(sorted(self._groups)) or "none"
            raise GroupError(f"unknown group {name!r} (groups: {known})")
        return g

    # ---- input ---------------------------------------------------------------

    def handle(self, msg: object) -> list[Outgoing]:
        """Take one message; return what to send, in order.

        Raises:
            ProtocolError: a message that is not part of the protocol, or a
                :class:`Flushed` nobody asked for (the state is unchanged).
        """
        if isinstance(msg, Request):
            try:
                return self._request(msg)
            except GroupError as e:
                return [(msg.endpoint, Reply(msg.req, msg.group, error=str(e)))]
        if isinstance(msg, Flushed):
            return self._flushed(msg)
        if isinstance(msg, Died):
            return self._died(msg)
        raise ProtocolError(f"the membership service does not take {type(msg).__name__} messages")

    def _request(self, r: Request) -> list[Outgoing]:
        if isinstance(r, CreateGroup):
            if r.group in self._groups:
                raise GroupError(f"group {r.group!r} already exists")
            if not isinstance(r.group, str) or not r.group:
                raise GroupError(f"a group name is a non-empty string, got {r.group!r}")
            if r.order not in ORDERS:
                raise GroupError(f"unknown ordering {r.order!r}; valid: {', '.join(ORDERS)}")
            spec = str(parse_tree(r.tree))
            gid = self._next_group_id
            self._next_group_id += 1
            self._groups[r.group] = _Group(r.group, gid, View(r.group, 0, r.order, spec))
            return [(r.endpoint, Reply(r.req, r.group, value=gid))]
        g = self._group(r.group)
        if r.endpoint in g.dead:
            raise GroupError(f"endpoint {r.endpoint} is dead")
        member = self._will_be_member(g, r.endpoint)
        if isinstance(r, Join):
            if member:
                raise GroupError(f"endpoint {r.endpoint} is already a member of group {r.group!r} (or joining it)")
            change = _Change("join", r.endpoint, r)
        elif isinstance(r, Leave):
            if not member:
                raise GroupError(f"endpoint {r.endpoint} is not a member of group {r.group!r}")
            change = _Change("leave", r.endpoint, r)
        else:
            if not member:
                raise GroupError(f"endpoint {r.endpoint} is not a member of group {r.group!r}")
            if isinstance(r, CreateMulticast):
                change = _Change("mcreate", r.endpoint, r)
            elif isinstance(r, (JoinMulticast, LeaveMulticast)):
                inside = self._will_be_in_multicast(g, r.endpoint, r.mcast)
                if isinstance(r, JoinMulticast) and inside:
                    raise GroupError(f"endpoint {r.endpoint} is already in multicast group {r.mcast} of {r.group!r}")
                if isinstance(r, LeaveMulticast) and not inside:
                    raise GroupError(f"endpoint {r.endpoint} is not in multicast group {r.mcast} of {r.group!r}")
                change = _Change("mjoin" if isinstance(r, JoinMulticast) else "mleave", r.endpoint, r, r.mcast)
            else:
                raise ProtocolError(f"unknown request {type(r).__name__}")
        g.queued.append(change)
        return self._advance(g)

    def _will_be_member(self, g: _Group, e: Endpoint) -> bool:
        """Whether ``e`` is a member once every queued and batched change is applied."""
        member = g.view.node_of(e) is not None
        for c in g.batch + g.queued:
            if c.endpoint == e and c.kind in ("join", "leave", "died"):
                member = c.kind == "join"
        return member

    def _will_be_in_multicast(self, g: _Group, e: Endpoint, mcast: int) -> bool:
        """Whether ``e`` is in multicast group ``mcast`` once the queued changes are applied.

        Raises GroupError when the multicast group neither exists nor is queued for creation
        (a queued creation has no id yet, so it cannot be named).
        """
        node = g.view.node_of(e)
        existing = dict(g.view.multicast)
        if mcast not in existing:
            raise GroupError(f"multicast id {mcast} is not a multicast group of {g.name!r}")
        inside = node is not None and node in existing[mcast]
        for c in g.batch + g.queued:
            if c.endpoint == e and c.mcast == mcast and c.kind in ("mjoin", "mleave"):
                inside = c.kind == "mjoin"
            if c.endpoint == e and c.kind in ("leave", "died"):
                inside = False
        return inside

    def _died(self, d: Died) -> list[Outgoing]:
        out: list[Outgoing] = []
        for g in self._groups.values():
            # its queued requests go; batched ones become no-ops (the change under way must still end)
            g.queued = [c for c in g.queued if c.endpoint != d.endpoint]
            g.batch = [c if c.endpoint != d.endpoint else _Change("noop", d.endpoint) for c in g.batch]
            node = g.view.node_of(d.endpoint)
            if node is not None and d.endpoint not in g.dead:
                g.dead.add(d.endpoint)
                if node not in g.reports:
                    report = next((f for f in d.flushed if f.group == g.name and f.view == g.view.view_id), None)
                    g.reports[node] = report or Flushed(g.name, g.view.view_id, node)
                g.waiting.discard(node)
                (g.batch if g.changing else g.queued).append(_Change("died", d.endpoint))
            out += self._advance(g)
        return out

    def _flushed(self, f: Flushed) -> list[Outgoing]:
        g = self._group(f.group)
        if f.view < g.view.view_id or (f.view == g.view.view_id and f.node in g.reports):
            return []  # written just before its sender died; its monitor's report came first and stands
        if f.view != g.view.view_id or f.node not in g.waiting:
            raise ProtocolError(
                f"unexpected Flushed from node {f.node} for {f.group!r} view {f.view} "
                f"(installed view {g.view.view_id}, waiting for {sorted(g.waiting)})"
            )
        g.waiting.discard(f.node)
        g.reports[f.node] = f
        return self._advance(g)

    # ---- view changes ----------------------------------------------------------

    def _advance(self, g: _Group) -> list[Outgoing]:
        """Start the next change if none is under way; install it when every report is in."""
        out: list[Outgoing] = []
        if not g.changing and g.queued:
            g.batch, g.queued = g.queued, []
            live = {n for n, e in g.view.members if e not in g.dead}
            g.waiting = live - set(g.reports)
            out += [(g.view.endpoint(n), Prepare(g.name, g.view.view_id)) for n in sorted(g.waiting)]
        if g.changing and not g.waiting:
            out += self._install(g)
            out += self._advance(g)  # changes that queued up meanwhile
        return out

    def _install(self, g: _Group) -> list[Outgoing]:
        old = g.view
        members = dict(old.members)
        mcasts = {m: set(nodes) for m, nodes in old.multicast}
        joined: list[int] = []
        left: list[int] = []
        died: list[int] = []
        replies: list[Outgoing] = []
        for c in g.batch:
            node = next((n for n, e in members.items() if e == c.endpoint), None)
            value = 0
            if c.kind == "join":
                node = node_id(g.next_node)
                g.next_node += 1
                members[node] = c.endpoint
                joined.append(node)
                value = node
            elif c.kind in ("leave", "died") and node is not None:
                del members[node]
                for nodes in mcasts.values():
                    nodes.discard(node)
                (left if c.kind == "leave" else died).append(node)
            elif c.kind == "mcreate":
                value = multicast_id(g.next_mcast)
                g.next_mcast += 1
                mcasts[value] = set()
            elif c.kind == "mjoin" and node is not None:
                mcasts[c.mcast].add(node)
            elif c.kind == "mleave" and node is not None:
                mcasts[c.mcast].discard(node)
            if c.req is not None:
                replies.append((c.endpoint, Reply(c.req.req, g.name, value=value)))
        new = View.make(g.name, old.view_id + 1, old.order, old.tree, members, mcasts)
        closing = tuple(m for n in sorted(g.reports) for m in g.reports[n].marks)
        install = Install(new, closing, tuple(joined), tuple(left), tuple(died))
        leavers = [old.endpoint(n) for n in left]
        out: list[Outgoing] = [(e, install) for _, e in new.members]
        out.extend((e, install) for e in leavers)
        g.view = new
        g.batch, g.reports, g.waiting = [], {}, set()
        g.dead = {e for e in g.dead if new.node_of(e) is not None}
        return out + replies

    def member_endpoints(self, groups: Iterable[str] | None = None) -> set[Endpoint]:
        """Every endpoint that is a member of one of ``groups`` (default: all) in the installed views."""
        names = self._groups if groups is None else list(groups)
        return {e for name in names for _, e in self._group(name).view.members}
