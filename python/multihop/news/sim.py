"""The simulator: the same peer, source and sink machines over in-memory channels and a virtual clock.

Every channel is a FIFO with a fixed latency; a message still on its way when
its sender dies arrives anyway (as a ring's contents would), and the nodes
linked to a dead one learn it ``close_delay`` later (as a pidfd tells a live
peer).  A *paused* node (SIGSTOP) keeps its channels but does nothing, so only
heartbeats can find it out.  Every message is encoded and decoded on its way
(``wire_check``), so the simulator exercises the Flounder stubs too.  One seed
and one script give one run: time-based rules are tested here exactly.  The
seed (``Sim(seed=...)``) makes the nodes' identities, and so the partition map
(rendezvous hashing over the peers' ids), the load-sharing choices and each
peer's random picks, the same on every run; without one, ids are fresh each run
as live nodes' are.  :meth:`Sim.slow_link` makes one direction of a channel
slower, to replay an interleaving a loaded machine produces (a peer that reads
a new channel before the older ones).

>>> sim = Sim()
>>> p = sim.add_peer()
>>> src = sim.add_source(SourceQoS())
>>> snk = sim.add_sink(["news"])
>>> sim.run(0.1); _ = src.send(["news"], b"hi"); sim.run(0.1)
>>> [n.payload for n in snk.got]
[b'hi']
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass
from typing import Any, Sequence, Union

from multihop.news.clock import VirtualClock, seconds_to_ns
from multihop.news.config import PeerConfig
from multihop.news.ids import Nid, domain_id, identity_of, new_identity
from multihop.news.news import News
from multihop.news.peer import PeerMachine
from multihop.news.qos import SinkQoS, SourceQoS
from multihop.news.sink_machine import SinkMachine
from multihop.news.source_machine import SourceMachine
from multihop.news.wire import Record, decode, encode

__all__ = ["Sim", "SimSource", "SimSink", "Sent"]

Machine = Union[PeerMachine, SourceMachine, SinkMachine]

Payload = Union[bytes, Record, None]
"""What an event carries: a message (its bytes with ``wire_check``, else its record), or nothing."""


@dataclass(frozen=True)
class Sent:
    """A news as its source sent it (for the checkers)."""

    source: Nid
    seq: int
    priority: int
    topics: tuple[str, ...]
    entry_ns: int

    @property
    def id(self) -> tuple[Nid, int]:
        """(source, seq)."""
        return (self.source, self.seq)


class SimSource:
    """A source in the simulator: ``send`` stamps with the virtual clock and writes to every linked peer."""

    def __init__(self, sim: "Sim", machine: SourceMachine) -> None:
        self.sim = sim
        self.machine = machine
        self.sent: list[Sent] = []

    @property
    def id(self) -> Nid:
        """The source's id."""
        return self.machine.me

    def send(self, topics: Sequence[str], payload: bytes = b"", skip: Sequence[Nid] = ()) -> Sent:
        """Send one news now (not to the peers in ``skip``: a best-effort source that found their channels busy)."""
        now = self.sim.now_ns
        rec = self.machine.make_news(topics, payload, now)
        for peer in sorted(self.machine.linked):
            if peer not in skip:
                self.sim.transmit(self.id, peer, rec)
        s = Sent(self.id, rec.seq, rec.priority, tuple(topics), now)
        self.sent.append(s)
        self.sim.sent.append(s)
        return s


class SimSink:
    """A sink in the simulator: while ``reading``, it takes every news as it arrives into ``got``."""

    def __init__(self, sim: "Sim", machine: SinkMachine, reading: bool) -> None:
        self.sim = sim
        self.machine = machine
        self.reading = reading
        self.got: list[News] = []

    @property
    def id(self) -> Nid:
        """The sink's id."""
        return self.machine.me

    def drain(self) -> None:
        """Take whatever is ready (if reading) and send the acks."""
        if not self.reading:
            return
        while True:
            n = self.machine.take(self.sim.now_ns)
            if n is None:
                break
            self.got.append(n)
        self.machine.flush_acks()


class Sim:
    """A simulated domain (see the module docstring)."""

    def __init__(
        self,
        config: PeerConfig | None = None,
        latency: float = 0.0002,
        close_delay: float = 0.001,
        wire_check: bool = True,
        clock: VirtualClock | None = None,
        domain: Nid | None = None,
        seed: int | None = None,
    ) -> None:
        self.clock = clock or VirtualClock()
        self.seed = seed
        self._rng = random.Random(seed) if seed is not None else None
        self.config = config or PeerConfig(heartbeat=0.05, dead_after=0.2, rate_grace=0.0)
        self.domain = domain or domain_id("sim", "main")
        self.latency_ns = seconds_to_ns(latency)
        self.close_delay_ns = seconds_to_ns(close_delay)
        self.wire_check = wire_check
        self.nodes: dict[Nid, Machine] = {}
        self.peers: dict[Nid, PeerMachine] = {}
        self.sinks: dict[Nid, SimSink] = {}
        self.sources: dict[Nid, SimSource] = {}
        self.dead: set[Nid] = set()
        self.paused: set[Nid] = set()
        self.links: set[tuple[Nid, Nid]] = set()  # (a, b) with a < b
        self.sent: list[Sent] = []
        self.events: list[tuple[int, Nid, str, dict[str, Any]]] = []
        self._queue: list[tuple[int, int, str, Nid, Nid, Payload]] = []
        self._seq = itertools.count()
        self._last_arrival: dict[tuple[Nid, Nid], int] = {}
        self._extra_ns: dict[tuple[Nid, Nid], int] = {}  # (src, dst) -> added latency (slow_link)

    @property
    def now_ns(self) -> int:
        """The virtual time."""
        return self.clock.now_ns()

    # ---- nodes -------------------------------------------------------------

    def identity(self, kind: str) -> tuple[Nid, bytes]:
        """A new node's ``(id, secret)``: drawn from the seed if the simulation has one, else fresh."""
        if self._rng is None:
            return new_identity(kind)
        secret = f"sim|{kind[:32]}|".encode() + self._rng.randbytes(16)
        return identity_of(secret), secret

    def add_peer(self, config: PeerConfig | None = None) -> PeerMachine:
        """Start a peer that joins the live peers (the first one is active at once)."""
        me, secret = self.identity("peer")
        existing = [p for p in self.peers if p not in self.dead]
        m = PeerMachine(me, self.domain, config or self.config, self.now_ns, existing, secret=secret)
        self.nodes[me] = self.peers[me] = m
        self._after(me)
        return m

    def _client_start(self, m: Machine) -> None:
        for peer in sorted(self.peers):
            if peer not in self.dead:
                self._schedule(self.now_ns + 2 * self.latency_ns, "connect", m.me, peer, None)

    def add_source(self, qos: SourceQoS | None = None) -> SimSource:
        """A source that binds to every live peer."""
        me, secret = self.identity("source")
        m = SourceMachine(me, self.domain, qos or SourceQoS(), self.now_ns, secret)
        self.nodes[m.me] = m
        s = self.sources[m.me] = SimSource(self, m)
        self._client_start(m)
        return s

    def add_sink(self, topics: Sequence[str], qos: SinkQoS | None = None, history: bool = False, reading: bool = True) -> SimSink:
        """A sink that binds to every live peer and joins."""
        me, secret = self.identity("sink")
        m = SinkMachine(me, self.domain, topics, qos or SinkQoS(), history, self.now_ns, secret=secret)
        self.nodes[m.me] = m
        s = self.sinks[m.me] = SimSink(self, m, reading)
        self._client_start(m)
        return s

    def kill(self, node: Nid) -> None:
        """SIGKILL: the node stops; what it sent still arrives; its neighbours see its channels close."""
        self.dead.add(node)
        for a, b in list(self.links):
            if node in (a, b):
                other = b if a == node else a
                self.links.discard((a, b))
                at = max(self.now_ns + self.close_delay_ns, self._last_arrival.get((node, other), 0))
                self._schedule(at, "closed", other, node, None)

    def leave(self, peer: Nid) -> None:
        """A peer leaves gracefully (``multihop news down`` for one peer)."""
        m = self.peers[peer]
        m.leave()
        self._after(peer)

    def pause(self, node: Nid) -> None:
        """SIGSTOP: the node does nothing until :meth:`resume`; its channels stay open."""
        self.paused.add(node)

    def resume(self, node: Nid) -> None:
        """SIGCONT."""
        self.paused.discard(node)
        self._after(node)

    def slow_link(self, src: Nid, dst: Nid, seconds: float) -> None:
        """Messages from ``src`` to ``dst`` sent from now on take ``seconds`` longer (0: the normal latency again).

        The channel stays a FIFO (a message never overtakes an earlier one on it); other
        channels are unaffected, so what ``dst`` hears from others may come first.
        """
        extra = seconds_to_ns(seconds)
        if extra:
            self._extra_ns[(src, dst)] = extra
        else:
            self._extra_ns.pop((src, dst), None)

    def set_reading(self, sink: Nid, reading: bool) -> None:
        """Make a sink application read (or stop reading)."""
        s = self.sinks[sink]
        s.reading = reading
        self._after(sink)

    # ---- the network -------------------------------------------------------

    def _schedule(self, at: int, kind: str, dst: Nid, src: Nid, payload: Payload) -> None:
        heapq.heappush(self._queue, (at, next(self._seq), kind, dst, src, payload))

    def transmit(self, src: Nid, dst: Nid, rec: Record) -> None:
        """Put a message on the channel src -> dst (dropped if there is none)."""
        if (min(src, dst), max(src, dst)) not in self.links:
            return
        data: Payload = encode(rec) if self.wire_check else rec
        at = max(self.now_ns + self.latency_ns + self._extra_ns.get((src, dst), 0), self._last_arrival.get((src, dst), 0))
        self._last_arrival[(src, dst)] = at
        self._schedule(at, "msg", dst, src, data)

    def _after(self, node: Nid) -> None:
        """Drain a node's outputs after it ran."""
        m = self.nodes.get(node)
        if m is None or node in self.dead or node in self.paused:
            return
        sink = self.sinks.get(node)
        if sink is not None:
            sink.drain()
        while (out := m.poll_transmit()) is not None:
            self.transmit(node, out[0], out[1])
        while (peer := m.poll_connect()) is not None:
            self._schedule(self.now_ns + 2 * self.latency_ns, "connect", node, peer, None)
        if isinstance(m, PeerMachine):
            while (ev := m.poll_event()) is not None:
                self.events.append((self.now_ns, node, ev[0], ev[1]))
            while (peer := m.poll_close()) is not None:  # the peer cuts a node off: both ends see the channel close
                self.links.discard((min(node, peer), max(node, peer)))
                at = max(self.now_ns + self.close_delay_ns, self._last_arrival.get((node, peer), 0))
                self._schedule(at, "closed", peer, node, None)
                self._schedule(self.now_ns, "closed", node, peer, None)
        else:
            while (peer := m.poll_close()) is not None:
                self.links.discard((min(node, peer), max(node, peer)))

    def _deliver(self, kind: str, dst: Nid, src: Nid, payload: Payload) -> None:
        m = self.nodes.get(dst)
        if m is None or dst in self.dead:
            return
        now = self.now_ns
        if kind == "msg":
            assert payload is not None  # transmit() always puts the message in
            rec = decode(payload) if isinstance(payload, bytes) else payload
            m.handle_message(src, rec, now)
        elif kind == "connect":
            if src in self.dead or src not in self.nodes:
                m.handle_connect_failed(src, now)
            else:
                self.links.add((min(dst, src), max(dst, src)))
                m.handle_connected(src, now)
        elif kind == "closed":
            m.handle_closed(src, now)
        self._after(dst)

    def step(self, until_ns: int) -> bool:
        """Run the next event due by ``until_ns`` (a message, or a peer's timer); False if there is none."""
        t_msg = self._queue[0][0] if self._queue else None
        t_timer, who = None, None
        for pid, m in self.peers.items():
            if pid in self.dead or pid in self.paused or m.stopped:
                continue
            t = m.poll_timeout()
            if t is not None and (t_timer is None or t < t_timer):
                t_timer, who = t, pid
        if t_msg is not None and t_msg <= until_ns and (t_timer is None or t_msg <= t_timer):
            at, _, kind, dst, src, payload = heapq.heappop(self._queue)
            if dst in self.paused:
                self._schedule(until_ns + 1, kind, dst, src, payload)  # held until resumed
                return True
            self.clock.set(max(at, self.now_ns))
            self._deliver(kind, dst, src, payload)
            return True
        if t_timer is not None and who is not None and t_timer <= until_ns:
            self.clock.set(max(t_timer, self.now_ns))
            self.peers[who].handle_timeout(self.now_ns)
            self._after(who)
            return True
        return False

    def run(self, seconds: float, max_steps: int = 5_000_000) -> None:
        """Advance the virtual clock by ``seconds``, running everything due on the way."""
        until = self.now_ns + seconds_to_ns(seconds)
        for _ in range(max_steps):
            if not self.step(until):
                break
        else:
            raise RuntimeError(f"the simulation did not settle within {max_steps} steps")
        self.clock.set(max(until, self.now_ns))

    def owner_of(self, sink: Nid) -> Nid | None:
        """The peer that serves ``sink`` now (by any live active peer's view)."""
        for pid, m in self.peers.items():
            if pid not in self.dead and m.active and sink in m.sinks:
                return m.owners[m.sinks[sink].partition]
        return None

    def events_named(self, name: str) -> list[tuple[int, Nid, dict[str, Any]]]:
        """The peer events of that name: (time, peer, fields)."""
        return [(t, n, f) for t, n, e, f in self.events if e == name]
