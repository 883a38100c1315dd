"""Handles per second through channels (issue 16 §1), against socket.send_fds in the same run.

Run: .venv/bin/python benches/bench_caps.py [--count 2000]

Two processes on CPUs 0 and 1 (real cores): a sender passes one memfd per message (and, in a second
case, 4 per message) and the receiver takes them (recv_with_handles) and closes them. Measured over
a UMP channel (handles through the two monitors of the channel's ends) and a multi-hop channel through
2 monitors (direct routing) and 3 monitors (ring of 3 cores, one more monitor on the path; virtual
core 2 shares a CPU). The baseline is what the kernel alone does: socket.send_fds / recv_fds over a
Unix socket pair between two processes, the same counts. Each figure: messages/s, handles/s, the
baseline's, and the ratio.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import time
from typing import Any

import multihop as mh

CTX = mp.get_context("spawn")


def _pin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu % os.cpu_count()})  # type: ignore[arg-type]


def _mh_receiver(name: str, core: int, count: int, ready: Any, out: Any) -> None:
    _pin(core)
    d = mh.Runtime.attach(name).dispatcher(core)
    svc = d.export("caps-bench")
    ready.set()
    ch = svc.accept(timeout=30)
    ch.recv_with_handles(timeout=30)  # warm-up message
    t0 = time.perf_counter()
    for _ in range(count):
        _, hs = ch.recv_with_handles(timeout=60)
        for h in hs:
            h.close()
    out.put(time.perf_counter() - t0)
    ch.recv(timeout=30)


def _sock_receiver(sock: socket.socket, count: int, per: int, out: Any) -> None:
    _pin(1)
    socket.recv_fds(sock, 64, per)
    t0 = time.perf_counter()
    for _ in range(count):
        _, fds, _, _ = socket.recv_fds(sock, 64, per)
        for fd in fds:
            os.close(fd)
    out.put(time.perf_counter() - t0)
    sock.send(b"done")


def bench_channel(rt: mh.Runtime, transport: str, cli_core: int, srv_core: int, count: int, per: int) -> float:
    """Seconds for `count` messages of `per` handles each, client in this process."""
    ready, out = CTX.Event(), CTX.Queue()
    p = CTX.Process(target=_mh_receiver, args=(rt.name, srv_core, count, ready, out))
    p.start()
    try:
        assert ready.wait(30)
        _pin(cli_core)
        ch = rt.dispatcher(core=cli_core).bind("caps-bench", transport=transport, timeout=10)
        fd = os.memfd_create("bench")
        fds = [fd] * per
        ch.send(b"warm-up", handles=fds)
        for _ in range(count):
            ch.send(b"m", handles=fds, timeout=60)
        took = out.get(timeout=300)
        ch.send(b"end")
        os.close(fd)
        return took
    finally:
        p.join(30)
        if p.is_alive():
            p.kill()


def bench_send_fds(count: int, per: int) -> float:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    out = CTX.Queue()
    p = CTX.Process(target=_sock_receiver, args=(b, count, per, out))
    p.start()
    _pin(0)
    fd = os.memfd_create("bench")
    socket.send_fds(a, [b"w"], [fd] * per)
    for _ in range(count):
        socket.send_fds(a, [b"m"], [fd] * per)
    took = out.get(timeout=300)
    a.recv(16)
    p.join(30)
    os.close(fd)
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=2000)
    a = ap.parse_args()
    rows = []
    for per in (1, 4):
        base = bench_send_fds(a.count, per)
        rows.append((f"socket.send_fds, {per}/msg", base, base))
        with mh.Runtime.start(f"bench-caps-{os.getpid()}", cores=[0, 1]) as rt:
            rows.append((f"UMP 0->1, {per}/msg", bench_channel(rt, "ump", 0, 1, a.count, per), base))
            rows.append((f"multi-hop 0->1 (2 monitors), {per}/msg", bench_channel(rt, "multihop", 0, 1, a.count, per), base))
        with mh.Runtime.start(f"bench-caps3-{os.getpid()}", cores=[0, 1, 2], routing="ring") as rt:
            rows.append((f"multi-hop 0->2 (3 monitors, virtual core 2), {per}/msg", bench_channel(rt, "multihop", 0, 2, a.count, per), base))
    print(f"{a.count} messages per case; two processes on CPUs 0 and 1 (real cores; core 2 is virtual)")
    print(f"{'case':52} {'msgs/s':>10} {'handles/s':>10} {'baseline handles/s':>19} {'ratio':>7}")
    for (case, took, base), per in zip(rows, [1] * 4 + [4] * 4, strict=True):
        rate = a.count / took
        print(f"{case:52} {rate:10.0f} {rate * per:10.0f} {a.count * per / base:19.0f} {base / took:7.3f}")


if __name__ == "__main__":
    main()
