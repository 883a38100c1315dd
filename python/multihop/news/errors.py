"""The errors of the dispatch subsystem, all under :class:`DispatchError` (a :class:`~multihop.MultihopError`).

Each also subclasses the standard error a caller would already catch:
a bad QoS or topic list is a ``ValueError``, a refused join a
``ConnectionError``.
"""

from __future__ import annotations

from multihop.errors import MultihopError

__all__ = ["DispatchError", "QosError", "TopicError", "UnknownTopic", "JoinRefused", "SourceRefused", "NoPeers", "PayloadTooLarge"]


class DispatchError(MultihopError):
    """Base class of every error of :mod:`multihop.news`."""


class QosError(DispatchError, ValueError):
    """A QoS is contradictory or out of range (the message names the field and the value)."""


class TopicError(DispatchError, ValueError):
    """A topic name or topic list is malformed (empty, repeated, bad characters, too long)."""


class UnknownTopic(TopicError):
    """A topic is not one the domain declared, or an exclusive flag names a topic the sink did not list."""


class JoinRefused(DispatchError, ConnectionError):
    """A peer refused a source or sink (the message holds the peer's reason)."""


class SourceRefused(JoinRefused):
    """The peers refused to register a source (the message holds the peer's reason, e.g. a QoS they do not accept).

    Raised when the source is made, as :class:`JoinRefused` is for a sink: a source the
    peers refuse would have every news dropped.
    """


class NoPeers(DispatchError, ConnectionError):
    """No dispatch peer of that system runs on the runtime (or none could be reached)."""


class PayloadTooLarge(DispatchError, ValueError):
    """A news payload is longer than :data:`multihop.news.news.MAX_PAYLOAD`."""
