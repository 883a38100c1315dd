"""Checkers of the dispatch guarantees, applied to recorded deliveries (Jepsen-style: record, then judge).

Each checker takes what was sent (:class:`~multihop.news.sim.Sent`, or
anything with ``id``, ``topics``, ``entry_ns``, ``priority``) and what each
sink received (:class:`~multihop.news.news.News` lists, in the order the
application got them) and returns a :class:`Verdict`: ``ok``, the violations
found (each a sentence naming the sink and the news), and counts.  Named after
what they check:

* :func:`no_loss_in_order`: every news a sink was owed arrived exactly once,
  and each source's news arrived in sequence order;
* :func:`exactly_the_exclusive_sinks`: a topic some sink flagged exclusive
  reached only (and every one of) the exclusive sinks;
* :func:`none_later_than_the_bound`: no news reached a sink after its
  ``max_delivery_time`` (and, with ``min_ns``, none before its embargo);
* :func:`priority_order`: while news waited, higher priorities went first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol, Sequence

from multihop.news.ids import NewsKey, Nid, short

__all__ = ["Verdict", "SentNews", "GotNews", "no_loss_in_order", "exactly_the_exclusive_sinks", "none_later_than_the_bound", "priority_order"]


class SentNews(Protocol):
    """A news as its source sent it: what the checkers read of :class:`~multihop.news.sim.Sent`."""

    @property
    def id(self) -> NewsKey:
        """(source, seq)."""

    @property
    def topics(self) -> Sequence[str]:
        """The topics it was sent under."""


class GotNews(Protocol):
    """A news as a sink got it: what the checkers read of :class:`~multihop.news.news.News`."""

    @property
    def id(self) -> NewsKey:
        """(source, seq)."""

    @property
    def source(self) -> Nid:
        """The source that sent it."""

    @property
    def seq(self) -> int:
        """Its number among the source's news."""

    @property
    def priority(self) -> int:
        """The source's priority."""

    @property
    def entry_ns(self) -> int:
        """When it entered the system."""

    @property
    def received_ns(self) -> int:
        """When the sink got it."""


@dataclass
class Verdict:
    """What a checker found."""

    name: str
    violations: list[str] = field(default_factory=list)
    checked: int = 0

    @property
    def ok(self) -> bool:
        """No violation."""
        return not self.violations

    def fail(self, text: str) -> None:
        """Record a violation."""
        self.violations.append(text)

    def assert_ok(self) -> None:
        """Raise AssertionError listing (the first 20) violations."""
        if self.violations:
            more = f"\n... and {len(self.violations) - 20} more" if len(self.violations) > 20 else ""
            raise AssertionError(
                f"{self.name}: {len(self.violations)} violation(s) in {self.checked} checked:\n" + "\n".join(self.violations[:20]) + more
            )

    def __repr__(self) -> str:
        return f"<Verdict {self.name}: {'ok' if self.ok else f'{len(self.violations)} violation(s)'}, {self.checked} checked>"


def _name(key: NewsKey) -> str:
    return f"{short(key[0])}#{key[1]}"


def no_loss_in_order(
    sent: Iterable[SentNews],
    received: Mapping[Nid, Sequence[GotNews]],
    owed: Mapping[Nid, Iterable[NewsKey]] | None = None,
    topics: Mapping[Nid, Iterable[str]] | None = None,
    in_order: bool = True,
) -> Verdict:
    """Every news owed to each sink arrived exactly once (and, with ``in_order``, per source in sequence order).

    What a sink is owed is ``owed[sink]`` (ids), or else every sent news that
    shares a topic with ``topics[sink]``.
    """
    v = Verdict("no loss, in order" if in_order else "no loss")
    sent = list(sent)
    for sink, got in received.items():
        if owed is not None:
            want = set(owed[sink])
        else:
            assert topics is not None, "give owed or topics"
            mine = set(topics[sink])
            want = {s.id for s in sent if mine.intersection(s.topics)}
        seen: dict[NewsKey, int] = {}
        last: dict[Nid, int] = {}
        for n in got:
            v.checked += 1
            seen[n.id] = seen.get(n.id, 0) + 1
            if seen[n.id] == 2:
                v.fail(f"sink {short(sink)} got news {_name(n.id)} twice")
            if in_order and n.source in last and n.seq < last[n.source]:
                v.fail(f"sink {short(sink)} got news {_name(n.id)} after #{last[n.source]} of the same source")
            last[n.source] = max(last.get(n.source, -1), n.seq)
        missing = sorted(want - set(seen), key=lambda k: (k[0], k[1]))
        for key in missing[:50]:
            v.fail(f"sink {short(sink)} never got news {_name(key)}")
        if len(missing) > 50:
            v.fail(f"sink {short(sink)} never got {len(missing) - 50} more news")
        extra = set(seen) - want
        for key in sorted(extra)[:20]:
            v.fail(f"sink {short(sink)} got news {_name(key)} it was not owed")
    return v


def exactly_the_exclusive_sinks(
    sent: Iterable[SentNews], received: Mapping[Nid, Sequence[GotNews]], topics: Mapping[Nid, Iterable[str]], exclusive: Mapping[Nid, Iterable[str]]
) -> Verdict:
    """Per news: the sinks that got it are exactly those the exclusivity rule names.

    Per topic of the news: its exclusive sinks if any sink flagged it, else
    every sink subscribed to it; the news goes to the union over its topics.
    """
    v = Verdict("exactly the exclusive sinks")
    excl_by_topic: dict[str, set[Nid]] = {}
    subs_by_topic: dict[str, set[Nid]] = {}
    for sink, ts in topics.items():
        for t in ts:
            subs_by_topic.setdefault(t, set()).add(sink)
    for sink, ts in exclusive.items():
        for t in ts:
            excl_by_topic.setdefault(t, set()).add(sink)
    got_by: dict[NewsKey, set[Nid]] = {}
    for sink, got in received.items():
        for n in got:
            got_by.setdefault(n.id, set()).add(sink)
    for s in sent:
        v.checked += 1
        want: set[Nid] = set()
        for t in s.topics:
            want |= excl_by_topic.get(t) or subs_by_topic.get(t, set())
        have = got_by.get(s.id, set())
        if have != want:
            wrong = sorted(short(x) for x in have - want)
            lost = sorted(short(x) for x in want - have)
            v.fail(f"news {_name(s.id)} topics {list(s.topics)}: went to {wrong or 'no'} wrong sink(s), missed {lost or 'no'} sink(s)")
    return v


def none_later_than_the_bound(
    received: Mapping[Nid, Sequence[GotNews]], max_ns: Mapping[Nid, int | None], min_ns: Mapping[Nid, int] | None = None
) -> Verdict:
    """No news reached a sink later than ``max_ns[sink]`` after it entered (nor before ``min_ns[sink]``)."""
    v = Verdict("none later than the bound")
    for sink, got in received.items():
        hi = max_ns.get(sink)
        lo = (min_ns or {}).get(sink, 0)
        for n in got:
            v.checked += 1
            age = n.received_ns - n.entry_ns
            if hi is not None and age > hi:
                v.fail(f"sink {short(sink)} got news {_name(n.id)} {age / 1e6:.3f} ms after it entered (bound {hi / 1e6:.3f} ms)")
            if age < lo:
                v.fail(f"sink {short(sink)} got news {_name(n.id)} {age / 1e6:.3f} ms after it entered, before its embargo of {lo / 1e6:.3f} ms")
    return v


def priority_order(got: Sequence[GotNews], waiting_from: int = 0) -> Verdict:
    """Within ``got[waiting_from:]`` (news that all waited together), priorities never increase."""
    v = Verdict("priority order")
    prev: GotNews | None = None
    for n in got[waiting_from:]:
        v.checked += 1
        if prev is not None and n.priority > prev.priority:
            v.fail(f"news {_name(n.id)} (priority {n.priority}) came after {_name(prev.id)} (priority {prev.priority})")
        prev = n
    return v
