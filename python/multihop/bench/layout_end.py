"""One end of a layout case: ``python -m multihop.bench.layout_end ...`` (see :mod:`multihop.bench.layouts`).

A server or a client of one benchmark case, in a process of its own whose
place in the process tree (session, process group, parent) the caller chose.
It reports on the file descriptor ``--report`` (inherited): ``pid N`` first
(a daemon is not its starter's child), ``ready`` once a
server has exported (or, for a pipe, once it is listening), then one JSON line
with the client's figure (and, for ``rtt``, each timed round trip's
``send_ns`` / ``recv_ns`` on CLOCK_MONOTONIC, the first tenth left out). Workloads: ``rtt`` (median round trip, us),
``stream`` (one-way, one ``send`` per message, msg/s) and ``batch`` (one-way,
``send_batch`` of 16, msg/s). Transports: ``multihop``, ``ump`` and ``pipe``
(a ``multiprocessing`` connection over an inherited socket pair, the
baseline: no runtime on its path).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

import numpy as np

import multihop as mh
from multihop.defaults import DEFAULT_WINDOW

BATCH = 16
_DONE = b"done"


def _report(fd: int, line: str) -> None:
    os.write(fd, (line + "\n").encode())


_SAMPLES: dict[str, list[int]] = {}


def _rtt(send: Callable[[bytes], Any], recv: Callable[[], bytes], n: int, size: int) -> float:
    msg = b"x" * size
    t_send = np.empty(n, dtype=np.int64)
    t_recv = np.empty(n, dtype=np.int64)
    clock = time.monotonic_ns  # system-wide: the bench records these times as a trace
    for i in range(n):
        t_send[i] = clock()
        send(msg)
        recv()
        t_recv[i] = clock()
    warm = n // 10  # the first tenth warms up
    _SAMPLES["send_ns"], _SAMPLES["recv_ns"] = t_send[warm:].tolist(), t_recv[warm:].tolist()
    return float(np.median(t_recv[warm:] - t_send[warm:])) / 1000.0


def _client(a: argparse.Namespace, send: Callable[[bytes], Any], recv: Callable[[], bytes], send_batch: Callable[[list[bytes]], int] | None) -> float:
    n: int = a.n
    size: int = a.size
    if a.work == "rtt":
        return _rtt(send, recv, n, size)
    msg = b"x" * size
    t0 = time.perf_counter()
    if a.work == "batch" and send_batch is not None:
        msgs = [msg] * BATCH
        sent = 0
        while sent < n:
            sent += send_batch(msgs[: n - sent])
    else:
        for _ in range(n):
            send(msg)
    if recv() != _DONE:
        raise mh.ProtocolError("layout server answered something else than done")
    return n / (time.perf_counter() - t0)


def _server(a: argparse.Namespace, send: Callable[[bytes], Any], recv: Callable[[], bytes], recv_batch: Callable[[], list[bytes]] | None) -> None:
    if a.work == "rtt":
        for _ in range(a.n):
            send(recv())
        return
    got = 0
    while got < a.n:
        if recv_batch is not None:
            got += len(recv_batch())
        else:
            recv()
            got += 1
    send(_DONE)


def _run_pipe(a: argparse.Namespace) -> None:
    conn = Connection(a.pipe_fd)
    if a.role == "server":
        _report(a.report, "ready")
        _server(a, conn.send_bytes, conn.recv_bytes, None)
        conn.recv_bytes()  # the client's goodbye
    else:
        value = _client(a, conn.send_bytes, conn.recv_bytes, None)
        conn.send_bytes(b"bye")
        _report(a.report, json.dumps({"value": value, **_SAMPLES}))
    conn.close()


def _run_channel(a: argparse.Namespace) -> None:
    rt = mh.Runtime.attach(a.runtime)
    with rt.dispatcher(a.core, pin=True) as d:
        if a.role == "server":
            svc = d.export(a.service)
            _report(a.report, "ready")
            ch = svc.accept(timeout=60)
            _server(a, ch.send, lambda: ch.recv(timeout=60), lambda: ch.recv_batch(4096, timeout=60))
            try:
                ch.recv(timeout=10)  # the client closes once it has its figure
            except (mh.ChannelClosed, mh.Timeout):
                pass
        else:
            with d.bind(a.service, transport=a.transport, window=a.window, timeout=60) as ch:
                value = _client(a, ch.send, lambda: ch.recv(timeout=60), lambda m: ch.send_batch(m, timeout=60))
            _report(a.report, json.dumps({"value": value, **_SAMPLES}))


def main(argv: list[str] | None = None) -> None:
    """Run one end of a layout case (arguments: see ``--help``)."""
    ap = argparse.ArgumentParser(prog="python -m multihop.bench.layout_end")
    ap.add_argument("--role", choices=("server", "client"), required=True)
    ap.add_argument("--transport", choices=("multihop", "ump", "pipe"), required=True)
    ap.add_argument("--work", choices=("rtt", "stream", "batch"), required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    ap.add_argument("--report", type=int, required=True, help="inherited descriptor for ready and the result")
    ap.add_argument("--runtime", default="")
    ap.add_argument("--core", type=int, default=0)
    ap.add_argument("--cpu", type=int, default=-1, help="pin to this CPU (pipe cases; channels pin to their core's)")
    ap.add_argument("--service", default="layout")
    ap.add_argument("--pipe-fd", type=int, default=-1)
    a = ap.parse_args(argv)
    _report(a.report, f"pid {os.getpid()}")
    if a.cpu >= 0:
        os.sched_setaffinity(0, {a.cpu})
    try:
        if a.transport == "pipe":
            _run_pipe(a)
        else:
            _run_channel(a)
    except BaseException as e:
        _report(a.report, json.dumps({"error": f"{type(e).__name__}: {e}"}))
        raise


if __name__ == "__main__":
    main()
