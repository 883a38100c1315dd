"""An independent brute-force model of the GES gateway propagation rules (for the property tests).

It shares no code with ``multihop.ges`` beyond reading a Topology: addresses
are strings and tuples, dissemination is a global search over the current
gateways instead of messages, and shortest paths are Bellman-Ford instead of
the row-by-row Dijkstra.

Rules modelled (routing paper 3.2, gateways paper 2-4):
* each gateway side is a record (origin, peer, level); a record crosses only
  gateways of level <= its level, and crossing a level-p gateway turns a near
  end of level x into level max(x, p);
* a broker keeps, per record, dead over alive and the lowest near level it was
  ever offered; a lost gateway makes both of its records dead at both ends and
  that spreads like any record;
* every broker's graph is built from what it holds.
"""

from __future__ import annotations

import math
from typing import Any

Parts = tuple[int, ...]


def parts(a: str) -> Parts:
    return tuple(int(p) for p in a.split(".")) if a else ()


def name(p: Parts) -> str:
    return ".".join(str(x) for x in p)


def glevel(a: Parts, b: Parts) -> int:
    n = len(a) - 1
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return n - i
    raise ValueError("same broker")


def prefix(a: Parts, level: int) -> Parts:
    return a[: len(a) - level]


def inside(unit: Parts, broker: Parts) -> bool:
    return broker[: len(unit)] == unit


class Model:
    """The model: brokers, current gateways, and what every broker holds."""

    def __init__(self, topology: Any) -> None:
        self.n = topology.levels
        self.brokers: set[Parts] = {parts(str(a)) for a in topology.brokers}
        self.gw: dict[frozenset[Parts], tuple[int, int, int]] = {}  # pair -> (level, incarnation, cost)
        self.inc: dict[frozenset[Parts], int] = {}
        # record id: (pair, incarnation, origin) -> (origin, peer, level, cost)
        self.records: dict[tuple[Any, ...], tuple[Parts, Parts, int, int]] = {}
        # broker -> record id -> (dead, x)
        self.state: dict[Parts, dict[tuple[Any, ...], tuple[bool, int]]] = {b: {} for b in self.brokers}
        for g in topology.gateways.values():
            self._up(parts(str(g.a)), parts(str(g.b)), g.cost)
        self.propagate()

    def _up(self, a: Parts, b: Parts, cost: int) -> None:
        pair = frozenset((a, b))
        inc = self.inc.get(pair, -1) + 1
        self.inc[pair] = inc
        lvl = glevel(a, b)
        self.gw[pair] = (lvl, inc, cost)
        for o, p in ((a, b), (b, a)):
            rid = (pair, inc, o)
            self.records[rid] = (o, p, lvl, cost)
            self.state[o][rid] = (False, 0)

    def add(self, a: str, b: str, cost: int = 0) -> None:
        self._up(parts(a), parts(b), cost)
        self.propagate()

    def _down(self, a: Parts, b: Parts, ends: tuple[Parts, ...]) -> None:
        pair = frozenset((a, b))
        _, inc, _ = self.gw.pop(pair)
        for end in ends:
            for o in (a, b):
                self._kill(end, (pair, inc, o))

    def _kill(self, broker: Parts, rid: tuple[Any, ...]) -> None:
        """Broker learns the record is dead: it keeps the form it knew (-1: never knew it alive, no graph node)."""
        h = self.state[broker].get(rid)
        if h is None or not h[0]:
            self.state[broker][rid] = (True, h[1] if h is not None else -1)

    def remove(self, a: str, b: str) -> None:
        x, y = parts(a), parts(b)
        self._down(x, y, (x, y))
        self.propagate()

    def kill(self, a: str) -> None:
        x = parts(a)
        for pair in [p for p in self.gw if x in p]:
            (y,) = tuple(pair - {x})
            self._down(x, y, (y,))
        self.brokers.discard(x)
        del self.state[x]
        self.propagate()

    def _adj(self) -> dict[Parts, list[tuple[Parts, int]]]:
        adj: dict[Parts, list[tuple[Parts, int]]] = {b: [] for b in self.brokers}
        for pair, (lvl, _, _) in self.gw.items():
            a, b = tuple(pair)
            adj[a].append((b, lvl))
            adj[b].append((a, lvl))
        return adj

    def propagate(self) -> None:
        adj = self._adj()
        for rid, (_, _, lvl, _) in self.records.items():
            # dead spreads from every broker that holds it dead
            stack = [b for b in self.brokers if self.state[b].get(rid, (False, 0))[0]]
            seen = set(stack)
            while stack:
                b = stack.pop()
                for c, p in adj[b]:
                    if p <= lvl and c not in seen:
                        seen.add(c)
                        self._kill(c, rid)
                        stack.append(c)
            # alive spreads from alive holders through brokers that do not hold it dead; lowest x wins
            best: dict[Parts, int] = {}
            for b in self.brokers:
                h = self.state[b].get(rid)
                if h is not None and not h[0]:
                    best[b] = h[1]
            frontier = sorted(best.items(), key=lambda t: t[1])
            changed = True
            while changed:
                changed = False
                for b, x in list(best.items()):
                    for c, p in adj[b]:
                        if p > lvl:
                            continue
                        h = self.state[c].get(rid)
                        if h is not None and h[0]:
                            continue
                        nx = max(x, p)
                        if c not in best or nx < best[c]:
                            best[c] = nx
                            changed = True
            del frontier
            for b, x in best.items():
                self.state[b][rid] = (False, x)

    # ---- a broker's graph, built independently ---------------------------------

    def graph(self, broker: str) -> "ModelGraph":
        return ModelGraph(self, parts(broker))


class ModelGraph:
    """What the model says broker ``v``'s connectivity graph is."""

    def __init__(self, m: Model, v: Parts) -> None:
        self.v = v
        n = m.n
        self.level: dict[Parts, int] = {v: 0}
        self.edges: dict[tuple[Parts, Parts], dict[Any, int]] = {}
        self.edge_level: dict[tuple[Parts, Parts], int] = {}
        self.own: dict[Parts, tuple[set[Parts], set[Parts]]] = {}
        self.own_hops: dict[Parts, dict[Parts, int]] = {}  # far unit -> {peer broker: cost} for the vertex's own gateways
        for rid, (dead, x) in m.state[v].items():
            if x < 0:
                continue
            o, p, lvl, cost = m.records[rid]
            near, far = prefix(o, x), prefix(p, lvl)
            if (lvl > 0 and inside(far, v)) or (x > 0 and inside(near, v)):
                own, other, olvl = (far, near, x) if inside(far, v) else (near, far, lvl)
                ul, dd = self.own.setdefault(own, (set(), set()))
                if not dead:
                    (ul if olvl <= n + 1 - len(own) else dd).add(other)
                continue
            self.level.setdefault(near, x)
            self.level.setdefault(far, lvl)
            if dead:
                continue
            a, b = sorted([(x, near), (lvl, far)])
            key = (a[1], b[1])
            gws = self.edges.setdefault(key, {})
            gkey = rid[:2]
            gws[gkey] = min(cost, gws.get(gkey, cost))
            self.edge_level[key] = lvl
            if o == v and x == 0:
                hops = self.own_hops.setdefault(far, {})
                hops[p] = min(cost, hops.get(p, cost))

    def weight(self, key: tuple[Parts, Parts]) -> int:
        a, b = key
        return self.level[a] + self.level[b] + min(self.edges[key].values())

    def edge_tuples(self) -> list[tuple[str, str, int, float, int]]:
        out = [(name(a), name(b), self.edge_level[(a, b)], float(self.weight((a, b))), len(g)) for (a, b), g in self.edges.items()]
        return sorted(out, key=lambda t: (t[2], t[0], t[1]))

    def l_ul(self, u: Parts) -> set[Parts]:
        if u in self.own:
            return self.own[u][0]
        out = set()
        for a, b in self.edges:
            if u in (a, b):
                o = b if a == u else a
                if self.level[o] <= self.level[u]:
                    out.add(o)
        return out

    def l_d(self, u: Parts) -> set[Parts]:
        if u in self.own:
            return self.own[u][1]
        out = set()
        for a, b in self.edges:
            if u in (a, b):
                o = b if a == u else a
                if self.level[o] > self.level[u]:
                    out.add(o)
        return out

    def paths(self) -> dict[Parts, tuple[float, Parts | None]]:
        """Bellman-Ford over L_UL links toward the vertex: node -> (cost, best hop); ties to fewer links, then the lowest hop."""
        INF = (math.inf, 0, None)
        lab: dict[Parts, tuple[float, int, Any]] = {u: INF for u in self.level}
        lab[self.v] = (0.0, 0, ())  # () sorts before every hop; stands for "no hop"
        for _ in range(len(self.level) + 1):
            changed = False
            for u in self.level:
                if u == self.v:
                    continue
                for w in self.l_ul(u):
                    cw, nw, hw = lab[w]
                    if math.isinf(cw):
                        continue
                    key = (u, w) if (u, w) in self.edges else (w, u)
                    c = cw + self.weight(key)
                    if w == self.v:
                        if self.level[u] == 0:
                            h = u
                        else:
                            hops = self.own_hops.get(u, {})
                            h = min(hops, key=lambda p: (hops[p], p)) if hops else u
                    else:
                        h = hw
                    old = lab[u]
                    if (c, nw + 1, h) < (old[0], old[1], old[2] if old[2] is not None else (999,)):
                        lab[u] = (c, nw + 1, h)
                        changed = True
            if not changed:
                break
        return {u: (c, None if h in ((), None) else h) for u, (c, _, h) in lab.items()}

    def unit_partitioned(self) -> set[str]:
        p = self.paths()
        out = {name(u) for u in self.level if u != self.v and (not self.l_ul(u) or math.isinf(p[u][0]))}
        out |= {name(u) for u, (ul, _) in self.own.items() if not ul}
        return out

    def system_partitioned(self) -> set[str]:
        out = {name(u) for u in self.level if u != self.v and not self.l_ul(u) and not self.l_d(u)}
        out |= {name(u) for u, (ul, dd) in self.own.items() if not ul and not dd}
        return out
