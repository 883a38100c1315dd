"""The source client as a sans-IO machine: registration, sequence numbers, acks and alarms.

The live :class:`~multihop.news.client.Source` and the simulator drive it.
On every channel to a peer it says ``client_hello`` (with its secret, the
proof of its id) then ``source_info`` (its QoS, its registration time and the
next sequence number); each peer answers with its own ``source_info`` of the
source (registered) or ``refused`` (the reason: :attr:`SourceMachine.refused`).
It sends each news to every peer it has a channel with (active replication),
binds to peers the members lists name, and forgets peers that leave or die.  A
reliable source counts a news *held* once every peer acknowledged it
(``news_ack`` is cumulative, never beyond what was sent).  ``rate_alarm`` from
the coordinator peer is recorded once per unit (at most
:data:`MAX_ALARM_UNITS` kept).  What a peer sends that makes no sense is
counted (``bad_frames``) and dropped.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

from multihop.news.errors import PayloadTooLarge, TopicError
from multihop.news.ids import Nid, short
from multihop.news.news import MAX_PAYLOAD
from multihop.news.qos import SourceQoS
from multihop.news.topics import check_declared, check_topics, decode_topics, encode_topics
from multihop.news.wire import M, Record

__all__ = ["SourceMachine", "MAX_ALARM_UNITS", "MAX_REFUSALS"]

MAX_ALARM_UNITS = 4096
"""Units of ``rate_alarm`` a source keeps (the count of units below the minimum goes on beyond)."""

MAX_REFUSALS = 64
"""Refusal reasons a source keeps (``stats()["refused_total"]`` counts them all)."""


class SourceMachine:
    """One source (see the module docstring)."""

    def __init__(self, me: Nid, domain: Nid, qos: SourceQoS, now_ns: int, secret: bytes = b"") -> None:
        self.me = me
        self.secret = secret  # shown in each hello: the data whose MD5 is ``me``
        self.domain = domain
        self.qos = qos
        self.origin_ns = now_ns
        self.seq = 0
        self.members: dict[Nid, bool] = {}  # peer -> active, as last told
        self.epoch = 0
        self.linked: set[Nid] = set()  # peers we have a channel with
        self.acked: dict[Nid, int] = {}  # peer -> cumulative ack
        self.declared: frozenset[str] | None = None
        self.alarmed: dict[int, tuple[int, int]] = {}  # unit -> (units, count)
        self.below_units = 0
        self.refusals: list[str] = []
        self.registered: set[Nid] = set()  # peers that answered our source_info with theirs
        self.refused_by: dict[Nid, str] = {}  # peers that refused our hello or registration -> why
        self.counters: dict[str, int] = {"sent": 0, "handed": 0, "dropped": 0, "bad_frames": 0, "refused_total": 0}
        self._out: deque[tuple[Nid, Record]] = deque()
        self._connects: deque[Nid] = deque()
        self._closing: deque[Nid] = deque()

    # ---- inputs ----------------------------------------------------------

    def handle_connected(self, peer: Nid, now_ns: int) -> None:
        """A channel to ``peer`` is up: register on it."""
        self.linked.add(peer)
        self.members.setdefault(peer, False)
        q = self.qos
        self._out.append((peer, M.messages.client_hello(M.client_kind.CLIENT_SOURCE, self.me, self.domain, self.secret)))
        self._out.append(
            (peer, M.messages.source_info(self.me, q.priority, q.unit_ns, q.min_per_unit, q.max_wire, q.reliable, self.origin_ns, self.seq))
        )

    def handle_connect_failed(self, peer: Nid, now_ns: int) -> None:
        """``peer`` could not be reached (it is gone)."""
        self.members.pop(peer, None)

    def handle_closed(self, peer: Nid, now_ns: int) -> None:
        """The channel to ``peer`` closed (it died or left)."""
        self.linked.discard(peer)
        self.members.pop(peer, None)
        self.acked.pop(peer, None)
        self.registered.discard(peer)

    def handle_message(self, src: Nid, rec: Record, now_ns: int) -> None:
        """A message from peer ``src`` (one that makes no sense is counted in ``bad_frames`` and dropped)."""
        if isinstance(rec, M.messages.news_ack):
            if rec.source != self.me or rec.next_seq > self.seq:
                self.counters["bad_frames"] += 1  # an ack of news we never sent would let flush() return early
                return
            self.acked[src] = max(self.acked.get(src, 0), rec.next_seq)
        elif isinstance(rec, (M.messages.welcome, M.messages.members)):
            welcome = isinstance(rec, M.messages.welcome)
            if isinstance(rec, M.messages.welcome):
                if rec.domain != self.domain:
                    self.counters["bad_frames"] += 1
                    return
                try:
                    self.declared = frozenset(decode_topics(rec.topics)) if rec.topics else None
                except TopicError:
                    self.counters["bad_frames"] += 1
            if rec.epoch >= self.epoch or welcome:
                self.epoch = max(self.epoch, rec.epoch)
                self.update_members([(m.id, m.active) for m in rec.members])
        elif isinstance(rec, M.messages.source_info):
            if rec.source != self.me:
                self.counters["bad_frames"] += 1
                return
            self.registered.add(src)
        elif isinstance(rec, M.messages.rate_alarm):
            if rec.source != self.me:
                self.counters["bad_frames"] += 1
                return
            if rec.unit not in self.alarmed and len(self.alarmed) < MAX_ALARM_UNITS:
                self.alarmed[rec.unit] = (rec.units, rec.count)
                self.below_units += rec.units
            elif rec.unit not in self.alarmed:
                self.below_units += rec.units  # counted, not kept
        elif isinstance(rec, M.messages.refused):
            self.counters["refused_total"] += 1
            text = f"peer {short(src)}: {rec.reason}"
            if len(self.refusals) < MAX_REFUSALS:
                self.refusals.append(text)
            if src not in self.registered and src not in self.refused_by:
                self.refused_by[src] = text  # the answer to our hello or registration
        elif isinstance(rec, M.messages.peer_leave):
            self.members.pop(src, None)
            if src in self.linked:
                self._closing.append(src)
        else:
            self.counters["bad_frames"] += 1

    def answered(self) -> bool:
        """Whether every linked peer answered our registration (registered us, or refused)."""
        return all(p in self.registered or p in self.refused_by for p in self.linked)

    @property
    def refused(self) -> str | None:
        """Why a peer refused this source's hello or registration (the first such answer), or None."""
        return next(iter(self.refused_by.values()), None)

    def update_members(self, listing: Sequence[tuple[Nid, bool]]) -> None:
        """Bind to every peer the list names that we have no channel with."""
        for peer, active in listing:
            if peer not in self.members and peer not in self.linked:
                self._connects.append(peer)
            self.members[peer] = active

    # ---- the source's own calls ------------------------------------------

    def make_news(self, topics: Sequence[str], payload: bytes, now_ns: int) -> M.messages.news:
        """The next news (checked), to send to every linked peer; raises TopicError, UnknownTopic, PayloadTooLarge."""
        names = check_topics(topics)
        check_declared(names, self.declared, "send")
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"a news payload is bytes, got {type(payload).__name__}")
        if len(payload) > MAX_PAYLOAD:
            raise PayloadTooLarge(f"payload of {len(payload)} bytes is above the limit of {MAX_PAYLOAD} bytes")
        rec = M.messages.news(self.me, self.seq, self.qos.priority, now_ns, self.domain, encode_topics(names), bytes(payload))
        self.seq += 1
        self.counters["sent"] += 1
        return rec

    def leave_messages(self) -> list[tuple[Nid, Record]]:
        """``leave`` for every linked peer (closing)."""
        return [(p, M.messages.leave(self.me)) for p in sorted(self.linked)]

    def unacked(self) -> int:
        """News not yet acknowledged by every linked peer (0 for best effort)."""
        if not self.qos.reliable or not self.linked:
            return 0
        return self.seq - min(self.acked.get(p, 0) for p in self.linked)

    # ---- outputs ---------------------------------------------------------

    def has_output(self) -> bool:
        """Whether anything waits in :meth:`poll_transmit`, :meth:`poll_connect` or :meth:`poll_close`."""
        return bool(self._out or self._connects or self._closing)

    def poll_transmit(self) -> tuple[Nid, Record] | None:
        """The next message to send, or None."""
        return self._out.popleft() if self._out else None

    def poll_connect(self) -> Nid | None:
        """The next peer to bind to, or None."""
        return self._connects.popleft() if self._connects else None

    def poll_close(self) -> Nid | None:
        """The next peer whose channel to close (it left), or None."""
        return self._closing.popleft() if self._closing else None

    def stats(self) -> dict[str, Any]:
        """Counters: sent, handed (channel writes), dropped (best effort), unacked, alarms, peers, refusals, bad frames."""
        return dict(
            self.counters,
            unacked=self.unacked(),
            below_min_units=self.below_units,
            alarms=len(self.alarmed),
            peers=len(self.linked),
            refusals=list(self.refusals),
            seq=self.seq,
        )
