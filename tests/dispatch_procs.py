"""Child processes of the live dispatch tests (importable by spawn): sinks that record what they got."""

from __future__ import annotations

import os
import time
from typing import Any

from multihop import news


def record_sink(
    runtime: str, topics: list[str], want: int, qos: dict[str, Any], ready: Any, result: Any, seconds: float = 60.0, system: str = "main"
) -> None:
    """Join, say ready (with the sink's id), read until ``want`` news or ``seconds`` pass, report what came."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    snk = news.sink(runtime, topics, qos=news.SinkQoS(**qos), system=system)
    ready.put((snk.id.hi, snk.id.lo))
    got: list[tuple[int, int, int, int, int, int]] = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        try:
            n = snk.next(timeout=0.5)
        except news.DispatchError:
            raise
        except TimeoutError:
            continue
        got.append((n.source.hi, n.source.lo, n.seq, n.peer.hi, n.peer.lo, n.received_ns - n.entry_ns))
    result.put((got, snk.stats()))
    result.close()
    result.join_thread()
    snk.close()
