"""The paper's testbed, live (routing paper section 4): brokers, 100 subscribers, a publisher, measuring subscribers.

:class:`Testbed` starts the brokers of a topology (figure 14: 22 brokers, 9 broker
hops from the publisher on node 22 to the measuring subscriber on node 10; or
figure 20), 5 subscribing clients on every broker but the publisher's and the
measuring ones (one process per broker, its clients waiting together in
``Dispatcher.poll`` and counting what they get), one measuring subscriber
process per measuring broker, and publishes from this process.  Every client
has the profile ``a=1, b=2, c=3, d=1``; events have six attributes and the
publisher sets the fourth so that the requested share matches (the paper's
"matching rate", varied through the fourth tag).  An event's payload starts with
its send time (``CLOCK_MONOTONIC`` ns; publisher and measuring subscribers are
on one host, as in the paper), padded to the event size.

:meth:`Testbed.run_case` publishes ``count`` events at ``rate`` per second (0:
as fast as the publisher goes) and returns, per measuring subscriber, the send
and receive times of what it got, plus the counts every other subscriber got.

The paper ran its 100 subscribing clients on a machine of their own; here all
share two CPUs with the brokers, so the background subscribers' processes run at
idle priority (:func:`background_priority`): they still get every event (each
case waits for every one of them), but yield the CPU to the brokers and the
measuring client.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from multihop.ges.live.broker import quiet_gc
from multihop.ges.live.system import LiveSystem
from multihop.ges.topology import EXAMPLES as TOPOLOGY_EXAMPLES
from multihop.ges.topology import Topology

__all__ = ["Testbed", "CaseResult", "PROFILE", "EXAMPLES", "event_content", "background_priority", "cpu_seconds"]

EXAMPLES = TOPOLOGY_EXAMPLES  # the shipped topology files (multihop/ges/examples/)
PROFILE = [("a", 1), ("b", 2), ("c", 3), ("d", 1)]
_CTX = mp.get_context("spawn")
GIVE_UP = 10.0  # a subscriber that got nothing for this long stops waiting for the rest of a case
PUBLISH_BATCH = 64
"""Events the flat-out publisher hands to ``publish_many`` at once (a NATS client buffers its publishes too)."""
#: nice value of the background subscribers' processes (see the module docstring)
BACKGROUND_NICE = 10


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """User + system CPU seconds of these processes so far."""
    total = 0.0
    for p in procs:
        t = p.cpu_times()
        total += t.user + t.system
    return total


def background_priority() -> None:
    """Make this process a background one: SCHED_IDLE (it runs when the brokers do not need the CPU),
    or nice ``BACKGROUND_NICE`` where SCHED_IDLE is not allowed."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        os.nice(BACKGROUND_NICE)


def event_content(k: int, match: int) -> dict[str, Any]:
    """The content of event ``k`` for a matching rate of ``match`` percent (evenly spread matches)."""
    hit = (k * match) // 100 != ((k + 1) * match) // 100
    return {"a": 1, "b": 2, "c": 3, "d": 1 if hit else 0, "e": k & 0xFF, "f": 0}


def _subscriber_proc(name: str, addr: str, n: int, conn: Any) -> None:
    """n clients on broker ``addr`` in one process: count deliveries between ``start`` and ``stop``."""
    import multihop as mh
    from multihop import ges

    background_priority()  # the paper's clients had a machine of their own: here they yield to the brokers
    rt = mh.Runtime.attach(name)
    info = json.loads((rt.dir / "ges.json").read_text())["brokers"][addr]
    d = rt.dispatcher(info["core"])
    clients = [ges.connect(name, addr, f"bg-{addr}-{k}", dispatcher=d) for k in range(n)]
    try:
        subs = [c.subscribe(PROFILE) for c in clients]
        for c, s in zip(clients, subs, strict=True):
            deadline = time.monotonic() + 60
            while c.active_level(s) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
        by = {id(c.ch): c for c in clients}
        # as the brokers: a subscriber receiving ~10,000 events/s allocates a tuple per event head, and with
        # the default thresholds its collector scanned the whole heap again and again (perf: 37 % of its CPU)
        quiet_gc()
        conn.send("ready")
        counts = [0] * n
        index = {id(c.ch): i for i, c in enumerate(clients)}
        while True:
            cmd = conn.recv()
            if cmd == "exit":
                return
            expect = cmd[1]  # ("count", n): each client should get n events
            counts = [0] * n
            last = time.monotonic()
            while min(counts) < expect and time.monotonic() - last < GIVE_UP:
                got = 0
                for ch in d.poll(0.5):
                    k = by[id(ch)].drain(timeout=0)
                    counts[index[id(ch)]] += k
                    got += k
                if got:
                    last = time.monotonic()
            conn.send(counts)
    finally:
        for c in clients:
            c.close()
        d.detach()


def _measuring_proc(name: str, addr: str, conn: Any) -> None:
    """One measuring subscriber on ``addr``: send and receive times of every event it gets."""
    from multihop import ges

    c = ges.connect(name, addr, f"measure-{addr}")
    try:
        s = c.subscribe(PROFILE)
        deadline = time.monotonic() + 60
        while c.active_level(s) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        # as the brokers: a subscriber receiving ~10,000 events/s allocates a tuple per event head, and with
        # the default thresholds its collector scanned the whole heap again and again (perf: 37 % of its CPU)
        quiet_gc()
        conn.send("ready")
        while True:
            cmd = conn.recv()
            if cmd == "exit":
                return
            expect = cmd[1]
            send: list[int] = []
            recv: list[int] = []
            last = time.monotonic()
            while len(send) < expect and time.monotonic() - last < GIVE_UP:
                evs = c.next_many(4096, timeout=0.5)
                if evs:
                    now = time.monotonic_ns()
                    for e in evs:
                        send.append(int.from_bytes(e.payload[:8], "little"))
                        recv.append(now)
                    last = time.monotonic()
            conn.send((np.asarray(send, dtype=np.int64), np.asarray(recv, dtype=np.int64)))
    finally:
        c.close()


@dataclass
class CaseResult:
    """What one case measured."""

    match: int
    size: int
    rate: float  #: asked for (0: as fast as possible)
    published: int
    publish_seconds: float
    #: measuring broker -> (send ns, receive ns) of each event it got
    measured: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    #: background subscriber broker -> events each of its clients got
    background: dict[str, list[int]] = field(default_factory=dict)
    #: CPU seconds (user + system) the broker processes used during the case, all brokers together
    broker_cpu: float = 0.0
    #: CPU seconds the subscriber processes (background and measuring) used during the case
    subscriber_cpu: float = 0.0
    #: CPU seconds the runtime's monitors (which carry the multi-hop channels' frames) used during the case
    monitor_cpu: float = 0.0
    #: CPU seconds the publishing process (this one: every thread) used during the case
    publisher_cpu: float = 0.0

    @property
    def broker_cpu_per_event(self) -> float:
        """The brokers' CPU seconds per published event (all brokers together)."""
        return self.broker_cpu / self.published if self.published else 0.0

    @property
    def publish_rate(self) -> float:
        """Events per second the publisher achieved."""
        return self.published / self.publish_seconds if self.publish_seconds > 0 else 0.0


class Testbed:
    """A running testbed (see the module docstring); use as a context manager."""

    def __init__(
        self,
        name: str,
        topology: Topology | str | Path = EXAMPLES / "paper_fig14.toml",
        *,
        publisher: str = "1.5.1.22",
        measuring: tuple[str, ...] = ("1.6.1.10",),
        per_broker: int = 5,
        cores: list[int] | None = None,
        engine: str | None = None,
        transport: str = "ump",
    ) -> None:
        """``engine``: the brokers' event path, ``"native"`` (the default) or ``"python"`` (the reference):
        ``MULTIHOP_GES_ENGINE`` in the brokers' environment; None leaves the environment's.
        ``transport``: what carries the events (``LiveSystem.up``'s: ``"ump"``, the default, or ``"multihop"``)."""
        if engine not in (None, "native", "python"):
            raise ValueError(f"engine must be 'native' or 'python', got {engine!r}")
        topo = topology if isinstance(topology, Topology) else Topology.load(topology)
        self.name = name
        self.per_broker = per_broker
        self.publisher_at = publisher
        self.measuring = tuple(measuring)
        #: the brokers' event path ("native" or "python")
        self.engine = engine or os.environ.get("MULTIHOP_GES_ENGINE", "native")
        old = os.environ.get("MULTIHOP_GES_ENGINE")
        os.environ["MULTIHOP_GES_ENGINE"] = self.engine  # read by the broker processes at start
        try:
            self.system = LiveSystem.up(topo, name, cores=cores or [0, 1], timeout=120, transport=transport)
        finally:
            if old is None:
                del os.environ["MULTIHOP_GES_ENGINE"]
            else:
                os.environ["MULTIHOP_GES_ENGINE"] = old
        self._procs: list[Any] = []
        self._bg: dict[str, Any] = {}
        self._ms: dict[str, Any] = {}
        try:
            from multihop import ges

            for addr in self.system.addresses:
                if addr == publisher or addr in self.measuring or per_broker <= 0:
                    continue
                a, b = _CTX.Pipe()
                p = _CTX.Process(target=_subscriber_proc, args=(name, addr, per_broker, b), daemon=True)
                p.start()
                self._procs.append(p)
                self._bg[addr] = a
            for addr in self.measuring:
                a, b = _CTX.Pipe()
                p = _CTX.Process(target=_measuring_proc, args=(name, addr, b), daemon=True)
                p.start()
                self._procs.append(p)
                self._ms[addr] = a
            for conn in [*self._bg.values(), *self._ms.values()]:
                if not conn.poll(120) or conn.recv() != "ready":
                    raise RuntimeError("a subscriber process did not get ready")
            self.publisher = ges.connect(name, publisher, "publisher")
            self._broker_procs = [psutil.Process(self.system.pid(a)) for a in self.system.addresses]
            self._monitor_procs = [psutil.Process(pid) for pid in self.system.runtime.monitor_pids.values()]
            self._sub_procs = [psutil.Process(p.pid) for p in self._procs]
        except BaseException:
            self.close()
            raise

    @property
    def subscribers(self) -> int:
        """Subscribing clients (background and measuring)."""
        return len(self._bg) * self.per_broker + len(self._ms)

    def run_case(self, match: int, size: int, rate: float, count: int, batch: int = PUBLISH_BATCH) -> CaseResult:
        """Publish ``count`` events of ``size`` payload bytes at ``rate``/s (0: flat out) with ``match`` % matching.

        Flat out, the publisher hands ``batch`` events at a time to ``publish_many`` (1: a
        ``publish`` call each); each event's payload carries the time it was made, so the
        latency includes its wait in the batch.
        """
        conns = [*self._bg.values(), *self._ms.values()]
        expect = sum(1 for k in range(count) if event_content(k, match)["d"] == 1)
        for c in conns:
            c.send(("count", expect))
        me = [psutil.Process()]
        cpu0 = cpu_seconds(self._broker_procs), cpu_seconds(self._sub_procs), cpu_seconds(self._monitor_procs), cpu_seconds(me)
        pad = b"\0" * max(0, size - 8)
        pub = self.publisher.publish
        clock = time.monotonic_ns
        period = 0 if rate <= 0 else int(1e9 / rate)
        t0 = clock()
        if not period and batch > 1:
            many = self.publisher.publish_many
            for k0 in range(0, count, batch):
                many([(event_content(k, match), clock().to_bytes(8, "little") + pad) for k in range(k0, min(count, k0 + batch))])
        else:
            for k in range(count):
                if period:
                    due = t0 + k * period
                    while True:
                        now = clock()
                        if now >= due:
                            break
                        if due - now > 2_000_000:
                            time.sleep((due - now - 1_000_000) / 1e9)  # the publisher paces itself; brokers never sleep
                pub(event_content(k, match), payload=clock().to_bytes(8, "little") + pad)
        t1 = clock()
        res = CaseResult(match, size, rate, count, (t1 - t0) / 1e9)
        for addr, c in self._bg.items():
            res.background[addr] = c.recv()
        for addr, c in self._ms.items():
            res.measured[addr] = c.recv()
        res.broker_cpu = cpu_seconds(self._broker_procs) - cpu0[0]
        res.subscriber_cpu = cpu_seconds(self._sub_procs) - cpu0[1]
        res.monitor_cpu = cpu_seconds(self._monitor_procs) - cpu0[2]
        res.publisher_cpu = cpu_seconds(me) - cpu0[3]
        return res

    def close(self) -> None:
        """Stop every process and the brokers."""
        for c in [*self._bg.values(), *self._ms.values()]:
            try:
                c.send("exit")
            except (OSError, BrokenPipeError):
                pass
        for p in self._procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
        pub = getattr(self, "publisher", None)
        if pub is not None:
            try:
                pub.close()
            except Exception:
                pass
        self.system.down()

    def __enter__(self) -> "Testbed":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
