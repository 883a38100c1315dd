"""RE.VE.N.GE. QoS news dispatching on the runtime: sources, sinks, replicated peers, relays.

::

    from multihop import news
    with news.start("news", peers=3):                       # three peer processes on runtime "news"
        src = news.source("news", qos=news.SourceQoS(priority=5, unit=1.0, max_per_unit=100))
        snk = news.sink("news", ["sport"], qos=news.SinkQoS(max_delivery_time=2.0))
        src.send(["sport"], b"goal")
        snk.next(timeout=1.0).payload                            # b'goal'

The parts, one per module: :mod:`.ids` (128-bit ids and the secrets that
prove them), :mod:`.qos` (the QoS and their checks), :mod:`.validate` (what
a node accepts from the wire), :mod:`.topics` (names and the topic table), :mod:`.queues`
(per-priority sink queues), :mod:`.rates` (rate units), :mod:`.partition`
(partitions and load sharing), :mod:`.membership` (heartbeats); the peer as
a sans-IO machine, :mod:`.peer` with :mod:`.clients`, :mod:`.serving` and
:mod:`.replication`; the clients as machines, :mod:`.source_machine` and
:mod:`.sink_machine`; :mod:`.sim` (the simulator), :mod:`.driver` (the live
peer), :mod:`.client` (live sources and sinks), :mod:`.relay` and
:mod:`.relay_driver` (relays between domains), :mod:`.system` (peer
processes), :mod:`.admin` and :mod:`.command` (``multihop news
up|status|down``), :mod:`.checkers` (the guarantees, checked on recorded
deliveries).  The benchmarks' load and measurements are in :mod:`multihop.bench.news`.  The
messages are the Flounder interface ``flounder-idl/dispatch.if``; the
protocol is written down in ``PROTOCOL.md`` next to this file.
"""

from __future__ import annotations

from multihop.deprecation import alias_modules
from multihop.news.client import Sink, Source, sink, source
from multihop.news.config import PeerConfig
from multihop.news.errors import (
    DispatchError,
    JoinRefused,
    NoPeers,
    PayloadTooLarge,
    QosError,
    SourceRefused,
    TopicError,
    UnknownTopic,
)
from multihop.news.news import MAX_PAYLOAD, News
from multihop.news.qos import SinkQoS, SourceQoS
from multihop.news.relay import Relay, relay
from multihop.news.system import PeerProcess, System, start

__all__ = [
    "DispatchError",
    "JoinRefused",
    "MAX_PAYLOAD",
    "News",
    "NoPeers",
    "PayloadTooLarge",
    "PeerConfig",
    "PeerProcess",
    "QosError",
    "Relay",
    "Sink",
    "SinkQoS",
    "Source",
    "SourceQoS",
    "SourceRefused",
    "System",
    "TopicError",
    "UnknownTopic",
    "relay",
    "sink",
    "source",
    "start",
]

# Moved to the benchmarks (issue 25); the old names work one release, with a DeprecationWarning.
alias_modules({"multihop.news.measure": "multihop.bench.news.measure", "multihop.news.workload": "multihop.bench.news.workload"})
