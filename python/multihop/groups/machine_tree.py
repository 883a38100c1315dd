"""Machine-aware trees: the tree with the lowest simulated shoot-down on a model (Smelt, OSDI'16).

:func:`machine_tree` builds a set of candidate trees and keeps the one that
:func:`~multihop.groups.simulate.simulate` finishes first (ties: the one
built first, so the answer is deterministic).  The candidates:

* ``greedy/F``: the earliest-arrival construction over all cores: repeatedly,
  of every (informed core u, uninformed core v) pair, add the edge u -> v
  that makes v's message arrive first (u is busy ``send`` per copy, so a
  core keeps sending only while that beats having a child forward), with at
  most F children per core (F bounds the acks a core must take back);
* ``sockets/F`` and ``sockets-far/F``: Smelt's shape: first a tree over one
  core per socket (the root, and each other socket's lowest member core),
  built greedily or farthest-socket-first, then inside every socket a greedy
  tree from its entry core, with at most F children per core;
* the fixed modes for comparison: ``flat``, ``radix:K`` (K = 2..8) and ``numa``.

The best candidate is then improved by local search on the simulation
(:func:`improve`): move one core (with its subtree) under another parent at
the front or the back of its children, or to the front of its own parent's
list; keep a move when the simulated shoot-down drops; stop when no move helps
or after ``budget`` simulations.  So the result is never worse, on the model,
than any fixed mode; the benchmark ``benches/bench_groups_model.py`` shows by
how much it is better.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from multihop.groups.errors import GroupError
from multihop.groups.fixed_trees import flat, numa, radix
from multihop.groups.model import MachineModel
from multihop.groups.simulate import SimResult, Workload, simulate
from multihop.groups.tree import Tree

__all__ = ["MachineTree", "machine_tree", "greedy_tree", "socket_tree", "improve"]

FANOUTS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 1 << 30)


@dataclass(frozen=True)
class MachineTree:
    """The chosen tree, its simulated result, and every candidate's shoot-down (ns) by name."""

    tree: Tree
    result: SimResult
    candidate: str
    candidates: dict[str, float]


def _members(root: int, cores: Iterable[int]) -> list[int]:
    listed = list(cores)
    if len(set(listed)) != len(listed):
        raise GroupError(f"a core is listed twice in {listed}")
    return sorted(set(listed) - {root})


def _grow(model: MachineModel, informed: dict[int, float], targets: Sequence[int], kids: dict[int, list[int]], fanout: int) -> None:
    """Greedy earliest arrival: add edges from ``informed`` (core -> time it is free) until ``targets`` are in.

    Each informed core keeps its uninformed targets sorted by one-way cost,
    so a step costs O(cores) and the whole growth O(cores^2).
    """
    left = set(targets) - set(informed)
    order = {u: sorted(left, key=lambda v: (model.one_way(u, v), v)) for u in informed}  # sorted at once: u is this one
    pos = {u: 0 for u in informed}
    while left:  # one target joins per round
        best: tuple[float, int, int] | None = None
        for u, free in informed.items():
            if len(kids.setdefault(u, [])) >= fanout:
                continue
            lst = order[u]
            i = pos[u]
            while i < len(lst) and lst[i] not in left:
                i += 1
            pos[u] = i
            if i == len(lst):
                continue
            v = lst[i]
            arrive = free + model.one_way(u, v)
            if best is None or (arrive, u, v) < best:
                best = (arrive, u, v)
        if best is None:
            raise GroupError(f"fan-out {fanout} cannot reach cores {sorted(left)}")
        arrive, u, v = best
        kids[u].append(v)
        informed[u] += model.cost("send", u, v)
        informed[v] = arrive
        order[v] = sorted(left - {v}, key=lambda w: (model.one_way(v, w), w))
        pos[v] = 0
        left.discard(v)


def greedy_tree(model: MachineModel, root: int, cores: Iterable[int], fanout: int = 1 << 30) -> Tree:
    """The earliest-arrival tree over ``root`` and ``cores`` with at most ``fanout`` children per core."""
    members = _members(root, cores)
    kids: dict[int, list[int]] = {}
    _grow(model, {root: 0.0}, members, kids, fanout)
    return Tree(root, {c: tuple(k) for c, k in kids.items()}, f"greedy/{_spell(fanout)}")


def socket_tree(model: MachineModel, root: int, cores: Iterable[int], fanout: int = 1 << 30, far_first: bool = False) -> Tree:
    """Smelt's shape: a tree over one entry core per socket, then a greedy tree inside each socket.

    The entry of the root's socket is the root; of another socket, its lowest
    member core.  With ``far_first`` the root sends to the other sockets'
    entries itself, farthest (by round trip) first; otherwise that top tree is
    grown greedily too.
    """
    members = _members(root, cores)
    topo = model.topology
    home = topo.socket_of(root)
    by_socket: dict[int, list[int]] = {}
    for c in members:
        by_socket.setdefault(topo.socket_of(c), []).append(c)
    entries = {s: cs[0] for s, cs in by_socket.items() if s != home}
    kids: dict[int, list[int]] = {}
    informed = {root: 0.0}
    if far_first:
        for e in sorted(entries.values(), key=lambda e: (-model.rtt(root, e), e)):
            kids.setdefault(root, []).append(e)
            informed[root] += model.cost("send", root, e)
            informed[e] = informed[root] + model.cost("latency", root, e) + model.cost("recv", root, e)
    else:
        _grow(model, informed, list(entries.values()), kids, fanout)
    for s, cs in sorted(by_socket.items()):
        entry = root if s == home else entries[s]
        local: dict[int, list[int]] = {}  # the fan-out bound holds per level: between sockets, and inside each
        _grow(model, {entry: informed[entry]}, cs, local, fanout)
        for c, k in local.items():
            kids.setdefault(c, []).extend(k)
    name = f"sockets-far/{_spell(fanout)}" if far_first else f"sockets/{_spell(fanout)}"
    return Tree(root, {c: tuple(k) for c, k in kids.items()}, name)


def _spell(fanout: int) -> str:
    return "any" if fanout >= 1 << 30 else str(fanout)


def _subtree(kids: dict[int, list[int]], v: int) -> set[int]:
    out, stack = {v}, [v]
    while stack:
        for c in kids.get(stack.pop(), ()):
            out.add(c)
            stack.append(c)
    return out


def improve(model: MachineModel, tree: Tree, workload: Workload = Workload(), budget: int = 3000) -> tuple[Tree, SimResult]:
    """Local search on the simulated shoot-down (first improvement, deterministic); see the module docstring.

    Candidate parents of a core are the root, its grandparent, its siblings
    and the cores of its own socket, so a pass costs O(cores x socket size)
    simulations.  Returns the improved tree (mode kept) and its result.
    """
    kids = {c: list(tree.children_of(c)) for c in tree.cores}
    parent = {c: tree.parent_of(c) for c in tree.cores}
    best = simulate(model, tree, workload)
    used = 1
    topo = model.topology

    def attempt(new_kids: dict[int, list[int]]) -> SimResult | None:
        nonlocal used
        used += 1
        candidate = Tree(tree.root, {c: tuple(k) for c, k in new_kids.items() if k}, tree.mode)
        r = simulate(model, candidate, workload)
        return r if r.shootdown < best.shootdown else None

    improved = True
    while improved and used < budget:  # each pass either improves or ends the search
        improved = False
        for v in sorted(kids):
            if v == tree.root or used >= budget:
                continue
            p = parent[v]
            assert p is not None
            inside = _subtree(kids, v)
            socket = topo.socket_of(v)
            targets = {tree.root, *kids[p], *(c for c in tree.cores if topo.socket_of(c) == socket)}
            grand = parent[p]
            if grand is not None:
                targets.add(grand)
            moves: list[tuple[int, int]] = [(p, 0)] if kids[p][0] != v else []
            moves += [(u, pos) for u in sorted(targets - inside) for pos in (0, -1)]
            for u, pos in moves:
                if used >= budget:
                    break
                trial = {c: list(k) for c, k in kids.items()}
                trial[p].remove(v)
                if pos == 0:
                    trial[u].insert(0, v)
                else:
                    trial[u].append(v)
                if trial == kids:
                    continue
                r = attempt(trial)
                if r is not None:
                    kids, best = trial, r
                    parent[v] = u
                    improved = True
                    break
    return Tree(tree.root, {c: tuple(k) for c, k in kids.items() if k}, tree.mode), best


def machine_tree(model: MachineModel, root: int, cores: Iterable[int], workload: Workload = Workload(), budget: int = 3000) -> MachineTree:
    """The candidate tree with the lowest simulated shoot-down of ``workload`` on ``model``.

    Raises:
        ModelError: a core the model does not have.
        GroupError: a core listed twice.
    """
    members = _members(root, cores)
    for c in (root, *members):
        model.cost("send", c, c)  # ModelError for a core outside the model
    candidates: list[Tree] = []
    for f in FANOUTS:
        candidates.append(greedy_tree(model, root, members, f))
        candidates.append(socket_tree(model, root, members, f))
        candidates.append(socket_tree(model, root, members, f, far_first=True))
    candidates += [flat(root, members), *(radix(root, members, k) for k in range(2, 9)), numa(root, members, model.topology, model.rtt)]
    best: tuple[float, int] | None = None
    scores: dict[str, float] = {}
    results: list[SimResult] = []
    for i, tree in enumerate(candidates):
        r = simulate(model, tree, workload)
        results.append(r)
        scores.setdefault(tree.mode, r.shootdown)
        if best is None or r.shootdown < best[0]:
            best = (r.shootdown, i)
    assert best is not None
    chosen = candidates[best[1]]
    tree, result = improve(model, Tree(chosen.root, chosen.children, "machine"), workload, budget)
    name = chosen.mode if result.shootdown == results[best[1]].shootdown else f"{chosen.mode}+search"
    return MachineTree(tree, result, name, scores)
