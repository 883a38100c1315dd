"""Relays: news between domains (runtimes), over a relay domain that only relays share.

A relay process attaches to two runtimes: its *local* domain's and the
*relay domain*'s.  Locally it is a reliable sink for the relayed topics and a
relay client of every peer (it injects news of other domains); in the relay
domain it exports ``dispatch.<relay_system>.relay.<id>`` and keeps a channel
to every other relay (point to point, as the paper's worst case).

* A local news (origin: the local domain) that the sink receives goes to
  every other relay.
* A news from another relay is injected into the local domain unless it came
  from here or was injected already; the peers keep its id, priority, topics,
  entry time and origin, so the sinks' QoS (``max_delivery_time`` counts from
  when it first entered) and their duplicate suppression work across domains.
* News injected here come back to the relay's own sink only if they match its
  topics; their origin is not local, so they are never sent on again (no loops
  in a full mesh of relays).

:class:`RelayMachine` is that rule, sans-IO; :class:`RelayDriver` runs it over
the live channels (three threads: local to relays, relays to local, accept);
:func:`relay` starts a relay process and returns its :class:`Relay` handle.
"""

from __future__ import annotations

import logging
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Sequence

import multihop as mh
from multihop.dispatch.channels import ChannelTable
from multihop.dispatch.client import Sink, _Client
from multihop.dispatch.errors import DispatchError
from multihop.dispatch.ids import Nid, NewsKey, domain_id, hex_id, new_id, parse_hex, short
from multihop.dispatch.naming import (DEFAULT_SYSTEM, check_system, listed_peers, peer_dir, register_peer,
                                      relay_service, unregister_peer)
from multihop.dispatch.news import News
from multihop.dispatch.qos import SinkQoS
from multihop.dispatch.topics import check_topics, encode_topics
from multihop.dispatch.wire import M, DecodeError, Record, decode

__all__ = ["RelayMachine", "RelayDriver", "Relay", "relay", "RELAY_SYSTEM"]

log = logging.getLogger("multihop.dispatch.relay")

RELAY_SYSTEM = "relays"
"""The default system name of the relay domain."""

_SEEN = 1 << 18  # news ids a relay remembers to drop what it injected already


class RelayMachine:
    """What a relay forwards (see the module docstring)."""

    def __init__(self, me: Nid, local: Nid) -> None:
        self.me = me
        self.local = local
        self.seen: OrderedDict[NewsKey, None] = OrderedDict()
        self.counters = {"out": 0, "in": 0, "dropped_own": 0, "dropped_seen": 0, "not_local": 0}

    def outgoing(self, n: News) -> Record | None:
        """The ``news`` to send to the other relays for a news the local sink got, or None (not local)."""
        if n.origin != self.local:
            self.counters["not_local"] += 1
            return None
        self.counters["out"] += 1
        return M.messages.news(n.source, n.seq, n.priority, n.entry_ns, n.origin, encode_topics(n.topics), n.payload)

    def incoming(self, rec: Record) -> Record | None:
        """The ``news`` to inject locally for one from another relay, or None (ours, or injected already)."""
        if rec.origin == self.local:
            self.counters["dropped_own"] += 1
            return None
        key = (rec.source, rec.seq)
        if key in self.seen:
            self.counters["dropped_seen"] += 1
            return None
        self.seen[key] = None
        if len(self.seen) > _SEEN:
            self.seen.popitem(last=False)
        self.counters["in"] += 1
        return rec


class _Injector(_Client):
    """The relay's clients of the local peers (kind CLIENT_RELAY): it writes foreign news to every peer."""

    class _Machine:
        def __init__(self, me: Nid, domain: Nid) -> None:
            self.me, self.domain = me, domain
            self.linked: set[Nid] = set()
            self.known: set[Nid] = set()
            self.epoch = 0
            self._out: deque[tuple[Nid, Record]] = deque()
            self._connects: deque[Nid] = deque()

        def handle_connected(self, peer: Nid, now: int) -> None:
            self.linked.add(peer)
            self.known.add(peer)
            self._out.append((peer, M.messages.client_hello(M.client_kind.CLIENT_RELAY, self.me, self.domain)))

        def handle_connect_failed(self, peer: Nid, now: int) -> None:
            self.known.discard(peer)

        def handle_closed(self, peer: Nid, now: int) -> None:
            self.linked.discard(peer)
            self.known.discard(peer)

        def handle_message(self, src: Nid, rec: Record, now: int) -> None:
            if rec.name in ("welcome", "members"):
                self.epoch = max(self.epoch, rec.epoch)
                for m in rec.members:
                    if m.id not in self.known:
                        self.known.add(m.id)
                        self._connects.append(m.id)

        def has_output(self) -> bool:
            return bool(self._out or self._connects)

        def poll_transmit(self) -> tuple[Nid, Record] | None:
            return self._out.popleft() if self._out else None

        def poll_connect(self) -> Nid | None:
            return self._connects.popleft() if self._connects else None

        def poll_close(self) -> Nid | None:
            return None

    def __init__(self, runtime: str, system: str, me: Nid, core: int | None) -> None:
        super().__init__(runtime, system, core, "ump", None)
        self.machine = self._Machine(me, self.domain)
        self._connect_all()

    def inject(self, rec: Record) -> None:
        """Queue ``rec`` for every local peer (written by the next step), after our hellos."""
        self._write()
        for peer in sorted(self.machine.linked):
            self.table.queue(peer, rec)


class RelayDriver:
    """A live relay (see the module docstring); ``run()`` blocks until :meth:`stop`."""

    def __init__(self, local_runtime: str, relay_runtime: str, topics: Sequence[str], *, system: str = DEFAULT_SYSTEM,
                 relay_system: str = RELAY_SYSTEM, me: Nid | None = None, core: int | None = None,
                 relay_core: int | None = None) -> None:
        self.topics = check_topics(topics)
        self.system = check_system(system)
        self.relay_system = check_system(relay_system)
        self.me = me or new_id("relay")
        self.machine = RelayMachine(self.me, domain_id(local_runtime, system))
        self.sink = Sink(local_runtime, self.topics, SinkQoS(queue_limit=100_000), system=system, core=core)
        self.injector = _Injector(local_runtime, system, self.me, core)
        self.rrt = mh.Runtime.attach(relay_runtime)
        self.rd = self.rrt.dispatcher(self.rrt.cores[0] if relay_core is None else relay_core)
        self.svc = self.rd.export(relay_service(self.relay_system, self.me))
        self.mesh = ChannelTable()
        self.lock = threading.Lock()  # guards self.mesh (written by the outgoing thread, changed by the incoming one)
        self.accepted: queue.SimpleQueue[mh.Channel] = queue.SimpleQueue()
        self.stopping = threading.Event()
        others = [r for r in listed_peers(self.rrt, self.relay_system, "relay") if r != self.me]
        register_peer(self.rrt, self.relay_system, self.me, {"pid": os.getpid(), "local": local_runtime,
                                                             "system": system}, "relay")
        self.early: list[tuple[mh.Channel, bytes]] = []  # what came with the answers to our hellos
        hello = M.messages.relay_hello(self.me, self.machine.local)
        for other in others:
            try:
                ch = self.rd.bind(relay_service(self.relay_system, other), timeout=5.0)
                with self.lock:
                    self.mesh.name(ch, other)
                    self.mesh.queue(other, hello)
                    self.mesh.flush()
                self._await_hello(ch)
            except (mh.BindError, mh.Timeout, mh.ChannelClosed) as e:
                log.info("relay %s: relay %s unreachable: %s", short(self.me), short(other), e)

    def _await_hello(self, ch: mh.Channel, timeout: float = 5.0) -> None:
        """Wait for the other relay's answer: once it came, that relay sends us what it relays."""
        deadline = time.monotonic() + timeout
        while True:
            data = ch.recv(max(0.0, deadline - time.monotonic()))
            try:
                if decode(data).name == "relay_hello":
                    return
            except DecodeError:
                continue
            self.early.append((ch, data))

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
        for _, data in self.early:
            out = self.machine.incoming(decode(data))
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
                    batch = ch.recv_batch(256, timeout=0)
                except mh.ChannelClosed:
                    with self.lock:
                        self.mesh.forget(ch)
                    continue
                for data in batch:
                    try:
                        rec = decode(data)
                    except DecodeError:
                        continue
                    if rec.name == "relay_hello":
                        with self.lock:
                            if self.mesh.node(ch) is None:
                                self.mesh.name(ch, rec.relay)
                                self.mesh.queue(rec.relay, hello)
                    elif rec.name == "news":
                        out = self.machine.incoming(rec)
                        if out is not None:
                            self.injector.inject(out)
            self.injector._step(0.0)
            with self.lock:
                self.mesh.flush()

    def run(self) -> None:
        """Relay until :meth:`stop` (or the runtimes go away)."""
        threads = [threading.Thread(target=f, daemon=True, name=f"relay-{f.__name__}")
                   for f in (self._accept_loop, self._outgoing)]
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


@dataclass
class Relay:
    """A relay process (from :func:`relay`): ``stop()`` ends it; a context manager."""

    id: Nid
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def alive(self) -> bool:
        """Whether the process runs."""
        return self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``."""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> "Relay":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def relay(local_runtime: str, relay_runtime: str, topics: Sequence[str], *, system: str = DEFAULT_SYSTEM,
          relay_system: str = RELAY_SYSTEM, timeout: float = 15.0) -> Relay:
    """Start a relay process between domain ``system`` of ``local_runtime`` and the relay domain on ``relay_runtime``.

    It relays the news of ``topics``; returns once it is connected (its local
    sink has joined and it is listed in the relay domain).  The process stops
    with this program (or with ``Relay.stop()``).  Raises DispatchError with its
    log if it does not start.
    """
    names = check_topics(topics)
    rt = mh.Runtime.attach(local_runtime)
    mh.Runtime.attach(relay_runtime)
    me = new_id("relay")
    logdir = peer_dir(rt, check_system(system), "log")
    logdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    log_path = logdir / f"relay-{hex_id(me)}.log"
    cmd = [sys.executable, "-m", "multihop.dispatch.relay", "--local", local_runtime, "--relay", relay_runtime,
           "--system", system, "--relay-system", check_system(relay_system), "--id", hex_id(me),
           "--owner-pid", str(os.getpid()), "--topics", *names]
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=logf, close_fds=True,
                                process_group=0)
    r = Relay(me, proc, log_path)
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                r.stop()
                raise DispatchError(f"relay did not start (exit {proc.returncode}):\n{tail}")
            if sel.select(0.1) and proc.stdout.readline().startswith(b"ready"):
                return r
    finally:
        sel.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m multihop.dispatch.relay``: one relay process."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m multihop.dispatch.relay")
    p.add_argument("--local", required=True)
    p.add_argument("--relay", required=True)
    p.add_argument("--system", default=DEFAULT_SYSTEM)
    p.add_argument("--relay-system", default=RELAY_SYSTEM)
    p.add_argument("--id", default=None)
    p.add_argument("--owner-pid", type=int, default=None)
    p.add_argument("--topics", nargs="+", required=True)
    a = p.parse_args(argv)
    logging.basicConfig(level="INFO", format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    driver = RelayDriver(a.local, a.relay, a.topics, system=a.system, relay_system=a.relay_system,
                         me=parse_hex(a.id) if a.id else None)
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
    log.info("relay %s: %s", short(driver.me), driver.machine.counters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
