"""What a peer knows of a source: its QoS, its rate schedule and monitor, the news it expects next.

A local source registers with ``source_info`` (its QoS, its registration
time ``origin_ns`` and the next sequence number it will send); its news then
arrive in sequence order on its channel.  A jump in the sequence is a gap (the
source could not hand us some news, or sent them before it knew us): the
peer asks another peer for them (a request for data) and parks the news
that follow the gap until it is filled (or given up), so each source's news
still reach a sink in sequence order.  A *foreign* source is
one of another domain whose news a relay brings: it has no schedule here
(its own domain enforced its rates), its news are deduplicated by id, and its
first news here fixes its origin and priority (a later news claiming others is
refused); it is forgotten once no news came from it for ``history``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multihop.news.ids import Nid
from multihop.news.rates import RateMonitor, RateSchedule
from multihop.news.wire import M

if TYPE_CHECKING:
    from multihop.news.news import StoredNews

__all__ = ["SourceState"]


class SourceState:
    """A source as one peer sees it."""

    __slots__ = (
        "id",
        "info",
        "foreign",
        "next_seq",
        "missing",
        "parked",
        "gap_tries",
        "gap_due",
        "schedule",
        "monitor",
        "acked",
        "received",
        "duplicates",
        "rejected",
        "connected",
        "origin",
        "priority",
        "last_ns",
    )

    def __init__(self, info: M.messages.source_info | None, source: Nid, grace_ns: int, foreign: bool = False) -> None:
        self.id = source
        self.info = info
        self.foreign = foreign
        self.next_seq = 0  # the next sequence number expected from the source
        self.missing: set[int] = set()  # sequence numbers asked of other peers
        self.parked: list[StoredNews] = []  # news after a gap, held until the gap is filled or given up (order per source)
        self.gap_tries = 0
        self.gap_due: int | None = None
        self.schedule: RateSchedule | None = None
        self.monitor: RateMonitor | None = None
        if info is not None:
            self.schedule = RateSchedule(info.origin_ns, info.unit_ns, info.max_per_unit or None)
            self.monitor = RateMonitor(info.origin_ns, info.unit_ns, info.min_per_unit, grace_ns)
        self.acked = 0  # the cumulative ack last sent to the source
        self.received = 0
        self.duplicates = 0
        self.rejected = 0
        self.connected = False
        self.origin: Nid | None = None  # a foreign source's origin and priority, fixed by its first news here
        self.priority: int | None = None
        self.last_ns = 0  # when a foreign source's last news came

    @property
    def reliable(self) -> bool:
        """Whether the source asked for acknowledgements."""
        return bool(self.info is not None and self.info.reliable)

    def describe(self) -> M.messages.source_info:
        """This source as a ``source_info`` (next_seq: what this peer expects next)."""
        i = self.info
        assert i is not None
        return M.messages.source_info(self.id, i.priority, i.unit_ns, i.min_per_unit, i.max_per_unit, i.reliable, i.origin_ns, self.next_seq)

    def status(self) -> dict[str, object]:
        """Counters for ``multihop news status``."""
        out: dict[str, object] = {
            "next_seq": self.next_seq,
            "received": self.received,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "missing": len(self.missing),
            "foreign": self.foreign,
        }
        if self.priority is not None:
            out["priority"] = self.priority
        if self.info is not None:
            out.update(
                priority=self.info.priority,
                reliable=bool(self.info.reliable),
                held=self.schedule.held if self.schedule else 0,
                below_min_units=self.monitor.below_units if self.monitor else 0,
            )
        return out
