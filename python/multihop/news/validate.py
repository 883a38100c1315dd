"""What a dispatch node accepts from the wire: limits, who may send what, and each field's checks.

The generated decoder already guarantees each field's type and wire range (a
``uint8`` is 0..255, an enum one of its values, an array within its bound).
This module checks what the protocol means by them, so that nothing a client
sends can make a peer compute a value it cannot send or keep (a sequence
number 2**64-1 once made every peer exit on ``next_seq 2**64 out of range``):

* :data:`MAY_SEND`: the messages each kind of node may send a peer (a source
  never sends ``shutdown``, a sink never ``stored_news``);
* the bounds of sequence numbers, times and durations (:data:`MAX_SEQ`,
  :data:`MAX_SKEW_NS`, :data:`MAX_DURATION_NS`);
* one function per message field group, returning why it is unacceptable or
  None (pure functions: the machines decide what to do with a refusal);
* :func:`reason` makes any text fit a ``refused`` message.

Nothing here does I/O or reads a clock: ``now_ns`` comes in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multihop.news.errors import TopicError
from multihop.news.ids import ZERO, Nid, hex_id, proves
from multihop.news.qos import MAX_PRIORITY, MAX_QUEUE_LIMIT, NO_BOUND
from multihop.news.topics import decode_topics

if TYPE_CHECKING:
    from multihop.news.wire import M

__all__ = [
    "MAX_SEQ",
    "MAX_SKEW_NS",
    "MAX_DURATION_NS",
    "MAX_MEMBERS",
    "MAX_REASON",
    "MAY_SEND",
    "reason",
    "hello_error",
    "seq_error",
    "source_info_error",
    "same_qos",
    "sink_info_error",
    "topics_error",
]

MAX_SEQ = (1 << 63) - 1
"""The largest sequence number a news may carry (a source sending a million news a second reaches it in 292,000 years;
bounded well below 2**64 so that every ``next_seq`` a peer computes and sends fits its ``uint64``)."""

MAX_SKEW_NS = 1_000_000_000
"""A time stamped further than this in the future (an entry time, a registration time) is taken as now or refused."""

MAX_DURATION_NS = 10 * 365 * 86400 * 1_000_000_000
"""The longest time unit or delivery bound (ten years, as :mod:`.qos` allows); :data:`~.qos.NO_BOUND` aside."""

MAX_MEMBERS = 64
"""The most peers a domain has (the Flounder bound of ``welcome.members``): a peer refuses one more."""

MAX_REASON = 1000
"""The most bytes of a refusal's reason (the Flounder bound of ``refused.reason`` is 1024)."""

PEER_MESSAGES = frozenset(
    {
        "peer_hello",
        "heartbeat",
        "queue_updates",
        "stored_news",
        "snapshot_request",
        "snapshot_end",
        "news_request",
        "request_data",
        "node_unknown",
        "sink_left",
        "peer_leave",
        "source_info",
        "sink_info",
    }
)

MAY_SEND: dict[str, frozenset[str]] = {
    "peer": PEER_MESSAGES,
    "source": frozenset({"client_hello", "source_info", "news", "leave"}),
    "sink": frozenset({"client_hello", "sink_info", "sink_ack", "leave"}),
    "relay": frozenset({"client_hello", "news", "leave"}),
    "admin": frozenset({"client_hello", "status_request", "shutdown", "leave"}),
}
"""The messages a peer takes from each kind of node (the kind its hello named); anything else is a bad frame."""


def reason(text: str) -> str:
    """``text`` made fit a ``refused`` message: no NUL, at most :data:`MAX_REASON` bytes of UTF-8 (cut at a character)."""
    data = text.replace("\0", "\\0").encode()
    if len(data) <= MAX_REASON:
        return text.replace("\0", "\\0")
    return data[: MAX_REASON - 3].decode(errors="ignore") + "..."


def hello_error(node: Nid, domain: Nid, proof: bytes, my_domain: Nid, me: Nid) -> str | None:
    """Why a hello (``client_hello`` or ``peer_hello``) is unacceptable, or None.

    The domain must be ours, the id not null nor ours, and ``proof`` the secret whose MD5 is the id
    (:func:`~.ids.proves`): only the node that drew an id can speak under it.
    """
    if domain != my_domain:
        return f"this peer belongs to domain {hex_id(my_domain)}, not {hex_id(domain)}"
    if node == ZERO:
        return "the null id names no node"
    if node == me:
        return "that id is this peer's own"
    if not proves(node, bytes(proof)):
        return f"the hello's proof is not the secret of id {hex_id(node)} (a node speaks only under its own id)"
    return None


def seq_error(seq: int, what: str = "sequence number") -> str | None:
    """Why a sequence number is unacceptable (above :data:`MAX_SEQ`), or None."""
    if seq > MAX_SEQ:
        return f"{what} {seq} is above the largest one, {MAX_SEQ}"
    return None


def _duration_error(name: str, value: int, unbounded_ok: bool) -> str | None:
    if unbounded_ok and value == NO_BOUND:
        return None
    if value > MAX_DURATION_NS:
        return f"{name} of {value} ns is above ten years"
    return None


def source_info_error(rec: M.messages.source_info, now_ns: int) -> str | None:
    """Why a ``source_info`` is unacceptable, or None (a peer checks what a client might have forged)."""
    if rec.source == ZERO:
        return "the null id names no source"
    if rec.priority > MAX_PRIORITY:
        return f"priority {rec.priority} is above {MAX_PRIORITY}"
    if rec.unit_ns < 1000:
        return f"unit of {rec.unit_ns} ns is below 1 microsecond"
    err = _duration_error("unit", rec.unit_ns, False)
    if err is not None:
        return err
    if rec.max_per_unit and rec.min_per_unit > rec.max_per_unit:
        return f"min_per_unit {rec.min_per_unit} is above max_per_unit {rec.max_per_unit}"
    if rec.origin_ns > now_ns + MAX_SKEW_NS:
        return f"registration time {rec.origin_ns} ns is in the future (now {now_ns} ns)"
    return seq_error(rec.next_seq, "next sequence number")


def same_qos(a: M.messages.source_info, b: M.messages.source_info) -> bool:
    """Whether two registrations of a source declare the same QoS and registration time (``next_seq`` aside)."""
    return (a.priority, a.unit_ns, a.min_per_unit, a.max_per_unit, bool(a.reliable), a.origin_ns) == (
        b.priority,
        b.unit_ns,
        b.min_per_unit,
        b.max_per_unit,
        bool(b.reliable),
        b.origin_ns,
    )


def topics_error(text: str, declared: frozenset[str] | None, what: str) -> str | None:
    """Why a wire topic list is unacceptable (malformed, or outside the declared topics), or None."""
    try:
        topics = decode_topics(text)
    except TopicError as e:
        return str(e)
    if not topics:
        return f"{what} names no topic"
    if declared is not None:
        unknown = [t for t in topics if t not in declared]
        if unknown:
            known = ", ".join(sorted(declared)) or "(none)"
            return f"{what}: unknown topic(s) {unknown}; this domain declares only: {known}"
    return None


def sink_info_error(rec: M.messages.sink_info, now_ns: int, partitions: int, no_partition: int, declared: frozenset[str] | None) -> str | None:
    """Why a sink registration (``sink_info``) is unacceptable, or None."""
    if rec.sink == ZERO:
        return "the null id names no sink"
    if rec.partition != no_partition and rec.partition >= partitions:
        return f"partition {rec.partition} is not one of the domain's {partitions}"
    if rec.join_ns > now_ns + MAX_SKEW_NS:
        return f"join time {rec.join_ns} ns is in the future (now {now_ns} ns)"
    for name, value, unbounded in (("max_delivery_time", rec.max_delivery_ns, True), ("min_delivery_time", rec.min_delivery_ns, False)):
        err = _duration_error(name, value, unbounded)
        if err is not None:
            return err
    err = topics_error(rec.topics, declared, "sink topics")
    if err is not None:
        return "a sink must subscribe to at least one topic" if not rec.topics else err
    try:
        excl = decode_topics(rec.exclusive)
    except TopicError as e:
        return f"exclusive topics: {e}"
    topics = decode_topics(rec.topics)
    stray = [t for t in excl if t not in topics]
    if stray:
        return f"exclusive topic(s) {stray} are not among the sink's topics {list(topics)}"
    if rec.max_delivery_ns != NO_BOUND and rec.min_delivery_ns > rec.max_delivery_ns:
        return "min_delivery_time is above max_delivery_time"
    if not 1 <= rec.queue_limit <= MAX_QUEUE_LIMIT:
        return f"queue_limit {rec.queue_limit} is outside 1..{MAX_QUEUE_LIMIT}"
    return None
