"""Functions run in child processes by the end-to-end tests (importable by spawn)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np

import multihop as mh

CTX = mp.get_context("spawn")

BLOB = np.random.default_rng(1234).bytes(2 << 20)  # 2 MiB of fixed random bytes


def small_message(i: int, size: int) -> bytes:
    """Message i of the 0-512 byte stream: sequence number then fixed bytes."""
    return (i.to_bytes(8, "little") + BLOB[(i * 7) % 4096 : (i * 7) % 4096 + 512])[:size]


def big_message(i: int, size: int) -> bytes:
    """Message i of the large-message stream."""
    off = (i * 4099) % (len(BLOB) - (1 << 20))
    return i.to_bytes(8, "little") + BLOB[off : off + size - 8] if size >= 8 else i.to_bytes(8, "little")[:size]


def sizes(seed: int, n: int, high: int) -> np.ndarray:
    """Deterministic random sizes in [0, high]."""
    return np.random.default_rng(seed).integers(0, high + 1, size=n)


def echo_server(name: str, core: int, service: str, ready: Any, count: int = -1) -> None:
    """Export `service`, accept one client, echo until it closes."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(service)
        ready.set()
        ch = svc.accept(timeout=30)
        n = 0
        while count < 0 or n < count:
            try:
                ch.send(ch.recv(timeout=30))
            except mh.ChannelClosed:
                return
            n += 1


def stream_sender(name: str, core: int, service: str, ready: Any, kind: str, n: int, seed: int) -> None:
    """Export `service`, accept, send n messages of the given kind, wait for the ack."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(service)
        ready.set()
        ch = svc.accept(timeout=30)
        if kind == "small":
            sz = sizes(seed, n, 512)
            batch = []
            for i in range(n):
                batch.append(small_message(i, int(sz[i])))
                if len(batch) == 1000:
                    assert ch.send_batch(batch, timeout=60) == len(batch)
                    batch = []
            if batch:
                assert ch.send_batch(batch, timeout=60) == len(batch)
        else:
            sz = np.maximum(sizes(seed, n, 1 << 20), 0)
            for i in range(n):
                ch.send(big_message(i, int(sz[i])), timeout=60)
        assert ch.recv(timeout=120) == b"ack"


def sleepy_sender(name: str, core: int, service: str, ready: Any) -> None:
    """Accept, send messages forever (until killed)."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(service)
        ready.set()
        ch = svc.accept(timeout=30)
        i = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                ch.send(i.to_bytes(8, "little"), timeout=1)
            except mh.Timeout:
                pass
            i += 1


def exporter_then_exit(name: str, core: int, service: str, ready: Any, done: Any) -> None:
    """Export a name, signal, wait, then exit (the name must be freed)."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    d.export(service)
    ready.set()
    done.wait(30)
    os._exit(0)


def start_and_abandon(root: str, name: str, q: Any) -> None:
    """Start a runtime and exit without stopping it."""
    os.environ["MULTIHOP_RUNTIME_ROOT"] = root
    rt = mh.Runtime.start(name, cores=[0, 1])
    q.put((str(rt.dir), list(rt.monitor_pids.values())))
    q.close()
    q.join_thread()  # flush before the abrupt exit
    os._exit(0)


def blocked_receiver(name: str, core: int, service: str, ready: Any) -> None:
    """Bind and block in recv() forever; used for the Ctrl-C test."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        ch = d.bind(service, timeout=30)
        ready.set()
        try:
            ch.recv()
        except KeyboardInterrupt:
            os._exit(42)
        os._exit(1)


def spawn(target: Any, *args: Any) -> Any:
    """Start `target(*args)` in a spawned process."""
    p = CTX.Process(target=target, args=args, daemon=True)
    p.start()
    return p
