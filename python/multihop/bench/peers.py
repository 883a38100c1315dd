"""Two-process comparison of a multihop channel against other IPC mechanisms ("peers").

Each case runs a fresh pair of processes: this one (the client, pinned to
the CPU of the client core) and a spawned server (pinned to the CPU of the
server core).  The same workload runs over our channel and over a peer
mechanism in the same run, so the ratio is measured, not remembered.  Used by
``multihop demo``, ``multihop bench`` and the scripts in ``benches/``.

Peers (:data:`PEERS`): ``pipe`` (``multiprocessing.Pipe``, ``send_bytes`` /
``recv_bytes``), ``queue`` (two ``multiprocessing.Queue``, one per
direction) and ``zmq`` (a ZeroMQ ``PAIR`` socket over ``ipc://``, only when
pyzmq is installed: the ``zmq`` extra; see :func:`available_peers`).

Workloads (sizes in bytes):
- ``rtt``: one message there, the same back; median of per-round-trip times;
- ``stream``: one-way, one ``send``/``recv`` per message; messages per second;
- ``records``: one-way, ``send_records``/``recv_records`` of fixed-size rows
  (the peers do one message per row: they have no batch call);
- ``idle``: CPU used by a receiver blocked in ``recv`` with nothing to read.
"""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Callable, TypeAlias, TypeVar

import numpy as np
import psutil

import multihop as mh
from multihop.defaults import DEFAULT_WINDOW

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

_CTX = mp.get_context("spawn")

PEERS = ("pipe", "queue", "zmq")
"""Peer mechanisms the benchmarks can compare against (``zmq`` needs pyzmq)."""

T = TypeVar("T")

Send = Callable[[bytes], object]  # what it returns is not used
Recv = Callable[[], bytes]
_DONE = b"done"


def available_peers() -> tuple[str, ...]:
    """The peers usable here: ``pipe`` and ``queue`` always, ``zmq`` when pyzmq imports."""
    return tuple(p for p in PEERS if p != "zmq" or importlib.util.find_spec("zmq") is not None)


@dataclass
class Figure:
    """One measured case: our figure, the peer's, and their ratio (higher is better for us)."""

    case: str
    unit: str
    ours: float
    pipe: float
    lower_is_better: bool

    @property
    def ratio(self) -> float:
        """How many times better ours is than the peer's."""
        if self.lower_is_better:
            return self.pipe / self.ours if self.ours else float("inf")
        return self.ours / self.pipe if self.pipe else float("inf")


def _pin(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def _work(send: Send, recv: Recv, work: str, n: int) -> None:
    """The server's side of `work`: echo n messages (rtt) or take n and answer done (stream)."""
    if work == "rtt":
        for _ in range(n):
            send(recv())
    elif work in ("stream", "records"):
        for _ in range(n):
            recv()
        send(_DONE)


# ---- server side (runs in the spawned process) ------------------------------


def _serve_channel(name: str, core: int, cpu: int | None, work: str, n: int, size: int, ready: Event) -> None:
    _pin(cpu)
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(f"bench-{work}")
        ready.set()
        ch = svc.accept(timeout=30)
        if work == "records":
            got = 0
            while got < n:
                got += len(ch.recv_records(min(4096, n - got), size, timeout=30))
            ch.send(_DONE)
        elif work == "idle":
            try:
                ch.recv(timeout=30)
            except mh.ChannelClosed:
                pass
        else:
            _work(ch.send, lambda: ch.recv(timeout=30), work, n)
        try:
            ch.recv(timeout=5)  # wait for the client to close
        except (mh.ChannelClosed, mh.Timeout):
            pass


Endpoint: TypeAlias = "Connection[Any, Any] | tuple[Queue[bytes], Queue[bytes]] | str"
"""What a peer server opens: its end of the Pipe, the (to client, from client) queues, or the ZeroMQ address."""


def _serve_peer(peer: str, endpoint: Endpoint, cpu: int | None, work: str, n: int) -> None:
    _pin(cpu)
    if peer == "pipe":
        assert isinstance(endpoint, Connection), endpoint
        endpoint.send_bytes(b"ready")
        _work(endpoint.send_bytes, endpoint.recv_bytes, work, n)
    elif peer == "queue":
        assert isinstance(endpoint, tuple), endpoint
        to_client, from_client = endpoint
        to_client.put(b"ready")
        _work(to_client.put, from_client.get, work, n)
    elif peer == "zmq":
        import zmq

        ctx = zmq.Context()
        sock = ctx.socket(zmq.PAIR)
        sock.setsockopt(zmq.RCVTIMEO, 60_000)
        assert isinstance(endpoint, str), endpoint
        try:
            sock.bind(endpoint)
            sock.send(b"ready")
            _work(sock.send, sock.recv, work, n)
            sock.recv()  # the client's goodbye: it has everything before we close
        finally:
            sock.close(linger=1000)
            ctx.term()


# ---- client side -------------------------------------------------------------


def _rtt_loop(send: Send, recv: Recv, n: int, size: int) -> float:
    msg = b"x" * size
    times = np.empty(n, dtype=np.int64)
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        send(msg)
        recv()
        times[i] = clock() - t0
    return float(np.median(times)) / 1000.0  # us


def _stream_loop(send: Send, recv_done: Recv, n: int, size: int) -> float:
    msg = b"x" * size
    t0 = time.perf_counter()
    for _ in range(n):
        send(msg)
    recv_done()
    return n / (time.perf_counter() - t0)


def _close_queues(queues: list[Queue[bytes]]) -> None:
    """Close multiprocessing queues so that interpreter exit never waits on them.

    A queue's feeder thread flushes what was put into it when the process
    exits; if the reader is gone (killed after Ctrl-C) that flush blocks
    forever.  Once a case is over (finished or interrupted) nobody reads the
    queues any more, so whatever is still unsent is dropped.
    """
    for q in queues:
        q.cancel_join_thread()
        q.close()


def _ignoring_sigint(target: Callable[..., None], *args: Any) -> None:
    """Run a spawned server's body with Ctrl-C ignored: its parent decides when it stops.

    The process starts with SIGINT blocked (see :func:`spawned`): a Ctrl-C
    that came while it was starting is dropped here, not raised in its imports.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    target(*args)


@contextlib.contextmanager
def spawned(target: Callable[..., None], *args: Any, grace: float = 30.0) -> Iterator[SpawnProcess]:
    """Run `target(*args)` in a spawned process (Ctrl-C ignored there) for the block.

    The process is joined (killed after `grace` seconds) when the block ends
    normally, and killed at once when it raises (Ctrl-C included), so an
    interrupted benchmark leaves nothing behind and does not wait.  It is
    started with SIGINT blocked (the mask is inherited), so a Ctrl-C sent to
    the whole process group while it boots does not print a traceback there;
    here the Ctrl-C is delivered once the start is over.
    """
    p = _CTX.Process(target=_ignoring_sigint, args=(target, *args), daemon=True)
    resource_tracker.ensure_running()  # first: launching it unblocks SIGINT again
    try:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            p.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        yield p
    except BaseException:
        if p.pid is not None:
            p.kill()
            p.join()
        raise
    p.join(grace)
    if p.is_alive():
        p.kill()
        p.join()


class PeerBench:
    """Runs the comparison against a live runtime: client on `client_core`, server on `server_core`."""

    def __init__(self, runtime: mh.Runtime, client_core: int, server_core: int, transport: str = "ump", window: int = DEFAULT_WINDOW) -> None:
        self.rt = runtime
        self.transport = transport
        self.window = window
        self.client_core = client_core
        self.server_core = server_core
        cpus = sorted(os.sched_getaffinity(0))
        self.client_cpu = runtime.cpu_of(client_core)
        self.server_cpu = runtime.cpu_of(server_core) if len(cpus) > 1 else None

    def channel_case(self, work: str, n: int, size: int, body: Callable[[mh.Channel], T]) -> T:
        """Run `body(channel)` against a spawned server doing `work` over our transport; its result."""
        ready = _CTX.Event()
        with spawned(_serve_channel, self.rt.name, self.server_core, self.server_cpu, work, n, size, ready):
            if not ready.wait(30):
                raise mh.MonitorError("benchmark server did not start")
            old = os.sched_getaffinity(0)
            # try/finally rather than `with`: the extension's __exit__ is typed `-> bool` (may swallow the
            # exception, so mypy saw a way to fall off the end); it never does, and this says so
            d = self.rt.dispatcher(self.client_core, pin=True)
            try:
                ch = d.bind(f"bench-{work}", transport=self.transport, timeout=30, window=self.window)
                try:
                    return body(ch)
                finally:
                    ch.close()
            finally:
                os.sched_setaffinity(0, old)
                d.detach()

    def peer_case(self, peer: str, work: str, n: int, body: Callable[[Send, Recv], T]) -> T:
        """Run `body(send, recv)` against a spawned server doing `work` over `peer`; its result.

        Raises:
            ValueError: `peer` is unknown, or not available here (zmq without pyzmq).
        """
        if peer not in available_peers():
            raise ValueError(f"peer {peer!r} is not available; available: {', '.join(available_peers())}")
        tmp = None
        old = os.sched_getaffinity(0)
        zctx = sock = None
        pipes: list[Connection[Any, Any]] = []
        queues: list[Queue[bytes]] = []
        send: Send
        recv: Recv
        endpoint: Endpoint
        if peer == "pipe":
            mine, theirs = _CTX.Pipe()
            pipes = [mine, theirs]
            send, recv, endpoint = mine.send_bytes, mine.recv_bytes, theirs
        elif peer == "queue":
            to_server, to_client = _CTX.Queue(), _CTX.Queue()
            queues = [to_server, to_client]
            send, recv, endpoint = to_server.put, to_client.get, (to_client, to_server)
        else:
            import zmq

            tmp = tempfile.mkdtemp(prefix="multihop-zmq-")
            endpoint = f"ipc://{tmp}/peer"
            zctx = zmq.Context()
            sock = zctx.socket(zmq.PAIR)
            sock.connect(endpoint)
            sock.setsockopt(zmq.RCVTIMEO, 60_000)
            send, recv = sock.send, sock.recv
        try:
            with spawned(_serve_peer, peer, endpoint, self.server_cpu, work, n):
                _pin(self.client_cpu)
                if recv() != b"ready":
                    raise mh.ProtocolError(f"{peer} benchmark server sent something else than ready")
                result = body(send, recv)
                if sock is not None:
                    sock.send(b"bye")
            return result
        finally:
            os.sched_setaffinity(0, old)
            _close_queues(queues)
            for end in pipes:
                end.close()
            if sock is not None:
                sock.close(linger=0)
            if zctx is not None:
                zctx.term()
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def rtt_ours(self, n: int, size: int = 64) -> float:
        """Median round trip over our channel, in microseconds."""
        warm = min(n // 10, 2000)
        return self.channel_case("rtt", n + warm, size, lambda ch: (_rtt_loop(ch.send, ch.recv, warm, size), _rtt_loop(ch.send, ch.recv, n, size))[1])

    def rtt_peer(self, n: int, size: int = 64, peer: str = "pipe") -> float:
        """Median round trip over `peer` (default multiprocessing.Pipe), in microseconds."""
        warm = min(n // 10, 2000)
        return self.peer_case(peer, "rtt", n + warm, lambda s, r: (_rtt_loop(s, r, warm, size), _rtt_loop(s, r, n, size))[1])

    def stream_ours(self, n: int, size: int = 64) -> float:
        """One-way messages per second over our channel, per-message send/recv."""
        return self.channel_case("stream", n, size, lambda ch: _stream_loop(ch.send, lambda: ch.recv(timeout=60), n, size))

    def stream_peer(self, n: int, size: int = 64, peer: str = "pipe") -> float:
        """One-way messages per second over `peer` (default multiprocessing.Pipe)."""
        return self.peer_case(peer, "stream", n, lambda s, r: _stream_loop(s, r, n, size))

    def rtt(self, n: int, size: int = 64) -> Figure:
        """Median round trip in microseconds, ours and Pipe's."""
        return Figure(f"round trip {size} B (median)", "us", self.rtt_ours(n, size), self.rtt_peer(n, size), lower_is_better=True)

    def stream(self, n: int, size: int = 64) -> Figure:
        """One-way messages per second with per-message send/recv, ours and Pipe's."""
        return Figure(f"one-way {size} B send/recv", "msg/s", self.stream_ours(n, size), self.stream_peer(n, size), lower_is_better=False)

    def records(self, n: int, size: int = 64, batch: int = 4096) -> Figure:
        """One-way rows per second with send_records/recv_records (Pipe: per message)."""
        rows = np.zeros((batch, size), dtype=np.uint8)

        def body(ch: mh.Channel) -> float:
            t0 = time.perf_counter()
            sent = 0
            while sent < n:
                k = min(batch, n - sent)
                sent += ch.send_records(rows[:k], timeout=60)
            ch.recv(timeout=60)
            return n / (time.perf_counter() - t0)

        ours = self.channel_case("records", n, size, body)
        pipe = self.stream_peer(max(n // 20, 1000), size)
        return Figure(f"one-way {size} B records (batch {batch})", "msg/s", ours, pipe, lower_is_better=False)

    def idle_cpu(self, seconds: float = 2.0) -> float:
        """Percent of one core used by a receiver parked in recv."""
        ready = _CTX.Event()
        with spawned(_serve_channel, self.rt.name, self.server_core, self.server_cpu, "idle", 0, 0, ready) as p:
            ready.wait(30)
            with self.rt.dispatcher(self.client_core) as d, d.bind("bench-idle", timeout=30) as ch:
                time.sleep(0.2)  # let it get past the spin phase
                proc = psutil.Process(p.pid)
                c0 = sum(proc.cpu_times()[:2])
                time.sleep(seconds)
                c1 = sum(proc.cpu_times()[:2])
                ch.send(b"wake")
        return 100.0 * (c1 - c0) / seconds


def format_table(figures: list[Figure]) -> str:
    """A plain-text table of figures with ratios."""
    rows = [("case", "multihop", "Pipe", "unit", "ratio")]
    for f in figures:
        rows.append((f.case, f"{f.ours:,.2f}", f"{f.pipe:,.2f}", f.unit, f"{f.ratio:,.1f}x"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run(runtime: mh.Runtime, scale: float = 1.0, progress: Callable[[str], None] | None = None) -> list[Figure]:
    """Run every case at `scale` (1.0: the full benchmark) and return the figures."""
    cores = runtime.cores
    client, server = cores[0], cores[1 % len(cores)]
    b = PeerBench(runtime, client, server)
    say = progress or (lambda s: None)
    figs = []
    say("round trip 64 B")
    figs.append(b.rtt(int(50_000 * scale), 64))
    say("one-way 64 B")
    figs.append(b.stream(int(500_000 * scale), 64))
    say("records 64 B")
    figs.append(b.records(int(5_000_000 * scale), 64))
    say("one-way 4 KiB")
    figs.append(b.stream(int(200_000 * scale), 4096))
    return figs


def median(xs: list[float]) -> float:
    """Median of a non-empty list."""
    return statistics.median(xs)
