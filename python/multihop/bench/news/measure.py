"""The dispatch benchmarks as functions (``benches/bench_dispatch.py`` prints them, ``multihop bench dispatch`` traces them).

* :func:`macro_sinks`: RE.VE.N.GE.'s only benchmark, live and time-compressed
  by ``compress``: each peer processes a constant 65 news/s (65 x compress per
  wall second), and a macro-sink (interested in everything, its own channel to
  every peer) joins every 15 s (15 / compress wall seconds) until deliveries
  start to be late (older than ``late`` paper seconds) or dropped (more than
  ``tolerance`` of what was due), fall behind (10 % short), or the source
  cannot keep its rate (the CPUs are saturated), two intervals in a row; the
  result is the step at which that started: sinks and delivered bandwidth.
* :func:`takeover`: the peer serving some sinks is killed (SIGKILL: its
  channels close; or SIGSTOP: only the heartbeats tell); the take-over time is
  from the kill to each orphaned sink's first news from its new peer.
* :func:`saturation`: one source as fast as it can, k sinks: news/s, deliveries/s
  and latency; :func:`plain_saturation`: the same over a plain broker;
  :func:`ges_saturation`: the same over the GES path (a publisher and k
  subscribers on the brokers of one cluster).
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

import multihop as mh
from multihop import news
from multihop.bench.news.workload import CTX, Load, plain_broker, plain_publisher
from multihop.news.ids import hex_id

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

__all__ = ["Step", "MacroResult", "macro_sinks", "Takeover", "takeover", "Saturation", "saturation", "plain_saturation", "ges_saturation"]

PAPER_RATE = 65.0
"""News per second each peer processes in the paper's benchmark."""

PAPER_JOIN = 15.0
"""Seconds between two macro-sinks in the paper's benchmark."""


@dataclass
class Step:
    """One join interval of the macro-sink benchmark."""

    sinks: int
    seconds: float
    expected: int
    delivered: int
    late: int
    dropped: int
    bytes: int
    samples: list[tuple[int, int]] = field(default_factory=list)  # sampled (entered, received)
    offered: float = 1.0  # the source's rate in the interval over the target rate

    def failing(self, tolerance: float) -> bool:
        """Late or dropped beyond ``tolerance``, 10 % short, or the source below 90 % of its rate."""
        return self.bad > tolerance or self.short > 0.1 or self.offered < 0.9

    @property
    def latencies(self) -> list[int]:
        """The sampled latencies, ns."""
        return [r - e for e, r in self.samples]

    @property
    def bad(self) -> float:
        """Late plus dropped, over what was expected."""
        return (self.late + self.dropped) / max(1, self.expected)

    @property
    def short(self) -> float:
        """The part of what was expected that did not arrive in the interval (the sinks fall behind)."""
        return max(0.0, 1.0 - self.delivered / max(1, self.expected))


@dataclass
class MacroResult:
    """The macro-sink benchmark for one peer count."""

    peers: int
    compress: float
    rate: float
    size: int
    steps: list[Step]
    threshold: Step | None  # the first step with late or dropped deliveries (None: not reached)

    @property
    def last_good(self) -> Step | None:
        """The last step before the threshold."""
        good = [s for s in self.steps if self.threshold is None or s.sinks < self.threshold.sinks]
        return good[-1] if good else None


def macro_sinks(
    runtime: str,
    peers: int,
    *,
    compress: float = 30.0,
    size: int = 1024,
    late: float = 3.0,
    tolerance: float = 0.01,
    max_sinks: int = 64,
    progress: Callable[[str], None] | None = None,
) -> MacroResult:
    """Run the macro-sink benchmark with ``peers`` peers on ``runtime`` (see the module docstring)."""
    system = f"macro{peers}-{int(time.monotonic() * 1000) % 100000}"
    rate = PAPER_RATE * compress
    interval = PAPER_JOIN / compress
    late_ns = int(late / compress * 1e9)
    cfg = news.PeerConfig(heartbeat=0.1, dead_after=1.0, window=256)
    steps: list[Step] = []
    threshold = None
    with news.start(runtime, peers, system=system, config=cfg):
        load = Load(runtime, system, qos={"max_delivery_time": late / compress, "queue_limit": 100_000}, late_ns=late_ns)
        try:
            load.add_sinks(1)
            _, go, result = load.source(rate, size, seconds=max_sinks * interval * 2 + 30)
            counter = load.sent
            assert counter is not None  # source() made it
            go.set()
            time.sleep(interval)
            load.report()  # warm-up
            dropped_before = 0
            sent_before = counter.value
            bad_run = 0
            for k in range(1, max_sinks + 1):
                t0 = time.monotonic()
                time.sleep(interval)
                reps = load.report()
                dt = time.monotonic() - t0
                sent_now = counter.value
                dropped_now = sum(r.stats.get("expired", 0) + r.stats.get("overflowed", 0) for r in reps)
                step = Step(
                    k,
                    dt,
                    (sent_now - sent_before) * k,
                    sum(r.count for r in reps),
                    sum(r.late for r in reps),
                    dropped_now - dropped_before,
                    sum(r.count for r in reps) * size,
                    [x for r in reps for x in r.samples],
                    (sent_now - sent_before) / dt / rate,
                )
                dropped_before, sent_before = dropped_now, sent_now
                steps.append(step)
                if progress:
                    progress(
                        f"{peers} peer(s), {k} macro-sink(s): {step.delivered / dt:,.0f} deliveries/s, "
                        f"late {step.late}, dropped {step.dropped}, source at {step.offered:.0%} of its rate"
                    )
                # a threshold is two bad intervals in a row (one alone may be another process taking the CPUs)
                bad_run = bad_run + 1 if step.failing(tolerance) else 0
                if bad_run >= 2:
                    threshold = steps[-2]
                    break
                load.add_sinks(1)
            go.clear()
        finally:
            load.close()
    return MacroResult(peers, compress, rate, size, steps, threshold)


@dataclass
class Takeover:
    """Take-over times after one peer was killed."""

    how: str
    sinks: int
    times_ns: list[int]
    detect: str
    kill_ns: int = 0


def takeover(
    runtime: str, *, how: str = "kill", peers: int = 3, sinks: int = 6, rate: float = 2000.0, dead_after: float = 0.3, heartbeat: float = 0.05
) -> Takeover:
    """Kill (SIGKILL) or stop (SIGSTOP) the peer serving sink 0; time each orphaned sink's first news from a survivor."""
    system = f"takeover-{how}-{int(time.monotonic() * 1000) % 100000}"
    cfg = news.PeerConfig(heartbeat=heartbeat, dead_after=dead_after, window=256)
    with news.start(runtime, peers, system=system, config=cfg) as sysm:
        load = Load(runtime, system)
        victim = None
        try:
            load.add_sinks(sinks)
            _, go, _ = load.source(rate, 256, seconds=60)
            go.set()
            time.sleep(0.5)
            load.report()
            status = sysm.status()
            owner = {sid: pid for pid, st in status.items() for sid, v in st["sinks"].items() if v["served_here"]}
            victim_hex = owner[hex_id(load.sink_ids[0])]
            victim = next(p for p in sysm.peers if hex_id(p.id) == victim_hex)
            orphans = [i for i, s in enumerate(load.sink_ids) if owner.get(hex_id(s)) == victim_hex]
            t_kill = time.monotonic_ns()
            sysm.kill(victim, signal.SIGKILL if how == "kill" else signal.SIGSTOP)
            time.sleep(max(1.0, 3 * dead_after))
            reps = load.report()
            go.clear()
            times = []
            for i in orphans:
                after = [first for peer, (first, _) in reps[i].peers.items() if peer != victim.id and first >= t_kill]
                if after:
                    times.append(min(after) - t_kill)
        finally:
            if victim is not None and how == "stop":
                sysm.kill(victim, signal.SIGKILL)
            load.close()
    detect = "channel closed (pidfd)" if how == "kill" else f"heartbeats only (dead_after {dead_after} s)"
    return Takeover(how, len(orphans), times, detect, t_kill)


@dataclass
class Saturation:
    """One source as fast as it can, ``sinks`` sinks."""

    path: str
    sinks: int
    size: int
    seconds: float
    news: int
    deliveries: int
    samples: np.ndarray  # (n, 2): entered, received (CLOCK_MONOTONIC ns)

    @property
    def latencies(self) -> np.ndarray:
        """The sampled latencies, ns."""
        return self.samples[:, 1] - self.samples[:, 0] if len(self.samples) else np.zeros(0, dtype=np.int64)

    @property
    def news_per_s(self) -> float:
        """News the source got into the system per second."""
        return self.news / self.seconds

    @property
    def deliveries_per_s(self) -> float:
        """News delivered to the sinks per second (all sinks)."""
        return self.deliveries / self.seconds

    def percentile(self, q: float) -> float:
        """A latency percentile in microseconds (NaN without samples)."""
        return float(np.percentile(self.latencies, q) / 1e3) if len(self.latencies) else float("nan")


def _run(load: Load, go: Event, result: Queue[dict[str, Any]], seconds: float, sinks: int, size: int, path: str) -> Saturation:
    load.report()
    go.set()
    time.sleep(seconds)
    go.clear()
    res = result.get(timeout=60)
    time.sleep(min(2.0, 0.2 + sinks * 0.01))  # what is in flight arrives
    reps = load.report()
    pairs = np.asarray([x for r in reps for x in r.samples], dtype=np.int64).reshape(-1, 2)
    return Saturation(path, sinks, size, res["seconds"], res["sent"], sum(r.count for r in reps), pairs)


def saturation(runtime: str, sinks: int, *, size: int = 64, seconds: float = 2.0, peers: int = 1, every: int = 16) -> Saturation:
    """Dispatch: one reliable source as fast as it can, ``sinks`` reliable sinks, ``peers`` peers."""
    system = f"sat{sinks}-{int(time.monotonic() * 1000) % 100000}"
    with news.start(runtime, peers, system=system, config=news.PeerConfig(window=256)):
        load = Load(runtime, system, every=every)
        try:
            load.add_sinks(sinks)
            _, go, result = load.source(None, size, seconds)
            return _run(load, go, result, seconds, sinks, size, f"dispatch ({peers} peer)")
        finally:
            load.close()


def plain_saturation(runtime: str, sinks: int, *, size: int = 64, seconds: float = 2.0, every: int = 16) -> Saturation:
    """The baseline: the same fan-out through one plain broker process (no QoS, no replication, no acks)."""
    rt = mh.Runtime.attach(runtime)
    load = Load(runtime, plain=True, every=every)
    ready, stop, go, result = CTX.Event(), CTX.Event(), CTX.Event(), CTX.Queue()
    try:
        load.spawn(plain_broker, runtime, rt.cores[0], sinks, ready, stop)
        if not ready.wait(30):
            raise RuntimeError("the plain broker did not start")
        load.add_sinks(sinks)
        load.spawn(plain_publisher, runtime, rt.cores[-1], size, seconds, go, result)
        return _run(load, go, result, seconds, sinks, size, "plain broker")
    finally:
        stop.set()
        load.close()


def ges_saturation(sinks: int, *, size: int = 64, count: int = 20_000, cores: list[int] | None = None) -> Saturation:
    """The GES path next to dispatch: one publisher as fast as it can, ``sinks`` subscribers, 100 % matching.

    Three brokers of one cluster on their own runtime (``cores``, default 0
    and 1): the publisher's (``1.1.1.1``), the measuring subscriber's
    (``1.1.1.2``, whose latencies are the samples) and one holding the other
    ``sinks - 1`` subscribers (``1.1.1.3``, in one process, at background
    priority as in the GES testbed).  Deliveries per second are every
    subscriber's events over the time from the first publish to the measuring
    subscriber's last event.
    """
    import os

    from multihop.bench.ges.testbed import Testbed
    from multihop.ges import Topology

    topo = Topology(levels=3)
    for k, addr in enumerate(("1.1.1.1", "1.1.1.2", "1.1.1.3")):
        topo.add_broker(addr, core=k % 2)
    topo.add_gateway("1.1.1.1", "1.1.1.2")
    topo.add_gateway("1.1.1.1", "1.1.1.3")
    name = f"ges-sat{sinks}-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"
    with Testbed(name, topo, publisher="1.1.1.1", measuring=("1.1.1.2",), per_broker=sinks - 1, cores=cores) as tb:
        res = tb.run_case(100, size, 0.0, count)
    send, recv = res.measured["1.1.1.2"]
    deliveries = len(send) + sum(sum(v) for v in res.background.values())
    samples = np.stack([send, recv], axis=1) if len(send) else np.zeros((0, 2), dtype=np.int64)
    # From the first publish to the measuring subscriber's last event: brokers may still hold events when the
    # publisher is done, so its own time would overstate the rate.
    seconds = max(res.publish_seconds, (int(recv.max()) - int(send.min())) / 1e9 if len(send) else 0.0)
    return Saturation("GES (3 brokers)", sinks, size, seconds, res.published, deliveries, samples)
