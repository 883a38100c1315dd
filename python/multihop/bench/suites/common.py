"""What every suite shares: the run context, the traced round-trip loop, and the case recorders.

Tracing must not distort what it measures, so a round-trip case times one
round trip in every ``ctx.every`` (two ``time.monotonic_ns`` reads, kept in a
preallocated list) and runs the others bare; the sampled timestamps go to the
trace writer once, when the case ends.  ``benches/bench_tracing.py`` measures
what tracing costs (goal: within 10% of the same loop untraced).

Repeats: every suite measures each case ``ctx.repeats`` times (3 with
``--quick``, 5 otherwise), the repeat loop outermost, so the repeats of one
case are spread over the suite's run, interleaved with its other cases: a
burst of load from elsewhere then shows as spread between the repeats of
every case it hit, instead of as a difference between two cases measured once
each at different moments.  Each repeat is its own ``cases`` row (``repeat`` =
0, 1, ...), with the load measured over it (:mod:`multihop.bench.load`).

A round trip over a channel starts with :data:`WARM_UP` untimed round trips
(at most a tenth of the case), so the first messages (cold rings, the
monitors' poll estimate settling) are not part of the figure.
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
from multihop.bench.load import Sampled, sampling
from multihop.bench.peers import PeerBench
from multihop.bench.progress import Progress
from multihop.bench.suites.options import SHARED_CORES, SHARED_ROUTING, TRACE_EVERY, BenchOptions, OptionError
from multihop.bench.trace import TraceWriter, case_name

__all__ = [
    "TRACE_EVERY",
    "WARM_UP",
    "RttResult",
    "SuiteContext",
    "channel_rtt",
    "channel_stream",
    "measure_rtt",
    "need_cores",
    "peer_rtt",
    "peer_stream",
    "record_result",
    "record_rtt",
    "record_samples",
    "record_totals",
    "rtt_trace",
    "sampling",
    "warm_up",
]

WARM_UP = 200
"""Untimed round trips before a channel's timed ones (at most a tenth of the case)."""

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

    @property
    def repeats(self) -> int:
        """How many times each case is measured (:attr:`BenchOptions.repeat_count`)."""
        return self.options.repeat_count

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


@dataclass
class RttResult:
    """A measured round-trip case: sampled sequence numbers, send and receive times, n and the wall time."""

    seq: np.ndarray
    send_ns: np.ndarray
    recv_ns: np.ndarray
    n: int
    duration_ns: int


def measure_rtt(send: Send, recv: Recv, n: int, size: int, every: int, warm: int = 0) -> RttResult:
    """`warm` untimed round trips, then `n` traced ones (one in `every` timed)."""
    msg = b"x" * size
    for _ in range(warm):
        send(msg)
        recv()
    t0 = time.monotonic_ns()
    seq, send_ns, recv_ns = rtt_trace(send, recv, n, size, every)
    return RttResult(seq, send_ns, recv_ns, n, time.monotonic_ns() - t0)


def warm_up(n: int) -> int:
    """Untimed round trips before `n` timed ones: :data:`WARM_UP`, at most a tenth of `n`."""
    return min(WARM_UP, n // 10)


def record_result(
    ctx: SuiteContext, params: dict[str, Any], got: RttResult, size: int, *, repeat: int = 0, load: dict[str, Any] | None = None
) -> None:
    """Record one measured round-trip repeat: its sampled messages and its ``cases`` row."""
    p = dict(params, kind="rtt")
    name = case_name(p)
    w = ctx.writer
    w.add_messages(name, p, got.send_ns, got.recv_ns, kind="rtt", seq=got.seq, every=1, suite=p["suite"], repeat=repeat)
    w.add_case(
        name, p, messages=got.n, duration_ns=max(got.duration_ns, 1), nbytes=2 * got.n * max(size, 0), kind="rtt", suite=p["suite"],
        repeat=repeat, load=load,
    )  # fmt: skip


def record_rtt(
    ctx: SuiteContext, params: dict[str, Any], send: Send, recv: Recv, n: int, size: int, *, repeat: int = 0, runtime: mh.Runtime | None = None
) -> None:
    """Run and record one round-trip repeat over ready ends, after a warm-up (load sampled over it; `runtime`: whose monitors)."""
    with sampling(runtime) as s:
        got = measure_rtt(send, recv, n, size, ctx.every, warm_up(n))
    record_result(ctx, params, got, size, repeat=repeat, load=s.columns())


def record_totals(
    ctx: SuiteContext,
    params: dict[str, Any],
    kind: str,
    messages: int,
    duration_ns: int,
    *,
    repeat: int = 0,
    load: dict[str, Any] | None = None,
    **extra: Any,
) -> None:
    """Record a case's totals only (one-way throughput, resources): no message rows."""
    p = dict(params, kind=kind)
    ctx.writer.add_case(
        case_name(p), p, messages=messages, duration_ns=max(int(duration_ns), 1), kind=kind, suite=p["suite"], repeat=repeat, load=load, **extra
    )


def record_samples(
    ctx: SuiteContext, params: dict[str, Any], send_ns: list[int], recv_ns: list[int], *, repeat: int = 0, load: dict[str, Any] | None = None
) -> None:
    """Record timed operations that are not message round trips (e.g. binds) as an rtt case."""
    p = dict(params, kind="rtt")
    name = case_name(p)
    s, r = np.asarray(send_ns, dtype=np.int64), np.asarray(recv_ns, dtype=np.int64)
    ctx.writer.add_messages(name, p, s, r, kind="rtt", every=1, suite=p["suite"], repeat=repeat)
    duration = max(int(r[-1] - s[0]), 1) if len(s) else 1
    ctx.writer.add_case(name, p, messages=len(s), duration_ns=duration, nbytes=0, kind="rtt", suite=p["suite"], repeat=repeat, load=load)


# -- one repeat of a case against a spawned server (PeerBench), load sampled over the whole case ------------


def channel_rtt(ctx: SuiteContext, bench: PeerBench, params: dict[str, Any], n: int, size: int, repeat: int) -> None:
    """One repeat of a round-trip case over our channel (``params["hops"]`` from the channel), recorded.

    The load is sampled from before the server is spawned to after it is gone:
    a window of a few tenths of a second, long enough for ``/proc``'s ticks.
    """
    warm = warm_up(n)

    def body(ch: mh.Channel) -> RttResult:
        params["hops"] = int(ch.stats()["hops"])
        return measure_rtt(ch.send, ch.recv, n, size, ctx.every, warm)

    with sampling(bench.rt) as s:
        got = bench.channel_case("rtt", n + warm, size, body)
    record_result(ctx, params, got, size, repeat=repeat, load=s.columns())


def peer_rtt(ctx: SuiteContext, bench: PeerBench, peer: str, params: dict[str, Any], n: int, size: int, repeat: int) -> None:
    """One repeat of a round-trip case over `peer` (Pipe, Queue, ZeroMQ), recorded like :func:`channel_rtt`."""
    warm = warm_up(n)
    with sampling() as s:
        got = bench.peer_case(peer, "rtt", n + warm, lambda send, recv: measure_rtt(send, recv, n, size, ctx.every, warm))
    record_result(ctx, params, got, size, repeat=repeat, load=s.columns())


def _stream(ctx: SuiteContext, params: dict[str, Any], n: int, rate: float, s: Sampled, repeat: int) -> None:
    record_totals(ctx, params, "oneway", n, int(n / rate * 1e9) if rate > 0 else 1, repeat=repeat, load=s.columns())


def channel_stream(ctx: SuiteContext, bench: PeerBench, params: dict[str, Any], n: int, size: int, repeat: int) -> None:
    """One repeat of a one-way stream over our channel (:meth:`PeerBench.stream_ours`), recorded."""
    with sampling(bench.rt) as s:
        rate = bench.stream_ours(n, size)
    _stream(ctx, params, n, rate, s, repeat)


def peer_stream(ctx: SuiteContext, bench: PeerBench, peer: str, params: dict[str, Any], n: int, size: int, repeat: int) -> None:
    """One repeat of a one-way stream over `peer` (:meth:`PeerBench.stream_peer`), recorded."""
    with sampling() as s:
        rate = bench.stream_peer(n, size, peer=peer)
    _stream(ctx, params, n, rate, s, repeat)
