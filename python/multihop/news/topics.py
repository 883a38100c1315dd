"""Topics: names, lists, the domain's declared set, and the peers' topic table.

A topic name is 1-128 characters from ``A-Z a-z 0-9 _ . : / + -``; a news or
a sink lists 1-64 distinct topics.  On the wire a list is one string, names
separated by single spaces (which no name contains).

A domain is *open* (any well-formed topic) unless its peers were started with
a declared set; then a source sending on, or a sink joining, a topic outside
it gets :class:`UnknownTopic` naming it and listing the known ones.

:class:`TopicTable` is the peers' index, topic -> subscribed sinks and the
exclusive ones among them; :meth:`TopicTable.recipients` applies the
exclusivity rule (if any sink flags a topic exclusive, that topic's news goes
only to the exclusive sinks).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable, Sequence

from multihop.news.errors import TopicError, UnknownTopic
from multihop.news.ids import Nid

__all__ = ["MAX_TOPICS", "MAX_TOPIC_LEN", "check_topics", "encode_topics", "decode_topics", "check_declared", "TopicTable"]

MAX_TOPICS = 64
"""The most topics one news or one sink may list."""

MAX_TOPIC_LEN = 128
"""The longest topic name."""

_NAME = re.compile(r"[A-Za-z0-9_.:/+\-]{1,128}")


def check_topics(topics: Any, what: str = "topics") -> tuple[str, ...]:
    """Return ``topics`` as a tuple of checked names, in the order given.

    Raises:
        TopicError: not a list of strings, empty, more than :data:`MAX_TOPICS`,
            a malformed name, or a name listed twice (the message names it).
    """
    if isinstance(topics, str):
        raise TopicError(f"{what} must be a list of topic names, got the string {topics!r} (write [{topics!r}])")
    try:
        items = list(topics)
    except TypeError:
        raise TopicError(f"{what} must be a list of topic names, got {type(topics).__name__}") from None
    if not items:
        raise TopicError(f"{what} is empty: name at least one topic")
    if len(items) > MAX_TOPICS:
        raise TopicError(f"{what} lists {len(items)} topics; at most {MAX_TOPICS}")
    seen: set[str] = set()
    for t in items:
        if not isinstance(t, str) or not _NAME.fullmatch(t):
            raise TopicError(f"{what}: {_shown(t)} is not a topic name (1-{MAX_TOPIC_LEN} characters from A-Z a-z 0-9 _ . : / + -)")
        if t in seen:
            raise TopicError(f"{what}: topic {t!r} is listed twice")
        seen.add(t)
    return tuple(items)


def _shown(value: Any) -> str:
    """``repr(value)``, cut to 60 characters (an error names a bad topic, not all 4,096 bytes of it)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}... ({len(value) if isinstance(value, str) else '?'} characters)"


def check_declared(topics: Iterable[str], declared: frozenset[str] | None, what: str = "topics") -> None:
    """Raise :class:`UnknownTopic` if a topic is outside ``declared`` (None: an open domain)."""
    if declared is None:
        return
    unknown = [t for t in topics if t not in declared]
    if unknown:
        known = ", ".join(sorted(declared)) or "(none)"
        raise UnknownTopic(f"{what}: unknown topic(s) {unknown}; this domain declares only: {known}")


def encode_topics(topics: Sequence[str]) -> str:
    """The wire form of a checked topic list."""
    return " ".join(topics)


@functools.lru_cache(maxsize=4096)
def decode_topics(text: str) -> tuple[str, ...]:
    """The topic list of a wire string ('' is the empty list); TopicError if malformed (remembered: lists repeat)."""
    if not text:
        return ()
    return check_topics(text.split(" "), "topics on the wire")


class TopicTable:
    """topic -> subscribed sinks, and which of them flagged it exclusive."""

    __slots__ = ("_subs", "_excl", "_cache")

    def __init__(self) -> None:
        self._subs: dict[str, set[Nid]] = {}
        self._excl: dict[str, set[Nid]] = {}
        self._cache: dict[tuple[str, ...], frozenset[Nid]] = {}

    def add(self, sink: Nid, topics: Iterable[str], exclusive: Iterable[str]) -> None:
        """Subscribe ``sink`` to ``topics``, exclusively to those in ``exclusive``."""
        for t in topics:
            self._subs.setdefault(t, set()).add(sink)
        for t in exclusive:
            self._excl.setdefault(t, set()).add(sink)
        self._cache.clear()

    def remove(self, sink: Nid, topics: Iterable[str]) -> None:
        """Unsubscribe ``sink`` from ``topics`` (and from their exclusivity)."""
        for t in topics:
            for table in (self._subs, self._excl):
                s = table.get(t)
                if s is not None:
                    s.discard(sink)
                    if not s:
                        del table[t]
        self._cache.clear()

    def recipients(self, topics: tuple[str, ...]) -> frozenset[Nid]:
        """The sinks a news of ``topics`` goes to: per topic, its exclusive sinks if any, else all its sinks."""
        hit = self._cache.get(topics)
        if hit is not None:
            return hit
        out: set[Nid] = set()
        for t in topics:
            excl = self._excl.get(t)
            out |= excl if excl else self._subs.get(t, set())
        result = frozenset(out)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[topics] = result
        return result

    def exclusive_sinks(self, topic: str) -> frozenset[Nid]:
        """The sinks that flagged ``topic`` exclusive."""
        return frozenset(self._excl.get(topic, ()))

    def topics(self) -> list[str]:
        """Every topic some sink subscribes to."""
        return sorted(self._subs)
