"""The testbed's processes and channels with no GES in them: what an event costs before any routing logic.

:class:`Floor` starts, for a topology (figure 14 by default), one *relay* process
per broker on the core the live system would give it, joined by channels of
the same transport along the topology's gateways (``transport``: UMP, as a live
system's default, or multi-hop with window 64, as gateways), and the same
subscriber processes as :class:`~multihop.bench.ges.testbed.Testbed` (5 clients on
every broker but the publisher's and the measuring one's, at idle priority,
each a channel of that transport to its relay; one measuring client). A relay floods
each event it gets to every neighbour but the one it came from (the topology is
a tree, so each relay sees each event once) and to each of its local clients,
as a GES broker does with everyone subscribed, and nothing else: no profiles,
no routing cache, no duplicate filter, no acknowledgements. Its loop is the
brokers' (``Dispatcher.poll``, ``recv_batch``, ``try_send`` in a corked round).

So :meth:`Floor.latency` is the latency the machine's processes, monitors and
channels give the paper's 9-hop path when every event reaches every one of the
100 subscribers: the part of the GES testbed's figure that no broker logic,
native or not, can remove on this machine (``benches/bench_ges_testbed.py``
prints the two side by side). ``grouped=True`` puts the background clients of
all relays of a core in one process (two processes instead of twenty: fewer
wake-ups per event), ``per_broker=0`` leaves them out.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

import multihop as mh
from multihop.bench.ges.testbed import EXAMPLES, GIVE_UP, background_priority
from multihop.defaults import DRAIN_BATCH
from multihop.ges.topology import Topology

__all__ = ["Floor"]

_CTX = mp.get_context("spawn")
WINDOW = 64  #: credit window of relay-to-relay channels (the brokers' gateway window)


def _service(system: str, addr: str) -> str:
    return f"floor/{system}/{addr}"


def _relay_proc(
    name: str, system: str, addr: str, core: int, uplinks: list[str], downlinks: int, clients: int, ready: Any, transport: str = "multihop"
) -> None:
    """One relay: bind to the neighbours in ``uplinks`` (the lower address binds), accept ``downlinks``
    neighbours and ``clients`` local clients, then flood what comes in until the runtime goes."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core, pin=True)
    svc = d.export(_service(system, addr))
    neighbours: list[Any] = []
    locals_: list[Any] = []
    ready.send("listening")
    deadline = time.monotonic() + 60
    for up in uplinks:
        while True:  # bounded: the peer exports within the start-up's minute
            try:
                ch = d.bind(_service(system, up), transport=transport, window=WINDOW, timeout=60)
                break
            except mh.BindError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        ch.send(b"n", timeout=10)
        neighbours.append(ch)
    want = downlinks + clients
    while want:
        ch = svc.accept(timeout=60)
        kind = ch.recv(timeout=10)
        if kind == b"n":
            neighbours.append(ch)
        elif kind == b"c":
            locals_.append(ch)
        # b"p": the publisher's channel, which is only read
        want -= 1
    ready.send("ready")
    try:
        while True:
            for ch in d.poll(None):
                try:
                    batch = ch.recv_batch(DRAIN_BATCH, timeout=0)
                except mh.ChannelClosed:
                    return
                if not batch:
                    continue
                src = id(ch)
                with d.corked():
                    for ev in batch:
                        for n in neighbours:
                            if id(n) != src:
                                n.send(ev, timeout=10)
                        for c in locals_:
                            c.send(ev, timeout=10)
    except mh.MultihopError:
        return


def _subscribers_proc(name: str, system: str, addrs: list[str], core: int, n: int, conn: Any, transport: str = "multihop") -> None:
    """n clients of each relay of ``addrs`` (all on ``core``) in one process, at idle priority: count what they get."""
    background_priority()
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    chans = []
    for addr in addrs:
        for _ in range(n):
            ch = d.bind(_service(system, addr), transport=transport, timeout=60)
            ch.send(b"c", timeout=10)
            chans.append(ch)
    conn.send("ready")
    while True:
        cmd = conn.recv()
        if cmd == "exit":
            return
        counts = [0] * len(chans)
        index = {id(c): i for i, c in enumerate(chans)}
        last = time.monotonic()
        while min(counts) < cmd[1] and time.monotonic() - last < GIVE_UP:
            for ch in d.poll(0.5):
                got = len(ch.recv_batch(4096, timeout=0))
                counts[index[id(ch)]] += got
                if got:
                    last = time.monotonic()
        conn.send(counts)


def _measuring_proc(name: str, system: str, addr: str, core: int, conn: Any, transport: str = "multihop") -> None:
    """The measuring client of relay ``addr``: send and receive times of each event."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    ch = d.bind(_service(system, addr), transport=transport, timeout=60)
    ch.send(b"c", timeout=10)
    conn.send("ready")
    while True:
        cmd = conn.recv()
        if cmd == "exit":
            return
        send: list[int] = []
        recv: list[int] = []
        last = time.monotonic()
        while len(send) < cmd[1] and time.monotonic() - last < GIVE_UP:
            try:
                evs = ch.recv_batch(4096, timeout=0.5)
            except mh.Timeout:
                continue
            now = time.monotonic_ns()
            for e in evs:
                send.append(int.from_bytes(e[:8], "little"))
                recv.append(now)
            if evs:
                last = time.monotonic()
        conn.send((np.asarray(send, dtype=np.int64), np.asarray(recv, dtype=np.int64)))


class Floor:
    """Relays in a topology, their subscribers and a publisher (see the module docstring); a context manager."""

    def __init__(
        self,
        name: str,
        topology: Topology | str | Path = EXAMPLES / "paper_fig14.toml",
        *,
        publisher: str = "1.5.1.22",
        measuring: str = "1.6.1.10",
        per_broker: int = 5,
        grouped: bool = False,
        transport: str = "ump",
    ) -> None:
        """``transport``: the channels' (``"ump"``, the default, or ``"multihop"``, as ``LiveSystem.up``'s),
        to compare a GES system with the floor of its own channels."""
        topo = topology if isinstance(topology, Topology) else Topology.load(topology)
        self.name = name
        self.measuring = measuring
        self.rt = mh.Runtime.start(name, cores=[0, 1])
        self._procs: list[Any] = []
        self._bg: list[Any] = []
        self._ms: Any = None
        self._pub: Any = None
        self._d: Any = None
        try:
            addrs = [str(a) for a in sorted(topo.brokers)]
            core = {a: self.rt.cores[i % len(self.rt.cores)] for i, a in enumerate(addrs)}  # as LiveSystem places brokers
            up: dict[str, list[str]] = {a: [] for a in addrs}
            down = dict.fromkeys(addrs, 0)
            for ga, gb in topo.gateways:
                lo, hi = sorted((str(ga), str(gb)), key=lambda x: addrs.index(x))
                up[lo].append(hi)
                down[hi] += 1
            clients = {a: (0 if a == publisher else 1 if a == measuring else per_broker) for a in addrs}
            clients[publisher] += 1  # the publisher's channel
            readies = {}
            for a in addrs:
                r, w = _CTX.Pipe(duplex=False)
                p = _CTX.Process(target=_relay_proc, args=(name, name, a, core[a], up[a], down[a], clients[a], w, transport), daemon=True)
                p.start()
                self._procs.append(p)
                readies[a] = r
            for a in addrs:  # every relay has exported (relays retry binds until their peers have)
                if not readies[a].poll(120) or readies[a].recv() != "listening":
                    raise mh.MonitorError(f"relay {a} did not start")
            served = [a for a in addrs if a not in (publisher, measuring)] if per_broker > 0 else []
            # a process per broker's clients (the testbed's layout), or (grouped) one per core for all of them
            groups = [[a for a in served if core[a] == c] for c in self.rt.cores] if grouped else [[a] for a in served]
            for g in filter(None, groups):
                r, w = _CTX.Pipe()
                p = _CTX.Process(target=_subscribers_proc, args=(name, name, g, core[g[0]], per_broker, w, transport), daemon=True)
                p.start()
                self._procs.append(p)
                self._bg.append(r)
            r, w = _CTX.Pipe()
            p = _CTX.Process(target=_measuring_proc, args=(name, name, measuring, core[measuring], w, transport), daemon=True)
            p.start()
            self._procs.append(p)
            self._ms = r
            for c in [*self._bg, self._ms]:
                if not c.poll(120) or c.recv() != "ready":
                    raise mh.MonitorError("a floor subscriber did not get ready")
            self._d = self.rt.dispatcher(core[publisher])
            self._pub = self._d.bind(_service(name, publisher), transport=transport, timeout=60)
            self._pub.send(b"p", timeout=10)
            for a in addrs:
                if not readies[a].poll(120) or readies[a].recv() != "ready":
                    raise mh.MonitorError(f"relay {a} did not connect")
        except BaseException:
            self.close()
            raise

    def latency(self, count: int = 200, rate: float = 10.0, size: int = 50) -> np.ndarray:
        """Publish ``count`` events of ``size`` bytes at ``rate`` per second; the measuring client's latencies (ms).

        Every subscriber must get every event (the case waits for them all, as the testbed does).
        """
        for c in [*self._bg, self._ms]:
            c.send(("count", count))
        pad = b"\0" * max(0, size - 8)
        period = int(1e9 / rate)
        t0 = time.monotonic_ns()
        for k in range(count):
            due = t0 + k * period
            while True:
                now = time.monotonic_ns()
                if now >= due:
                    break
                if due - now > 2_000_000:
                    time.sleep((due - now - 1_000_000) / 1e9)
            self._pub.send(time.monotonic_ns().to_bytes(8, "little") + pad, timeout=10)
        for c in self._bg:
            got = c.recv()
            if min(got) < count:
                raise mh.MonitorError(f"a floor subscriber got {min(got)} of {count} events")
        send, recv = self._ms.recv()
        if len(send) < count:
            raise mh.MonitorError(f"the measuring client got {len(send)} of {count} events")
        return np.asarray((recv - send) / 1e6)

    def close(self) -> None:
        """Stop every process and the runtime."""
        for c in [*self._bg, *([self._ms] if self._ms is not None else [])]:
            try:
                c.send("exit")
            except (OSError, BrokenPipeError):
                pass
        if self._pub is not None:
            self._pub.close()
        if self._d is not None:
            self._d.detach()
        self.rt.stop()  # the relays' channels close with the monitors
        for p in self._procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)

    def __enter__(self) -> Floor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":  # a quick look: python -m multihop.bench.ges.floor
    for grouped in (False, True):
        with Floor(f"floor-{os.getpid()}", grouped=grouped) as f:
            f.latency(50, 50)
            lat = f.latency()
            how = "a process per core" if grouped else "a process per broker"
            print(f"floor, 9 hops, 100 subscribers ({how}), 10/s: mean {lat.mean():.3f} ms, median {np.median(lat):.3f} ms")
