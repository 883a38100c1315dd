"""Import circles of a graph, shared by the import gates (.ci/py_imports.py for Python files, .ci/rust_cycles.py for
Rust modules): the strongly connected sets of two or more nodes, by Tarjan's algorithm, iterative."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

N = TypeVar("N", bound=Hashable)


def circles(graph: Mapping[N, Iterable[N]]) -> list[list[N]]:
    """Every strongly connected set of two or more nodes of ``graph`` (node -> the nodes it uses), each sorted,
    roots taken in the graph's order and children in sorted order (so the output is the same on every run)."""
    index: dict[N, int] = {}
    low: dict[N, int] = {}
    on_stack: set[N] = set()
    stack: list[N] = []
    out: list[list[N]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]  # type: ignore[type-var]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))  # type: ignore[type-var]
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))  # type: ignore[type-var]
    return out
