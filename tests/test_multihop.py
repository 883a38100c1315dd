"""Multi-hop channels end to end: routing modes, forwarding, credits, teardown."""

from __future__ import annotations

import os
import signal
import struct
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

import multihop as mh
from multihop import rts
from conftest import unique_name
import procs

SIX = mh.Topology(sockets=[[0, 1, 2], [3, 4, 5]])


def frame(vci: int, payload: bytes, kind: int = 1, direction: int = 1) -> bytes:
    """A raw multi-hop frame as core-rs/src/wire.rs lays it out (for forgers)."""
    return struct.pack("<QBBHI", vci, direction, kind, 0, 0) + payload


@contextmanager
def runtime(cores: list[int], routing: str, topology: mh.Topology | None = None) -> Iterator[mh.Runtime]:
    rt = mh.Runtime.start(unique_name(routing), cores=cores, routing=routing, topology=topology)
    try:
        yield rt
    finally:
        rt.stop()
        pair.keep.clear()  # type: ignore[attr-defined]


def pair(rt: mh.Runtime, client_core: int, server_core: int, name: str, **kw) -> tuple[mh.Channel, mh.Channel]:  # type: ignore[no-untyped-def]
    """A multi-hop channel between two dispatchers of this process."""
    srv, cli = rt.dispatcher(server_core), rt.dispatcher(client_core)
    svc = srv.export(name)
    box: list[mh.Channel] = []
    t = threading.Thread(target=lambda: box.append(svc.accept(timeout=10)))
    t.start()
    c = cli.bind(name, transport="multihop", timeout=10, **kw)
    t.join(10)
    pair.keep.extend([srv, cli])  # type: ignore[attr-defined]
    return c, box[0]


pair.keep = []  # type: ignore[attr-defined]  # the pairs' dispatchers, released with their runtime


@pytest.mark.parametrize("mode", rts.MODES)
def test_observed_hops_equal_the_table_path(mode: str) -> None:
    cores = [0, 1, 2, 3, 4, 5]
    table = rts.routing_table(SIX, mode, cores)
    with runtime(cores, mode, SIX) as rt:
        status = rt.status()
        # Monitor links exist exactly where the table names a next hop.
        up = {(min(m["core"], p), max(m["core"], p)) for m in status["monitors"] for p in m["monitor_links_up"]}
        assert up == rts.links(table)
        for m in status["monitors"]:
            assert {int(k): v for k, v in m["routing_row"].items()} == table[m["core"]]
        for i, (src, dst) in enumerate([(0, 5), (5, 0), (1, 4), (2, 3), (4, 4), (3, 1)]):
            c, s = pair(rt, src, dst, f"hops-{i}")
            want = len(rts.path(table, src, dst))  # monitors on the path
            assert c.stats()["hops"] == want == s.stats()["hops"], (mode, src, dst)
            c.send(b"ping")
            assert s.recv(timeout=5) == b"ping"
            s.send(b"pong")
            assert c.recv(timeout=5) == b"pong"
            c.close()
            s.close()
        deadline = time.monotonic() + 5
        while any(m["data"]["forwarding_entries"] for m in rt.status()["monitors"]):
            assert time.monotonic() < deadline, "forwarding entries left after every channel closed"
            time.sleep(0.02)


def test_same_core_bind_goes_through_one_monitor_and_large_messages_cross() -> None:
    with runtime([0, 1], "direct") as rt:
        c, s = pair(rt, 1, 1, "local")
        assert c.stats()["hops"] == 1
        c2, s2 = pair(rt, 0, 1, "big")
        for size in (0, 1, 55, 57, 4096, 100_000, 1 << 20):
            msg = os.urandom(size)
            c2.send(msg, timeout=10)
            assert s2.recv(timeout=10) == msg
        with pytest.raises(mh.MessageTooLarge):
            c2.send(b"x" * ((1 << 20) + 1))


def test_million_messages_per_direction_on_eight_channels_in_ring_mode() -> None:
    k, n = 8, 125_000  # 8 channels x 125,000 = 1,000,000 messages each way
    with runtime([0, 1, 2], "ring") as rt:
        ready, result = procs.CTX.Event(), procs.CTX.Queue()
        with procs.child(procs.mh_stream_peer, rt.name, 2, "server", "stream", k, n, ready, result) as srv, procs.child(
            procs.mh_stream_peer, rt.name, 0, "client", "stream", k, n, ready, result
        ) as cli:
            outcomes = [result.get(timeout=280), result.get(timeout=280)]
            for role, sent, received in outcomes:
                assert sent == [n] * k, f"{role} sent {sent}"
                assert received == [n] * k, f"{role} received {received}"
            srv.join(30)
            cli.join(30)
            assert srv.exitcode == 0 and cli.exitcode == 0
        # Once both ends close, acks still in flight against the TEARDOWN meet
        # removed entries and are dropped (counted); never more than the windows.
        st = rt.status()
        assert sum(m["data"]["dropped"] for m in st["monitors"]) <= 2 * k * 64


def test_stalled_receiver_blocks_sender_after_window_and_bounds_monitor_queues() -> None:
    window = 8
    with runtime([0, 1, 2], "ring") as rt:
        c, s = pair(rt, 0, 2, "stall", window=window)
        sent = 0
        with pytest.raises(mh.TxBusy, match="credit window"):
            for _ in range(10_000):
                c.try_send(sent.to_bytes(8, "little"))
                sent += 1
        assert sent == window
        with pytest.raises(mh.Timeout):
            c.send(b"more", timeout=0.3)
        time.sleep(1.0)  # the receiver does not read for a second
        st = rt.status()
        assert max(m["data"]["max_queue"] for m in st["monitors"]) <= window
        for i in range(window):
            assert s.recv(timeout=5) == i.to_bytes(8, "little")
        c.send(b"room again", timeout=5)  # the dummy ack returned the credits
        assert s.recv(timeout=5) == b"room again"
        assert s.stats()["dummies_sent"] >= 1
        assert c.stats()["busy_count"] >= 1


def test_forged_vcis_are_dropped_counted_and_harmless() -> None:
    with runtime([0, 1], "direct") as rt:
        c, s = pair(rt, 0, 1, "victim")
        forger = rt.dispatcher(0)
        before = rt.status()["monitors"][0]["data"]
        for i in range(100):
            forger._inject_raw(frame(vci=0xF0F0_0000 + i, payload=b"evil"))
        forger._inject_raw(b"\x01\x02short")  # not even a header
        deadline = time.monotonic() + 5
        while rt.status()["monitors"][0]["data"]["dropped"] < before["dropped"] + 100:
            assert time.monotonic() < deadline, "forged messages not counted"
            time.sleep(0.02)
        after = rt.status()["monitors"][0]["data"]
        assert after["malformed"] >= before["malformed"] + 1
        assert s.try_recv() is None and c.try_recv() is None  # nothing delivered
        assert rt.alive
        c.send(b"still fine")
        assert s.recv(timeout=5) == b"still fine"


def _closed_within(ch: mh.Channel, seconds: float) -> float:
    t0 = time.monotonic()
    with pytest.raises(mh.ChannelClosed):
        for _ in range(1_000_000):
            ch.recv(timeout=seconds)
    return time.monotonic() - t0


def test_killed_client_closes_the_service_end_and_others_keep_working() -> None:
    with runtime([0, 1, 2], "ring") as rt, rt.dispatcher(2) as srv:
        svc = srv.export("kill-client")
        other_c, other_s = pair(rt, 1, 2, "bystander")
        ready, bound = procs.CTX.Event(), procs.CTX.Event()
        ready.set()
        with procs.child(procs.mh_client, rt.name, 0, "kill-client", ready, bound) as p:
            ch = svc.accept(timeout=30)
            assert bound.wait(30) and ch.recv(timeout=5) == b"hi"
            os.kill(p.pid, signal.SIGKILL)
            assert _closed_within(ch, 5) < 1.0
        other_c.send(b"alive")
        assert other_s.recv(timeout=5) == b"alive"


def test_killed_service_closes_the_client_end() -> None:
    with runtime([0, 1, 2], "ring") as rt, rt.dispatcher(0) as cli:
        ready = procs.CTX.Event()
        with procs.child(procs.mh_echo, rt.name, 2, "kill-service", ready) as p:
            assert ready.wait(30)
            ch = cli.bind("kill-service", transport="multihop", timeout=30)
            ch.send(b"x")
            assert ch.recv(timeout=5) == b"x"
            os.kill(p.pid, signal.SIGKILL)
            assert _closed_within(ch, 5) < 1.0
            with pytest.raises(mh.ChannelClosed):
                ch.send(b"anyone?")


def test_killed_intermediate_monitor_closes_both_ends() -> None:
    with runtime([0, 1, 2], "ring") as rt:
        c, s = pair(rt, 0, 2, "through-1")  # ring: 0 -> 1 -> 2
        assert c.stats()["hops"] == 3
        c.send(b"before")
        assert s.recv(timeout=5) == b"before"
        os.kill(rt.monitor_pids[1], signal.SIGKILL)
        assert _closed_within(s, 5) < 1.0
        assert _closed_within(c, 5) < 1.0


def test_poll_serves_many_clients_from_one_thread() -> None:
    with runtime([0, 1], "direct") as rt, rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("poller")
        ends: list[mh.Channel] = []
        t = threading.Thread(target=lambda: ends.extend(svc.accept(timeout=10) for _ in range(5)))
        t.start()
        clients = [cli.bind("poller", transport="multihop", timeout=10) for _ in range(5)]
        t.join(10)
        for i, c in enumerate(clients):
            c.send(i.to_bytes(1, "little"))
        by_index = {}
        for e in ends:
            by_index[e.recv(timeout=5)[0]] = e
        assert srv.poll(timeout=0.05) == []
        clients[3].send(b"three")
        clients[1].send(b"one")
        seen: set[int] = set()
        deadline = time.monotonic() + 5
        while len(seen) < 2 and time.monotonic() < deadline:
            for e in srv.poll(timeout=1):
                seen.add(next(i for i, x in by_index.items() if x is e))
                e.recv(timeout=1)
        assert seen == {1, 3}
        assert srv.poll(timeout=0.05) == []
        clients[4].close()
        ready = srv.poll(timeout=5)
        assert ready == [by_index[4]]
        with pytest.raises(mh.ChannelClosed):
            by_index[4].recv(timeout=1)


def test_bad_routing_and_binds_are_clear_errors() -> None:
    with pytest.raises(mh.RoutingError, match="unknown routing mode"):
        mh.Runtime.start(unique_name(), cores=[0, 1], routing="hypercube")
    with runtime([0, 1], "ring") as rt, rt.dispatcher(0) as d, rt.dispatcher(1) as srv:
        with pytest.raises(mh.BindError, match="no service"):
            d.bind("nobody", transport="multihop", timeout=2)
        svc = srv.export("grumpy", on_connect=lambda info: info["transport"] != "multihop")
        t = threading.Thread(target=lambda: pytest.raises(mh.Timeout, svc.accept, timeout=1.5))
        t.start()
        with pytest.raises(mh.BindError, match="refused"):
            d.bind("grumpy", transport="multihop", timeout=5)
        t.join(10)
        with pytest.raises(ValueError, match="window"):
            d.bind("grumpy", transport="multihop", window=0)
        assert all(m["data"]["forwarding_entries"] == 0 for m in rt.status()["monitors"])


def test_messages_sent_just_before_close_and_exit_are_delivered() -> None:
    for attempt in range(5):  # the race this guards against was intermittent
        with runtime([0, 1], "direct") as rt, rt.dispatcher(1) as srv:
            svc = srv.export("last-words")
            ready = procs.CTX.Event()
            with procs.child(procs.mh_send_close_exit, rt.name, 0, "last-words", ready, 20) as p:
                ready.set()
                ch = svc.accept(timeout=30)
                p.join(10)
                time.sleep(0.2)
                got = [int.from_bytes(ch.recv(timeout=5), "little") for _ in range(20)]
                assert got == list(range(20)), f"attempt {attempt}"
                with pytest.raises(mh.ChannelClosed):
                    ch.recv(timeout=5)
