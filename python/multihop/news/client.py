"""Live sources and sinks: ``news.source(...)`` and ``news.sink(...)``.

A client is a dispatcher of this process (on ``core``, by default one of the
runtime's) with one channel to every peer of its domain; its protocol is a
sans-IO machine (:mod:`.source_machine`, :mod:`.sink_machine`) that this
module feeds.  Clients have no thread of their own: a source reads what the
peers sent (acks, alarms, new members) on each ``send``; a sink reads on each
``next``.  Both are context managers; ``close()`` tells the peers it leaves.

Each client draws its identity (:func:`~.ids.new_identity`): its hellos show
the secret whose MD5 is its id, so no other process can speak under it.  A
source is made only once every peer registered it (a QoS they refuse raises
:class:`~.errors.SourceRefused` naming their reason), as a sink is made only
once a peer gave it its partition (:class:`~.errors.JoinRefused`).  A message
from a peer whose handling fails is counted (``stats()["frame_errors"]``) and
logged, never raised into ``send`` or ``next``.
"""

from __future__ import annotations

import logging
import os
import time
from types import TracebackType
from typing import Any, Generic, Protocol, Sequence, TypeVar

import multihop as mh
from multihop.defaults import DEFAULT_TIMEOUT
from multihop.news.channels import ChannelTable, drain
from multihop.news.clock import Clock, MonotonicClock
from multihop.news.errors import JoinRefused, NoPeers, SourceRefused, UnknownTopic
from multihop.news.ids import Nid, domain_id, hex_id, new_identity, short
from multihop.news.naming import DEFAULT_SYSTEM, check_system, listed_peers, peer_service
from multihop.news.news import News
from multihop.news.qos import SinkQoS, SourceQoS
from multihop.news.sink_machine import SinkMachine
from multihop.news.source_machine import SourceMachine
from multihop.news.topics import check_topics
from multihop.news.wire import DecodeError, Record, decode

__all__ = ["Source", "Sink", "source", "sink"]

log = logging.getLogger("multihop.news.client")


class ClientMachine(Protocol):
    """What a client's loop step feeds and drains: the inputs and outputs that
    :class:`~.source_machine.SourceMachine` and :class:`~.sink_machine.SinkMachine` share."""

    def handle_connected(self, peer: Nid, now_ns: int, /) -> None:
        """The channel to ``peer`` the machine asked for is up."""

    def handle_connect_failed(self, peer: Nid, now_ns: int, /) -> None:
        """``peer`` could not be reached."""

    def handle_closed(self, peer: Nid, now_ns: int, /) -> None:
        """The channel to ``peer`` closed."""

    def handle_message(self, src: Nid, rec: Record, now_ns: int, /) -> None:
        """A message from peer ``src``."""

    def has_output(self) -> bool:
        """Whether anything waits in the ``poll_*`` methods."""

    def poll_transmit(self) -> tuple[Nid, Record] | None:
        """The next message to send, or None."""

    def poll_connect(self) -> Nid | None:
        """The next peer to bind to, or None."""

    def poll_close(self) -> Nid | None:
        """The next peer whose channel to close, or None."""


MachineT = TypeVar("MachineT", bound=ClientMachine)


class _Client(Generic[MachineT]):
    """The channels of a source or sink to its domain's peers, and the loop step that feeds its machine."""

    machine: MachineT  # made by the subclass's constructor, before it binds

    def __init__(self, runtime: str, system: str, core: int | None, transport: str, clock: Clock | None) -> None:
        self.system = check_system(system)
        self.rt = mh.Runtime.attach(runtime)
        self.clock = clock or MonotonicClock()
        self.transport = transport
        cores = self.rt.cores
        self.d = self.rt.dispatcher(cores[os.getpid() % len(cores)] if core is None else core)
        self.table = ChannelTable()
        self.domain = domain_id(runtime, system)
        self.closed = False
        self.frame_errors = 0  # messages from peers whose handling raised (a bug: counted and logged)
        self._last_scan = time.monotonic()

    def _connect_all(self) -> None:
        peers = listed_peers(self.rt, self.system)
        if not peers:
            self.d.detach()
            raise NoPeers(
                f"no dispatch peer of system {self.system!r} runs on runtime {self.rt.name!r}; "
                f"start them with multihop news up {self.rt.name} (or news.start)"
            )
        for peer in sorted(peers):
            self._bind(peer)
        if not self.table.by_node:
            self.d.detach()
            raise NoPeers(f"none of the {len(peers)} listed peers of system {self.system!r} could be reached")

    def _bind(self, peer: Nid) -> None:
        try:
            ch = self.d.bind(peer_service(self.system, peer), transport=self.transport, timeout=DEFAULT_TIMEOUT)
        except (mh.BindError, mh.Timeout):
            self.machine.handle_connect_failed(peer, self.clock.now_ns())
            return
        self.table.name(ch, peer)
        self.machine.handle_connected(peer, self.clock.now_ns())

    def _rescan(self) -> None:
        """With no peer left, look for peers again (at most once a second): a domain restarted is found."""
        now = time.monotonic()
        if self.table.by_node or now - self._last_scan < 1.0:
            return
        self._last_scan = now
        for peer in sorted(listed_peers(self.rt, self.system)):
            if self.table.channel(peer) is None:
                self._bind(peer)

    def _step(self, timeout: float) -> None:
        """Write what the machine queued, bind where it asks, then read what arrived (waiting up to ``timeout``)."""
        self._rescan()
        self._write()
        if timeout > 0:
            ready = self.d.poll(timeout=timeout)
        else:  # looking costs a non-blocking read per channel, far less than a poll
            ready = list(self.table.channels())
        now = self.clock.now_ns()
        m = self.machine
        for ch in ready:
            node = self.table.node(ch)
            try:
                batch = drain(ch)
            except mh.ChannelClosed:
                gone = self.table.forget(ch)
                if gone is not None:
                    m.handle_closed(gone, now)
                continue
            if node is None:
                continue
            for data in batch:
                try:
                    m.handle_message(node, decode(data), now)
                except DecodeError:
                    continue
                except Exception:
                    self.frame_errors += 1
                    if self.frame_errors <= 20:
                        log.exception("dispatch client: a message from peer %s failed; dropped", short(node))
        self._write()

    def _write(self) -> None:
        m = self.machine
        if not m.has_output() and not self.table.outbox:
            return
        while (peer := m.poll_connect()) is not None:
            self._bind(peer)
        while (peer := m.poll_close()) is not None:
            ch = self.table.channel(peer)
            if ch is not None:
                self.table.flush()
        while (out := m.poll_transmit()) is not None:
            self.table.queue(out[0], out[1])
        self.table.flush()

    def _close(self, leaving: list[tuple[Nid, Record]]) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            for node, rec in leaving:
                self.table.queue(node, rec)
            for node in list(self.table.outbox):
                try:
                    self.table.flush_node(node, 1.0)
                except (mh.Timeout, mh.ChannelClosed):
                    pass
        finally:
            self.table.close_all()
            try:
                self.d.detach()
            except Exception:
                pass


class Source(_Client[SourceMachine]):
    """A live news source (make one with :func:`source`)."""

    def __init__(
        self,
        runtime: str,
        qos: SourceQoS,
        *,
        system: str = DEFAULT_SYSTEM,
        core: int | None = None,
        transport: str = "ump",
        clock: Clock | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not isinstance(qos, SourceQoS):
            raise TypeError(f"qos must be a news.SourceQoS, got {type(qos).__name__}")
        super().__init__(runtime, system, core, transport, clock)
        self.id, secret = new_identity("source")
        self.machine = SourceMachine(self.id, self.domain, qos, self.clock.now_ns(), secret)
        self._connect_all()
        deadline = time.monotonic() + timeout
        m = self.machine
        # every peer's answer to the registration (and a welcome: declared topics, members)
        while not (m.epoch and m.answered()) and m.refused is None and time.monotonic() < deadline:
            self._step(0.02)
        if m.refused is not None:
            self._close(m.leave_messages())
            raise SourceRefused(f"source refused by {m.refused}")
        if not m.epoch or not m.registered:
            self._close(m.leave_messages())
            raise mh.Timeout(f"no dispatch peer of system {system!r} registered the source within {timeout} s")

    @property
    def qos(self) -> SourceQoS:
        """The source's QoS."""
        return self.machine.qos

    def send(self, topics: Sequence[str], payload: bytes, timeout: float | None = DEFAULT_TIMEOUT) -> int:
        """Send one news under ``topics``; return its sequence number.

        Every peer gets it (active replication).  A reliable source waits up to
        ``timeout`` for room on each peer's channel (raising Timeout: the news
        then reached only some peers, which pass it on to the others); a best
        effort source never waits and counts a peer it could not hand the news
        to (``stats()["dropped"]``).  Raises TopicError / UnknownTopic for a
        bad topic list, PayloadTooLarge, NoPeers when no peer is left (the
        source looks for new ones first), ValueError when closed.
        """
        if self.closed:
            raise ValueError("this source is closed")
        m = self.machine
        self._step(0.0)
        if not m.linked:
            self._last_scan = 0.0
            self._rescan()
            if not m.linked:
                raise NoPeers(f"news not sent: no dispatch peer of system {self.system!r} is left on runtime {self.rt.name!r}")
        self._write()  # the hellos of a peer just bound go before the news
        rec = m.make_news(topics, payload, self.clock.now_ns())
        reliable = m.qos.reliable
        for peer in sorted(m.linked):
            self.table.queue(peer, rec)
            if reliable:
                try:
                    self.table.flush_node(peer, timeout)
                    m.counters["handed"] += 1
                except mh.ChannelClosed:
                    pass
            else:
                box = self.table.outbox.get(peer)
                ch = self.table.channel(peer)
                try:
                    while box and ch is not None:
                        ch.try_send(box[0])
                        box.popleft()
                    m.counters["handed"] += 1
                except mh.TxBusy:
                    assert box is not None  # TxBusy comes from try_send only, inside the loop: box is not empty
                    box.pop()  # this news, for this peer: dropped (the other peers pass it on)
                    m.counters["dropped"] += 1
                except mh.ChannelClosed:
                    pass
        return int(rec.seq)

    def flush(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Wait until every peer acknowledged every news (reliable sources; a no-op for best effort)."""
        deadline = time.monotonic() + timeout
        while self.machine.unacked():
            left = deadline - time.monotonic()
            if left <= 0:
                raise mh.Timeout(f"{self.machine.unacked()} news not acknowledged by every peer within {timeout} s")
            self._step(min(left, 0.05))

    def stats(self) -> dict[str, Any]:
        """sent, handed (channel writes), dropped (best effort), unacked, alarms and below_min_units, peers, refusals,
        bad_frames (messages from peers that made no sense) and frame_errors (whose handling failed)."""
        self._step(0.0)
        return dict(self.machine.stats(), frame_errors=self.frame_errors)

    def close(self) -> None:
        """Tell the peers this source leaves, and release its channels."""
        if not self.closed:
            self._close(self.machine.leave_messages())

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<news.Source {hex_id(self.id)} system={self.system!r} peers={len(self.machine.linked)}>"


class Sink(_Client[SinkMachine]):
    """A live news sink (make one with :func:`sink`)."""

    def __init__(
        self,
        runtime: str,
        topics: Sequence[str],
        qos: SinkQoS,
        history: bool = False,
        *,
        system: str = DEFAULT_SYSTEM,
        core: int | None = None,
        transport: str = "ump",
        clock: Clock | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not isinstance(qos, SinkQoS):
            raise TypeError(f"qos must be a news.SinkQoS, got {type(qos).__name__}")
        if not isinstance(history, bool):
            raise TypeError(f"history must be True or False, got {history!r}")
        names = check_topics(topics)
        qos.exclusive_topics(names)  # checked before anything starts
        super().__init__(runtime, system, core, transport, clock)
        self.id, secret = new_identity("sink")
        self.machine = SinkMachine(self.id, self.domain, names, qos, history, self.clock.now_ns(), secret=secret)
        self._connect_all()
        deadline = time.monotonic() + timeout
        m = self.machine
        while m.info is None and m.refused is None and time.monotonic() < deadline:
            self._step(0.02)
        if m.info is None:
            self._close(m.leave_messages())
            if m.topic_error is not None:
                raise UnknownTopic(f"sink topics: {m.topic_error}")
            if m.refused is not None:
                raise JoinRefused(f"sink refused by {m.refused}")
            raise mh.Timeout(f"no dispatch peer of system {system!r} accepted the sink's JOIN within {timeout} s")

    @property
    def topics(self) -> tuple[str, ...]:
        """The sink's topics."""
        return self.machine.topics

    @property
    def partition(self) -> int:
        """The partition the sink was given."""
        p = self.machine.partition
        assert p is not None  # the constructor returns only once a peer gave the sink its partition
        return p

    def _handed(self, n: News | None) -> News | None:
        """Send the batched acks that are due (the peers' window moves on)."""
        m = self.machine
        if m.pending_acks:
            m.flush_due_acks(self.clock.now_ns())
            self._write()
        return n

    def try_next(self) -> News | None:
        """The next news if one has arrived, else None (never waits)."""
        if self.closed:
            raise ValueError("this sink is closed")
        n = self.machine.take(self.clock.now_ns())
        if n is None:
            self._step(0.0)
            n = self.machine.take(self.clock.now_ns())
        return self._handed(n)

    def next(self, timeout: float | None = None) -> News:
        """The next news, waiting up to ``timeout`` seconds (None: for ever); raises ``multihop.Timeout``.

        Each news is handed out once (duplicates from a take-over are dropped)
        and never later than the sink's ``max_delivery_time``.
        """
        if self.closed:
            raise ValueError("this sink is closed")
        deadline = None if timeout is None else time.monotonic() + timeout
        m = self.machine
        while True:
            n = m.take(self.clock.now_ns())
            if n is not None:
                self._handed(n)
                return n
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            due = m.ack_deadline()
            if due is not None:
                now = self.clock.now_ns()
                if now >= due:
                    m.flush_acks()
                else:
                    left = min(left, (due - now) / 1e9)
            if left <= 0 and (deadline is not None and time.monotonic() >= deadline):
                self._step(0.0)
                n = m.take(self.clock.now_ns())
                if n is not None:
                    self._handed(n)
                    return n
                m.flush_acks()
                self._write()
                raise mh.Timeout(f"no news for sink {short(self.id)} within {timeout} s")
            self._step(max(0.0, left))

    def stats(self) -> dict[str, Any]:
        """received, delivered, duplicates (suppressed), late, expired, overflowed, waiting, partition, peers, by_peer,
        bad_frames (messages from peers that made no sense) and frame_errors (whose handling failed)."""
        return dict(self.machine.stats(), frame_errors=self.frame_errors)

    def close(self) -> None:
        """Tell the peers this sink leaves (they drop its queue), and release its channels."""
        if not self.closed:
            self._close(self.machine.leave_messages())

    def __enter__(self) -> "Sink":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<news.Sink {hex_id(self.id)} topics={list(self.topics)} partition={self.machine.partition}>"


def source(runtime_name: str, qos: SourceQoS | None = None, **kwargs: Any) -> Source:
    """Register a news source with the dispatch peers of runtime ``runtime_name``.

    Returns once every peer registered it.  Keyword arguments: ``system``
    (default ``"main"``), ``core``, ``transport`` (``"ump"`` or
    ``"multihop"``), ``clock``, ``timeout``.  Raises RuntimeNotFound, NoPeers,
    QosError (from ``SourceQoS``), SourceRefused (a peer refused it, with the
    peer's reason), Timeout.
    """
    return Source(runtime_name, qos if qos is not None else SourceQoS(), **kwargs)


def sink(runtime_name: str, topics: Sequence[str], qos: SinkQoS | None = None, history: bool = False, **kwargs: Any) -> Sink:
    """Register a news sink (a JOIN) for ``topics``; with ``history=True`` it also gets the news the peers kept.

    Returns once a peer gave it its partition.  Keyword arguments as for
    :func:`source`.  Raises TopicError / UnknownTopic, QosError, JoinRefused
    (with the peer's reason), NoPeers, Timeout.
    """
    return Sink(runtime_name, topics, qos if qos is not None else SinkQoS(), history, **kwargs)
