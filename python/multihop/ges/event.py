"""Events: id, signature, content and payload (the anatomy of an event, GES service paper 3 and 4.3).

An event has a **signature** (an ordered list of typed attributes), a **content**
(a value for each attribute, in signature order), a **payload** (bytes) and an
**id** ``(publisher, timestamp, sequence, incarnation)`` (equation 4.9):

* ``publisher``: the client id of the issuing client (unique per client, its "point in space");
* ``timestamp``: taken when the client starts and again every ``SEQUENCE_MAX`` events
  (routing paper 3.6: a timestamp alone limits the rate to the clock's granularity,
  a sequence alone grows without bound and restarts badly after a crash);
* ``sequence``: counts the events since the timestamp was taken;
* ``incarnation``: raised at every connection (roam or reconnect) of the client, so the
  events of a new incarnation are never taken for duplicates of the old one (3.7, Table 3).

Related events (one publisher, one incarnation) are ordered by ``(timestamp, sequence)``:
the duplicate detection at brokers compares exactly that (:mod:`multihop.ges.dedup`).

Values travel as canonical text with a one-letter type tag (``i5``, ``sfoo``, ``b1``,
``f0.5``), so brokers match by string comparison and never need the types, and
``5`` never matches ``"5"``.  Attribute names and string values may not contain
the separators ``\\x1c``-``\\x1f`` nor NUL.  The storage and roaming issue builds on these ids:
an event is identified and ordered without any broker state.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, NamedTuple

from multihop._ges import event_texts as _native_texts

__all__ = [
    "EventId",
    "Event",
    "EventData",
    "SEQUENCE_MAX",
    "TYPES",
    "canonical",
    "decode_value",
    "make_event",
    "signature_text",
    "split_signature",
    "check_attribute",
    "validate_event",
    "names_and_values",
]

#: events per timestamp: after this many the client takes a new timestamp
SEQUENCE_MAX = 1 << 32
#: attribute types and their tags
TYPES = {"int": "i", "str": "s", "bool": "b", "float": "f"}
_TAG_TYPE = {v: k for k, v in TYPES.items()}
_SEP_UNIT = "\x1f"  # between values / attributes
_FORBIDDEN = ("\x00", "\x1c", "\x1d", "\x1e", "\x1f")


class EventId(NamedTuple):
    """The unique id of an event: ``(publisher, timestamp, sequence, incarnation)``."""

    publisher: str
    timestamp: int
    sequence: int
    incarnation: int

    @property
    def stream(self) -> tuple[str, int]:
        """The stream of related events this one belongs to: (publisher, incarnation)."""
        return (self.publisher, self.incarnation)

    @property
    def order(self) -> tuple[int, int]:
        """The position in its stream: (timestamp, sequence)."""
        return (self.timestamp, self.sequence)


class EventData(NamedTuple):
    """An event as brokers carry it: the id, the signature and values as canonical text, the payload."""

    id: EventId
    signature: str  #: ``name:type`` joined by \\x1f
    values: str  #: canonical values joined by \\x1f
    payload: bytes


class Event:
    """An event as a client receives it: ``.id``, ``.content`` (attribute -> value), ``.payload``, ``.publisher``.

    The content is decoded when first read.
    """

    __slots__ = ("id", "payload", "data", "_content")

    def __init__(self, data: EventData) -> None:
        self.data = data
        self.id = data.id
        self.payload = data.payload
        self._content: dict[str, Any] | None = None

    @property
    def content(self) -> dict[str, Any]:
        """Attribute -> value, in signature order."""
        c = self._content
        if c is None:
            names = split_signature(self.data.signature)[0]
            vals = self.data.values.split(_SEP_UNIT) if names else []
            c = self._content = {n: decode_value(v) for n, v in zip(names, vals, strict=False)}
        return c

    @property
    def publisher(self) -> str:
        """The client id of the publisher."""
        return self.id.publisher

    def __repr__(self) -> str:
        return f"Event({self.id}, {self.content}, {len(self.payload)} B)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Event) and other.data == self.data

    def __hash__(self) -> int:
        return hash(self.data)


def check_attribute(name: Any) -> str:
    """An attribute name, checked: a non-empty string without NUL, separators or ``:``."""
    if not isinstance(name, str) or not name or any(c in name for c in _FORBIDDEN) or ":" in name:
        raise ValueError(f"attribute name {name!r} must be a non-empty string without ':', NUL or \\x1c-\\x1f")
    return name


def canonical(value: Any, attribute: str = "?") -> str:
    """The canonical text of a content value: a type tag and the value (``i5``, ``sfoo``, ``b1``, ``f0.5``)."""
    if isinstance(value, bool):
        return "b1" if value else "b0"
    if isinstance(value, int):
        return f"i{value}"
    if isinstance(value, float):
        if math.isnan(value):
            raise ValueError(f"attribute {attribute!r}: NaN matches nothing; use another value")
        return f"f{value!r}"
    if isinstance(value, str):
        if any(c in value for c in _FORBIDDEN):
            raise ValueError(f"attribute {attribute!r}: a string value may not contain NUL or \\x1c-\\x1f")
        return "s" + value
    raise TypeError(f"attribute {attribute!r}: values are int, str, bool or float, got {type(value).__name__} {value!r}")


def type_of(value: Any) -> str:
    """The attribute type name of a value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "str"


def decode_value(text: str) -> Any:
    """The value of a canonical text."""
    tag, rest = text[:1], text[1:]
    if tag == "i":
        return int(rest)
    if tag == "s":
        return rest
    if tag == "b":
        return rest == "1"
    if tag == "f":
        return float(rest)
    raise ValueError(f"not a canonical value: {text!r}")


def signature_text(names: Iterable[str], types: Iterable[str]) -> str:
    """``name:type`` pairs joined by \\x1f."""
    return _SEP_UNIT.join(f"{n}:{t}" for n, t in zip(names, types, strict=False))


_SIG_CACHE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def split_signature(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names, types) of a signature text (cached: signatures repeat)."""
    hit = _SIG_CACHE.get(text)
    if hit is not None:
        return hit
    if not text:
        out: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    else:
        pairs = [p.rsplit(":", 1) for p in text.split(_SEP_UNIT)]
        if any(len(p) != 2 or p[1] not in TYPES for p in pairs):
            raise ValueError(f"malformed event signature {text!r}")
        out = (tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))
    if len(_SIG_CACHE) < 4096:
        _SIG_CACHE[text] = out
    return out


def make_event(event_id: EventId, content: Mapping[str, Any], payload: bytes = b"") -> EventData:
    """An :class:`EventData` from a content dict (its order is the signature's), checking every value.

    The plain case (a dict of str names to exact bool, int, float and str values) is made natively
    (``multihop._ges.event_texts``, the same text); anything else, and every error, comes from here.
    """
    if type(payload) is bytes:
        texts = _native_texts(content)
        if texts is not None:
            return EventData(event_id, texts[0], texts[1], payload)
    return checked_event(event_id, content, payload)


def checked_event(event_id: EventId, content: Mapping[str, Any], payload: bytes = b"") -> EventData:
    """:func:`make_event` in Python alone: the reference the native texts are checked against, and the
    author of every error."""
    if not isinstance(content, Mapping) or not content:
        raise ValueError(f"content must be a non-empty dict attribute -> value (in signature order), got {content!r}")
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
    names = [check_attribute(n) for n in content]
    vals = [canonical(v, n) for n, v in content.items()]
    types = [type_of(v) for v in content.values()]
    return EventData(event_id, signature_text(names, types), _SEP_UNIT.join(vals), bytes(payload))


#: (signature, values) pairs found valid: a publisher's events repeat them, and the check depends on nothing else
_VALID: dict[tuple[str, str], None] = {}


def validate_event(ev: EventData) -> None:
    """Check an event that came from outside (a client): a well-formed signature, one canonical value per
    attribute, each of its attribute's type.  Raises ValueError naming what is wrong."""
    key = (ev.signature, ev.values)
    if key in _VALID:
        return
    _check_event(ev)
    if len(_VALID) >= 4096:
        _VALID.clear()
    _VALID[key] = None


def _check_event(ev: EventData) -> None:
    names, types = split_signature(ev.signature)
    if not names:
        raise ValueError("an event has at least one attribute")
    for n in names:
        check_attribute(n)
    vals = ev.values.split(_SEP_UNIT)
    if len(vals) != len(names):
        raise ValueError(f"the event has {len(names)} attributes but {len(vals)} values")
    for n, t, v in zip(names, types, vals, strict=True):
        if v[:1] != TYPES[t]:
            raise ValueError(f"attribute {n!r} is declared {t} but its value {v!r} is not")
        try:
            decode_value(v)
        except ValueError:
            raise ValueError(f"attribute {n!r}: malformed {t} value {v[1:]!r}") from None


def names_and_values(ev: EventData) -> tuple[tuple[str, ...], list[str]]:
    """The attribute names and canonical values of an event, for matching."""
    names = split_signature(ev.signature)[0]
    return names, ev.values.split(_SEP_UNIT)
