"""An in-memory network that drives the group machines: the reference driver of phase 1.

:class:`SimNet` holds one :class:`~multihop.groups.service.MembershipService`,
any number of :class:`~multihop.groups.member.GroupMember` endpoints, and
stand-ins for the monitors' forwarding: every frame travels from its sender's
core down the tree of its destination in its view (``flat``, ``radix k``,
``numa`` or ``machine``, built by :func:`~multihop.groups.trees.build_tree`),
each core delivering to its local members and passing copies to its
children.  Every link is FIFO; which link moves next is drawn from one seeded
random generator, so one seed gives one run, and different seeds interleave
senders, view changes and deaths differently.

A killed endpoint behaves as phase 2 specifies for a dead dispatcher: what it
wrote before dying is still forwarded, frames for it are dropped, and its
monitor tells the service (:class:`~multihop.groups.messages.Died`) how far
each of its streams went.

Every send and delivery is recorded in a :class:`~multihop.groups.checkers.History`
(message id: the payload, which a test keeps unique), so the checkers can
judge a run.  Nothing here reads a clock.
"""

from __future__ import annotations

import random
from collections import deque
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from multihop.groups.checkers import History
from multihop.groups.events import Delivered, Multicast, Sent, ToService, Unicast
from multihop.groups.member import GroupMember
from multihop.groups.messages import Data, Died, Flushed, Install, StreamMark, Submit
from multihop.groups.service import MembershipService
from multihop.groups.tree import Tree
from multihop.groups.trees import build_tree
from multihop.groups.view import Endpoint, View
from multihop.topology import Topology

if TYPE_CHECKING:
    from multihop.groups.model import MachineModel

__all__ = ["SimNet"]

#: a FIFO link of the network: to the service (from a member, or a dead member's monitor by name), from the
#: service to a member, a member up to its monitor, a monitor down to a member, one tree edge between monitors
_Link: TypeAlias = (
    tuple[Literal["to-service"], Endpoint | str] | tuple[Literal["from-service", "up", "down"], Endpoint] | tuple[Literal["edge"], int, int]
)

_SERVICE = "service"


class SimNet:
    """The service, the members and the forwarding between them, stepped one link at a time.

    Args:
        seed: the random generator's seed (which link moves next).
        topology: the sockets, for ``numa`` trees (default: all cores on one socket).
        model: a machine model, for ``machine`` trees.
    """

    def __init__(self, seed: int = 0, topology: Topology | None = None, model: MachineModel | None = None) -> None:
        self.rng = random.Random(seed)
        self.topology = topology
        self.model = model
        self.service = MembershipService()
        self.members: dict[Endpoint, GroupMember] = {}
        self.dead: set[Endpoint] = set()
        self.history = History()
        self.events: dict[Endpoint, list[object]] = {}
        self.steps = 0
        self.max_link = 0
        self._links: dict[_Link, deque[Any]] = {}
        self._busy: list[_Link] = []
        self._views: dict[tuple[str, int], View] = {}
        self._trees: dict[tuple[str, int, int, int], Tree] = {}
        self._written: dict[Endpoint, dict[tuple[str, int], dict[int, StreamMark]]] = {}
        self._next_dispatcher = 1

    # ---- membership of the network -------------------------------------------------

    def add(self, core: int) -> Endpoint:
        """A new endpoint (dispatcher) on ``core``."""
        ep = Endpoint(core, self._next_dispatcher)
        self._next_dispatcher += 1
        self.members[ep] = GroupMember(ep)
        self.events[ep] = []
        return ep

    def kill(self, ep: Endpoint) -> None:
        """``ep`` dies now: its link's frames still go out, its monitor reports it with how far it wrote."""
        self.dead.add(ep)
        reports = []
        for (group, view_id), marks in self._written.get(ep, {}).items():
            view = self._views.get((group, view_id))
            node = view.node_of(ep) if view is not None else None
            if node is not None:
                reports.append(Flushed(group, view_id, node, tuple(marks[d] for d in sorted(marks))))
        self._put(("to-service", f"monitor-{ep.core}"), Died(ep, tuple(reports)))

    # ---- driving the members -------------------------------------------------------

    def do(self, ep: Endpoint, action: str, *args: Any) -> Any:
        """Call ``member.action(*args)`` on ``ep``'s machine and send what it produced.

        Raises:
            ValueError: ``ep`` is dead (a dead dispatcher does nothing more).
        """
        if ep in self.dead:
            raise ValueError(f"endpoint {ep} is dead")
        result = getattr(self.members[ep], action)(*args)
        self._pump(ep)
        return result

    def _pump(self, ep: Endpoint) -> None:
        m = self.members[ep]
        for t in m.transmits():
            if isinstance(t, ToService):
                self._put(("to-service", ep), t.msg)
            else:
                self._note_written(ep, t)
                self._put(("up", ep), t)
        for e in m.events():
            self.events[ep].append(e)
            if isinstance(e, Sent):
                recipients = set(e.recipients)
                if e.payload in self.history.messages:
                    self.history.readdress(e.payload, recipients)  # a total-order message submitted again
                else:
                    self.history.send(ep, e.payload, (e.group, e.dest), recipients)
            elif isinstance(e, Delivered):
                self.history.deliver(ep, e.payload)

    def _note_written(self, ep: Endpoint, t: Multicast | Unicast) -> None:
        """What a monitor learns from the frames it forwards for ``ep`` (its report if ``ep`` dies)."""
        f = t.frame
        if isinstance(f, Submit):
            return
        marks = self._written.setdefault(ep, {}).setdefault((f.group, f.view), {})
        if f.stamp:
            old = marks.get(f.dest)
            submitted = dict(old.submitted) if old is not None else {}
            submitted[f.sender] = max(submitted.get(f.sender, 0), f.seq)
            marks[f.dest] = StreamMark(f.dest, t.origin if isinstance(t, Multicast) else f.sender, f.stamp, tuple(sorted(submitted.items())))
        else:
            marks[f.dest] = StreamMark(f.dest, f.sender, f.seq)

    # ---- the network --------------------------------------------------------------

    def _put(self, link: _Link, item: Any) -> None:
        q = self._links.get(link)
        if q is None:
            q = self._links[link] = deque()
        if not q:
            self._busy.append(link)
        q.append(item)
        self.max_link = max(self.max_link, len(q))

    def step(self) -> bool:
        """Move the head of one non-empty link, chosen at random; False when every link is empty."""
        if not self._busy:
            return False
        i = self.rng.randrange(len(self._busy))
        link = self._busy[i]
        q = self._links[link]
        item = q.popleft()
        if not q:
            self._busy[i] = self._busy[-1]
            self._busy.pop()
        self.steps += 1
        if link[0] == "to-service":
            for ep, msg in self.service.handle(item):
                if isinstance(msg, Install):
                    self._views[(msg.view.group, msg.view.view_id)] = msg.view
                if ep not in self.dead:
                    self._put(("from-service", ep), msg)
        elif link[0] == "from-service" or link[0] == "down":
            ep = link[1]
            if ep not in self.dead:
                self.members[ep].receive(item)
                self._pump(ep)
        elif link[0] == "up":
            self._forward(link[1].core, item)
        else:  # ("edge", parent, child)
            self._arrive(link[2], *item)
        return True

    def run(self, max_steps: int = 1_000_000) -> int:
        """Step until every link is empty; returns the steps taken.

        Raises:
            RuntimeError: still busy after ``max_steps`` (a livelock).
        """
        start = self.steps
        while self.step():
            if self.steps - start > max_steps:
                raise RuntimeError(f"the network is still busy after {max_steps} steps")
        return self.steps - start

    def _forward(self, core: int, t: Multicast | Unicast) -> None:
        """A frame written by an endpoint on ``core`` reaches that core's monitor."""
        f = t.frame
        view = self._views[(f.group, f.view)]
        if isinstance(t, Unicast):
            target = view.endpoint(t.node)
            self._hop(core, target.core, f, None, (target,))
            return
        targets = tuple(view.endpoint(n) for n in view.destinations(f.dest) if n != t.origin)
        key = (f.group, f.view, f.dest, core)
        tree = self._trees.get(key)
        if tree is None:
            cores = sorted({e.core for e in targets})
            topology = self.topology or Topology.flat(sorted({core, *cores}))
            tree = self._trees[key] = build_tree(view.tree, core, cores, topology=topology, model=self.model)
        self._arrive(core, f, tree, targets)

    def _hop(self, here: int, there: int, f: Data | Submit, tree: Tree | None, targets: tuple[Endpoint, ...]) -> None:
        if here == there:
            self._arrive(there, f, tree, targets)
        else:
            self._put(("edge", here, there), (f, tree, targets))

    def _arrive(self, core: int, f: Data | Submit, tree: Tree | None, targets: tuple[Endpoint, ...]) -> None:
        """A frame at ``core``'s monitor: hand it to local targets, copy it to the tree children."""
        for ep in targets:
            if ep.core == core:
                self._put(("down", ep), f)
        if tree is not None:
            for child in tree.children_of(core):
                self._put(("edge", core, child), (f, tree, targets))

    # ---- what tests look at -------------------------------------------------------------

    def of_kind(self, ep: Endpoint, kind: type) -> list[Any]:
        """The events of one kind ``ep`` produced so far."""
        return [e for e in self.events[ep] if isinstance(e, kind)]
