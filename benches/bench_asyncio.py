"""asyncio through multihop vs the blocking API vs asyncio streams over a Unix socket.

Run: .venv/bin/python benches/bench_asyncio.py [--scale 1.0]

Two processes on two CPUs: this one (core 0, the client) and a peer (core 1)
that serves with the blocking API: an echo for round trips, a sink that
counts a one-way stream and answers ``done``.  The same peer serves the
baseline over a Unix stream socket (``asyncio.open_unix_connection`` on the
client, a blocking socket on the peer).  For each transport (UMP,
multi-hop) the client measures, in the same run:

* round trip of a 64-byte message: ``await send_async`` + ``await recv_async``,
  then the blocking ``send`` + ``recv``, then asyncio streams
  (``write`` + ``drain`` + ``readexactly``);
* one-way throughput of 64-byte messages (``send_async`` in a loop; blocking
  ``send``; streams ``write`` + ``drain``), until the peer says it has them all.

Multi-hop runs with the default credit window (16) and with 64: a window is what
bounds a multi-hop stream here, where a socket has a 208 KiB buffer.

Each figure is the median of 3 rounds; the ratios printed are asyncio over
the blocking API and asyncio over streams.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import statistics
import tempfile
import threading
import time
from typing import Any, Callable

import multihop as mh

SIZE = 64
SERVICE = "bench-aio"


def _sock_serve(conn: socket.socket) -> None:
    """One Unix-socket client: 'E' then echo 64-byte frames; 'S' + count then sink."""
    with conn:
        f = conn.makefile("rb")
        mode = f.read(1)
        if mode == b"E":
            while True:
                m = f.read(SIZE)
                if len(m) < SIZE:
                    return
                conn.sendall(m)
        n = int.from_bytes(f.read(8), "little")
        got = 0
        while got < n * SIZE:
            chunk = f.read1(1 << 16)
            if not chunk:
                return
            got += len(chunk)
        conn.sendall(b"done")


def peer(rt_name: str, path: str, ready: Any) -> None:
    """The peer process: blocking echo / sink on every channel it accepts and every socket client."""
    os.sched_setaffinity(0, {1 % os.cpu_count()})  # type: ignore[operator]
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(path)
    lsock.listen(4)

    def sockets() -> None:
        while True:
            conn, _ = lsock.accept()
            threading.Thread(target=_sock_serve, args=(conn,), daemon=True).start()

    threading.Thread(target=sockets, daemon=True).start()
    rt = mh.Runtime.attach(rt_name)
    d = rt.dispatcher(1)
    svc = d.export(SERVICE)
    ready.set()
    while True:
        ch = svc.accept()
        try:
            mode = ch.recv(timeout=30)
            if mode == b"E":
                while True:
                    ch.send(ch.recv())
            n = int.from_bytes(mode[1:], "little")
            for _ in range(n):
                ch.recv()
            ch.send(b"done")
            ch.recv()  # until the client closes
        except mh.ChannelClosed:
            pass
        finally:
            ch.close()


def median_of(rounds: int, fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(rounds))


def run_blocking(d: mh.Dispatcher, transport: str, window: int, n_rt: int, n_tp: int) -> tuple[float, float]:
    """(round trip us, messages/s) through the blocking API."""
    msg = b"x" * SIZE

    def rtt() -> float:
        ch = d.bind(SERVICE, transport=transport, window=window)
        ch.send(b"E")
        for _ in range(200):
            ch.send(msg)
            ch.recv(timeout=10)
        t = time.perf_counter()
        for _ in range(n_rt):
            ch.send(msg)
            ch.recv(timeout=10)
        dt = time.perf_counter() - t
        ch.close()
        return dt / n_rt * 1e6

    def tput() -> float:
        ch = d.bind(SERVICE, transport=transport, window=window)
        ch.send(b"S" + n_tp.to_bytes(8, "little"))
        t = time.perf_counter()
        for _ in range(n_tp):
            ch.send(msg, timeout=10)
        assert ch.recv(timeout=30) == b"done"
        dt = time.perf_counter() - t
        ch.close()
        return n_tp / dt

    return median_of(3, rtt), median_of(3, tput)


async def run_async(d: mh.Dispatcher, transport: str, window: int, n_rt: int, n_tp: int) -> tuple[float, float]:
    """(round trip us, messages/s) through asyncio (send_async / recv_async)."""
    msg = b"x" * SIZE
    rtts, tputs = [], []
    for _ in range(3):
        ch = await d.bind_async(SERVICE, transport=transport, window=window)
        await ch.send_async(b"E")
        for _ in range(200):
            await ch.send_async(msg)
            await asyncio.wait_for(ch.recv_async(), 10)
        t = time.perf_counter()
        for _ in range(n_rt):
            await ch.send_async(msg)
            await ch.recv_async(timeout=10)
        rtts.append((time.perf_counter() - t) / n_rt * 1e6)
        ch.close()
        ch = await d.bind_async(SERVICE, transport=transport, window=window)
        await ch.send_async(b"S" + n_tp.to_bytes(8, "little"))
        t = time.perf_counter()
        for _ in range(n_tp):
            await ch.send_async(msg, timeout=10)
        assert await ch.recv_async(timeout=30) == b"done"
        tputs.append(n_tp / (time.perf_counter() - t))
        ch.close()
    return statistics.median(rtts), statistics.median(tputs)


async def run_streams(path: str, n_rt: int, n_tp: int) -> tuple[float, float]:
    """(round trip us, messages/s) through asyncio streams over a Unix socket."""
    msg = b"x" * SIZE
    rtts, tputs = [], []
    for _ in range(3):
        r, w = await asyncio.open_unix_connection(path)
        w.write(b"E")
        for _ in range(200):
            w.write(msg)
            await w.drain()
            await r.readexactly(SIZE)
        t = time.perf_counter()
        for _ in range(n_rt):
            w.write(msg)
            await w.drain()
            await r.readexactly(SIZE)
        rtts.append((time.perf_counter() - t) / n_rt * 1e6)
        w.close()
        await w.wait_closed()
        r, w = await asyncio.open_unix_connection(path)
        w.write(b"S" + n_tp.to_bytes(8, "little"))
        t = time.perf_counter()
        for _ in range(n_tp):
            w.write(msg)
            await w.drain()
        assert await asyncio.wait_for(r.readexactly(4), 30) == b"done"
        tputs.append(n_tp / (time.perf_counter() - t))
        w.close()
        await w.wait_closed()
    return statistics.median(rtts), statistics.median(tputs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the message counts")
    a = ap.parse_args()
    n_rt, n_tp = max(100, int(5000 * a.scale)), max(1000, int(100_000 * a.scale))
    os.sched_setaffinity(0, {0})
    with tempfile.TemporaryDirectory() as tmp, mh.Runtime.start(f"bench-aio-{os.getpid()}", cores=[0, 1]) as rt:
        path = os.path.join(tmp, "peer.sock")
        ctx = mp.get_context("spawn")
        ready = ctx.Event()
        p = ctx.Process(target=peer, args=(rt.name, path, ready), daemon=True)
        p.start()
        try:
            if not ready.wait(30):
                raise SystemExit("the peer did not start")
            d = rt.dispatcher(0)
            s_rt, s_tp = asyncio.run(run_streams(path, n_rt, n_tp))
            rows = []
            for transport, window in (("ump", 16), ("multihop", 16), ("multihop", 64)):
                label = transport if transport == "ump" else f"{transport} w{window}"
                print(f"running: {label}", flush=True)
                a_rt, a_tp = asyncio.run(run_async(d, transport, window, n_rt, n_tp))
                b_rt, b_tp = run_blocking(d, transport, window, n_rt, n_tp)
                rows.append((label, a_rt, b_rt, a_tp, b_tp))
            bell = mh._core.AsyncBell().kind
        finally:
            p.kill()
            p.join(10)
    print(f"\n64-byte messages, client on CPU 0, blocking peer on CPU 1; doorbell descriptor: {bell}; medians of 3")
    print(f"asyncio streams over a Unix socket: round trip {s_rt:.1f} us, one-way {s_tp / 1e3:.0f} k msg/s\n")
    print(
        f"{'transport':13} {'rtt asyncio':>12} {'rtt blocking':>13} {'asyncio/blk':>12} {'streams/asyncio':>16}"
        f" {'tput asyncio':>13} {'tput blocking':>14} {'asyncio/blk':>12} {'asyncio/streams':>16}"
    )
    for transport, a_rt, b_rt, a_tp, b_tp in rows:
        print(
            f"{transport:13} {a_rt:10.1f}us {b_rt:11.1f}us {a_rt / b_rt:11.2f}x {s_rt / a_rt:15.2f}x"
            f" {a_tp / 1e3:9.0f}k/s {b_tp / 1e3:10.0f}k/s {a_tp / b_tp:11.2f}x {a_tp / s_tp:15.2f}x"
        )


if __name__ == "__main__":
    main()
