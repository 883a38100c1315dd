"""Functions run in child processes by the end-to-end tests (importable by spawn)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

import multihop as mh

CTX = mp.get_context("spawn")

BLOB = np.random.default_rng(1234).bytes(2 << 20)  # 2 MiB of fixed random bytes


def small_message(i: int, size: int) -> bytes:
    """Message i of the 0-512 byte stream: sequence number then fixed bytes."""
    return (i.to_bytes(8, "little") + BLOB[(i * 7) % 4096 : (i * 7) % 4096 + 512])[:size]


def big_message(i: int, size: int) -> bytes:
    """Message i of the large-message stream."""
    off = (i * 4099) % (len(BLOB) - (1 << 20))
    return i.to_bytes(8, "little") + BLOB[off : off + size - 8] if size >= 8 else i.to_bytes(8, "little")[:size]


def sizes(seed: int, n: int, high: int) -> np.ndarray:
    """Deterministic random sizes in [0, high]."""
    return np.random.default_rng(seed).integers(0, high + 1, size=n)


@contextmanager
def accepted(name: str, core: int, service: str, ready: Any) -> Iterator[mh.Channel]:
    """In a child: attach to runtime `name` on `core`, export `service`, set
    `ready`, and yield the first client's channel (the dispatcher lives as long
    as the block)."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(service)
        ready.set()
        yield svc.accept(timeout=30)


def echo_server(name: str, core: int, service: str, ready: Any, count: int = -1) -> None:
    """Export `service`, accept one client, echo until it closes."""
    with accepted(name, core, service, ready) as ch:
        n = 0
        while count < 0 or n < count:
            try:
                ch.send(ch.recv(timeout=30))
            except mh.ChannelClosed:
                return
            n += 1


def stream_sender(name: str, core: int, service: str, ready: Any, kind: str, n: int, seed: int) -> None:
    """Export `service`, accept, send n messages of the given kind, wait for the ack."""
    with accepted(name, core, service, ready) as ch:
        if kind == "small":
            sz = sizes(seed, n, 512)
            batch = []
            for i in range(n):
                batch.append(small_message(i, int(sz[i])))
                if len(batch) == 1000:
                    assert ch.send_batch(batch, timeout=60) == len(batch)
                    batch = []
            if batch:
                assert ch.send_batch(batch, timeout=60) == len(batch)
        else:
            sz = np.maximum(sizes(seed, n, 1 << 20), 0)
            for i in range(n):
                ch.send(big_message(i, int(sz[i])), timeout=60)
        assert ch.recv(timeout=120) == b"ack"


def sleepy_sender(name: str, core: int, service: str, ready: Any) -> None:
    """Accept, send messages forever (until killed)."""
    with accepted(name, core, service, ready) as ch:
        i = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                ch.send(i.to_bytes(8, "little"), timeout=1)
            except mh.Timeout:
                pass
            i += 1


def exporter_then_exit(name: str, core: int, service: str, ready: Any, done: Any) -> None:
    """Export a name, signal, wait, then exit (the name must be freed)."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    svc = d.export(service)  # held: dropping the Service would withdraw the name
    ready.set()
    done.wait(30)
    assert svc.name == service
    os._exit(0)


def start_and_abandon(root: str, name: str, q: Any) -> None:
    """Start a runtime and exit without stopping it."""
    os.environ["MULTIHOP_RUNTIME_ROOT"] = root
    rt = mh.Runtime.start(name, cores=[0, 1])
    q.put((str(rt.dir), list(rt.monitor_pids.values())))
    q.close()
    q.join_thread()  # flush before the abrupt exit
    os._exit(0)


def blocked_receiver(name: str, core: int, service: str, ready: Any) -> None:
    """Bind and block in recv() forever; used for the Ctrl-C test."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        ch = d.bind(service, timeout=30)
        ready.set()
        try:
            ch.recv()
        except KeyboardInterrupt:
            os._exit(42)
        os._exit(1)


def spawn(target: Any, *args: Any) -> Any:
    """Start `target(*args)` in a spawned process."""
    p = CTX.Process(target=target, args=args, daemon=True)
    p.start()
    return p


@contextmanager
def child(target: Any, *args: Any) -> Iterator[Any]:
    """Run `target(*args)` in a spawned process; kill and reap it whatever happens."""
    p = spawn(target, *args)
    try:
        yield p
    finally:
        if p.is_alive():
            p.kill()
        p.join(10)


def mh_stream_peer(
    name: str, core: int, role: str, service: str, k: int, n: int, ready: Any, result: Any, done: Any, transport: str = "multihop"
) -> None:
    """One side of the k-channel multi-hop stream test: send n seqs on each of
    k channels while checking the peer's n seqs per channel arrive in order;
    `done` (a two-party barrier) holds the channels open until the peer is finished too."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        if role == "server":
            svc = d.export(service)
            ready.set()
            chans = [svc.accept(timeout=60) for _ in range(k)]
        else:
            assert ready.wait(60)
            chans = [d.bind(service, transport=transport, window=64, timeout=30) for _ in range(k)]
        # The first message on each channel names it, so both sides agree on order.
        if role == "client":
            for i, ch in enumerate(chans):
                ch.send(i.to_bytes(4, "little"))
        else:
            named = {}
            for ch in chans:
                named[int.from_bytes(ch.recv(timeout=30), "little")] = ch
            chans = [named[i] for i in range(k)]
        sent, got = [0] * k, [0] * k
        chunk = 256
        deadline = time.monotonic() + 240
        while (min(sent) < n or min(got) < n) and time.monotonic() < deadline:
            for i, ch in enumerate(chans):
                if sent[i] < n:
                    m = min(chunk, n - sent[i])
                    batch = [(i << 40 | (sent[i] + j)).to_bytes(8, "little") for j in range(m)]
                    sent[i] += ch.send_batch(batch, timeout=0)
            for ch in d.poll(timeout=0.05):
                i = chans.index(ch)
                for msg in ch.recv_batch(4096, timeout=0):
                    v = int.from_bytes(msg, "little")
                    assert v >> 40 == i, f"channel {i} got a message of channel {v >> 40}"
                    assert v & ((1 << 40) - 1) == got[i], f"channel {i}: expected {got[i]}, got {v & ((1 << 40) - 1)}"
                    got[i] += 1
        result.put((role, sent, got))
        result.close()
        result.join_thread()
        # Hold the channels open until the peer is done too.
        done.wait(240)


def mh_echo(name: str, core: int, service: str, ready: Any) -> None:
    """Accept multi-hop clients and echo on all of them with poll() until killed."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(service)
        ready.set()
        chans = [svc.accept(timeout=30)]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for ch in d.poll(timeout=0.1):
                try:
                    ch.send(ch.recv(timeout=1), timeout=5)
                except mh.ChannelClosed:
                    chans.remove(ch)
                    ch.close()


def mh_client(name: str, core: int, service: str, ready: Any, bound: Any) -> None:
    """Bind over multi-hop, echo once, then wait to be killed."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        assert ready.wait(30)
        ch = d.bind(service, transport="multihop", timeout=30)
        ch.send(b"hi")
        bound.set()
        time.sleep(120)


def mh_send_close_exit(name: str, core: int, service: str, ready: Any, n: int) -> None:
    """Bind over multi-hop, send n messages, close, and exit at once."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    assert ready.wait(30)
    ch = d.bind(service, transport="multihop", timeout=30, window=64)
    for i in range(n):
        ch.send(i.to_bytes(4, "little"), timeout=10)
    ch.close()
    os._exit(0)


def cpu_hog(cpu: int, seconds: float, running: Any = None) -> None:
    """Spin on `cpu` for `seconds` (a CPU-bound neighbour for a monitor); set `running` as it starts."""
    os.sched_setaffinity(0, {cpu})
    end = time.monotonic() + seconds
    if running is not None:
        running.set()
    x = 0
    while time.monotonic() < end:
        for _ in range(10_000):
            x += 1


def bind_send_and_sleep(name: str, core: int, service: str, transport: str, ready: Any, payload: bytes = b"") -> None:
    """Bind to `service`, send `payload` (if any), set `ready`, then sleep until killed, reading nothing."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    ch = d.bind(service, transport=transport, timeout=30)
    if payload:
        ch.send(payload)
    ready.set()
    time.sleep(120)
    assert not ch.closed


# ---- the kill -9 / SIGSTOP attack (tests/attack, benches/bench_attack.py) -----------------


def attack_starter(root: str, name: str, cores: list[int], routing: str, pids: Any, done: Any) -> None:
    """Start runtime `name` (owned by this process), report its monitors' pids, wait until
    `done` (a shared flag) is set, stop it."""
    os.environ["MULTIHOP_RUNTIME_ROOT"] = root
    rt = mh.Runtime.start(name, cores=cores, routing=routing)
    pids.put(rt.monitor_pids)
    deadline = time.monotonic() + 300
    while not done.value and time.monotonic() < deadline:  # a flag, not an Event: we may be killed waiting
        time.sleep(0.02)
    rt.stop()


def attack_server(name: str, core: int, service: str, ready: Any, progress: Any, result: Any, n: int) -> None:
    """Accept one client and read `n` sequence numbers, checking each is the next one; report
    (role, count, how it ended, monotonic end time)."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    svc = d.export(service)
    ready.value = 1
    got, how = 0, "finished"
    try:
        ch = svc.accept(timeout=60)
        deadline = time.monotonic() + 120
        while got < n:
            msgs = ch.recv_batch(256, timeout=max(0.0, deadline - time.monotonic()))
            if not msgs:
                how = "timeout"
                break
            for m in msgs:
                v = int.from_bytes(m, "little")
                if v != got:
                    how = f"out of order: expected {got}, got {v}"
                    raise StopIteration
                got += 1
            progress.value = got
        if got == n:
            ch.recv(timeout=120)  # its library runs (and acks) until the client closes
            how = "a message after the last"
    except mh.ChannelClosed:
        how = "closed" if got < n else "finished"
    except mh.Timeout:
        how = "timeout"
    except StopIteration:
        pass
    result.put(("server", got, how, time.monotonic()))
    result.close()
    result.join_thread()


def attack_client(name: str, core: int, service: str, transport: str, ready: Any, progress: Any, result: Any, n: int, acted: Any = None) -> None:
    """Bind and send sequence numbers 0..n-1 in batches; report (role, accepted, how it ended,
    monotonic end time). A batch cut short by a close counts what it sent (``e.sent``). With
    ``acted`` (a flag), the last batch waits until the scenario has acted: however fast the
    stream, the kill or stop lands before its end."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    deadline = time.monotonic() + 60
    while not ready.value:  # flags, not Events: a killed waiter would wedge an Event
        assert time.monotonic() < deadline, "the server never exported"
        time.sleep(0.005)
    ch = d.bind(service, transport=transport, timeout=60)
    sent, how = 0, "finished"
    try:
        while sent < n:
            batch = [(sent + j).to_bytes(8, "little") for j in range(min(64, n - sent))]
            if acted is not None and sent + len(batch) == n:
                held = time.monotonic() + 120
                while not acted.value and time.monotonic() < held:
                    time.sleep(0.001)
            k = ch.send_batch(batch, timeout=120)
            sent += k
            progress.value = sent
            if k < len(batch):
                how = "timeout"
                break
        if how == "finished":
            ch.flush(timeout=120)  # delivered, not just accepted
            ch.close()
    except mh.ChannelClosed as e:
        sent += getattr(e, "sent", 0) or 0
        how = "closed"
    except mh.Timeout:
        how = "flush timeout"
    result.put(("client", sent, how, time.monotonic()))
    result.close()
    result.join_thread()


def bind_many_and_sleep(name: str, core: int, service: str, k: int, ready: Any) -> None:
    """Bind `k` multi-hop channels to `service`, set `ready`, sleep until killed."""
    rt = mh.Runtime.attach(name)
    d = rt.dispatcher(core)
    chans = [d.bind(service, transport="multihop", timeout=60) for _ in range(k)]
    ready.set()
    time.sleep(120)
    assert len(chans) == k
