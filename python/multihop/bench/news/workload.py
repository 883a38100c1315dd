"""Live load for the dispatch benchmarks: sink hosts, a paced source, and a plain broker to compare with.

Processes (spawned, so each is importable from here):

* :func:`sink_host` holds up to a few dozen macro-sinks (each its own
  dispatch sink: its own dispatcher and one channel per peer, point to point)
  and, on ``report``, sends what each got since the last report: count,
  late count (older than ``late_ns``), sampled latencies, and the first and
  last delivery from each peer (to measure take-overs);
* :func:`paced_source` sends news of ``size`` bytes at ``rate`` per second
  (or as fast as it can, ``rate=None``), stamping each when it enters;
* :func:`plain_broker` / :func:`plain_publisher` / plain sinks in
  :func:`sink_host` (``plain=True``): the same fan-out over the same channels
  with nothing of dispatch (one broker process copies each message to every
  subscriber): the floor any broker path pays, measured in the same run.

:class:`Load` drives them from the benchmark process.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

import multihop as mh
from multihop import news
from multihop.defaults import DRAIN_BATCH
from multihop.news.channels import drain
from multihop.news.ids import Nid

__all__ = ["Load", "sink_host", "paced_source", "plain_broker", "plain_publisher", "SinkReport"]

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import SpawnProcess
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

CTX = mp.get_context("spawn")
_STAMP = struct.Struct("<qQ")  # plain path: send time (ns), sequence number
BROKER = "bench.dispatch.plain-broker"


@dataclass
class SinkReport:
    """What one sink got during one report interval."""

    count: int = 0
    late: int = 0
    samples: list[tuple[int, int]] = field(default_factory=list)  # sampled (entered, received), CLOCK_MONOTONIC ns
    peers: dict[Nid, tuple[int, int]] = field(default_factory=dict)  # peer -> (first, last) receive time
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def latencies(self) -> list[int]:
        """The sampled latencies, ns."""
        return [r - e for e, r in self.samples]


def _plain_sink(runtime: str, core: int) -> tuple[mh.Dispatcher, mh.Channel]:
    d = mh.Runtime.attach(runtime).dispatcher(core)
    ch = d.bind(BROKER, timeout=10)
    ch.send(b"S", 10)
    return d, ch


class SharedInt(Protocol):
    """A shared integer (``multiprocessing.Value("q", ...)``): one process writes, others read."""

    value: int


def sink_host(runtime: str, system: str, conn: Connection[Any, Any], qos: dict[str, Any], late_ns: int, every: int, plain: bool = False) -> None:
    """Hold sinks; commands on ``conn``: ("add", n) -> ids, ("report",) -> {index: SinkReport}, ("stop",)."""
    sinks: list[Any] = []
    reports: list[SinkReport] = []
    cores = mh.Runtime.attach(runtime).cores
    seen = 0
    while True:
        while conn.poll():
            cmd = conn.recv()
            if cmd[0] == "add":
                ids = []
                for _ in range(cmd[1]):
                    core = cores[(os.getpid() + len(sinks)) % len(cores)]
                    if plain:
                        sinks.append(_plain_sink(runtime, core))
                        ids.append((0, len(sinks)))
                    else:
                        s = news.sink(runtime, ["all"], qos=news.SinkQoS(**qos), system=system, core=core)
                        sinks.append(s)
                        ids.append((s.id.hi, s.id.lo))
                    reports.append(SinkReport())
                conn.send(ids)
            elif cmd[0] == "report":
                out = {}
                for i, r in enumerate(reports):
                    if not plain:
                        r.stats = sinks[i].stats()
                    out[i] = r
                reports = [SinkReport() for _ in reports]
                conn.send(out)
            elif cmd[0] == "stop":
                for s in sinks:
                    if plain:
                        s[1].close()
                        s[0].detach()
                    else:
                        s.close()
                conn.send("stopped")
                return
        got = 0
        for i, s in enumerate(sinks):
            r = reports[i]
            if plain:
                try:
                    batch = drain(s[1]) if not s[1].closed else []
                except mh.ChannelClosed:
                    batch = []
                for data in batch:
                    now = time.monotonic_ns()
                    t0, _ = _STAMP.unpack_from(data)
                    lat = now - t0
                    r.count += 1
                    got += 1
                    if lat > late_ns:
                        r.late += 1
                    seen += 1
                    if seen % every == 0:
                        r.samples.append((t0, now))
                continue
            while (n := s.try_next()) is not None:
                lat = n.received_ns - n.entry_ns
                r.count += 1
                got += 1
                if lat > late_ns:
                    r.late += 1
                seen += 1
                if seen % every == 0:
                    r.samples.append((n.entry_ns, n.received_ns))
                first, _ = r.peers.get(n.peer, (n.received_ns, 0))
                r.peers[n.peer] = (first, n.received_ns)
        if not got and sinks:
            d = sinks[0][0] if plain else sinks[0].d
            d.poll(timeout=0.001)  # parks; any ring of this process wakes it
        elif not sinks:
            conn.poll(0.05)


def paced_source(
    runtime: str,
    system: str,
    rate: float | None,
    size: int,
    seconds: float,
    go: Event,
    result: Queue[dict[str, Any]],
    reliable: bool = True,
    counter: SharedInt | None = None,
) -> None:
    """Send news of ``size`` bytes on topic "all" at ``rate`` per second (None: as fast as possible) once ``go`` is set.

    ``counter`` (a shared integer) follows how many were sent.
    """
    src = news.source(runtime, qos=news.SourceQoS(reliable=reliable), system=system)
    payload = bytes(size)
    go.wait(60)
    t0 = time.monotonic()
    end = t0 + seconds
    sent = 0
    while True:
        now = time.monotonic()
        if now >= end or go.is_set() is False:
            break
        target = int((now - t0) * rate) + 1 if rate is not None else sent + 64
        while sent < target:
            try:
                src.send(["all"], payload, timeout=1.0)
            except mh.Timeout:
                pass
            sent += 1
        if counter is not None:
            counter.value = sent
        if rate is not None:
            time.sleep(max(0.0, min(0.001, t0 + sent / rate - time.monotonic())))
    elapsed = time.monotonic() - t0
    st = src.stats()
    src.close()
    result.put({"sent": sent, "seconds": elapsed, "stats": st})


def plain_broker(runtime: str, core: int, subscribers: int, ready: Event, stop: Event) -> None:
    """Accept one publisher and ``subscribers`` sinks; copy each message to every sink (blocking sends)."""
    d = mh.Runtime.attach(runtime).dispatcher(core)
    svc = d.export(BROKER)
    ready.set()
    pub = None
    subs = []
    while pub is None or len(subs) < subscribers:
        ch = svc.accept(timeout=30)
        if ch.recv(timeout=10) == b"P":
            pub = ch
        else:
            subs.append(ch)
    live = True
    while not stop.is_set():
        try:
            batch = pub.recv_batch(DRAIN_BATCH, timeout=0.1) if live else []
        except mh.ChannelClosed:
            live = False  # the publisher is done; the subscribers keep their channels until the stop
            batch = []
        if not live:
            stop.wait(0.1)
        for m in batch:
            for s in subs:
                s.send(m, 10)
    d.detach()


def plain_publisher(runtime: str, core: int, size: int, seconds: float, go: Event, result: Queue[dict[str, Any]]) -> None:
    """Publish as fast as the broker takes them, each stamped with its send time."""
    d = mh.Runtime.attach(runtime).dispatcher(core)
    ch = d.bind(BROKER, timeout=10)
    ch.send(b"P", 10)
    pad = bytes(max(0, size - _STAMP.size))
    go.wait(60)
    t0 = time.monotonic()
    sent = 0
    while time.monotonic() - t0 < seconds:
        for _ in range(64):
            ch.send(_STAMP.pack(time.monotonic_ns(), sent) + pad, 10)
            sent += 1
    result.put({"sent": sent, "seconds": time.monotonic() - t0})
    ch.close()
    d.detach()


class Load:
    """Sink hosts and sources of one benchmark run, all stopped by :meth:`close`."""

    def __init__(
        self,
        runtime: str,
        system: str = "main",
        qos: dict[str, Any] | None = None,
        late_ns: int = 10**9,
        per_host: int = 8,
        every: int = 16,
        plain: bool = False,
    ) -> None:
        self.runtime, self.system = runtime, system
        self.qos = qos or {}
        self.late_ns, self.per_host, self.every, self.plain = late_ns, per_host, every, plain
        self.hosts: list[tuple[SpawnProcess, Connection[Any, Any], int]] = []  # (process, conn, sinks held)
        self.procs: list[SpawnProcess] = []
        self.sink_ids: list[Nid] = []
        self.sent: SharedInt | None = None  # news sent by the last source started

    def add_sinks(self, n: int) -> None:
        """Start ``n`` more sinks (new host processes as needed); returns once they joined."""
        while n > 0:
            if not self.hosts or self.hosts[-1][2] >= self.per_host:
                a, b = CTX.Pipe()
                p = CTX.Process(target=sink_host, args=(self.runtime, self.system, b, self.qos, self.late_ns, self.every, self.plain), daemon=True)
                p.start()
                self.hosts.append((p, a, 0))
            p, conn, held = self.hosts[-1]
            k = min(n, self.per_host - held)
            conn.send(("add", k))
            self.sink_ids += [Nid(hi, lo) for hi, lo in self._answer(p, conn, "add its sinks")]
            self.hosts[-1] = (p, conn, held + k)
            n -= k

    def report(self) -> list[SinkReport]:
        """Every sink's report since the last call (sink order)."""
        out: list[SinkReport] = []
        for _, conn, _ in self.hosts:
            conn.send(("report",))
        for p, conn, _ in self.hosts:
            rep = self._answer(p, conn, "report")
            out += [rep[i] for i in sorted(rep)]
        return out

    @staticmethod
    def _answer(p: SpawnProcess, conn: Connection[Any, Any], what: str, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while not conn.poll(0.1):
            if not p.is_alive():
                raise RuntimeError(f"a sink host exited ({p.exitcode}) before it could {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"a sink host did not {what} within {timeout} s")
        return conn.recv()

    def source(self, rate: float | None, size: int, seconds: float, reliable: bool = True) -> tuple[SpawnProcess, Event, Queue[dict[str, Any]]]:
        """Start a paced source; returns (process, go event, result queue)."""
        go, result = CTX.Event(), CTX.Queue()
        self.sent = CTX.Value("q", 0, lock=False)  # written by the source only
        p = CTX.Process(target=paced_source, args=(self.runtime, self.system, rate, size, seconds, go, result, reliable, self.sent), daemon=True)
        p.start()
        self.procs.append(p)
        return p, go, result

    def spawn(self, target: Callable[..., None], *args: Any) -> SpawnProcess:
        """Start any helper process (stopped by :meth:`close`)."""
        p = CTX.Process(target=target, args=args, daemon=True)
        p.start()
        self.procs.append(p)
        return p

    def close(self) -> None:
        """Stop every host and process."""
        for p, conn, _ in self.hosts:
            try:
                conn.send(("stop",))
                conn.poll(10) and conn.recv()
            except (OSError, EOFError):
                pass
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        for p in self.procs:
            p.join(0.5)
            if p.is_alive():
                p.kill()
                p.join(5)
        self.hosts.clear()
        self.procs.clear()
