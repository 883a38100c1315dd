"""The live peer: a dispatcher process that feeds channel messages and real time to a :class:`PeerMachine`.

One loop, in one thread, owns the machine: it waits on every channel at once
(``Dispatcher.poll``, which parks: an idle peer uses no CPU), at most until the
machine's next timer; it decodes what arrived and hands it over, runs the
timers, binds where the machine asks, and writes what the machine queued
without ever blocking (see :mod:`.channels`).  A second thread only accepts:
``Service.accept`` blocks, and a bind may wait until it is accepted, so
accepting never waits behind the loop (this works whether ``bind`` returns
when accepted or when queued in the service's backlog).

A peer exports ``dispatch.<system>.peer.<id>``, lists itself in the peer
directory (:mod:`.naming`), and leaves gracefully on ``shutdown`` or SIGTERM;
it stops when its runtime stops or, if it has one, when its owner process dies.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Any, Callable

import multihop as mh
from multihop.dispatch.channels import ChannelTable
from multihop.dispatch.clock import Clock, MonotonicClock
from multihop.dispatch.config import PeerConfig
from multihop.dispatch.ids import Nid, domain_id, new_id, short
from multihop.dispatch.naming import check_system, listed_peers, peer_service, register_peer, unregister_peer
from multihop.dispatch.peer import PeerMachine
from multihop.dispatch.wire import DecodeError, decode

__all__ = ["PeerDriver", "HELLOS"]

log = logging.getLogger("multihop.dispatch.peer")

HELLOS = {"client_hello": "client", "peer_hello": "peer"}
"""The messages that name the node of a fresh channel, and their node field."""

_MAX_WAIT = 0.05  # seconds: how long the loop parks at most (new channels are noticed within this)


class PeerDriver:
    """One live peer (see the module docstring).  ``run()`` blocks until it stops."""

    def __init__(
        self,
        runtime: str,
        system: str,
        core: int,
        config: PeerConfig,
        *,
        me: Nid | None = None,
        transport: str = "ump",
        owner_pid: int | None = None,
        clock: Clock | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.system = check_system(system)
        self.rt = mh.Runtime.attach(runtime)
        self.clock = clock or MonotonicClock()
        self.me = me or new_id("peer")
        self.transport = transport
        self.owner_pid = owner_pid
        self.on_event = on_event
        self.d = self.rt.dispatcher(core)
        self.svc = self.d.export(peer_service(system, self.me))
        others = [p for p in listed_peers(self.rt, system) if p != self.me]
        register_peer(self.rt, system, self.me, {"pid": os.getpid(), "core": core, "started": time.time()})
        self.machine = PeerMachine(self.me, domain_id(runtime, system), config, self.clock.now_ns(), others)
        self.table = ChannelTable()
        self.accepted: queue.SimpleQueue[mh.Channel] = queue.SimpleQueue()
        self.stop_requested = threading.Event()
        self.counters = {"malformed": 0, "loops": 0}
        self.machine.status_hook = self._driver_status
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"dispatch-accept-{short(self.me)}", daemon=True)

    def _accept_loop(self) -> None:
        while not self.stop_requested.is_set():
            try:
                self.accepted.put(self.svc.accept(timeout=0.2))
            except mh.Timeout:
                continue
            except Exception as e:  # the runtime went away
                log.info("peer %s: accept stopped: %s", short(self.me), e)
                return

    # ---- the loop ----------------------------------------------------------

    def run(self) -> None:
        """Serve until the machine stops (after a graceful leave), the runtime stops, or the owner dies."""
        self._acceptor.start()
        m = self.machine
        next_check = 0.0
        try:
            self._outputs()
            while not (m.stopped and not self.table.backlog):
                if self.stop_requested.is_set() and not m.leaving:
                    m.leave()
                    self._outputs()
                now = self.clock.now_ns()
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + 0.25
                    if not self._alive():
                        log.info("peer %s: runtime or owner gone, stopping", short(self.me))
                        return
                due = m.poll_timeout()
                wait = _MAX_WAIT if due is None else min(_MAX_WAIT, max(0.0, (due - now) / 1e9))
                if self.table.backlog:
                    wait = min(wait, 0.001)
                ready = self.d.poll(timeout=wait)
                self._adopt_accepted()
                for ch in ready:
                    self._read(ch)
                now = self.clock.now_ns()
                due = m.poll_timeout()
                if due is not None and now >= due:
                    m.handle_timeout(now)
                self._outputs()
                self.counters["loops"] += 1
        finally:
            self.close()

    def _alive(self) -> bool:
        if not self.d.attached:
            return False
        if self.owner_pid is not None:
            try:
                os.kill(self.owner_pid, 0)
            except ProcessLookupError:
                return False
        return True

    def _adopt_accepted(self) -> None:
        while True:
            try:
                ch = self.accepted.get_nowait()
            except queue.Empty:
                return
            self.table.add_fresh(ch)
            self._read(ch)

    def _read(self, ch: mh.Channel) -> None:
        m = self.machine
        try:
            batch = ch.recv_batch(256, timeout=0)
        except mh.ChannelClosed:
            node = self.table.forget(ch)
            if node is not None:
                m.handle_closed(node, self.clock.now_ns())
            return
        now = self.clock.now_ns()
        for data in batch:
            node = self.table.node(ch)
            try:
                rec = decode(data)
            except DecodeError as e:
                self.counters["malformed"] += 1
                log.warning("peer %s: malformed message dropped: %s", short(self.me), e)
                if node is None:  # not even a hello: not one of ours, the channel is closed
                    self.table.forget(ch)
                    return
                continue
            if node is None:
                field = HELLOS.get(rec.name)
                if field is None:
                    self.counters["malformed"] += 1  # a channel must start with a hello: refuse it
                    self.table.forget(ch)
                    return
                node = getattr(rec, field)
                self.table.name(ch, node)
            m.handle_message(node, rec, now)

    def _outputs(self) -> None:
        m = self.machine
        while (peer := m.poll_connect()) is not None:
            try:
                ch = self.d.bind(peer_service(self.system, peer), transport=self.transport, timeout=5.0)
            except (mh.BindError, mh.Timeout) as e:
                log.info("peer %s: cannot bind to peer %s: %s", short(self.me), short(peer), e)
                m.handle_connect_failed(peer, self.clock.now_ns())
                continue
            self.table.name(ch, peer)
            m.handle_connected(peer, self.clock.now_ns())
        while (out := m.poll_transmit()) is not None:
            self.table.queue(out[0], out[1])
        self.table.flush()
        while (ev := m.poll_event()) is not None:
            log.info("peer %s: %s %s", short(self.me), ev[0], ev[1])
            if self.on_event is not None:
                self.on_event(*ev)

    def stop(self) -> None:
        """Ask the loop to leave gracefully (safe from a signal handler or another thread)."""
        self.stop_requested.set()

    def close(self) -> None:
        """Release everything: the peer entry, the channels, the dispatcher."""
        self.stop_requested.set()
        unregister_peer(self.rt, self.system, self.me)
        self.table.close_all()
        if self._acceptor.is_alive():
            self._acceptor.join(timeout=1.0)
        try:
            self.d.detach()
        except Exception:
            pass

    def _driver_status(self) -> dict[str, Any]:
        """The driver's counters (in the peer's status reply)."""
        return dict(
            self.counters,
            pid=os.getpid(),
            dropped=self.table.dropped,
            backlog=self.table.backlog,
            busy_rounds=self.table.busy_rounds,
            channels=len(list(self.table.channels())),
        )
