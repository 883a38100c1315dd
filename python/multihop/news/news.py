"""A news: what a source sends, what the peers keep, what a sink receives.

A news carries its id (source, seq), its priority, its topics, the time it
entered the dispatch system (stamped by its source), the domain it entered
(``origin``: relays carry it to other domains unchanged) and its payload of at
most :data:`MAX_PAYLOAD` bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from multihop.news.ids import NewsKey, Nid

if TYPE_CHECKING:
    from multihop.news.wire import M

__all__ = ["News", "StoredNews", "MAX_PAYLOAD"]

MAX_PAYLOAD = 1_040_000
"""The largest payload of one news, in bytes (the Flounder bound of ``news.payload``)."""


class News(NamedTuple):
    """A news as a sink receives it from :meth:`multihop.news.Sink.next` (an immutable named tuple).

    Attributes:
        source: the id of the source that sent it.
        seq: its number among that source's news (0, 1, 2, ...).
        priority: the source's priority (0..255).
        topics: the topics it was sent under.
        entry_ns: when it entered the dispatch system (``CLOCK_MONOTONIC`` ns).
        origin: the id of the domain it entered (another one if a relay brought it).
        payload: the bytes the source sent.
        received_ns: when this sink received it (its clock).
        peer: the peer that delivered it.
    """

    source: Nid
    seq: int
    priority: int
    topics: tuple[str, ...]
    entry_ns: int
    origin: Nid
    payload: bytes
    received_ns: int
    peer: Nid

    @property
    def id(self) -> NewsKey:
        """(source, seq): the news id, unique in every domain."""
        return (self.source, self.seq)

    @property
    def age_ns(self) -> int:
        """Time it spent in the system before this sink received it."""
        return self.received_ns - self.entry_ns


class StoredNews:
    """A news held by a peer, and the sink queues that still hold it."""

    __slots__ = ("key", "priority", "entry_ns", "release_ns", "origin", "topics", "wire_topics", "payload", "refs", "_deliver")

    def __init__(
        self, key: NewsKey, priority: int, entry_ns: int, release_ns: int, origin: Nid, topics: tuple[str, ...], wire_topics: str, payload: bytes
    ) -> None:
        self.key = key
        self.priority = priority
        self.entry_ns = entry_ns
        self.release_ns = release_ns
        self.origin = origin
        self.topics = topics
        self.wire_topics = wire_topics
        self.payload = payload
        self.refs = 0  # sink queues (and in-flight tables) holding it
        self._deliver: M.messages.deliver | None = None

    def deliver(self) -> M.messages.deliver:
        """The ``deliver`` message of this news (one object for every sink: drivers encode it once)."""
        if self._deliver is None:
            from multihop.news.wire import M

            k = self.key
            self._deliver = M.messages.deliver(k[0], k[1], self.priority, self.entry_ns, self.origin, self.wire_topics, self.payload)
        return self._deliver
