"""The GES simulator: every broker's protocol core on in-memory links with a virtual clock.

``Simulator(topology, seed=0)`` builds one :class:`~multihop.ges.broker.BrokerCore`
per broker and brings every gateway of the topology up at time 0.  Links
have a delay each (drawn once per link from ``delay``, seeded) and are FIFO;
with ``loss`` > 0 each message is dropped with that probability and a
reliable link layer (:mod:`multihop.ges.reliable`) retransmits it.  A broker
gathers what it receives for ``batch_delay`` before sending (as a live broker
drains its channels before it writes), so one batch per neighbour leaves per
round.  The same seed gives the same trace: :attr:`Simulator.digest` hashes
every delivery (time, source, destination, kind).

Changes while it runs: :meth:`add_gateway`, :meth:`remove_gateway`,
:meth:`set_cost`, :meth:`kill_broker`, and with ``durable=True`` (stable storage:
:mod:`multihop.ges.durability`, one in-memory store per cluster, in
:attr:`Simulator.stores`) :meth:`crash_broker` / :meth:`restart_broker`; :meth:`run_until_quiet` runs until no
message is in flight and returns how many protocol messages were delivered.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import itertools
import random
import struct
from typing import Any, Iterable, Mapping

from multihop.defaults import DEFAULT_TIMEOUT
from multihop.errors import ChannelClosed, Timeout
from multihop.ges.address import Address, AddressLike, level_of_difference, unit_id, unit_str
from multihop.ges.broker import BrokerCore
from multihop.ges.client import ClientCore, DurableState, check_client_id, check_credential
from multihop.ges.costs import CostMatrix
from multihop.ges.durability import storage_brokers_of
from multihop.ges.errors import GesStateError, TopologyError
from multihop.ges.event import Event, EventId
from multihop.ges.graph import ConnectivityGraph
from multihop.ges.messages import Attach, Connections, DurableAttach, Events
from multihop.ges.nap import Joiner
from multihop.ges.reliable import ReliableReceiver, ReliableSender
from multihop.ges.storage import MemoryStorage
from multihop.ges.topology import Topology

__all__ = ["Simulator", "SimClient", "NotQuiet"]

_DELIVER, _FLUSH, _TIMER, _ACK, _RTO, _JOIN, _TO_BROKER, _TO_CLIENT = range(8)
_CLIENT_BASE = -(1 << 40)  # client ids are below this (newcomers of NAP are small negatives)


class NotQuiet(GesStateError):
    """:meth:`Simulator.run_until_quiet` reached ``max_steps`` with messages still in flight."""


class _Link:
    """One direction of a simulated gateway."""

    __slots__ = ("delay", "last", "incarnation", "tx", "rx", "rto_set")

    def __init__(self, delay: float, incarnation: int, reliable: bool) -> None:
        self.delay = delay
        self.last = 0.0
        self.incarnation = incarnation
        self.tx = ReliableSender() if reliable else None
        self.rx = ReliableReceiver() if reliable else None
        self.rto_set = False


class Simulator:
    """Simulated GES system (see the module docstring)."""

    def __init__(
        self,
        topology: Topology,
        seed: int = 0,
        *,
        delay: tuple[float, float] = (0.5e-3, 1.5e-3),
        loss: float = 0.0,
        batch_delay: float | None = None,
        costs: CostMatrix | None = None,
        trace: bool = False,
        trace_events: bool = False,
        durable: bool = False,
        native: bool = False,
    ) -> None:
        if not isinstance(topology, Topology):
            raise TypeError(f"topology must be a multihop.ges.Topology, got {type(topology).__name__}")
        lo, hi = delay
        if not 0 < lo <= hi:
            raise ValueError(f"delay must be (low, high) with 0 < low <= high seconds, got {delay!r}")
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"loss must be a probability below 1, got {loss!r}")
        self.topology = topology.copy()
        self.levels = topology.levels
        self.seed = seed
        self.rng = random.Random(seed)
        self.delay = (lo, hi)
        self.loss = loss
        self.batch_delay = lo / 10 if batch_delay is None else batch_delay
        self.costs = costs or CostMatrix(self.levels)
        self.now = 0.0
        self._heap: list[tuple[float, int, int, int, int, Any]] = []
        self._seq = itertools.count()
        self.brokers: dict[int, BrokerCore] = {}
        self._links: dict[tuple[int, int], _Link] = {}
        self._incarnations: dict[tuple[int, int], int] = {}
        self._flush_pending: set[int] = set()
        #: newcomers of the node organization protocol (temporary negative ids) -> their NAP machine
        self._joiners: dict[int, Joiner] = {}
        #: clients (ids below _CLIENT_BASE) -> their driver
        self._clients: dict[int, SimClient] = {}
        self._incarnations_of: dict[str, int] = {}
        #: durable clients' credentials come from here (its own stream: the seed gives the same trace as before)
        self._credentials = random.Random(f"credentials-{seed}")
        #: one-way delay between a client and its broker
        self.client_delay = lo / 2
        #: protocol messages handed to brokers, over the whole run
        self.delivered = 0
        #: connection records carried by the messages sent (one message carries a batch)
        self.records_sent = 0
        #: frames put on links (messages, retransmissions and acks), and frames the links dropped
        self.frames = 0
        self.dropped = 0
        self._digest = hashlib.blake2b(digest_size=16)
        self.trace: list[tuple[float, str, str, str]] | None = [] if trace else None
        #: with trace_events: every event copy delivered between brokers, as (source, destination, copy)
        self.event_trace: list[tuple[int, int, Any]] | None = [] if trace_events else None
        #: durable mode: cluster -> its storage broker (the cluster's lowest address), and the stores
        self.durable = durable
        #: the brokers route events with the native engine (``BrokerCore(native=True)``)
        self.native = native
        self.storage_brokers: dict[int, int] | None = None
        self.stores: dict[int, MemoryStorage] = {}
        self._epochs: dict[int, int] = {}
        #: crashed brokers (durable mode), waiting for restart_broker
        self.crashed: set[int] = set()
        self._last_client: dict[str, SimClient] = {}
        if durable:
            sb = storage_brokers_of(self.topology)
            self.storage_brokers = sb
            self.stores = {code: MemoryStorage(f"memory:{Address.from_code(code, self.levels)}") for code in sb.values()}
        for b in self.topology.brokers.values():
            self.brokers[b.address.code] = self._make_core(b.address)
        for gw in self.topology.gateways.values():
            self._connect(gw.a.code, gw.b.code, gw.cost)

    # ---- helpers ---------------------------------------------------------------

    def _make_core(self, addr: Address) -> BrokerCore:
        if not self.durable:
            return BrokerCore(addr, self.costs, self.topology.thresholds, native=self.native)
        return BrokerCore(
            addr,
            self.costs,
            self.topology.thresholds,
            storage_brokers=self.storage_brokers,
            storage=self.stores.get(addr.code),
            epoch=self._epochs.get(addr.code, 0),
            native=self.native,
        )

    def _code(self, a: AddressLike) -> int:
        addr = Address(a, self.levels)
        if addr.code not in self.brokers:
            raise GesStateError(f"no broker {addr} in the simulation")
        return addr.code

    def _push(self, t: float, kind: int, dst: int, src: int, payload: Any) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), kind, dst, src, payload))

    def _schedule_flush(self, code: int) -> None:
        if code not in self._flush_pending:
            self._flush_pending.add(code)
            self._push(self.now + self.batch_delay, _FLUSH, code, code, None)

    def _connect(self, a: int, b: int, cost: int) -> None:
        key = (min(a, b), max(a, b))
        inc = self._incarnations.get(key, -1) + 1
        self._incarnations[key] = inc
        lo, hi = self.delay
        reliable = self.loss > 0
        for s, d in ((a, b), (b, a)):
            self._links[(s, d)] = _Link(self.rng.uniform(lo, hi), inc, reliable)
        self.brokers[a].link_up(b, inc, cost)
        self.brokers[b].link_up(a, inc, cost)
        self._schedule_flush(a)
        self._schedule_flush(b)

    def _disconnect(self, a: int, b: int) -> None:
        self._links.pop((a, b), None)
        self._links.pop((b, a), None)
        for x, y in ((a, b), (b, a)):
            core = self.brokers.get(x)
            if core is not None:
                core.link_down(y)
                self._schedule_flush(x)

    def _flush(self, code: int) -> None:
        self._flush_pending.discard(code)
        core = self.brokers.get(code)
        if core is None:
            return
        for peer, msgs in core.take_outbox().items():
            if peer <= _CLIENT_BASE:
                if peer in self._clients:
                    for msg in msgs:
                        self._push(self.now + self.client_delay, _TO_CLIENT, peer, code, msg)
                continue
            joiner = self._joiners.get(peer)
            if joiner is not None:  # the answer to a newcomer, over its temporary connection
                for msg in msgs:
                    self._push(self.now + self.delay[0], _JOIN, peer, code, msg)
                continue
            link = self._links.get((code, peer))
            if link is None:
                continue  # the gateway went down meanwhile
            for msg in msgs:
                self._transmit(code, peer, link, msg)
        for delay, name in core.take_timers():
            self._push(self.now + delay, _TIMER, code, code, name)

    def _transmit(self, src: int, dst: int, link: _Link, msg: Any) -> None:
        if type(msg) is Connections:
            self.records_sent += len(msg.records)
        frame = link.tx.send(msg) if link.tx is not None else msg
        self._put(src, dst, link, _DELIVER, frame)
        if link.tx is not None and not link.rto_set:
            link.rto_set = True
            back = self._links.get((dst, src))
            rtt = link.delay + (back.delay if back else link.delay)
            self._push(self.now + 3 * rtt, _RTO, dst, src, link.incarnation)

    def _put(self, src: int, dst: int, link: _Link, kind: int, frame: Any) -> None:
        self.frames += 1
        if self.loss and self.rng.random() < self.loss:
            self.dropped += 1
            return
        t = self.now + link.delay
        if t <= link.last:
            t = link.last + 1e-9  # FIFO
        link.last = t
        self._push(t, kind, dst, src, (link.incarnation, frame))

    # ---- the loop ----------------------------------------------------------------

    def step(self) -> bool:
        """Handle the next event; False when nothing is in flight."""
        if not self._heap:
            return False
        t, _, kind, dst, src, payload = heapq.heappop(self._heap)
        self.now = t
        if kind == _FLUSH:
            self._flush(dst)
            return True
        if kind == _TIMER:
            core = self.brokers.get(dst)
            if core is not None:
                core.fire(payload)
                self._schedule_flush(dst)
            return True
        if kind == _TO_BROKER:
            core = self.brokers.get(dst)
            client = self._clients.get(src)
            if core is None or client is None or client.broker != dst:
                return True  # the broker died or the client left while the message flew
            self.delivered += 1
            self._record(src, dst, payload)
            if type(payload) is Attach or type(payload) is DurableAttach:
                core.client_attach(src, payload)
            elif payload is None:
                core.client_detach(src)
            else:
                core.client_receive(src, payload)
            self._schedule_flush(dst)
            return True
        if kind == _TO_CLIENT:
            client = self._clients.get(dst)
            if client is not None and client.broker == src and not client.closed:
                self.delivered += 1
                self._record(src, dst, payload)
                client.core.on_message(payload)
                if client.core.durable is not None:
                    client.flush()  # acknowledgements
            return True
        if kind == _JOIN:
            self.delivered += 1
            self._record(src, dst, payload)
            if dst < 0:  # to a newcomer
                self._joiners[dst].on_reply(payload)
                self._joiner_flush(dst)
            else:
                core = self.brokers.get(dst)
                if core is not None:
                    core.receive(src, payload)
                    self._schedule_flush(dst)
            return True
        if kind == _RTO:
            link = self._links.get((src, dst))
            if link is None or link.incarnation != payload or link.tx is None:
                return True
            link.rto_set = False
            if link.tx.unacked:
                for frame in link.tx.expire():
                    self._put(src, dst, link, _DELIVER, frame)
                link.rto_set = True
                back = self._links.get((dst, src))
                rtt = link.delay + (back.delay if back else link.delay)
                self._push(self.now + 3 * rtt, _RTO, dst, src, link.incarnation)
            return True
        inc, frame = payload
        if kind == _ACK:
            fwd = self._links.get((dst, src))  # the acknowledged direction: dst sent the data
            if fwd is not None and fwd.incarnation == inc and fwd.tx is not None:
                fwd.tx.ack(frame)
            return True
        link = self._links.get((src, dst))
        if link is None or link.incarnation != inc:
            return True  # the gateway went down (or came back) while the frame flew
        core = self.brokers[dst]
        if link.rx is not None:
            msgs, ack = link.rx.receive(frame)
            back = self._links.get((dst, src))
            if back is not None:
                self._put(dst, src, back, _ACK, ack)
        else:
            msgs = [frame]
        for msg in msgs:
            self.delivered += 1
            self._record(src, dst, msg)
            if self.event_trace is not None and type(msg) is Events:
                self.event_trace.extend((src, dst, c) for c in msg.copies)
            core.receive(src, msg)
        self._schedule_flush(dst)
        return True

    def _record(self, src: int, dst: int, msg: Any) -> None:
        kind = type(msg).__name__
        self._digest.update(struct.pack("<dqq", self.now, src, dst) + kind.encode())
        if self.trace is not None:
            self.trace.append((self.now, self._name(src), self._name(dst), kind))

    def _name(self, code: int) -> str:
        if code <= _CLIENT_BASE:
            return f"client{_CLIENT_BASE - code}"
        return f"newcomer{-code}" if code < 0 else str(Address.from_code(code, self.levels))

    def run_until_quiet(self, max_steps: int = 50_000_000) -> int:
        """Run until no message or batch is pending; returns the protocol messages delivered meanwhile.

        Raises :class:`NotQuiet` after ``max_steps`` events (timers that keep
        firing, or a protocol that does not settle).
        """
        before = self.delivered
        steps = 0
        while self._heap:
            if steps >= max_steps:
                raise NotQuiet(f"still {len(self._heap)} events pending after {max_steps} steps (virtual time {self.now:.6f} s)")
            self.step()
            steps += 1
        return self.delivered - before

    @property
    def digest(self) -> str:
        """A hash of every delivery so far (time, source, destination, kind): equal seeds give equal digests."""
        return self._digest.copy().hexdigest()

    # ---- changes ---------------------------------------------------------------------

    def add_gateway(self, a: AddressLike, b: AddressLike, cost: int | None = None) -> None:
        """Bring a new gateway up between two running brokers (both ends exchange their connections)."""
        x, y = self._code(a), self._code(b)
        try:
            gw = self.topology.add_gateway(a, b, cost)
        except TopologyError as e:
            raise GesStateError(str(e)) from None
        self._connect(x, y, gw.cost)

    def remove_gateway(self, a: AddressLike, b: AddressLike) -> None:
        """Close the gateway between two brokers; both ends disseminate its loss."""
        x, y = self._code(a), self._code(b)
        try:
            self.topology.remove_gateway(a, b)
        except TopologyError as e:
            raise GesStateError(str(e)) from None
        self._disconnect(x, y)

    def set_cost(self, a: AddressLike, b: AddressLike, cost: int) -> None:
        """Change the extra cost of the gateway between ``a`` and ``b`` at both ends (a run-time link cost)."""
        x, y = self._code(a), self._code(b)
        if (x, y) not in self._links:
            raise GesStateError(f"there is no gateway between {a} and {b}")
        if not isinstance(cost, int) or isinstance(cost, bool) or cost < 0:
            raise ValueError(f"cost must be a non-negative integer, got {cost!r}")
        for s, d in ((x, y), (y, x)):
            self.brokers[s].gpp.set_cost(d, cost)
            self._schedule_flush(s)

    def kill_broker(self, address: AddressLike) -> None:
        """Crash a broker: it stops, and each neighbour sees its gateway to it lost (its clients are cut off)."""
        x = self._code(address)
        for c in self._clients.values():
            if c.broker == x:
                c.closed = True
        for peer in list(self.brokers[x].gpp.links):
            self._disconnect(x, peer)
        self.topology.remove_broker(address)
        del self.brokers[x]

    def crash_broker(self, address: AddressLike) -> None:
        """Durable mode: kill a broker as SIGKILL would (its store keeps what it committed); see :meth:`restart_broker`.

        Its gateways are lost (each neighbour routes what it had not got acknowledged
        again, or parks it), its clients are cut off (they roam: :meth:`fallback_broker`).
        """
        if not self.durable:
            raise GesStateError("crash_broker needs a durable simulator (Simulator(..., durable=True)); kill_broker removes a broker for good")
        x = self._code(address)
        for c in self._clients.values():
            if c.broker == x:
                c.closed = True
        for peer in list(self.brokers[x].gpp.links):
            self._disconnect(x, peer)
        st = self.stores.get(x)
        if st is not None:
            st.crash()
        del self.brokers[x]
        self.crashed.add(x)

    def restart_broker(self, address: AddressLike) -> None:
        """Durable mode: start a crashed broker again on its store; its gateways to running brokers come up."""
        addr = Address(address, self.levels)
        x = addr.code
        if x not in self.crashed:
            raise GesStateError(f"broker {addr} has not crashed")
        self.crashed.discard(x)
        self._epochs[x] = self._epochs.get(x, 0) + 1
        self.brokers[x] = self._make_core(addr)
        for gw in list(self.topology.gateways.values()):
            a, b = gw.a.code, gw.b.code
            if x in (a, b):
                other = b if a == x else a
                if other in self.brokers and (a, b) not in self._links:
                    self._connect(a, b, gw.cost)
        self._schedule_flush(x)

    def fallback_broker(self, address: AddressLike) -> str:
        """Where the clients of a failed broker roam: the next running broker of its cluster in address order
        (wrapping around), so the clients of one failed broker all go to the same one."""
        addr = Address(address, self.levels)
        cluster = unit_id(addr.code, 1, self.levels)
        members = sorted(c for c in self.brokers if unit_id(c, 1, self.levels) == cluster and c != addr.code)
        if not members:
            raise GesStateError(f"no running broker left in the cluster of {addr}")
        after = [c for c in members if c > addr.code]
        return str(Address.from_code((after or members)[0], self.levels))

    # ---- clients -----------------------------------------------------------------------------

    def client(
        self,
        broker_address: AddressLike,
        client_id: str | int,
        resume: bool = False,
        *,
        last_received: Mapping[str, EventId] | None = None,
        credential: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> "SimClient":
        """A client attached to broker ``broker_address`` (each call with the same id is a new incarnation).

        In a durable simulator the client is durable: its subscriptions and the events
        for it are kept by its home storage broker.  With ``resume=True`` it reconnects
        (to the same or another broker) with the state of its previous incarnation, and
        gets what it missed, then live events.  ``last_received`` replaces the last event
        per publisher it presents, ``credential`` the secret it presents (a first
        connection makes one from the simulator's seed; a resume presents its previous
        incarnation's).  A durable attach waits up to ``timeout`` virtual seconds for the
        answer; a refused resume raises :class:`~multihop.ges.errors.ResumeRefused`, a plain
        connect of an id its home holds state for :class:`~multihop.ges.errors.ClientIdInUse`.
        """
        code = self._code(broker_address)
        cid = check_client_id(client_id)
        if resume and not self.durable:
            raise GesStateError("resume=True needs a durable simulator (Simulator(..., durable=True))")
        inc = self._incarnations_of.get(cid, -1) + 1
        self._incarnations_of[cid] = inc
        peer = _CLIENT_BASE - len(self._clients)
        state = None
        mark: tuple[Any, ...] | None = None
        if self.durable:
            prev = self._last_client.get(cid)
            if resume and prev is not None:
                if not prev.closed:
                    prev.disconnect()
                state = prev.core.durable
                assert state is not None, "every client of a durable simulator is made with a DurableState"
                mark = state.mark()
                if credential is not None:
                    state.credential = check_credential(credential)
            else:
                token = base64.urlsafe_b64encode(self._credentials.randbytes(32)).rstrip(b"=").decode()
                state = DurableState(check_credential(credential) if credential is not None else ("" if resume else token))
            if last_received is not None:
                state.last = dict(last_received)
        c = SimClient(self, peer, code, ClientCore(cid, inc, int(self.now * 1e6), state, resume, code))
        self._clients[peer] = c
        c.flush()
        if self.durable:
            self._last_client[cid] = c
            end = self.now + timeout
            core = c.core
            while not core.welcomed and core.refused is None:
                if not self._heap or self._heap[0][0] > end:
                    raise Timeout(f"no answer to client {cid!r}'s attach within {timeout} s of virtual time")
                self.step()
            if core.refused is not None:
                c.closed = True
                if prev is not None:
                    self._last_client[cid] = prev  # refused: the id's state is what it was
                    if mark is not None and prev.core.durable is not None:
                        prev.core.durable.undo(mark)
                else:
                    del self._last_client[cid]
                raise core.refusal(str(Address.from_code(code, self.levels)))
        return c

    def _client_send(self, client: "SimClient", msg: Any) -> None:
        self._push(self.now + self.client_delay, _TO_BROKER, client.broker, client.peer, msg)

    def run_for(self, seconds: float, max_steps: int = 50_000_000) -> int:
        """Run until ``seconds`` of virtual time passed (or nothing is in flight); returns messages delivered."""
        before = self.delivered
        end = self.now + seconds
        steps = 0
        while self._heap and self._heap[0][0] <= end:
            if steps >= max_steps:
                raise NotQuiet(f"still busy after {max_steps} steps")
            self.step()
            steps += 1
        self.now = max(self.now, end)
        return self.delivered - before

    # ---- node organization -------------------------------------------------------------

    def _joiner_flush(self, me: int) -> None:
        j = self._joiners[me]
        for first, req in j.take():
            self._push(self.now + self.delay[0], _JOIN, first, me, req)

    def _join(self, level: int, entry: int, cluster: int) -> Joiner:
        me = -1 - len(self._joiners)
        j = Joiner(me, level, entry, cluster)
        self._joiners[me] = j
        self._joiner_flush(me)
        self.run_until_quiet()
        if j.result is None:
            raise GesStateError("the join request got no answer")
        return j

    def join_node(self, via: AddressLike) -> str:
        """A new broker joins the cluster of ``via`` by the node organization protocol; returns its address.

        ``via``'s threshold for level-0 gateways decides whether it takes the
        newcomer itself, forwards the request inside the cluster, or answers
        with the cluster's level-1 gatekeepers, through which the newcomer
        tries the neighbouring clusters.  Raises GesStateError when refused.
        """
        entry = self._code(via)
        j = self._join(0, entry, Address(via, self.levels).unit_id(1))
        r = j.result
        assert r is not None
        if r.accepted_by < 0:
            raise GesStateError(f"no member took the new node: {r.reason}")
        addr = Address.from_code(r.assigned, self.levels)
        self.topology.add_broker(addr)
        self.brokers[addr.code] = self._make_core(addr)
        self.topology.add_gateway(addr, Address.from_code(r.accepted_by, self.levels))
        self._connect(addr.code, r.accepted_by, 0)
        return str(addr)

    def add_unit(self, unit: Topology, via: AddressLike, into: AddressLike) -> str:
        """Add a whole unit (a topology whose brokers share one unit) through broker ``into``; returns its new prefix.

        The unit's level is the smallest unit holding all its brokers; ``via``
        (one of them, by its address in ``unit``) asks ``into`` for a gateway of
        that level.  The unit gets a new address under ``into``'s parent unit,
        its brokers keep their inner addresses under it, and the gateway
        ``via`` - accepting member comes up with the unit's own gateways: the two
        systems exchange their connections by the GPP rules.
        """
        if unit.levels != self.levels:
            raise TopologyError(f"the unit has {unit.levels} levels, the system {self.levels}")
        addrs = list(unit.brokers)
        if not addrs:
            raise TopologyError("the unit has no brokers")
        v = Address(via, self.levels)
        if v not in unit.brokers:
            raise TopologyError(f"broker {v} is not in the unit being added")
        level = 1 + max((level_of_difference(a.code, b.code, self.levels) for a in addrs for b in addrs), default=-1)
        level = max(level, 1)
        entry = self._code(into)
        j = self._join(level, entry, 0)
        r = j.result
        assert r is not None
        if r.accepted_by < 0:
            raise GesStateError(f"no member took the unit: {r.reason}")
        low = (1 << (6 * level)) - 1
        prefix = r.assigned & ((1 << 60) - 1)

        def rename(a: Address) -> Address:
            return Address.from_code(prefix | (a.code & low), self.levels)

        for a in addrs:
            na = rename(a)
            if na.code in self.brokers:
                raise GesStateError(f"the new address {na} of unit broker {a} is taken")
        for a in addrs:
            na = rename(a)
            self.topology.add_broker(na, unit.brokers[a].core)
            self.brokers[na.code] = self._make_core(na)
        for gw in unit.gateways.values():
            x, y = rename(gw.a), rename(gw.b)
            self.topology.add_gateway(x, y, gw.cost)
            self._connect(x.code, y.code, gw.cost)
        nv = rename(v)
        acc = Address.from_code(r.accepted_by, self.levels)
        self.topology.add_gateway(nv, acc)
        self._connect(nv.code, acc.code, 0)
        return unit_str(r.assigned, self.levels)

    # ---- views ----------------------------------------------------------------------

    def broker(self, address: AddressLike) -> BrokerCore:
        """The protocol core of a broker."""
        return self.brokers[self._code(address)]

    def graph(self, address: AddressLike) -> ConnectivityGraph:
        """The connectivity graph broker ``address`` built."""
        return self.broker(address).graph()

    def gatekeepers(self) -> dict[int, set[str]]:
        """Level (>= 1) -> the brokers that hold a live gateway of that level (from the brokers' own state)."""
        out: dict[int, set[str]] = {lvl: set() for lvl in range(1, self.levels + 1)}
        for core in self.brokers.values():
            for lvl in core.gatekeeper_levels():
                if lvl >= 1:
                    out[lvl].add(str(core.address))
        return out

    def addresses(self) -> list[str]:
        """The running brokers' addresses, in address order."""
        return [str(a) for a in sorted(c.address for c in self.brokers.values())]

    def graphs(self, addresses: Iterable[AddressLike] | None = None) -> dict[str, ConnectivityGraph]:
        """Address -> connectivity graph, for the given brokers (default: all)."""
        codes = [self._code(a) for a in addresses] if addresses is not None else list(self.brokers)
        return {str(self.brokers[c].address): self.brokers[c].graph() for c in codes}


class SimClient:
    """A client of the simulated system (see :meth:`Simulator.client`).

    ``subscribe``, ``unsubscribe``, ``publish`` send at once (the simulation runs
    when you call :meth:`next`, :meth:`active_level` or a ``run_*`` method of the
    simulator); ``received`` lists every event delivered so far, in order.
    """

    def __init__(self, sim: Simulator, peer: int, broker: int, core: ClientCore) -> None:
        self.sim = sim
        self.peer = peer
        self.broker = broker
        self.core = core
        self.closed = False

    @property
    def client_id(self) -> str:
        """This client's id."""
        return self.core.client

    @property
    def incarnation(self) -> int:
        """This client's incarnation."""
        return self.core.incarnation

    @property
    def received(self) -> list[Any]:
        """Every event delivered so far, in order."""
        return self.core.received

    @property
    def refusals(self) -> list[tuple[str, str]]:
        """Requests the broker refused: (what, reason)."""
        return self.core.refusals

    def flush(self) -> None:
        """Send what the client queued."""
        for msg in self.core.take():
            self.sim._client_send(self, msg)

    def _check(self) -> None:
        if self.closed:
            raise ChannelClosed(f"client {self.client_id!r} is closed (or its broker is gone)")

    def subscribe(self, profile: Iterable[Any]) -> int:
        """Subscribe (profile: ``[(attribute, value or "*"), ...]`` in signature order); returns the subscription id."""
        self._check()
        sub = self.core.subscribe(profile)
        self.flush()
        return sub

    def unsubscribe(self, sub: int) -> None:
        """Remove a subscription."""
        self._check()
        self.core.unsubscribe(sub)
        self.flush()

    def publish(self, content: Mapping[str, Any], payload: bytes = b"") -> EventId:
        """Publish an event (content: attribute -> value in signature order); returns its id.

        A durable client that is disconnected keeps the event in its local queue
        (at most :data:`~multihop.ges.client.QUEUE_MAX`); it goes out when the client resumes.
        """
        if self.core.durable is None or not self.closed:
            self._check()
        eid = self.core.publish(content, payload, int(self.sim.now * 1e6))
        if not self.closed:
            self.flush()
        return eid

    def publish_many(self, events: Iterable[tuple[Mapping[str, Any], bytes]]) -> list[EventId]:
        """Publish several events, ``(content, payload)`` each, in order; returns their ids (as
        :meth:`publish` one at a time; the live client sends them together)."""
        return [self.publish(content, payload) for content, payload in events]

    def disconnect(self) -> None:
        """Durable: leave without losing anything: the home store keeps the events for this client
        until it resumes (``sim.client(broker, id, resume=True)``); publishing goes on into the local queue."""
        if self.core.durable is None:
            raise GesStateError("disconnect is for durable clients (Simulator(..., durable=True)); use close()")
        if not self.closed:
            self.closed = True
            self.sim._client_send(self, None)
        self.core.disconnect()

    @property
    def queued(self) -> int:
        """Durable: published events not yet confirmed stored."""
        return len(self.core.durable.queue) if self.core.durable is not None else 0

    @property
    def replay_progress(self) -> tuple[int, int]:
        """Durable: (events replayed so far, events waiting in storage when this incarnation started)."""
        return (self.core.replayed, self.core.replay)

    @property
    def store_error(self) -> str | None:
        """Durable: why the home store answered "not stored" last (a full disk); None once it stores again."""
        return self.core.store_error

    def next(self, timeout: float | None = 1.0) -> Event:
        """The next event delivered, running the simulation up to ``timeout`` virtual seconds; raises Timeout."""
        inbox = self.core.inbox
        end = None if timeout is None else self.sim.now + timeout
        while not inbox:
            heap = self.sim._heap
            if not heap or (end is not None and heap[0][0] > end):
                if end is not None:
                    self.sim.now = max(self.sim.now, end)
                raise Timeout(f"no event for client {self.client_id!r} within {timeout} s of virtual time")
            self.sim.step()
        return inbox.popleft()

    def active_level(self, sub: int, timeout: float = 1.0) -> int:
        """From which unit level on the subscription is active (0: its broker; levels + 1: the whole system)."""
        self._check()
        self.core.active.pop(sub, None)
        self.core.ask_active(sub)
        self.flush()
        end = self.sim.now + timeout
        while sub not in self.core.active:
            if not self.sim._heap or self.sim._heap[0][0] > end:
                raise Timeout(f"no answer from the broker within {timeout} s of virtual time")
            self.sim.step()
        return self.core.active[sub]

    def close(self) -> None:
        """Detach: the broker drops this client's subscriptions."""
        if not self.closed:
            self.closed = True
            self.sim._client_send(self, None)
