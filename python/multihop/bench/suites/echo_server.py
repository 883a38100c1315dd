"""A spawned process that serves ``<prefix>-<core>`` on cores of a runtime (one thread per core).

Each core's thread accepts clients; every accepted channel gets an echo thread
pinned to that core's CPU, which echoes every message until the client closes.  The
suites that measure many core pairs (``routing``, ``fanout``, ``resources``)
start one of these instead of a process per pair.  It stops when ``stop`` is
set or after ``lifetime`` seconds, whichever is first.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import multihop as mh
from multihop.bench.peers import spawned

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess
    from multiprocessing.synchronize import Event

_CTX = mp.get_context("spawn")


SINK = b"s"
"""Messages starting with this byte are consumed silently (one-way streams); all others are echoed."""


def service_name(core: int, prefix: str = "echo") -> str:
    """The name an echo server with `prefix` exports on `core`."""
    return f"{prefix}-{core}"


def _echo(ch: mh.Channel, cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})  # this thread only
    try:
        while True:
            m = ch.recv(timeout=60)
            if m[:1] != SINK:
                ch.send(m, timeout=60)
    except mh.MultihopError:
        pass  # closed by the client (or the runtime went away)
    finally:
        ch.close()


def _serve(rt: mh.Runtime, d: mh.Dispatcher, core: int, prefix: str, ready: threading.Barrier, stop: Event) -> None:
    """Accept clients on `core`; each gets its own echo thread, so accepting never waits on echoing."""
    cpu = rt.cpu_of(core) if len(os.sched_getaffinity(0)) > 1 else None
    svc = d.export(service_name(core, prefix))
    ready.wait()
    while not stop.is_set():
        try:
            ch = svc.accept(timeout=0.5)
        except mh.Timeout:
            continue
        except mh.MultihopError:
            return  # the runtime went away
        threading.Thread(target=_echo, args=(ch, cpu), daemon=True).start()


def _main(name: str, cores: list[int], prefix: str, ready: Event, stop: Event, lifetime: float) -> None:
    rt = mh.Runtime.attach(name)
    dispatchers = [rt.dispatcher(c) for c in cores]
    barrier = threading.Barrier(len(cores) + 1)
    threads = [threading.Thread(target=_serve, args=(rt, d, c, prefix, barrier, stop), daemon=True) for d, c in zip(dispatchers, cores, strict=True)]
    for t in threads:
        t.start()
    barrier.wait(timeout=30)
    ready.set()
    stop.wait(lifetime)
    stop.set()
    for t in threads:
        t.join(2)


@contextlib.contextmanager
def echo_server(rt: mh.Runtime, cores: list[int] | None = None, prefix: str = "echo", lifetime: float = 3600.0) -> Iterator[SpawnProcess]:
    """Run an echo server process for runtime `rt` on `cores` (default: all) during the block.

    It exports ``service_name(core, prefix)`` on each of its cores (give
    servers sharing a core different prefixes) and yields the process.  It is
    stopped when the block ends, and killed at once if the block raises.
    """
    ready, stop = _CTX.Event(), _CTX.Event()
    chosen = list(rt.cores if cores is None else cores)
    with spawned(_main, rt.name, chosen, prefix, ready, stop, lifetime, grace=10) as p:
        if not ready.wait(60):
            raise mh.MonitorError("the echo server did not start")
        try:
            yield p
        finally:
            stop.set()
