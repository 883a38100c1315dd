"""A live GES broker: one dispatcher process whose loop feeds channel messages to a :class:`BrokerCore`.

``python -m multihop.ges.live.broker --runtime RT --config FILE --address A``
(started by :class:`~multihop.ges.live.system.LiveSystem`).  The broker
exports ``ges/<system>/<address>`` on its core and, for every gateway of the
topology where it has the lower address, binds a multi-hop channel to the
peer's service; the first message on every channel is ``hello``.

The loop blocks in ``Dispatcher.poll`` on its channels and never sleeps:
an acceptor thread (``Service.accept``) and a dialer thread (``bind``, retried
until the peer has exported its service) hand new channels to it through a
queue and wake it through a UMP channel to itself.  So the broker accepts in
its own process whether or not ``bind`` returns before ``accept``, and two
brokers binding to each other never wait on each other.  Each round the
loop drains every ready channel (``recv_batch``), hands the messages to the
core, then writes the core's outbox (one batch per neighbour).  A send that
finds the peer's credit window full stays queued, and only then does the
loop poll with a 1 ms timeout until the window opens.  A closed channel
(the peer closed it or died) is a lost gateway: ``BrokerCore.link_down``.

**The native engine** (the default; ``MULTIHOP_GES_ENGINE=python`` in a broker's environment runs the
Python event path instead): the channels of the broker's gateways
and of its attached clients are read, routed and written by ``multihop._ges.Engine`` (crate
``core-rs/ges``), the GIL released: each round it decodes the event batches, acknowledgements and
publications, routes them (duplicates, matching, next hops, routing information) and, at the round's
end, encodes one batch and an acknowledgement per gateway and the deliveries per client and writes
them after the control plane's frames for the same link. Every other frame (connection records,
profiles, a client's subscriptions, hellos, control) comes back to this loop in its place, and is
handled by the :class:`BrokerCore` as before; the core's event routing is then
:class:`~multihop.ges.native.NativeEventRouting`, the same state as the engine's. In a durable system
a round that gave the storage broker's store something to do (events to store for its homed clients,
entries every next hop has) comes back here before anything of it is written: the store does its
calls, the core commits the store's batch, and only then does the engine write the round (its
acknowledgements held while the store cannot write).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import queue
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any

import multihop as mh
from multihop import _ges
from multihop.defaults import DRAIN_BATCH
from multihop.ges.address import Address, unit_id
from multihop.ges.broker import BrokerCore
from multihop.ges.durability import storage_brokers_of
from multihop.ges.errors import StorageError
from multihop.ges.live import durable_wire, wire
from multihop.ges.live.incarnation import IncarnationSource
from multihop.ges.live.wire import KIND_BROKER, KIND_CLIENT, KIND_CONTROL, KIND_JOINER
from multihop.ges.messages import Attach, Deliver, JoinRequest, Refused
from multihop.ges.native import NativeEventRouting
from multihop.ges.storage_sqlite import SqliteStorage
from multihop.ges.topology import Topology

__all__ = ["LiveBroker", "main"]

WINDOW = 64  #: credit window of gateway channels
BIND_RETRY = 0.02  #: seconds between binds to a peer that has not exported its service yet


class _Peer:
    """One channel of this broker and what is known about the other end."""

    __slots__ = ("ch", "kind", "code", "out", "out_bytes", "client", "incarnation", "native")

    def __init__(self, ch: Any, kind: int = 0, code: int = -1) -> None:
        self.ch = ch
        self.kind = kind  # 0 until hello
        self.code = code  # a neighbour's broker code, or a client's peer id (negative)
        self.out: deque[bytes] = deque()
        self.out_bytes = 0  # bytes in out
        self.client: str | None = None  # a client's id, once attached
        self.incarnation = 0
        self.native = False  # read and written by the native engine (its frames queue there, not in out)

    def queue(self, frames: list[bytes]) -> None:
        """Frames to write, after those already waiting."""
        self.out.extend(frames)
        self.out_bytes += sum(map(len, frames))


class LiveBroker:
    """The driver of one broker process (see the module docstring)."""

    def __init__(
        self,
        runtime: mh.Runtime,
        system: str,
        topology: Topology,
        address: Address,
        core: int,
        storage_dir: str | None = None,
        restart: bool = False,
        accept_empty_store: bool = False,
        transport: str = "ump",
        client_queue_limit: int = _ges.CLIENT_QUEUE_LIMIT,
    ) -> None:
        self.runtime = runtime
        #: bytes that may wait here for one client beyond what its channel holds before it is given up as a
        #: slow consumer (both event paths; ``_ges.CLIENT_QUEUE_LIMIT`` says why)
        self.client_queue_limit = client_queue_limit
        #: the last clients given up, why (for ``status``)
        self.given_up: deque[str] = deque(maxlen=16)
        #: what the gateways this broker dials to brokers of its own runtime are (``wire.TRANSPORTS``)
        self.transport = transport
        self.system = system
        self.topology = topology
        self.address = address
        self.core_no = core
        #: durable mode (a system with stable storage): the storage brokers, this broker's store
        self.durable = storage_dir is not None
        self.storage: SqliteStorage | None = None
        #: durable mode: where this broker's restarts and the gateways it dials again take new incarnations
        #: (never one its gateways had before: ``incarnation.py`` says why)
        self.incarnations = IncarnationSource(Path(storage_dir) / f"ges-{address}.incarnation") if storage_dir is not None else None
        # a restart is a new epoch and its gateways new incarnations (above the topology's 0, growing)
        self.epoch = self.incarnations.next() if restart and self.incarnations is not None else 0
        native = os.environ.get("MULTIHOP_GES_ENGINE", "native") != "python"
        if storage_dir is not None:  # durable
            sb = storage_brokers_of(topology)
            if sb.get(unit_id(address.code, 1, address.levels)) == address.code:
                sync = os.environ.get("MULTIHOP_GES_SYNCHRONOUS", "FULL")  # docs/ges.md: why FULL
                self.storage = SqliteStorage(Path(storage_dir) / f"ges-{address}.db", str(address), sync, accept_empty=accept_empty_store)
                if self.storage.accepted_loss:
                    print(
                        f"broker {address}: started on a store that lost its data, as told (--accept-empty-store): {self.storage.accepted_loss}",
                        file=sys.stderr,
                        flush=True,
                    )
            self.core = BrokerCore(address, thresholds=topology.thresholds, storage_brokers=sb, storage=self.storage, epoch=self.epoch, native=native)
        else:
            self.core = BrokerCore(address, thresholds=topology.thresholds, native=native)
        self.d = runtime.dispatcher(core, pin=os.environ.get("MULTIHOP_GES_PIN", "1") == "1")
        #: the native engine (None: the Python event path, MULTIHOP_GES_ENGINE=python)
        self.engine: _ges.Engine | None = None
        self.erp: NativeEventRouting | None = None
        if isinstance(self.core.erp, NativeEventRouting):
            self.erp = self.core.erp
            self.erp.wire = True  # the engine writes what the routing makes
            self.engine = _ges.Engine(self.erp.engine, self.d, client_queue_limit)
        self.name = wire.service_name(system, str(address))
        #: a system spread over a fabric's runtimes: the broker's service is exported to the fabric (its
        #: neighbours and clients on other runtimes bind it as ``name@runtime``); its wake service stays local
        self.placed = topology.placed
        self.svc = self.d.export(self.name, fabric=self.placed)
        self.wake_svc = self.d.export(self.name + "/wake")
        self.inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.peers: dict[int, _Peer] = {}  # id(channel) -> peer
        self.by_code: dict[int, _Peer] = {}  # neighbour broker code (or client peer id) -> its channel
        self._next_client = -1
        #: brokers allowed to open a gateway to this one -> the incarnation they will announce
        self.expected: dict[int, int | None] = {gw.a.code: None if restart else 0 for gw in topology.gateways.values() if gw.b == address}
        #: the brokers of the system (gateways to others are refused)
        self.known = {str(a) for a in topology.brokers}
        self.stopping = False
        self.started = time.time()
        #: rounds of the loop and the time spent working in them (not waiting in poll)
        #: (busy_ns: wall clock; cpu_ns: this thread's CPU time in that work; poll_cpu_ns: its CPU time in poll)
        self.counters = {
            "messages_in": 0,
            "messages_out": 0,
            "busy": 0,
            "refused": 0,
            "closed": 0,
            "rounds": 0,
            "busy_ns": 0,
            "cpu_ns": 0,
            "poll_cpu_ns": 0,
            "slow_clients": 0,
        }
        self._wake_srv: Any = None
        self._ready = threading.Event()
        threading.Thread(target=self._acceptor, name="ges-acceptor", daemon=True).start()
        self.wake = self.d.bind(self.name + "/wake", transport="ump", timeout=10.0)
        self._ready.wait(10.0)
        for gw in topology.gateways.values():
            if gw.a == address:
                self.dial(gw.b.code, self.epoch, gw.cost)

    # ---- threads that hand channels to the loop --------------------------------------

    def _acceptor(self) -> None:
        try:
            self._wake_srv = self.wake_svc.accept(timeout=10.0)
            self._ready.set()
            while not self.stopping:
                ch = self.svc.accept(timeout=None)
                self._hand("accepted", ch)
        except Exception as e:  # the monitor is gone, or we are stopping
            self._hand("acceptor-stopped", repr(e))

    def _hand(self, what: str, item: Any) -> None:
        self.inbox.put((what, item))
        try:
            self._wake_srv.try_send(b"!")
        except Exception:
            pass  # already woken (ring full) or stopping

    def _elsewhere(self, peer: Address) -> str | None:
        """The other runtime of the fabric broker ``peer`` is placed on (None: this runtime's, or unplaced)."""
        if not self.placed or peer not in self.topology.brokers:
            return None
        there = self.topology.runtime_of(peer)
        return there if there is not None and there != self.runtime.name else None

    def service_of(self, peer: Address) -> str:
        """The service name this broker binds to reach broker ``peer``: ``ges/<system>/<address>``, followed by
        ``@<runtime>`` when the peer is placed on another runtime of the fabric (a bridged channel)."""
        name = wire.service_name(self.system, str(peer))
        there = self._elsewhere(peer)
        return f"{name}@{there}" if there is not None else name

    def dial(self, peer: int, incarnation: int, cost: int) -> None:
        """Bind a gateway channel to broker ``peer`` in the background (retried until its service exists)."""

        def run() -> None:
            to = Address.from_code(peer, self.address.levels)
            name = self.service_of(to)
            # a gateway to another runtime crosses the fabric: a multi-hop channel, whatever this runtime's choice
            transport = "multihop" if self._elsewhere(to) is not None else self.transport
            deadline = time.monotonic() + 60.0
            while not self.stopping:
                try:
                    ch = self.d.bind(name, transport=transport, window=WINDOW, timeout=10.0, max_message=wire.MAX_MESSAGE)
                except mh.BindError:
                    if time.monotonic() > deadline:
                        self._hand("dial-failed", (peer, f"no service {name!r} within 60 s"))
                        return
                    time.sleep(BIND_RETRY)  # the peer has not exported yet (start-up only)
                    continue
                except Exception as e:
                    self._hand("dial-failed", (peer, repr(e)))
                    return
                ch.send(
                    wire.stub.encode("hello", kind=KIND_BROKER, address=self.address.code, incarnation=incarnation, cost=cost, system=self.system),
                    timeout=10.0,
                )
                self._hand("dialed", (ch, peer, incarnation, cost))
                return

        threading.Thread(target=run, name=f"ges-dial-{peer}", daemon=True).start()

    # ---- the loop -----------------------------------------------------------------------

    def run(self) -> None:
        """Serve until told to stop (or the runtime goes away)."""
        if self.engine is not None:
            self._run_native(self.engine)
            return
        poll = self.d.poll
        thread_ns = time.thread_time_ns
        timers: list[tuple[float, Any]] = []  # (due, name), the core's timers on the monotonic clock
        counters = self.counters
        while not self.stopping:
            pending = any(p.out for p in self.peers.values())
            timeout = 0.001 if pending else None
            if timers:
                wait = max(0.0, min(t for t, _ in timers) - time.monotonic())
                timeout = wait if timeout is None else min(timeout, wait)
            c_poll = thread_ns()
            ready = poll(timeout)
            t_busy = time.perf_counter_ns()
            c_busy = thread_ns()
            counters["poll_cpu_ns"] += c_busy - c_poll
            for ch in ready:
                if ch is self.wake:
                    self._drain_wake()
                    continue
                peer = self.peers.get(id(ch))
                if peer is None:
                    continue
                self._drain(peer)
            if timers:
                now = time.monotonic()
                for due, name in [t for t in timers if t[0] <= now]:
                    timers.remove((due, name))
                    self.core.fire(name)
            self._flush()
            for delay, name in self.core.take_timers():
                timers.append((time.monotonic() + delay, name))
            counters["rounds"] += 1
            counters["busy_ns"] += time.perf_counter_ns() - t_busy
            counters["cpu_ns"] += thread_ns() - c_busy
        self._close_all()

    def _drain_wake(self) -> None:
        try:
            self.wake.recv_batch(1024, timeout=0)
        except mh.MultihopError:
            pass
        while True:
            try:
                what, item = self.inbox.get_nowait()
            except queue.Empty:
                return
            if what == "accepted":
                self.peers[id(item)] = _Peer(item)
            elif what == "dialed":
                ch, code, inc, cost = item
                self._link_up(_Peer(ch), code, inc, cost, dialed=True)
            elif what == "acceptor-stopped":
                if not self.d.attached:
                    self.stopping = True
            elif what == "dial-failed":
                self.counters["refused"] += 1
                print(f"broker {self.address}: gateway to {Address.from_code(item[0], self.address.levels)} failed: {item[1]}", file=sys.stderr)

    def _link_up(self, peer: _Peer, code: int, incarnation: int, cost: int, dialed: bool = False) -> None:
        if code in self.by_code or code == self.address.code:
            self.counters["refused"] += 1
            self._lost(peer)
            return
        if self._reused(code, incarnation):
            self._lost(peer)
            if dialed and self.incarnations is not None and not self.stopping:
                self.dial(code, self.incarnations.next(), cost)  # again, with a new one
            return
        peer.kind, peer.code = KIND_BROKER, code
        self.peers[id(peer.ch)] = peer
        self.by_code[code] = peer
        self.core.link_up(code, incarnation, cost)
        self._go_native(peer)

    def _reused(self, code: int, incarnation: int) -> bool:
        """Whether a gateway to ``code`` with this incarnation must be refused because its pair had it before and
        lost it: it would be dead from birth (dead is final; ``incarnation.py``). Counted and logged."""
        if not self.core.gpp.was_lost(code, incarnation):
            return False
        self.counters["refused"] += 1
        other = Address.from_code(code, self.address.levels)
        print(f"broker {self.address}: gateway to {other} refused: its incarnation {incarnation} was lost before", file=sys.stderr, flush=True)
        return True

    def _go_native(self, peer: _Peer) -> None:
        """From now on the engine reads and writes ``peer``'s channel (a gateway, or an attached client)."""
        if self.engine is None:
            return
        kind = 1 if peer.kind == KIND_BROKER else 2
        self.engine.add_link(peer.code, peer.ch, kind, peer.client, peer.incarnation, list(peer.out))
        peer.out.clear()
        peer.out_bytes = 0
        peer.native = True

    def _lost(self, peer: _Peer) -> None:
        self.peers.pop(id(peer.ch), None)
        if peer.native and self.engine is not None:
            self.engine.remove_link(peer.code)
            peer.native = False
        if peer.kind == KIND_BROKER and self.by_code.get(peer.code) is peer:
            del self.by_code[peer.code]
            self.core.link_down(peer.code)
            if self.durable and not self.stopping:
                self._await_restart(peer.code)
        elif peer.kind == KIND_CLIENT and self.by_code.get(peer.code) is peer:
            del self.by_code[peer.code]
            self.core.client_detach(peer.code)
        elif peer.kind == KIND_JOINER and self.by_code.get(peer.code) is peer:
            del self.by_code[peer.code]
        self.counters["closed"] += 1
        try:
            peer.ch.close()
        except Exception:
            pass

    def _await_restart(self, code: int) -> None:
        """Durable mode: a neighbour of the topology was lost (killed?): take it back when it restarts.
        The lower address dials again (for 60 s), the higher one accepts any new incarnation."""
        for gw in self.topology.gateways.values():
            if gw.a == self.address and gw.b.code == code:
                assert self.incarnations is not None  # (durable mode)
                self.dial(code, self.incarnations.next(), gw.cost)
            elif gw.b == self.address and gw.a.code == code:
                self.expected[code] = None

    def _run_native(self, engine: _ges.Engine) -> None:
        """The loop with the native engine: it runs the event path (waits, reads, routes, writes, the
        acknowledgement timer) with the GIL released and comes back only when this control plane has
        something to do: a frame of its own from one of the engine's links (handled here in its place,
        then what it changed is pushed and what it made is written before the engine goes on), a closed
        link, one of the channels this loop reads itself readable (the wake channel, channels before
        their hello, control channels), a timer of the core, a slice (signals), or (durable mode) calls
        for the store, done here before the round is written."""
        erp = self.erp
        assert erp is not None
        thread_ns = time.thread_time_ns
        timers: list[tuple[float, Any]] = []  # (due, name), the core's timers on the monotonic clock
        counters = self.counters
        erp.sync()
        while not self.stopping:
            timeout = None
            if timers:
                timeout = max(0.0, min(t for t, _ in timers) - time.monotonic())
            own = [p.ch for p in self.peers.values() if not p.native]
            own.append(self.wake)
            c0 = thread_ns()
            kind, code, data = engine.run(own, timeout)
            t_busy = time.perf_counter_ns()
            c_busy = thread_ns()
            counters["poll_cpu_ns"] += c_busy - c0  # (the engine's own work included: it waits and works in one call)
            if kind == 1 or kind == 2:
                peer = self.by_code.get(code)
                if peer is not None:
                    if data is None:
                        self._lost(peer)
                    else:
                        self._frame(peer, data)
            elif kind == 3:
                for peer in [p for p in self.peers.values() if not p.native]:
                    if id(peer.ch) in self.peers:
                        self._drain(peer)
                self._drain_wake()
            elif kind == 4:
                erp.run_store_calls()  # (the round is written below, after the store committed)
            elif kind == 5:
                peer = self.by_code.get(code)
                if peer is not None and data is not None:
                    self._give_up(peer, data.decode())
            if timers:
                now = time.monotonic()
                for due, name in [t for t in timers if t[0] <= now]:
                    timers.remove((due, name))
                    self.core.fire(name)
            erp.sync()
            self._flush()
            for delay, name in self.core.take_timers():
                timers.append((time.monotonic() + delay, name))
            counters["rounds"] += 1
            counters["busy_ns"] += time.perf_counter_ns() - t_busy
            counters["cpu_ns"] += thread_ns() - c_busy
        self._close_all()

    def _drain(self, peer: _Peer) -> None:
        try:
            batch = peer.ch.recv_batch(DRAIN_BATCH, timeout=0)
        except mh.ChannelClosed:
            self._lost(peer)
            return
        for data in batch:
            if id(peer.ch) not in self.peers:
                return  # refused and closed by an earlier message of this batch
            self.counters["messages_in"] += 1
            self._frame(peer, data)

    def _frame(self, peer: _Peer, data: bytes) -> None:
        """One message of ``peer``'s channel."""
        core = self.core
        if peer.kind == KIND_CLIENT:
            self._from_client(peer, data)
            return
        try:
            rec: Any = None
            msg = wire.decode_events(data) if peer.kind == KIND_BROKER else None  # (the common case, natively)
            if msg is None:
                rec = wire.decode(data)
                msg = wire.decode_protocol(rec) if peer.kind in (KIND_BROKER, KIND_JOINER) else None
        except mh.ProtocolError:
            self.counters["refused"] += 1
            if peer.kind == 0:
                self._lost(peer)  # a channel that does not start with a hello is closed
            return
        if peer.kind == KIND_BROKER:
            if msg is not None:
                core.receive(peer.code, msg)
            elif rec.name == "shutdown":
                self.stopping = True
            else:
                self.counters["refused"] += 1
        elif peer.kind == KIND_JOINER:
            self._from_joiner(peer, msg)
        elif peer.kind == KIND_CONTROL:
            self._control(peer, rec)
        elif peer.kind == 0:
            self._hello(peer, rec)
        else:
            self.counters["refused"] += 1

    def _hello(self, peer: _Peer, rec: Any) -> None:
        if rec.name != "hello" or rec.system != self.system:
            self.counters["refused"] += 1
            self._lost(peer)
            return
        if rec.kind == KIND_BROKER:
            if rec.address not in self.expected or self.expected[rec.address] not in (None, rec.incarnation):
                # a gateway this broker was not told about (a forged or confused neighbour): refused
                self.counters["refused"] += 1
                self._lost(peer)
                return
            if self._reused(rec.address, rec.incarnation):
                self._lost(peer)  # (still expected: its dialler tries again with a new incarnation)
                return
            del self.expected[rec.address]
            self._link_up(peer, rec.address, rec.incarnation, rec.cost)
        elif rec.kind == KIND_CONTROL:
            peer.kind = KIND_CONTROL
        elif rec.kind in (KIND_CLIENT, KIND_JOINER):
            peer.kind = rec.kind
            peer.code = self._next_client
            self._next_client -= 1
            self.by_code[peer.code] = peer
        else:
            self.counters["refused"] += 1
            self._lost(peer)

    def _from_joiner(self, peer: _Peer, msg: Any) -> None:
        """A newcomer's NAP request: the path starts at this broker's id for the newcomer's channel,
        so the answer, wherever it is decided, comes back here and goes out on that channel."""
        if (
            type(msg) is not JoinRequest
            or len(msg.path) != 1
            or msg.level != 0
            or msg.target not in self.core.graph().node_level
            and msg.target != self.core.code
        ):
            # a joiner may only ask for a node's address (live units join as systems of their own: not
            # supported), with a path of itself, of a member this broker knows
            self.counters["refused"] += 1
            self._lost(peer)
            return
        self.core.receive(peer.code, msg._replace(path=(peer.code,)))

    # ---- clients --------------------------------------------------------------------------

    def _from_client(self, peer: _Peer, data: bytes) -> None:
        """A message of a client's channel (``ges_client.if``); bad ones are refused, the client told why."""
        core = self.core
        try:
            rec = wire.client_stub.decode(data)
        except mh.ProtocolError as e:
            self.counters["refused"] += 1
            peer.queue(wire.encode_for_client(Refused("message", str(e))))
            return
        if peer.client is None:
            if isinstance(rec, wire.client_stub.messages.durable_attach):
                peer.client, peer.incarnation = rec.client, rec.incarnation
                try:
                    msg = durable_wire.decode_attach(rec)
                except mh.ProtocolError:
                    self.counters["refused"] += 1
                    self._lost(peer)
                    return
                core.client_attach(peer.code, msg)
                return
            if not isinstance(rec, wire.client_stub.messages.attach):
                self.counters["refused"] += 1
                self._lost(peer)  # a client must say who it is first
                return
            peer.client, peer.incarnation = rec.client, rec.incarnation
            core.client_attach(peer.code, Attach(rec.client, rec.incarnation))
            if peer.code in core.clients:
                self._go_native(peer)
            return
        try:
            msg = wire.decode_from_client(rec, peer.client, peer.incarnation)
        except ValueError as e:
            self.counters["refused"] += 1
            peer.queue(wire.encode_for_client(Refused(rec.name, str(e))))
            return
        core.client_receive(peer.code, msg)

    # ---- control --------------------------------------------------------------------------

    def _control(self, peer: _Peer, rec: Any) -> None:
        enc = wire.stub.encode
        if rec.name == "status_call":
            peer.queue([enc("status_response", json=json.dumps(self.status()))])
        elif rec.name == "gateway_call":
            result, error = self._gateway(rec.peer, rec.op, rec.incarnation, rec.cost)
            peer.queue([enc("gateway_response", result=result, error=error)])
        elif rec.name == "shutdown":
            self.stopping = True
        else:
            self.counters["refused"] += 1

    def _gateway(self, code: int, op: int, incarnation: int, cost: int) -> tuple[int, str]:
        levels = self.address.levels
        try:
            other = Address.from_code(code, levels)
        except mh.MultihopError as e:
            return 1, f"bad peer address: {e}"
        if str(other) not in self.known and code not in self.core.nap.reserved and op in (1, 3):
            return 1, f"{other} is not a broker of this system"
        if other == self.address:
            return 1, "a gateway joins two different brokers"
        if op in (1, 3):
            if code in self.by_code:
                return 1, f"there is already a gateway to {other}"
            self.known.add(str(other))
            if op == 1:
                self.dial(code, incarnation, cost)
            else:
                self.expected[code] = incarnation
            return 0, ""
        p = self.by_code.get(code)
        if p is None:
            return 1, f"there is no gateway to {other}"
        if op == 0:
            self._lost(p)
            return 0, ""
        if op == 2:
            self.core.gpp.set_cost(code, cost)
            return 0, ""
        return 1, f"op must be 0 (down), 1 (up), 2 (cost) or 3 (expect), got {op}"

    def status(self) -> dict[str, Any]:
        """This broker's state for ``multihop ges status``."""
        gpp = self.core.gpp
        levels = self.address.levels
        g = self.core.graph()

        def name(c: int) -> str:
            return str(Address.from_code(c, levels))

        cache = {g.name(u): [cost, None if hop is None else g.name(hop)] for u, (cost, hop) in g.cache.table().items()}
        return {
            "address": str(self.address),
            "pid": os.getpid(),
            "core": self.core_no,
            "uptime": time.time() - self.started,
            "codec": "native" if wire.NATIVE or self.engine is not None else "stub",  # of the event batches (MULTIHOP_GES_NATIVE)
            "engine": "native" if self.engine is not None else "python",  # of the event path (MULTIHOP_GES_ENGINE)
            "transport": self.transport,  # of the gateways to brokers of this runtime (ges up --transport)
            "gatekeeper_levels": sorted(gpp.gatekeeper_levels()),
            "links": [
                {"peer": name(link.peer), "level": link.level, "incarnation": link.incarnation, "cost": link.cost} for link in gpp.links.values()
            ],
            "records": [[c.origin, c.peer, c.level, c.incarnation, c.version, c.cost, c.dead, x] for c, x in gpp.table.values()],
            "edges": g.edges(),
            "routing_cache": cache,
            "unit_partitioned": sorted(g.unit_partitioned()),
            "system_partitioned": sorted(g.system_partitioned()),
            "counters": {
                **self._counters(),
                "records_received": gpp.received,
                "records_accepted": gpp.accepted,
                "records_malformed": gpp.malformed,
                "refused": self.counters["refused"] + self.core.refused,
            },
            "clients": len(self.core.clients),
            "subscriptions": len(self.core.ppp.subs),
            "decided_levels": sorted(self.core.ppp.decided),
            "profiles_held": {str(lvl): g.profiles for lvl, g in self.core.ppp.graphs.items()},
            "events": dict(self.core.erp.counters),
            "durability": self._durability_status() if self.durable else None,
            "client_queue_limit": self.client_queue_limit,
            "given_up": list(self.given_up),  # the last clients given up as slow consumers, why
            "profile_propagation": dict(self.core.ppp.counters),
        }

    def _counters(self) -> dict[str, int]:
        """The loop's counters, the engine's frames included."""
        c = dict(self.counters)
        if self.engine is not None:
            e = self.engine.counters()
            c["messages_in"] += e["frames_in"]
            c["messages_out"] += e["frames_out"]
            c["busy"] += e["busy"]
            c["native_in"] = e["native_in"]
            c["engine_work_cpu_ns"] = e["work_cpu_ns"]  # the engine's own CPU time working (reading, routing, writing)
            c["engine_wait_cpu_ns"] = e["wait_cpu_ns"]  # and waiting (spinning, parking; measured on one wait in 8)
            c["engine_rounds"] = e["rounds"]  # rounds of reading (each reads every readable link once)
            c["engine_waits"] = e["waits"]  # times the engine's loop waited (parked) for input or credit
        return c

    def _durability_status(self) -> dict[str, Any]:
        out = self.core.durability.status()
        if self.storage is not None:
            out["store"]["file"] = self.storage.stats()
        return out

    # ---- output ------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Write the core's outbox: neighbour brokers first (the events' onward path), then clients;
        corked, so the monitor is woken once for the whole round, not once per channel."""
        with self.d.corked():
            self._write_outbox()

    def _write_outbox(self) -> None:
        encoded: dict[tuple[int, ...], list[bytes]] = {}
        memo: wire.Memo = {}  # the stubs' path: each event's text made once for every neighbour and client
        outbox = self.core.take_outbox()
        native: list[tuple[int, list[bytes]]] = []  # the control plane's frames for the engine's links
        for code, msgs in outbox.items():
            if code >= 0:
                peer = self.by_code.get(code)
                if peer is not None:
                    frames = [f for m in msgs for f in wire.encode(m, memo)]
                    if peer.native:
                        native.append((code, frames))
                        continue
                    peer.queue(frames)
                    self._write(peer)
        for code, msgs in outbox.items():
            if code < 0:
                peer = self.by_code.get(code)
                if peer is None:
                    continue
                out: list[bytes] = []
                if peer.kind == KIND_JOINER:  # a NAP answer, in the brokers' own interface
                    for m in msgs:
                        out.extend(wire.encode(m))
                else:
                    for m in msgs:
                        if type(m) is Deliver:  # clients that get the same events get the same bytes
                            key = tuple(map(id, m.events))
                            enc = encoded.get(key)
                            if enc is None:
                                enc = encoded[key] = wire.encode_for_client(m, memo)
                            out.extend(enc)
                        else:
                            out.extend(wire.encode_for_client(m))
                if peer.native:
                    native.append((code, out))
                else:
                    peer.queue(out)
        for peer in list(self.peers.values()):
            if peer.out:
                self._write(peer)
                # (a client whose channel the write found closed is lost already, not slow)
                if peer.kind == KIND_CLIENT and peer.out_bytes > self.client_queue_limit and id(peer.ch) in self.peers:
                    why = (
                        f"slow consumer: {peer.out_bytes} bytes of events waited for the client in its broker, beyond what "
                        f"its channel holds (limit {self.client_queue_limit})"
                    )
                    self._give_up(peer, why)
        if self.engine is not None:
            # the engine writes the control plane's frames, then what the routing made, on its links
            for code in self.engine.flush(native, not self.core.store_safe):
                lost = self.by_code.get(code)
                if lost is not None:
                    self._lost(lost)

    def _write(self, peer: _Peer) -> None:
        out = peer.out
        try:
            while out:
                peer.ch.try_send(out[0])
                peer.out_bytes -= len(out.popleft())
                self.counters["messages_out"] += 1
        except mh.TxBusy:
            self.counters["busy"] += 1  # the peer's credit window is full: retried next round
        except mh.ChannelClosed:
            self._lost(peer)

    def _give_up(self, peer: _Peer, why: str) -> None:
        """A client that does not read what comes for it: its queue dropped, its channel closed, the client
        detached (its subscriptions withdrawn, as when it leaves); said on stderr and in ``status``."""
        said = f"client {peer.client} (peer {peer.code}) given up: {why}"
        self.counters["slow_clients"] += 1
        self.given_up.append(said)
        print(f"broker {self.address}: {said}", file=sys.stderr, flush=True)
        peer.out.clear()
        peer.out_bytes = 0
        self._lost(peer)

    def _close_all(self) -> None:
        for p in list(self.peers.values()):
            try:
                p.ch.close()
            except Exception:
                pass
        try:
            self.d.detach()
        except Exception:
            pass


def quiet_gc() -> None:
    """For a process whose loop makes few reference cycles (a broker, a busy client): collect seldom,
    and never scan again what start-up built (``gc.freeze``). Call it once set up."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def main(argv: list[str] | None = None) -> int:
    """Entry point of a broker process."""
    ap = argparse.ArgumentParser(prog="python -m multihop.ges.live.broker")
    ap.add_argument("--runtime", required=True)
    ap.add_argument("--config", required=True, help="the system's ges.json")
    ap.add_argument("--address", required=True)
    ap.add_argument("--restart", action="store_true", help="durable systems: the broker restarts on its storage file")
    ap.add_argument(
        "--accept-empty-store",
        action="store_true",
        help="durable systems: start even though the storage file lost what it held (missing, empty, another store's or an older copy)",
    )
    a = ap.parse_args(argv)
    cfg = json.loads(Path(a.config).read_text())
    topo = Topology.loads(cfg["topology"], a.config)
    addr = Address(a.address, topo.levels)
    core = int(cfg["brokers"][str(addr)]["core"])
    rt = mh.Runtime.attach(a.runtime)
    try:
        try:
            broker = LiveBroker(
                rt,
                cfg["system"],
                topo,
                addr,
                core,
                cfg.get("storage_dir"),
                a.restart,
                a.accept_empty_store,
                wire.transport_of(cfg),
                int(cfg.get("client_queue_limit", _ges.CLIENT_QUEUE_LIMIT)),
            )
        except StorageError as e:
            print(f"broker {addr}: {e}", file=sys.stderr, flush=True)
            return 2
        quiet_gc()
        print(f"broker {addr} up on core {core}, pid {os.getpid()}", file=sys.stderr, flush=True)
        prof = os.environ.get("MULTIHOP_GES_PROFILE")  # a directory: profile each broker's loop there
        if prof:
            import cProfile

            cProfile.runctx("broker.run()", globals(), {"broker": broker}, str(Path(prof) / f"broker-{addr}.prof"))
        else:
            broker.run()
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
