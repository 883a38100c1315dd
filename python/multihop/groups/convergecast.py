"""Convergecast: replies aggregated back up a multicast's tree to its sender (sans-IO, one core's part).

The old Barrelfish routing library's bcast-with-ccast, as a machine per tree
core (in phase 2, per monitor): a core waits for the replies of its own
members and for one report from each child core, then sends one report up
(the root: delivers the result).  A report is a :class:`Partial`: the replies
gathered so far by member, and the members that will never reply.

Failures end the wait instead of hanging it: :meth:`Convergecast.member_gone`
(a member died or left: the view change says so) and
:meth:`Convergecast.child_gone` (a child core's monitor died: every member
below it is missing).  So a convergecast always completes, with the
survivors' replies and the names of those missing.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from multihop.groups.errors import GroupError

__all__ = ["Partial", "Convergecast"]


@dataclass(frozen=True)
class Partial:
    """Replies by member, and the members that will not reply (dead, left, or below a dead core)."""

    replies: dict[Hashable, object] = field(default_factory=dict)
    missing: frozenset[Hashable] = frozenset()

    def merge(self, other: Partial) -> Partial:
        """This report and ``other`` together (they cover different members)."""
        return Partial({**self.replies, **other.replies}, self.missing | other.missing)


class Convergecast:
    """One tree core's part: its local members' replies and its children's reports, sent up once.

    Args:
        members: the members on this core that must reply.
        children: the child cores whose reports are awaited.
    """

    def __init__(self, members: Iterable[Hashable], children: Iterable[Hashable]) -> None:
        self._waiting_members = set(members)
        self._waiting_children = set(children)
        self._acc = Partial()
        self._done = False
        self._out: Partial | None = None
        self._check()

    def _check(self) -> None:
        if not self._done and not self._waiting_members and not self._waiting_children:
            self._done = True
            self._out = self._acc

    def reply(self, member: Hashable, value: object) -> None:
        """A local member's reply.  GroupError if it is not awaited (a stranger, or a second reply)."""
        if member not in self._waiting_members:
            raise GroupError(f"reply from {member!r}, which this convergecast does not wait for")
        self._waiting_members.discard(member)
        self._acc = Partial({**self._acc.replies, member: value}, self._acc.missing)
        self._check()

    def report(self, child: Hashable, partial: Partial) -> None:
        """A child core's report.  GroupError if that child is not awaited."""
        if child not in self._waiting_children:
            raise GroupError(f"report from core {child!r}, which this convergecast does not wait for")
        self._waiting_children.discard(child)
        self._acc = self._acc.merge(partial)
        self._check()

    def member_gone(self, member: Hashable) -> None:
        """A local member died or left before replying: it is missing (no-op if it already replied)."""
        if member in self._waiting_members:
            self._waiting_members.discard(member)
            self._acc = Partial(self._acc.replies, self._acc.missing | {member})
            self._check()

    def child_gone(self, child: Hashable, members_below: Iterable[Hashable]) -> None:
        """A child core's monitor died before reporting: every member below it is missing."""
        if child in self._waiting_children:
            self._waiting_children.discard(child)
            self._acc = Partial(self._acc.replies, self._acc.missing | frozenset(members_below))
            self._check()

    def poll(self) -> Partial | None:
        """The report to send up (or, at the root, the result), once, when everything awaited is in."""
        out, self._out = self._out, None
        return out

    @property
    def done(self) -> bool:
        """Whether the report has been produced."""
        return self._done
