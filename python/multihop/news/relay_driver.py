"""The live relay: the channels and threads that run a :class:`~multihop.news.relay.RelayMachine`.

``python -m multihop.news.relay_driver`` is the relay process that
:func:`multihop.news.relay` starts.  Three threads: local news to the
other relays (the relay's sink), news of other relays to the local peers
(the relay's injector), and accepting relays that bind to us.  A frame from
another relay whose handling fails (a bug: the machine checks each) is counted
and logged, and the relay relays on.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
import time
from collections import deque
from typing import Sequence

import multihop as mh
from multihop.defaults import DEFAULT_TIMEOUT, DRAIN_BATCH
from multihop.news.channels import ChannelTable
from multihop.news.client import Sink, _Client
from multihop.news.ids import ZERO, Nid, domain_id, hex_id, identity_of, new_identity, short
from multihop.news.naming import DEFAULT_SYSTEM, check_system, listed_peers, register_peer, relay_service, unregister_peer
from multihop.news.peer_process import take_secret
from multihop.news.qos import SinkQoS
from multihop.news.relay import RELAY_SYSTEM, RelayMachine
from multihop.news.topics import check_topics
from multihop.news.wire import DecodeError, M, Record, decode

__all__ = ["RelayDriver", "main"]

log = logging.getLogger("multihop.news.relay")


class _InjectorMachine:
    """The injector's protocol: hello each local peer, bind to every member the peers list; count the peers' refusals."""

    def __init__(self, me: Nid, domain: Nid, secret: bytes) -> None:
        self.me, self.domain, self.secret = me, domain, secret
        self.refused = 0  # news (or hellos) the local peers refused, each logged (the first 20)
        self.linked: set[Nid] = set()
        self.known: set[Nid] = set()
        self.epoch = 0
        self._out: deque[tuple[Nid, Record]] = deque()
        self._connects: deque[Nid] = deque()

    def handle_connected(self, peer: Nid, now: int) -> None:
        self.linked.add(peer)
        self.known.add(peer)
        self._out.append((peer, M.messages.client_hello(M.client_kind.CLIENT_RELAY, self.me, self.domain, self.secret)))

    def handle_connect_failed(self, peer: Nid, now: int) -> None:
        self.known.discard(peer)

    def handle_closed(self, peer: Nid, now: int) -> None:
        self.linked.discard(peer)
        self.known.discard(peer)

    def handle_message(self, src: Nid, rec: Record, now: int) -> None:
        if isinstance(rec, (M.messages.welcome, M.messages.members)):
            self.epoch = max(self.epoch, rec.epoch)
            for m in rec.members:
                if m.id not in self.known:
                    self.known.add(m.id)
                    self._connects.append(m.id)
        elif isinstance(rec, M.messages.refused):
            self.refused += 1
            if self.refused <= 20:
                log.warning("relay %s: peer %s refused: %s", short(self.me), short(src), rec.reason)

    def has_output(self) -> bool:
        return bool(self._out or self._connects)

    def poll_transmit(self) -> tuple[Nid, Record] | None:
        return self._out.popleft() if self._out else None

    def poll_connect(self) -> Nid | None:
        return self._connects.popleft() if self._connects else None

    def poll_close(self) -> Nid | None:
        return None


class _Injector(_Client[_InjectorMachine]):
    """The relay's clients of the local peers (kind CLIENT_RELAY): it writes foreign news to every peer."""

    def __init__(self, runtime: str, system: str, me: Nid, secret: bytes, core: int | None) -> None:
        super().__init__(runtime, system, core, "ump", None)
        self.machine = _InjectorMachine(me, self.domain, secret)
        self._connect_all()

    def inject(self, rec: Record) -> None:
        """Queue ``rec`` for every local peer (written by the next step), after our hellos."""
        self._write()
        for peer in sorted(self.machine.linked):
            self.table.queue(peer, rec)


class RelayDriver:
    """A live relay (see the module docstring); ``run()`` blocks until :meth:`stop`."""

    def __init__(
        self,
        local_runtime: str,
        relay_runtime: str,
        topics: Sequence[str],
        *,
        system: str = DEFAULT_SYSTEM,
        relay_system: str = RELAY_SYSTEM,
        secret: bytes | None = None,
        core: int | None = None,
        relay_core: int | None = None,
    ) -> None:
        self.topics = check_topics(topics)
        self.system = check_system(system)
        self.relay_system = check_system(relay_system)
        if secret is None:
            self.me, secret = new_identity("relay")
        else:
            self.me = identity_of(secret)
        self.failures = 0  # frames from other relays whose handling raised (a bug: counted and logged)
        self.machine = RelayMachine(self.me, domain_id(local_runtime, system))
        self.sink = Sink(local_runtime, self.topics, SinkQoS(queue_limit=100_000), system=system, core=core)
        self.injector = _Injector(local_runtime, system, self.me, secret, core)
        self.rrt = mh.Runtime.attach(relay_runtime)
        self.rd = self.rrt.dispatcher(self.rrt.cores[0] if relay_core is None else relay_core)
        self.svc = self.rd.export(relay_service(self.relay_system, self.me))
        self.mesh = ChannelTable()
        self.lock = threading.Lock()  # guards self.mesh (written by the outgoing thread, changed by the incoming one)
        self.accepted: queue.SimpleQueue[mh.Channel] = queue.SimpleQueue()
        self.stopping = threading.Event()
        others = [r for r in listed_peers(self.rrt, self.relay_system, "relay") if r != self.me]
        register_peer(self.rrt, self.relay_system, self.me, {"pid": os.getpid(), "local": local_runtime, "system": system}, "relay")
        self.early: list[M.messages.news] = []  # news that came with the answers to our hellos
        hello = M.messages.relay_hello(self.me, self.machine.local)
        for other in others:
            try:
                ch = self.rd.bind(relay_service(self.relay_system, other), timeout=DEFAULT_TIMEOUT)
                with self.lock:
                    self.mesh.name(ch, other)
                    self.mesh.queue(other, hello)
                    self.mesh.flush()
                self._await_hello(ch)
            except (mh.BindError, mh.Timeout, mh.ChannelClosed) as e:
                log.info("relay %s: relay %s unreachable: %s", short(self.me), short(other), e)

    def _await_hello(self, ch: mh.Channel, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Wait for the other relay's answer: once it came, that relay sends us what it relays."""
        deadline = time.monotonic() + timeout
        while True:
            data = ch.recv(max(0.0, deadline - time.monotonic()))
            try:
                rec = decode(data)
            except DecodeError:
                continue
            if isinstance(rec, M.messages.relay_hello):
                return
            if isinstance(rec, M.messages.news):  # anything else from a relay means nothing here
                self.early.append(rec)

    def _accept_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                self.accepted.put(self.svc.accept(timeout=0.2))
            except mh.Timeout:
                continue
            except Exception:
                return

    def _outgoing(self) -> None:
        """Local news -> every other relay."""
        while not self.stopping.is_set():
            try:
                n = self.sink.next(timeout=0.2)
            except mh.Timeout:
                continue
            except Exception:  # a bug: counted and logged; the relay relays on
                self.failures += 1
                if self.failures <= 20:
                    log.exception("relay %s: reading the local sink failed", short(self.me))
                time.sleep(0.01)
                continue
            rec = self.machine.outgoing(n)
            if rec is None:
                continue
            with self.lock:
                for other in list(self.mesh.by_node):
                    self.mesh.queue(other, rec)
                self.mesh.flush()

    def _incoming(self) -> None:
        """News from other relays -> the local peers."""
        hello = M.messages.relay_hello(self.me, self.machine.local)
        for early in self.early:
            out = self.machine.incoming(early)
            if out is not None:
                self.injector.inject(out)
        self.early.clear()
        while not self.stopping.is_set():
            ready = self.rd.poll(timeout=0.05)
            while True:
                try:
                    ch = self.accepted.get_nowait()
                except queue.Empty:
                    break
                with self.lock:
                    self.mesh.add_fresh(ch)
                ready.append(ch)
            for ch in ready:
                try:
                    batch = ch.recv_batch(DRAIN_BATCH, timeout=0)
                except mh.ChannelClosed:
                    with self.lock:
                        self.mesh.forget(ch)
                    continue
                for data in batch:
                    try:
                        rec = decode(data)
                    except DecodeError:
                        continue
                    try:
                        self._from_relay(ch, rec, hello)
                    except Exception:
                        self.failures += 1
                        if self.failures <= 20:
                            log.exception("relay %s: a frame from another relay failed; dropped", short(self.me))
            self.injector._step(0.0)
            with self.lock:
                self.mesh.flush()

    def _from_relay(self, ch: mh.Channel, rec: Record, hello: Record) -> None:
        """One message from another relay: its hello names the channel (once), its news go to the local peers."""
        if isinstance(rec, M.messages.relay_hello):
            if rec.relay in (ZERO, self.me):
                self.machine.counters["bad"] += 1
                return
            with self.lock:
                if self.mesh.node(ch) is None:
                    self.mesh.name(ch, rec.relay)
                    self.mesh.queue(rec.relay, hello)
        elif isinstance(rec, M.messages.news):
            out = self.machine.incoming(rec)
            if out is not None:
                self.injector.inject(out)

    def run(self) -> None:
        """Relay until :meth:`stop` (or the runtimes go away)."""
        threads = [threading.Thread(target=f, daemon=True, name=f"relay-{f.__name__}") for f in (self._accept_loop, self._outgoing)]
        for t in threads:
            t.start()
        try:
            self._incoming()
        finally:
            self.stopping.set()
            for t in threads:
                t.join(timeout=2.0)
            self.close()

    def stop(self) -> None:
        """Ask :meth:`run` to return (safe from a signal handler)."""
        self.stopping.set()

    def close(self) -> None:
        """Release both runtimes' channels and dispatchers."""
        unregister_peer(self.rrt, self.relay_system, self.me, "relay")
        with self.lock:
            self.mesh.close_all()
        self.sink.close()
        self.injector._close([])
        try:
            self.rd.detach()
        except Exception:
            pass


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m multihop.news.relay``: one relay process."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m multihop.news.relay")
    p.add_argument("--local", required=True)
    p.add_argument("--relay", required=True)
    p.add_argument("--system", default=DEFAULT_SYSTEM)
    p.add_argument("--relay-system", default=RELAY_SYSTEM)
    p.add_argument("--id", default=None)
    p.add_argument("--owner-pid", type=int, default=None)
    p.add_argument("--topics", nargs="+", required=True)
    a = p.parse_args(argv)
    logging.basicConfig(level="INFO", format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    driver = RelayDriver(a.local, a.relay, a.topics, system=a.system, relay_system=a.relay_system, secret=take_secret(a.id))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: driver.stop())
    if a.owner_pid is not None:

        def watch() -> None:
            while not driver.stopping.wait(0.25):
                try:
                    os.kill(a.owner_pid, 0)
                except ProcessLookupError:
                    driver.stop()

        threading.Thread(target=watch, daemon=True).start()
    print(f"ready {hex_id(driver.me)}", flush=True)
    driver.run()
    log.info(
        "relay %s: %s, refused by local peers %d, failures %d",
        short(driver.me),
        driver.machine.counters,
        driver.injector.machine.refused,
        driver.failures,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
