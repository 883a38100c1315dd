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

A fresh channel is named only after the machine admitted its hello
(:meth:`PeerMachine.admit`: the proof of the id, no live channel of that node
already); a refused one gets the ``refused`` and is closed.  What the machine
asks to cut (:meth:`PeerMachine.poll_close`) is closed after what was queued
for it.  Nothing a node sends ends the loop: the machine checks every frame,
and should handling one still raise (a bug), the loop counts it
(``frame_errors``, ``encode_errors``, ``timer_errors``, ``loop_errors`` in the
status' ``driver`` part), logs it with its traceback, and serves on.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Any, Callable

import multihop as mh
from multihop.defaults import DEFAULT_TIMEOUT, DRAIN_BATCH
from multihop.news.channels import ChannelTable
from multihop.news.clock import Clock, MonotonicClock
from multihop.news.config import PeerConfig
from multihop.news.ids import Nid, domain_id, identity_of, new_identity, short
from multihop.news.naming import check_system, listed_peers, peer_service, register_peer, unregister_peer
from multihop.news.peer import PeerMachine
from multihop.news.wire import DecodeError, decode, encode

__all__ = ["PeerDriver", "HELLOS"]

log = logging.getLogger("multihop.news.peer")

HELLOS = {"client_hello": "client", "peer_hello": "peer"}
"""The messages that name the node of a fresh channel, and their node field."""

_MAX_WAIT = 0.05  # seconds: how long the loop parks at most (new channels are noticed within this)
_LOGGED_ERRORS = 20  # failures logged with their traceback one by one; beyond, every 1000th (all are counted)


class PeerDriver:
    """One live peer (see the module docstring).  ``run()`` blocks until it stops."""

    def __init__(
        self,
        runtime: str,
        system: str,
        core: int,
        config: PeerConfig,
        *,
        secret: bytes | None = None,
        transport: str = "ump",
        owner_pid: int | None = None,
        clock: Clock | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.system = check_system(system)
        self.rt = mh.Runtime.attach(runtime)
        self.clock = clock or MonotonicClock()
        if secret is None:
            self.me, self.secret = new_identity("peer")
        else:
            self.me, self.secret = identity_of(secret), bytes(secret)
        self.transport = transport
        self.owner_pid = owner_pid
        self.on_event = on_event
        self.d = self.rt.dispatcher(core)
        self.svc = self.d.export(peer_service(system, self.me))
        others = [p for p in listed_peers(self.rt, system) if p != self.me]
        register_peer(self.rt, system, self.me, {"pid": os.getpid(), "core": core, "started": time.time()})
        self.machine = PeerMachine(self.me, domain_id(runtime, system), config, self.clock.now_ns(), others, secret=self.secret)
        self.table = ChannelTable()
        self.accepted: queue.SimpleQueue[mh.Channel] = queue.SimpleQueue()
        self.stop_requested = threading.Event()
        self.counters = {
            "malformed": 0,
            "loops": 0,
            "hellos_refused": 0,
            "frame_errors": 0,
            "encode_errors": 0,
            "timer_errors": 0,
            "event_errors": 0,
            "loop_errors": 0,
        }
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
                try:
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
                        try:
                            m.handle_timeout(now)
                        except Exception:
                            self._failed("timer_errors", "a timer")
                    self._outputs()
                    self.counters["loops"] += 1
                except Exception:  # a bug: counted and logged; the peer serves on
                    self._failed("loop_errors", "a round of the loop")
                    if not self._alive():
                        log.info("peer %s: runtime or owner gone, stopping", short(self.me))
                        return
                    time.sleep(0.001)  # not a hot spin should it repeat
        finally:
            self.close()

    def _failed(self, counter: str, what: str) -> None:
        """Count and log (with its traceback: it is a bug) a failure the loop survives."""
        self.counters[counter] += 1
        n = self.counters[counter]
        if n <= _LOGGED_ERRORS or n % 1000 == 0:
            log.exception("peer %s: %s failed (%s #%d); serving on", short(self.me), what, counter, n)

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
            batch = ch.recv_batch(DRAIN_BATCH, timeout=0)
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
                claimed: Nid = getattr(rec, field)
                for old in list(self.table.by_node.get(claimed, ())):
                    self._read(old)  # a closed channel of that node is seen closed before its id is judged taken
                refusal = m.admit(rec)
                if refusal is not None:
                    self.counters["hellos_refused"] += 1
                    try:
                        ch.try_send(encode(refusal))
                    except (mh.TxBusy, mh.ChannelClosed):
                        pass
                    self.table.forget(ch)
                    return
                node = claimed
                self.table.name(ch, node)
            try:
                m.handle_message(node, rec, now)
            except Exception:
                self._failed("frame_errors", f"handling {rec.name} from {short(node)}")

    def _outputs(self) -> None:
        m = self.machine
        while (peer := m.poll_connect()) is not None:
            try:
                ch = self.d.bind(peer_service(self.system, peer), transport=self.transport, timeout=DEFAULT_TIMEOUT)
            except (mh.BindError, mh.Timeout) as e:
                log.info("peer %s: cannot bind to peer %s: %s", short(self.me), short(peer), e)
                m.handle_connect_failed(peer, self.clock.now_ns())
                continue
            self.table.name(ch, peer)
            m.handle_connected(peer, self.clock.now_ns())
        for _ in range(64):  # a cut may queue more (a sink removed: sink_left to the peers); bounded
            while (out := m.poll_transmit()) is not None:
                try:
                    self.table.queue(out[0], out[1])
                except Exception:
                    self._failed("encode_errors", f"encoding {out[1].name} for {short(out[0])}")
            self.table.flush()
            cut = m.poll_close()
            if cut is None:
                break
            now = self.clock.now_ns()
            for ch in list(self.table.by_node.get(cut, ())):
                self.table.forget(ch)
            m.handle_closed(cut, now)
        while (ev := m.poll_event()) is not None:
            log.info("peer %s: %s %s", short(self.me), ev[0], ev[1])
            if self.on_event is not None:
                try:
                    self.on_event(*ev)
                except Exception:
                    self._failed("event_errors", f"the on_event hook for {ev[0]}")

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
