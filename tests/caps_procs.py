"""Child-process bodies of tests/handles/test_caps.py (importable by spawn)."""

from __future__ import annotations

import mmap
import os
import resource
import time
from typing import Any

import multihop as mh


def memfd_writer(name: str, core: int, service: str, text: bytes, out: Any) -> None:
    """Bind over multi-hop, write `text` into a fresh memfd, send it; then wait for the peer's
    answer written into the same memory, and report (hops, what the peer wrote)."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    ch = d.bind(service, transport="multihop", timeout=10)
    fd = os.memfd_create("shared-page")
    os.ftruncate(fd, 4096)
    m = mmap.mmap(fd, 4096)
    m[: len(text)] = text
    ch.send(b"here is a page", handles=[fd], give_away=True)
    out.put(("gave", _is_open(fd)))
    assert ch.recv(timeout=20) == b"answered"
    out.put(("done", ch.stats()["hops"], bytes(m[4096 - 16 :]).rstrip(b"\0")))
    ch.close()


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def hoarder(name: str, core: int, service: str, ready: Any) -> None:
    """Export `service`, accept one client, keep room for many handles, never read: killed by the test."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    svc = d.export(service)
    ready.set()
    ch = svc.accept(timeout=20)
    ch.handle_room = 100_000
    time.sleep(60)
    del ch


def starved_receiver(name: str, core: int, service: str, ready: Any, limited: Any, out: Any) -> None:
    """Accept one client with a descriptor table that has room for 2 more descriptors (`limited` is
    set once it has: a bind completes when queued, before this accept); report what arrives (the
    client's many-handle message must be refused, the plain one must come)."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    svc = d.export(service)
    ready.set()
    ch = svc.accept(timeout=20)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # The lowest limit that leaves 2 free descriptor numbers below it, holes in the table counted
    # (a new descriptor takes the lowest free number, and it must be below the limit).
    open_now = {int(x) for x in os.listdir("/proc/self/fd")}
    free, limit = 0, 0
    while free < 2:  # bounded: at most len(open_now) + 2 steps
        free += limit not in open_now
        limit += 1
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    limited.set()
    data, hs = ch.recv_with_handles(timeout=20)
    out.put((data, len(hs)))
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    data, hs = ch.recv_with_handles(timeout=20)
    out.put((data, len(hs)))
    ch.close()


def ordered_sender(name: str, core: int, service: str, transport: str, n: int, every: int) -> None:
    """Send n numbered messages; every `every`-th carries memfds holding its number (one, or two
    for every third of those), the others none."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    ch = d.bind(service, transport=transport, timeout=10)
    for i in range(n):
        body = i.to_bytes(8, "little")
        if i % every == 0:
            k = 2 if (i // every) % 3 == 0 else 1
            fds = []
            for j in range(k):
                fd = os.memfd_create(f"m{i}")
                os.write(fd, body + bytes([j]))
                fds.append(fd)
            ch.send(body, handles=fds, give_away=True, timeout=30)
        else:
            ch.send(body, timeout=30)
    ch.flush(timeout=60)
    ch.close()
