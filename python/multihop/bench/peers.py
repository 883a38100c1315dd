"""Two-process comparison of a multihop channel against multiprocessing.Pipe.

Each case runs a fresh pair of processes: this one (the client, pinned to
the first CPU) and a spawned server (pinned to the second).  The same
workload runs over our channel and over ``multiprocessing.Pipe`` in the same
run, so the ratio is measured, not remembered.  Used by ``multihop demo`` and
``benches/bench_ump_vs_pipe.py``.

Workloads (sizes in bytes):
- ``rtt``: one message there, the same back; median of per-round-trip times;
- ``stream``: one-way, one ``send``/``recv`` per message; messages per second;
- ``records``: one-way, ``send_records``/``recv_records`` of fixed-size rows
  (Pipe does one message per row: it has no batch call);
- ``idle``: CPU used by a receiver blocked in ``recv`` with nothing to read.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import psutil

import multihop as mh

_CTX = mp.get_context("spawn")


@dataclass
class Figure:
    """One measured case: our figure, Pipe's, and their ratio (higher is better for us)."""

    case: str
    unit: str
    ours: float
    pipe: float
    lower_is_better: bool

    @property
    def ratio(self) -> float:
        """How many times better ours is than Pipe's."""
        if self.lower_is_better:
            return self.pipe / self.ours if self.ours else float("inf")
        return self.ours / self.pipe if self.pipe else float("inf")


def _pin(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


# ---- server side (runs in the spawned process) ------------------------------


def _serve_channel(name: str, core: int, cpu: int | None, work: str, n: int, size: int, ready: Any) -> None:
    _pin(cpu)
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(f"bench-{work}")
        ready.set()
        ch = svc.accept(timeout=30)
        if work == "rtt":
            for _ in range(n):
                ch.send(ch.recv(timeout=30))
        elif work == "stream":
            for _ in range(n):
                ch.recv(timeout=30)
            ch.send(b"done")
        elif work == "records":
            got = 0
            while got < n:
                got += len(ch.recv_records(min(4096, n - got), size, timeout=30))
            ch.send(b"done")
        elif work == "idle":
            try:
                ch.recv(timeout=30)
            except mh.ChannelClosed:
                pass
        try:
            ch.recv(timeout=5)  # wait for the client to close
        except (mh.ChannelClosed, mh.Timeout):
            pass


def _serve_pipe(conn: Any, cpu: int | None, work: str, n: int, size: int) -> None:
    _pin(cpu)
    conn.send_bytes(b"ready")
    if work == "rtt":
        for _ in range(n):
            conn.send_bytes(conn.recv_bytes())
    elif work in ("stream", "records"):
        for _ in range(n):
            conn.recv_bytes()
        conn.send_bytes(b"done")


# ---- client side -------------------------------------------------------------


def _rtt_loop(send: Callable[[bytes], None], recv: Callable[[], bytes], n: int, size: int) -> float:
    msg = b"x" * size
    times = np.empty(n, dtype=np.int64)
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        send(msg)
        recv()
        times[i] = clock() - t0
    return float(np.median(times)) / 1000.0  # us


def _stream_loop(send: Callable[[bytes], None], recv_done: Callable[[], bytes], n: int, size: int) -> float:
    msg = b"x" * size
    t0 = time.perf_counter()
    for _ in range(n):
        send(msg)
    recv_done()
    return n / (time.perf_counter() - t0)


class PeerBench:
    """Runs the comparison against a live runtime with cores `cores` (client first)."""

    def __init__(self, runtime: mh.Runtime, client_core: int, server_core: int, transport: str = "ump", window: int = 16) -> None:
        self.rt = runtime
        self.transport = transport
        self.window = window
        self.client_core = client_core
        self.server_core = server_core
        cpus = sorted(os.sched_getaffinity(0))
        self.client_cpu = runtime.cpu_of(client_core)
        self.server_cpu = runtime.cpu_of(server_core) if len(cpus) > 1 else None

    def _channel_case(self, work: str, n: int, size: int, body: Callable[[mh.Channel], float]) -> float:
        ready = _CTX.Event()
        p = _CTX.Process(target=_serve_channel, args=(self.rt.name, self.server_core, self.server_cpu, work, n, size, ready))
        p.start()
        try:
            if not ready.wait(30):
                raise mh.MonitorError("benchmark server did not start")
            old = os.sched_getaffinity(0)
            with self.rt.dispatcher(self.client_core, pin=True) as d:
                try:
                    with d.bind(f"bench-{work}", transport=self.transport, timeout=30, window=self.window) as ch:
                        return body(ch)
                finally:
                    os.sched_setaffinity(0, old)
        finally:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()

    def _pipe_case(self, work: str, n: int, size: int, body: Callable[[Any], float]) -> float:
        a, b = _CTX.Pipe()
        p = _CTX.Process(target=_serve_pipe, args=(b, self.server_cpu, work, n, size))
        p.start()
        old = os.sched_getaffinity(0)
        try:
            _pin(self.client_cpu)
            a.recv_bytes()
            return body(a)
        finally:
            os.sched_setaffinity(0, old)
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()

    def rtt_ours(self, n: int, size: int = 64) -> float:
        """Median round trip over our channel, in microseconds."""
        warm = min(n // 10, 2000)
        return self._channel_case("rtt", n + warm, size, lambda ch: (_rtt_loop(ch.send, ch.recv, warm, size), _rtt_loop(ch.send, ch.recv, n, size))[1])

    def rtt_pipe(self, n: int, size: int = 64) -> float:
        """Median round trip over multiprocessing.Pipe, in microseconds."""
        warm = min(n // 10, 2000)
        return self._pipe_case("rtt", n + warm, size, lambda c: (_rtt_loop(c.send_bytes, c.recv_bytes, warm, size), _rtt_loop(c.send_bytes, c.recv_bytes, n, size))[1])

    def stream_ours(self, n: int, size: int = 64) -> float:
        """One-way messages per second over our channel, per-message send/recv."""
        return self._channel_case("stream", n, size, lambda ch: _stream_loop(ch.send, lambda: ch.recv(timeout=60), n, size))

    def stream_pipe(self, n: int, size: int = 64) -> float:
        """One-way messages per second over multiprocessing.Pipe."""
        return self._pipe_case("stream", n, size, lambda c: _stream_loop(c.send_bytes, c.recv_bytes, n, size))

    def rtt(self, n: int, size: int = 64) -> Figure:
        """Median round trip in microseconds, ours and Pipe's."""
        return Figure(f"round trip {size} B (median)", "us", self.rtt_ours(n, size), self.rtt_pipe(n, size), lower_is_better=True)

    def stream(self, n: int, size: int = 64) -> Figure:
        """One-way messages per second with per-message send/recv, ours and Pipe's."""
        return Figure(f"one-way {size} B send/recv", "msg/s", self.stream_ours(n, size), self.stream_pipe(n, size), lower_is_better=False)

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

        ours = self._channel_case("records", n, size, body)
        pn = max(n // 20, 1000)
        pipe = self._pipe_case("records", pn, size, lambda c: _stream_loop(c.send_bytes, c.recv_bytes, pn, size))
        return Figure(f"one-way {size} B records (batch {batch})", "msg/s", ours, pipe, lower_is_better=False)

    def idle_cpu(self, seconds: float = 2.0) -> float:
        """Percent of one core used by a receiver parked in recv."""
        ready = _CTX.Event()
        p = _CTX.Process(target=_serve_channel, args=(self.rt.name, self.server_core, self.server_cpu, "idle", 0, 0, ready))
        p.start()
        try:
            ready.wait(30)
            with self.rt.dispatcher(self.client_core) as d, d.bind("bench-idle", timeout=30) as ch:
                time.sleep(0.2)  # let it get past the spin phase
                proc = psutil.Process(p.pid)
                c0 = sum(proc.cpu_times()[:2])
                time.sleep(seconds)
                c1 = sum(proc.cpu_times()[:2])
                ch.send(b"wake")
            return 100.0 * (c1 - c0) / seconds
        finally:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()


def format_table(figures: list[Figure]) -> str:
    """A plain-text table of figures with ratios."""
    rows = [("case", "multihop", "Pipe", "unit", "ratio")]
    for f in figures:
        rows.append((f.case, f"{f.ours:,.2f}", f"{f.pipe:,.2f}", f.unit, f"{f.ratio:,.1f}x"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
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
