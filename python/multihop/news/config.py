"""The settings of a domain's peers (every peer of a domain should use the same).

Defaults suit a live domain on one machine; tests set short times and drive a
virtual clock.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from multihop.defaults import DEFAULT_TIMEOUT
from multihop.news.clock import seconds_to_ns
from multihop.news.topics import check_topics

__all__ = ["PeerConfig"]


@dataclass(frozen=True)
class PeerConfig:
    """Settings of the dispatch peers.

    Attributes:
        partitions: how many partitions the sinks are divided into (1..4096).
        heartbeat: seconds between a peer's heartbeats.
        dead_after: seconds of silence after which a peer is declared dead
            (more than ``heartbeat``; a closed channel declares it at once).
        window: news a peer sends a sink before the sink acknowledges them.
        update_delay: seconds lazy updates (``QueueUpdate``) and source acks may
            wait to be batched.
        ack_every: a reliable source is acknowledged at least every this many news.
        history: seconds a peer keeps a news after it entered (for sinks asking
            for old news, the join cut, and other peers' requests for data).
        history_limit: the most news kept for history (news still queued for a
            sink are kept whatever this says).
        rate_grace: seconds a peer waits after a unit ends before judging its
            ``min_per_unit`` (news stamped in the unit may still be on the way).
        gap_retry: seconds between requests for missing news.
        gap_tries: requests for missing news before giving up on them.
        join_timeout: seconds a joining peer waits for its snapshot before
            asking another peer.
        topics: the declared topics of the domain, or None for an open domain.
    """

    partitions: int = 64
    heartbeat: float = 0.1
    dead_after: float = 0.5
    window: int = 64
    update_delay: float = 0.005
    ack_every: int = 64
    history: float = 30.0
    history_limit: int = 10_000
    rate_grace: float = 0.02
    gap_retry: float = 0.2
    gap_tries: int = 5
    join_timeout: float = DEFAULT_TIMEOUT
    topics: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or math.isinf(v) or v <= 0:
                raise ValueError(f"PeerConfig.{name}={v!r}: must be a positive number of seconds")

        for name in ("heartbeat", "dead_after", "update_delay", "history", "gap_retry", "join_timeout"):
            positive(name)
        if self.rate_grace < 0:
            raise ValueError(f"PeerConfig.rate_grace={self.rate_grace!r}: cannot be negative")
        if self.dead_after <= self.heartbeat:
            raise ValueError(f"PeerConfig.dead_after={self.dead_after} must be longer than heartbeat={self.heartbeat}")
        for name, low, high in (
            ("partitions", 1, 4096),
            ("window", 1, 100_000),
            ("ack_every", 1, 1_000_000),
            ("history_limit", 0, 10_000_000),
            ("gap_tries", 0, 1000),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                raise ValueError(f"PeerConfig.{name}={v!r}: must be an integer in {low}..{high}")
        if self.topics is not None:
            object.__setattr__(self, "topics", check_topics(self.topics, "PeerConfig.topics"))

    def ns(self, name: str) -> int:
        """A time setting in nanoseconds."""
        return seconds_to_ns(getattr(self, name))

    @property
    def declared(self) -> frozenset[str] | None:
        """The declared topics as a set (None: open domain)."""
        return None if self.topics is None else frozenset(self.topics)

    def to_dict(self) -> dict[str, Any]:
        """As plain data (JSON)."""
        d = asdict(self)
        d["topics"] = list(self.topics) if self.topics is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PeerConfig":
        """From :meth:`to_dict`'s output."""
        d = dict(d)
        if d.get("topics") is not None:
            d["topics"] = tuple(d["topics"])
        return cls(**d)
