"""Peer processes of the asyncio tests (importable by spawn); they use the blocking API."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import multihop as mh


def many_peer(name: str, core: int, service: str, k: int, bound: Any, go: Any, result: Any) -> None:
    """Bind ``k`` channels to ``service`` (UMP and multi-hop alternately), set ``bound``; once ``go``
    is set, send each channel its index in a random order, then check each echoes it back; put
    the number of correct echoes (or the error) in ``result``."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        with ThreadPoolExecutor(16) as pool:  # binds in parallel: each is a few control-plane hops
            chans = list(pool.map(lambda i: d.bind(service, transport="ump" if i % 2 == 0 else "multihop", timeout=60), range(k)))
        bound.set()
        if not go.wait(60):
            result.put("no go")
            return
        order = list(range(k))
        random.Random(7).shuffle(order)
        try:
            for i in order:
                chans[i].send(i.to_bytes(4, "little"))
            good = sum(1 for i in order if chans[i].recv(timeout=30) == i.to_bytes(4, "little"))
            result.put(good)
        except Exception as e:  # reported to the test, which fails on it
            result.put(repr(e))
        for ch in chans:
            ch.close()


def bind_and_hold(name: str, core: int, service: str, transport: str, ready: Any) -> None:
    """Bind to ``service``, set ``ready``, then wait (the test SIGKILLs this process)."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        ch = d.bind(service, transport=transport, timeout=30)
        ready.set()
        try:
            ch.recv(timeout=60)
        except mh.ChannelClosed:
            pass


def gated_reader(name: str, core: int, service: str, ready: Any, gate: Any, result: Any) -> None:
    """Export ``service``, accept one client, read nothing until ``gate``; then read until the
    message ``END`` and put what came before it in ``result`` (joined)."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(service)
        ready.set()
        ch = svc.accept(timeout=30)
        if not gate.wait(60):
            result.put(b"no gate")
            return
        got = []
        for _ in range(1_000_000):
            m = ch.recv(timeout=30)
            if m == b"END":
                break
            got.append(m)
        result.put(b"".join(got))
        try:
            ch.recv(timeout=30)  # until the client closes
        except mh.ChannelClosed:
            pass


def binder(name: str, core: int, service: str, transports: list[str], result: Any) -> None:
    """Bind to ``service`` once per transport (blocking), send ``hello <transport>`` on each,
    wait for the reply ``ok``; put "done" (or the error) in ``result``."""
    rt = mh.Runtime.attach(name)
    try:
        with rt.dispatcher(core) as d:
            for t in transports:
                ch = d.bind(service, transport=t, timeout=30)
                ch.send(b"hello " + t.encode())
                assert ch.recv(timeout=30) == b"ok"
                ch.close()
        result.put("done")
    except Exception as e:
        result.put(repr(e))


def slow_acceptor(name: str, core: int, service: str, ready: Any, gate: Any, result: Any) -> None:
    """Export ``service`` whose ``on_connect`` holds every client until ``gate``; then accept the
    one client and put how its channel ended in ``result`` ("closed" when the client gave up)."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        asked = threading.Event()

        def on_connect(info: dict[str, Any]) -> bool:
            asked.set()
            return bool(gate.wait(60))

        svc = d.export(service, on_connect=on_connect)
        ready.set()
        if not asked.wait(60):
            result.put("no client")
            return
        ch = svc.accept(timeout=60)
        try:
            got = ch.recv(timeout=30)
            result.put(f"message {got!r}")
        except mh.ChannelClosed:
            result.put("closed")
        except mh.Timeout:
            result.put("still open")


def kv_serve(name: str, core: int, service: str, binding_py: str, ready: Any) -> None:
    """Serve the kvstore interface (blocking ``serve``) to one client until it closes;
    an overwriting put sends ``invalidate(key)`` before its response."""
    from pathlib import Path

    from generated import import_file

    mod = import_file(Path(binding_py))
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(service)
        ready.set()
        b = mod.KvstoreBinding(svc.accept(timeout=30))
        data: dict[str, bytes] = {}

        class Kv:
            def put(self, key: str, value: bytes, overwrite: bool) -> Any:
                if key in data:
                    if not overwrite:
                        return mod.status.KV_EXISTS
                    b.tx.invalidate(key=key)
                data[key] = bytes(value)
                return mod.status.KV_OK

            def get(self, key: str) -> tuple[Any, bytes]:
                if key not in data:
                    return mod.status.KV_NOT_FOUND, b""
                return mod.status.KV_OK, data[key]

        for _ in range(100_000):
            try:
                b.serve(Kv(), timeout=30)
            except mh.ChannelClosed:
                return
