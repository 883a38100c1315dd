"""A sink's queue at a peer: one queue per priority, bounded, with eligibility and expiry times.

Each news waits with three times: when it becomes *eligible* (its release
under the source's ``max_per_unit``, and its embargo ``entry +
min_delivery_time``), when it *expires* (``entry + max_delivery_time``: it may
still be delivered at that instant, not after), and its entry time.
:meth:`SinkQueue.next_eligible` gives the highest-priority eligible news (the
earliest eligible within a priority), so a busy sink gets its high-priority
news first.

Removal by id (a peer's ``QueueUpdate``) is lazy: the heaps keep stale items
that are skipped, and are rebuilt when stale items outnumber live ones.

Overflow (more than ``limit`` news): ``drop-oldest`` evicts the news of the
lowest priority waiting that is due first (for one priority: the oldest),
possibly the arriving one; ``drop-newest`` refuses the arriving news.
"""

from __future__ import annotations

import heapq

from multihop.news.ids import NewsKey

__all__ = ["SinkQueue"]

_NEVER = 1 << 64


class SinkQueue:
    """The news waiting for one sink (see the module docstring)."""

    __slots__ = ("limit", "overflow", "_live", "_heaps", "_order", "_expiry", "_gen", "_stale")

    def __init__(self, limit: int, overflow: str = "drop-oldest") -> None:
        self.limit = limit
        self.overflow = overflow
        self._live: dict[NewsKey, tuple[int, int, int, int]] = {}  # key -> (priority, eligible, expire, gen)
        self._heaps: dict[int, list[tuple[int, int, NewsKey, int]]] = {}  # priority -> (eligible, entry, key, gen)
        self._order: list[int] = []  # the priorities of self._heaps, highest first
        self._expiry: list[tuple[int, NewsKey, int]] = []  # (expire, key, gen)
        self._gen = 0
        self._stale = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def keys(self) -> list[NewsKey]:
        """The ids of the news waiting (any order)."""
        return list(self._live)

    def push(self, key: NewsKey, priority: int, entry_ns: int, eligible_ns: int, expire_ns: int | None) -> NewsKey | None:
        """Add a news; return the id of the news the overflow policy dropped (maybe ``key``), else None.

        Adding a news already waiting does nothing (returns None).
        """
        if key in self._live:
            return None
        if len(self._live) >= self.limit and self.overflow == "drop-newest":
            return key
        self._gen += 1
        gen = self._gen
        exp = _NEVER if expire_ns is None else expire_ns
        self._live[key] = (priority, eligible_ns, exp, gen)
        h = self._heaps.get(priority)
        if h is None:
            h = self._heaps[priority] = []
            self._order = sorted(self._heaps, reverse=True)
        heapq.heappush(h, (eligible_ns, entry_ns, key, gen))
        if expire_ns is not None:
            heapq.heappush(self._expiry, (exp, key, gen))
        if len(self._live) > self.limit:
            victim = self._lowest_first()
            self.remove(victim)
            return victim
        return None

    def _clean(self, prio: int) -> list[tuple[int, int, NewsKey, int]] | None:
        """The heap of ``prio`` with stale items popped off its top, or None if it is empty."""
        h = self._heaps.get(prio)
        while h:
            _, _, key, gen = h[0]
            rec = self._live.get(key)
            if rec is not None and rec[3] == gen:
                return h
            heapq.heappop(h)
            self._stale -= 1
        if h is not None:
            del self._heaps[prio]
            self._order = sorted(self._heaps, reverse=True)
        return None

    def _lowest_first(self) -> NewsKey:
        for prio in reversed(self._order):
            h = self._clean(prio)
            if h:
                return h[0][2]
        raise AssertionError("overflow with an empty queue")

    def remove(self, key: NewsKey) -> bool:
        """Remove a news by id; False if it was not waiting."""
        if self._live.pop(key, None) is None:
            return False
        self._stale += 2 if self._expiry else 1
        if self._stale > 2 * len(self._live) + 64:
            self._rebuild()
        return True

    def _rebuild(self) -> None:
        heaps: dict[int, list[tuple[int, int, NewsKey, int]]] = {}
        for prio, h in self._heaps.items():
            live = [item for item in h if self._live.get(item[2], (0, 0, 0, -1))[3] == item[3]]
            if live:
                heapq.heapify(live)
                heaps[prio] = live
        self._heaps = heaps
        self._order = sorted(heaps, reverse=True)
        self._expiry = [item for item in self._expiry if self._live.get(item[1], (0, 0, 0, -1))[3] == item[2]]
        heapq.heapify(self._expiry)
        self._stale = 0

    def next_eligible(self, now_ns: int) -> NewsKey | None:
        """The highest-priority news eligible at ``now_ns`` (not removed), or None."""
        live = self._live
        for prio in self._order:
            h = self._heaps.get(prio)
            if h:
                top = h[0]
                rec = live.get(top[2])
                if rec is None or rec[3] != top[3]:
                    h = self._clean(prio)
                    if not h:
                        continue
                    top = h[0]
                if top[0] <= now_ns:
                    return top[2]
        return None

    def pop_expired(self, now_ns: int) -> list[NewsKey]:
        """Remove and return every news whose expiry is before ``now_ns``."""
        out: list[NewsKey] = []
        h = self._expiry
        while h and h[0][0] < now_ns:
            _, key, gen = heapq.heappop(h)
            rec = self._live.get(key)
            if rec is not None and rec[3] == gen:
                self._live.pop(key)
                self._stale += 1
                out.append(key)
        return out

    def next_time(self, now_ns: int) -> int | None:
        """The next time something changes: a head becomes eligible, or a news expires (after ``now_ns``)."""
        best: int | None = None
        for prio in list(self._heaps):
            h = self._clean(prio)
            if h and h[0][0] > now_ns and (best is None or h[0][0] < best):
                best = h[0][0]
        h2 = self._expiry
        while h2:
            exp, key, gen = h2[0]
            rec = self._live.get(key)
            if rec is not None and rec[3] == gen:
                if best is None or exp + 1 < best:
                    best = exp + 1
                break
            heapq.heappop(h2)
        return best
