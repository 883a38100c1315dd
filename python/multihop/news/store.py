"""A peer's news store: every news it holds, for its sinks' queues, for history and for recovery.

A news stays while some sink queue (or in-flight table) holds it, and for
``retention_ns`` after it entered in any case, up to ``limit`` news: the
retained ones serve a sink that joins with ``history=True``, the *join cut*
(a sink receives every news that entered after its JOIN, even one a peer got
before it learnt of the sink), and other peers' requests for data.

Tombstones remember lazy updates that arrived before their news (a peer that
delivered it ahead of our copy): when the news comes, those sinks are left out.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterator

from multihop.news.ids import NewsKey, Nid
from multihop.news.news import StoredNews

__all__ = ["NewsStore"]


class NewsStore:
    """Held news by id, oldest arrival first, plus tombstones (see the module docstring)."""

    __slots__ = ("retention_ns", "limit", "_news", "_tombs", "evicted")

    def __init__(self, retention_ns: int, limit: int) -> None:
        self.retention_ns = retention_ns
        self.limit = limit
        self._news: OrderedDict[NewsKey, StoredNews] = OrderedDict()
        self._tombs: OrderedDict[NewsKey, tuple[int, set[Nid]]] = OrderedDict()
        self.evicted = 0  # unreferenced news dropped for the count limit before their retention ended

    def __len__(self) -> int:
        return len(self._news)

    def __contains__(self, key: object) -> bool:
        return key in self._news

    def get(self, key: NewsKey) -> StoredNews | None:
        """The news with id ``key``, or None."""
        return self._news.get(key)

    def add(self, news: StoredNews) -> None:
        """Keep ``news`` (its id must be new)."""
        self._news[news.key] = news

    def __iter__(self) -> Iterator[StoredNews]:
        return iter(list(self._news.values()))

    def tomb(self, key: NewsKey, sink: Nid, now_ns: int) -> None:
        """Remember that ``sink`` already got news ``key``, which we do not hold (yet)."""
        entry = self._tombs.get(key)
        if entry is None:
            self._tombs[key] = (now_ns, {sink})
        else:
            entry[1].add(sink)

    def has_tomb(self, key: NewsKey, sink: Nid) -> bool:
        """Whether a lazy update said ``sink`` already got ``key``."""
        entry = self._tombs.get(key)
        return entry is not None and sink in entry[1]

    def tombs(self, key: NewsKey) -> set[Nid]:
        """The sinks that already got ``key`` (kept until the tombstones expire)."""
        entry = self._tombs.get(key)
        return set(entry[1]) if entry is not None else set()

    def take_tombs(self, key: NewsKey) -> set[Nid]:
        """The sinks that already got ``key`` (and forget them)."""
        entry = self._tombs.pop(key, None)
        return entry[1] if entry is not None else set()

    def prune(self, now_ns: int) -> list[NewsKey]:
        """Forget unreferenced news past their retention (or beyond the limit) and old tombstones; return the ids dropped."""
        dropped: list[NewsKey] = []
        horizon = now_ns - self.retention_ns
        over = len(self._news) - self.limit
        for key, n in list(self._news.items()):  # oldest arrival first (about entry order)
            if n.entry_ns >= horizon and over <= len(dropped):
                break  # the rest is newer and within the limit
            if n.refs > 0:
                continue
            if n.entry_ns < horizon:
                dropped.append(key)
            elif over > len(dropped):
                dropped.append(key)
                self.evicted += 1
        for key in dropped:
            del self._news[key]
        while self._tombs:
            key, (t, _) = next(iter(self._tombs.items()))
            if t >= horizon:
                break
            del self._tombs[key]
        return dropped
