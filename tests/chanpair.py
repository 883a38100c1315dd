"""A real channel pair inside the test process: two dispatchers of a live runtime, one bind.

The client end is attached on one core, the service end on another, so a
``"multihop"`` pair really crosses the monitors (hops >= 2) and a ``"ump"`` pair
shares rings with no monitor on the path: the runtime's own channels, not a
stand-in.
"""

from __future__ import annotations

import itertools
import os
import threading
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

import multihop as mh

_names = itertools.count()


@contextmanager
def channel_pair(
    rt: mh.Runtime, transport: str = "ump", client_core: int = 0, server_core: int = 1, **bind: Any
) -> Iterator[tuple[mh.Channel, mh.Channel]]:
    """``(client_end, service_end)`` of a fresh channel; both closed and their dispatchers
    detached on exit, even if the body fails."""
    with ExitStack() as stack:
        srv = stack.enter_context(rt.dispatcher(server_core))
        cli = stack.enter_context(rt.dispatcher(client_core))
        name = f"pair-{os.getpid()}-{next(_names)}"
        svc = srv.export(name)
        box: list[Any] = []

        def accept() -> None:
            try:
                box.append(svc.accept(timeout=10))
            except BaseException as e:  # reported by the caller below
                box.append(e)

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        client = stack.enter_context(cli.bind(name, transport=transport, timeout=10, **bind))
        t.join(10)
        assert box, "the service end did not accept within 10 s"
        if isinstance(box[0], BaseException):
            raise box[0]
        server = stack.enter_context(box[0])
        yield client, server


@contextmanager
def runtime_pair(prefix: str, transport: str = "ump") -> Iterator[tuple[mh.Channel, mh.Channel]]:
    """A fresh two-core runtime and one channel pair on it; the runtime is stopped on exit."""
    from session import unique_name

    rt = mh.Runtime.start(unique_name(prefix), cores=[0, 1])
    try:
        with channel_pair(rt, transport) as pair:
            yield pair
    finally:
        rt.stop()
