"""Member processes of the live group tests (spawned; importable by the spawn start method)."""

from __future__ import annotations

import struct
import time
from typing import Any

import multihop as mh

_ID = struct.Struct("<II")


def payload(node: int, i: int, size: int = 8) -> bytes:
    """A message naming its sender and number, padded to ``size`` bytes."""
    return _ID.pack(node, i) + bytes(max(0, size - _ID.size))


def msg_id(data: bytes) -> tuple[int, int]:
    """The (sender node, number) a :func:`payload` carries."""
    node, i = _ID.unpack_from(data)
    return node, i


def wait_view(g: Any, size: int, timeout: float = 60) -> None:
    """Pump ``g`` until its installed view has ``size`` members (deliveries stay queued for recv)."""
    deadline = time.monotonic() + timeout
    while len(g.view.nodes) < size:
        if time.monotonic() > deadline:
            raise TimeoutError(f"view of {len(g.view.nodes)} members, not {size}, after {timeout} s")
        g._ep.pump(0.01)


def member(
    name: str, core: int, group: str, n_send: int, expect: int, q: Any, go: Any, finish: Any, unicast_every: int = 0, size: int = 8, members: int = 6
) -> None:
    """Join ``group``, wait for ``go``, send ``n_send`` broadcasts (and a unicast to the next node every
    ``unicast_every``) while delivering, until ``expect`` deliveries; report the event history; leave on ``finish``.

    Reported: ("joined", core, node), then ("done", core, node, events, view_changes), events being
    ("send", id, dest, recipients) and ("deliver", id, dest) in this process's order.
    """
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        views: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []
        g = d.join(group, on_view=lambda e: views.append((e.view.view_id, e.left, e.died)), timeout=60)
        q.put(("joined", core, g.node))
        if not go.wait(120):
            return
        wait_view(g, members)
        events: list[tuple[Any, ...]] = []
        sent = got = 0
        deadline = time.monotonic() + 240
        nodes = g.view.nodes
        while (sent < n_send or got < expect) and time.monotonic() < deadline:
            if sent < n_send:
                sent += 1
                dest = g.broadcast
                if unicast_every and sent % unicast_every == 0:
                    dest = nodes[(nodes.index(g.node) + 1) % len(nodes)]
                recipients = g.view.destinations(dest)
                events.append(("send", (g.node, sent), dest, recipients))
                g.send(dest, payload(g.node, sent, size), timeout=60)
            while got < expect:
                dl = g.try_recv() if sent < n_send else g.recv(timeout=60)
                if dl is None:
                    break
                events.append(("deliver", msg_id(dl.payload), dl.dest))
                got += 1
        q.put(("done", core, g.node, events, views))
        finish.wait(120)
        node = g.node
        d.leave(group, timeout=60)
        q.put(("left", core, node))


def stoppable_receiver(name: str, core: int, group: str, q: Any, finish: Any, expect: int = 0) -> None:
    """Join ``group`` and deliver until ``finish`` (or ``expect`` deliveries): report the count every 1,000
    deliveries, and at the end."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        g = d.join(group, timeout=60)
        q.put(("joined", core, g.node))
        got: list[tuple[int, int]] = []
        while not finish.is_set() and (not expect or len(got) < expect):
            try:
                dl = g.recv(timeout=0.2)
            except mh.Timeout:
                continue
            if dl.request:
                continue  # a convergecast request: answered by the endpoint already
            got.append(msg_id(dl.payload))
            if len(got) % 1000 == 0:
                q.put(("progress", core, g.node, len(got)))
        q.put(("done", core, g.node, got))


def sender(name: str, core: int, group: str, n: int, q: Any, go: Any, finish: Any, size: int = 8) -> None:
    """Join, wait for ``go``, broadcast ``n`` messages (reporting progress every 500), then deliver until ``finish``."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        g = d.join(group, timeout=60)
        q.put(("joined", core, g.node))
        if not go.wait(120):
            return
        for i in range(1, n + 1):
            g.send(g.broadcast, payload(g.node, i, size), timeout=60)
            if i % 500 == 0:
                q.put(("progress", core, g.node, i))
            while g.try_recv() is not None:
                pass
        q.put(("sent", core, g.node, n))
        while not finish.is_set():
            try:
                g.recv(timeout=0.2)
            except mh.Timeout:
                pass


def reply_bytes(node: int, size: int) -> bytes:
    """The reply :func:`replier` gives as node ``node``: ``size`` bytes that name it and differ per node."""
    return bytes((node * 31 + i) % 251 for i in range(size))


def replier(name: str, core: int, group: str, q: Any, finish: Any, size: int = 1024) -> None:
    """Join ``group`` answering every convergecast with :func:`reply_bytes` (``size`` bytes); deliver until ``finish``."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        g = d.join(group, reply=lambda dl: reply_bytes(g.node, size), timeout=60)
        q.put(("joined", core, g.node))
        while not finish.is_set():
            try:
                g.recv(timeout=0.2)
            except mh.Timeout:
                continue
        q.put(("done", core, g.node))
