"""What every suite shares: the run context, the traced round-trip loop, and the case recorders.

Tracing must not distort what it measures, so a round-trip case times one
round trip in every ``ctx.every`` (two ``time.monotonic_ns`` reads, kept in a
preallocated list) and runs the others bare; the sampled timestamps go to the
trace writer once, when the case ends.  ``benches/bench_tracing.py`` measures
what tracing costs (goal: within 10% of the same loop untraced).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Callable

import numpy as np

import multihop as mh
from multihop.bench.progress import Progress
from multihop.bench.suites.options import SHARED_CORES, SHARED_ROUTING, TRACE_EVERY, BenchOptions, OptionError
from multihop.bench.trace import TraceWriter, case_name

__all__ = ["TRACE_EVERY", "SuiteContext", "need_cores", "record_rtt", "record_samples", "record_totals", "rtt_trace"]

Send = Callable[[bytes], object]  # what it returns is not used
Recv = Callable[[], object]  # the reply is awaited, not read


@dataclass
class SuiteContext:
    """One ``multihop bench`` run: the trace writer, the options, progress, and the runtimes.

    ``runtime()`` is the runtime the suites without a topology of their own
    share: the attached one (``--attach``), else one started (once, lazily)
    on ``--cores`` / ``--routing`` or their defaults; ``close()`` stops it if
    it was started here.  ``own_runtime()`` gives the suites that need their
    own topology (hops, routing, resources) a runtime for one block: the
    attached one, left running, or a fresh one, stopped when the block ends.
    """

    writer: TraceWriter
    options: BenchOptions
    progress: Progress
    attached: mh.Runtime | None = None
    _runtime: mh.Runtime | None = field(default=None, repr=False)

    @property
    def quick(self) -> bool:
        """Whether the run is ``--quick``."""
        return self.options.quick

    @property
    def every(self) -> int:
        """Trace one round trip in this many."""
        return self.options.every

    def runtime(self) -> mh.Runtime:
        """The shared runtime (the attached one, or one started on first use)."""
        if self.attached is not None:
            return self.attached
        if self._runtime is None:
            cores = list(self.options.cores or SHARED_CORES)
            routing = self.options.routing or SHARED_ROUTING
            self._runtime = mh.Runtime.start(f"bench-{os.getpid()}", cores=cores, routing=routing)
        return self._runtime

    @contextlib.contextmanager
    def own_runtime(self, suite: str, cores: list[int], routing: str, topology: mh.Topology | None = None) -> Iterator[mh.Runtime]:
        """The attached runtime (left running), or a new one on `cores` stopped when the block ends."""
        if self.attached is not None:
            yield self.attached
            return
        with mh.Runtime.start(f"bench-{suite}-{os.getpid()}", cores=cores, routing=routing, topology=topology) as rt:
            yield rt

    def close(self) -> None:
        """Stop the shared runtime, if it was started here (an attached one keeps running)."""
        if self._runtime is not None:
            rt, self._runtime = self._runtime, None
            rt.stop()

    def __enter__(self) -> SuiteContext:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def need_cores(suite: str, why: str, cores: list[int] | tuple[int, ...], attached: mh.Runtime | None, at_least: int = 2) -> None:
    """Raise :class:`OptionError` naming `suite` unless `cores` has `at_least` cores.

    `cores` are the cores the suite would run on (the attached runtime's, or ``--cores``).
    """
    if len(cores) >= at_least:
        return
    where = f"the attached runtime {attached.name!r} has cores {list(attached.cores)}" if attached is not None else f"--cores gives {list(cores)}"
    raise OptionError(f"suite {suite} needs at least {at_least} cores ({why}); {where}")


def rtt_trace(send: Send, recv: Recv, n: int, size: int, every: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run n round trips of `size` bytes, timing one in `every`.

    Returns the sampled messages' sequence numbers, send times and receive
    times (CLOCK_MONOTONIC ns, int64 arrays of equal length).
    """
    msg = b"x" * size
    k = (n + every - 1) // every
    t_send = [0] * k
    t_recv = [0] * k
    clock = time.monotonic_ns
    bare = range(every - 1)  # made once: a range per block would cost more than the clocks
    for j in range(n // every):
        t0 = clock()
        send(msg)
        recv()
        t_recv[j] = clock()
        t_send[j] = t0
        for _ in bare:
            send(msg)
            recv()
    if k > n // every:  # a last, partial block
        t0 = clock()
        send(msg)
        recv()
        t_recv[k - 1] = clock()
        t_send[k - 1] = t0
        for _ in range(n - (k - 1) * every - 1):
            send(msg)
            recv()
    seq = np.arange(0, n, every, dtype=np.int64)
    return seq, np.asarray(t_send, dtype=np.int64), np.asarray(t_recv, dtype=np.int64)


def record_rtt(ctx: SuiteContext, params: dict[str, Any], send: Send, recv: Recv, n: int, size: int) -> None:
    """Run and record one round-trip case (sampled messages and the case's totals)."""
    t0 = time.monotonic_ns()
    seq, send_ns, recv_ns = rtt_trace(send, recv, n, size, ctx.every)
    duration = time.monotonic_ns() - t0
    p = dict(params, kind="rtt")
    name = case_name(p)
    ctx.writer.add_messages(name, p, send_ns, recv_ns, kind="rtt", seq=seq, every=1, suite=p["suite"])
    ctx.writer.add_case(name, p, messages=n, duration_ns=duration, nbytes=2 * n * max(size, 0), kind="rtt", suite=p["suite"])


def record_totals(ctx: SuiteContext, params: dict[str, Any], kind: str, messages: int, duration_ns: int, **extra: Any) -> None:
    """Record a case's totals only (one-way throughput, resources): no message rows."""
    p = dict(params, kind=kind)
    ctx.writer.add_case(case_name(p), p, messages=messages, duration_ns=max(int(duration_ns), 1), kind=kind, suite=p["suite"], **extra)


def record_samples(ctx: SuiteContext, params: dict[str, Any], send_ns: list[int], recv_ns: list[int]) -> None:
    """Record timed operations that are not message round trips (e.g. binds) as an rtt case."""
    p = dict(params, kind="rtt")
    name = case_name(p)
    s, r = np.asarray(send_ns, dtype=np.int64), np.asarray(recv_ns, dtype=np.int64)
    ctx.writer.add_messages(name, p, s, r, kind="rtt", every=1, suite=p["suite"])
    ctx.writer.add_case(name, p, messages=len(s), duration_ns=max(int(r[-1] - s[0]), 1) if len(s) else 1, nbytes=0, kind="rtt", suite=p["suite"])
