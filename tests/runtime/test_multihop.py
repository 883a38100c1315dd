"""Multi-hop channels end to end: routing modes, forwarding, credits, teardown."""

from __future__ import annotations

import os
import signal
import struct
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pytest

import multihop as mh
import procs
from multihop import _core, rts
from session import unique_name

SIX = mh.Topology(sockets=[[0, 1, 2], [3, 4, 5]])
KIND_DATA, KIND_DUMMY, KIND_TEARDOWN = 1, 2, 3


def frame(vci: int, payload: bytes, kind: int = KIND_DATA, direction: int = 1) -> bytes:
    """A raw multi-hop frame as core-rs/base/src/wire/mod.rs lays it out (for forgers)."""
    return struct.pack("<QBBHI", vci, direction, kind, 0, 0) + payload


@contextmanager
def runtime(cores: list[int], routing: str, topology: mh.Topology | None = None) -> Iterator[mh.Runtime]:
    rt = mh.Runtime.start(unique_name(routing), cores=cores, routing=routing, topology=topology)
    try:
        yield rt
    finally:
        rt.stop()
        pair.keep.clear()  # type: ignore[attr-defined]


def pair(rt: mh.Runtime, client_core: int, server_core: int, name: str, **kw: Any) -> tuple[mh.Channel, mh.Channel]:
    """A multi-hop channel between two dispatchers of this process."""
    srv, cli = rt.dispatcher(server_core), rt.dispatcher(client_core)
    return bound_pair(srv, cli, name, **kw)


def bound_pair(srv: mh.Dispatcher, cli: mh.Dispatcher, name: str, **kw: Any) -> tuple[mh.Channel, mh.Channel]:
    """A multi-hop channel from dispatcher `cli` to a new service of `srv`."""
    svc = srv.export(name)
    box: list[mh.Channel] = []
    t = threading.Thread(target=lambda: box.append(svc.accept(timeout=10)))
    t.start()
    c = cli.bind(name, transport="multihop", timeout=10, **kw)
    t.join(10)
    pair.keep.extend([srv, cli])  # type: ignore[attr-defined]
    assert box, f"service {name!r} did not accept"
    return c, box[0]


pair.keep = []  # type: ignore[attr-defined]  # the pairs' dispatchers, released with their runtime


def until(what: str, check: Callable[[], bool], seconds: float = 5.0) -> None:
    """Wait (bounded) until `check()` holds."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def at_last_monitor(rt: mh.Runtime, core: int) -> int:
    """Messages the monitor of `core` put on its dispatchers' links or queued for them."""
    (m,) = [m for m in rt.status()["monitors"] if m["core"] == core]
    return sum(link["forwarded_out"] + link["queued"] for link in m["data"]["links"] if link["kind"] == "dispatcher")


def entries(rt: mh.Runtime) -> dict[int, int]:
    """Forwarding-table size of every live monitor, by core."""
    return {m["core"]: m["data"]["forwarding_entries"] for m in rt.status()["monitors"] if "data" in m}


def counter(rt: mh.Runtime, name: str) -> dict[int, int]:
    """A data-plane counter (forwarded, dropped, malformed) of every monitor, by core."""
    return {m["core"]: m["data"][name] for m in rt.status()["monitors"]}


def closed_within(ch: mh.Channel, seconds: float) -> float:
    """Seconds until `ch` raises ChannelClosed, reading what came before (at most `seconds`)."""
    t0 = time.monotonic()
    with pytest.raises(mh.ChannelClosed):
        while time.monotonic() - t0 < seconds:
            ch.recv(timeout=max(seconds - (time.monotonic() - t0), 0.01))
    return time.monotonic() - t0


def _all_threads_stopped(pid: int) -> bool:
    tasks = os.listdir(f"/proc/{pid}/task")
    for t in tasks:
        with open(f"/proc/{pid}/task/{t}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state not in ("T", "t"):
            return False
    return bool(tasks)


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """Hold process `pid` stopped (SIGSTOP) for the block, from the moment every
    thread of it has stopped (delivery is not instant); SIGCONT whatever happens."""
    os.kill(pid, signal.SIGSTOP)
    try:
        until(f"every thread of process {pid} has stopped", lambda: _all_threads_stopped(pid))
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("mode", rts.MODES)
def test_observed_paths_equal_the_table_for_every_core_pair(mode: str) -> None:
    cores = [0, 1, 2, 3, 4, 5]
    table = rts.routing_table(SIX, mode, cores)
    with runtime(cores, mode, SIX) as rt:
        status = rt.status()
        # Monitor links exist exactly where the table names a next hop.
        up = {(min(m["core"], p), max(m["core"], p)) for m in status["monitors"] for p in m["monitor_links_up"]}
        assert up == rts.links(table)
        for m in status["monitors"]:
            assert {int(k): v for k, v in m["routing_row"].items()} == table[m["core"]]
        srvs = {c: rt.dispatcher(c) for c in cores}
        clis = {c: rt.dispatcher(c) for c in cores}
        for i, (src, dst) in enumerate((s, d) for s in cores for d in cores):
            c, s = bound_pair(srvs[dst], clis[src], f"path-{i}")
            path = rts.path(table, src, dst)
            assert c.stats()["hops"] == len(path) == s.stats()["hops"], (mode, src, dst)
            # The circuit holds two entries (one per direction) on exactly the
            # monitors of the table's path, and none anywhere else.
            assert entries(rt) == {core: (2 if core in path else 0) for core in cores}, (mode, path)
            c.send(b"ping")
            assert s.recv(timeout=5) == b"ping"
            s.send(b"pong")
            assert c.recv(timeout=5) == b"pong"
            # Either end may close; the other's next call raises within a second.
            closer, other = (c, s) if i % 2 else (s, c)
            closer.close()
            assert closed_within(other, 1.0) < 1.0
            other.close()
            until("the circuit's entries are gone", lambda: not any(entries(rt).values()), 2.0)


def test_same_core_bind_goes_through_one_monitor_and_large_messages_cross() -> None:
    with runtime([0, 1], "direct") as rt:
        c, s = pair(rt, 1, 1, "local")
        assert c.stats()["hops"] == 1
        c.send(b"here")
        assert s.recv(timeout=5) == b"here"
        c2, s2 = pair(rt, 0, 1, "big")
        for size in (0, 1, 55, 57, 4096, 100_000, 1 << 20):
            msg = os.urandom(size)
            c2.send(msg, timeout=10)
            assert s2.recv(timeout=10) == msg
            s2.send(msg, timeout=10)
            assert c2.recv(timeout=10) == msg
        with pytest.raises(mh.MessageTooLarge):
            c2.send(b"x" * ((1 << 20) + 1))


def test_million_messages_per_direction_on_eight_channels_in_ring_mode() -> None:
    k, n = 8, 1_000_000  # 8 channels, each carrying 1,000,000 messages each way
    with runtime([0, 1, 2], "ring") as rt:
        ready, result, done = procs.CTX.Event(), procs.CTX.Queue(), procs.CTX.Barrier(2)
        with (
            procs.child(procs.mh_stream_peer, rt.name, 2, "server", "stream", k, n, ready, result, done) as srv,
            procs.child(procs.mh_stream_peer, rt.name, 0, "client", "stream", k, n, ready, result, done) as cli,
        ):
            outcomes = [result.get(timeout=600), result.get(timeout=600)]
            for role, sent, received in outcomes:
                assert sent == [n] * k, f"{role} sent {sent}"
                assert received == [n] * k, f"{role} received {received}"
            srv.join(30)
            cli.join(30)
            assert srv.exitcode == 0 and cli.exitcode == 0
        # Once both ends close, acks still in flight against the TEARDOWN meet
        # removed entries and are dropped (counted); never more than the windows.
        assert sum(counter(rt, "dropped").values()) <= 2 * k * 64


def test_stalled_receiver_blocks_sender_after_window_and_bounds_monitor_queues() -> None:
    window, size = 16, 64 * 1024  # 64 KiB: a link ring holds 3, so the monitors must queue
    with runtime([0, 1, 2], "ring") as rt:
        c, s = pair(rt, 0, 2, "stall", window=window)
        sent = 0
        most = 4 * ((1 << 20) // (size + 4))  # four held frames of the 1 MiB maximum (core-rs/dispatcher/src/multihop/held.rs): 60
        with pytest.raises(mh.Timeout):
            for _ in range(window * most // 4 + most + 1):  # every frame full at the most
                c.send(sent.to_bytes(8, "little") * (size // 8), timeout=1.0)
                sent += 1
        # The window's frames went (a message that met a full link was held and went with others as one
        # frame); then the sender held one frame's worth in its own process, and waited.
        assert c.stats()["in_flight"] == window and c.stats()["held"] == most
        assert window + most <= sent <= window * most // 4 + most
        with pytest.raises(mh.TxBusy, match="held"):
            c.try_send(b"one more")
        # The receiver reads nothing: wait until all `window` messages are at the last monitor (on the
        # receiver's link ring or queued for it), so every monitor on the path has had to hold them.
        until("every message is at the last monitor", lambda: at_last_monitor(rt, 2) == window, 30)
        queued = [m["data"]["max_queue"] for m in rt.status()["monitors"]]
        assert 0 < max(queued) <= window, queued
        for i in range(sent):  # the held frame leaves as the receiver's acks return credit
            assert s.recv(timeout=5) == i.to_bytes(8, "little") * (size // 8)
        c.send(b"room again", timeout=5)  # the dummy acks returned the credits
        assert s.recv(timeout=5) == b"room again"
        assert s.stats()["dummies_sent"] >= 1
        assert c.stats()["busy_count"] >= 1


def test_acks_ride_on_replies_and_every_monitor_forwards_each_message_once() -> None:
    with runtime([0, 1, 2], "ring") as rt:
        c, s = pair(rt, 0, 2, "counted", window=16)
        hops = c.stats()["hops"]
        assert hops == 3
        before = sum(counter(rt, "forwarded").values())
        rounds = 200
        for i in range(rounds):
            c.send(i.to_bytes(4, "little"))
            s.send(s.recv(timeout=5))
            assert c.recv(timeout=5) == i.to_bytes(4, "little")
        # Two-way traffic: every ack is piggy-backed, no dummy is needed.
        assert c.stats()["dummies_sent"] == 0 and s.stats()["dummies_sent"] == 0
        assert c.stats()["acks_sent"] >= rounds - 1 and s.stats()["acks_sent"] >= rounds - 1
        assert sum(counter(rt, "forwarded").values()) - before == 2 * rounds * hops
        # One-way traffic: the receiver acknowledges with a dummy every window/2.
        before = sum(counter(rt, "forwarded").values())
        for _i in range(64):
            c.send(b"x", timeout=5)
            assert s.recv(timeout=5) == b"x"
        dummies = s.stats()["dummies_sent"]
        assert dummies == 64 // 8
        until("dummies are forwarded", lambda: sum(counter(rt, "forwarded").values()) - before == (64 + dummies) * hops)
        assert c.try_recv() is None  # reads the acks waiting on its link
        assert c.stats()["in_flight"] == 0


def test_forged_vcis_on_a_dispatcher_link_are_dropped_counted_and_harmless() -> None:
    with runtime([0, 1], "direct") as rt:
        c, s = pair(rt, 0, 1, "victim")
        forger = rt.dispatcher(0)
        before = rt.status()["monitors"][0]["data"]
        for i in range(100):
            forger._inject_raw(frame(vci=0xF0F0_0000 + i, payload=b"evil"))
        # The victim's own VCI, from another link, as data and as a teardown.
        forger._inject_raw(frame(vci=c._vcis()[1], payload=b"evil"))
        forger._inject_raw(frame(vci=c._vcis()[1], payload=b"", kind=KIND_TEARDOWN))
        forger._inject_raw(b"\x01\x02short")  # not even a header
        until("forged messages are counted", lambda: rt.status()["monitors"][0]["data"]["malformed"] > before["malformed"])  # the last one injected
        after = rt.status()["monitors"][0]["data"]
        assert after["dropped"] == before["dropped"] + 101  # data frames
        assert after["late"] == before["late"] + 1  # the teardown
        assert after["malformed"] == before["malformed"] + 1
        assert s.try_recv() is None and c.try_recv() is None  # nothing delivered
        assert rt.alive
        c.send(b"still fine")
        assert s.recv(timeout=5) == b"still fine"
        s.send(b"both ways")
        assert c.recv(timeout=5) == b"both ways"


def test_forged_frames_on_a_monitor_link_are_dropped_counted_and_harmless() -> None:
    # Ring of four: monitor 0 has links to 1 and 3. The forger claims to be
    # monitor 3 (a stranger is refused), replacing that link, and writes raw
    # frames into monitor 0 on it. The victim's path is 0 -> 1, so it does not
    # need the 0 - 3 link.
    with runtime([0, 1, 2, 3], "ring") as rt:
        with pytest.raises(mh.MonitorError, match="not a neighbour"):
            _core.ForgedMonitorLink(str(rt.dir), 0, 2)
        c, s = pair(rt, 0, 1, "victim")
        c_in, c_out = c._vcis()  # type: ignore[misc]
        s_in, s_out = s._vcis()  # type: ignore[misc]
        before = rt.status()["monitors"][0]["data"]
        forged = _core.ForgedMonitorLink(str(rt.dir), 0, 3)
        try:
            for i in range(50):
                forged.inject(frame(vci=0xBAD0_0000 + i, payload=b"evil"))
            # Every VCI the victim uses, valid on other links, as data and teardown.
            for v in (c_in, c_out, s_in, s_out):
                forged.inject(frame(vci=v, payload=b"evil"))
                forged.inject(frame(vci=v, payload=b"", kind=KIND_TEARDOWN))
            forged.inject(b"\x00" * 7)  # shorter than a header
            want = before["dropped"] + 50 + 4
            until("forged frames are counted", lambda: rt.status()["monitors"][0]["data"]["malformed"] > before["malformed"])  # the last one injected
            after = rt.status()["monitors"][0]["data"]
            assert after["dropped"] == want  # data frames
            assert after["late"] == before["late"] + 4  # teardowns
            assert after["malformed"] == before["malformed"] + 1
            assert after["forwarding_entries"] == before["forwarding_entries"] == 2
        finally:
            forged.close()
        assert s.try_recv() is None and c.try_recv() is None
        assert rt.alive
        c.send(b"still fine")
        assert s.recv(timeout=5) == b"still fine"
        s.send(b"both ways")
        assert c.recv(timeout=5) == b"both ways"


def test_killed_client_closes_the_service_end_and_others_keep_working() -> None:
    with runtime([0, 1, 2], "ring") as rt, rt.dispatcher(2) as srv:
        svc = srv.export("kill-client")
        other_c, other_s = pair(rt, 1, 2, "bystander")  # path 1 -> 2
        ready, bound = procs.CTX.Event(), procs.CTX.Event()
        ready.set()
        with procs.child(procs.mh_client, rt.name, 0, "kill-client", ready, bound) as p:
            ch = svc.accept(timeout=30)  # path 0 -> 1 -> 2
            assert bound.wait(30) and ch.recv(timeout=5) == b"hi"
            assert entries(rt) == {0: 2, 1: 4, 2: 4}
            os.kill(p.pid, signal.SIGKILL)
            assert closed_within(ch, 5) < 1.0
        until("the dead client's entries are gone", lambda: entries(rt) == {0: 0, 1: 2, 2: 2})
        other_c.send(b"alive")
        assert other_s.recv(timeout=5) == b"alive"


def test_killed_service_closes_the_client_end_and_others_keep_working() -> None:
    with runtime([0, 1, 2], "ring") as rt, rt.dispatcher(0) as cli:
        other_c, other_s = pair(rt, 1, 2, "bystander")  # path 1 -> 2
        ready = procs.CTX.Event()
        with procs.child(procs.mh_echo, rt.name, 2, "kill-service", ready) as p:
            assert ready.wait(30)
            ch = cli.bind("kill-service", transport="multihop", timeout=30)  # path 0 -> 1 -> 2
            ch.send(b"x")
            assert ch.recv(timeout=5) == b"x"
            assert entries(rt) == {0: 2, 1: 4, 2: 4}
            os.kill(p.pid, signal.SIGKILL)
            assert closed_within(ch, 5) < 1.0
            with pytest.raises(mh.ChannelClosed):
                ch.send(b"anyone?")
        until("the dead service's entries are gone", lambda: entries(rt) == {0: 0, 1: 2, 2: 2})
        other_c.send(b"alive")
        assert other_s.recv(timeout=5) == b"alive"


def test_killed_intermediate_monitor_closes_both_ends_and_others_keep_working() -> None:
    with runtime([0, 1, 2], "ring") as rt:
        c, s = pair(rt, 0, 2, "through-1")  # ring: 0 -> 1 -> 2
        other_c, other_s = pair(rt, 2, 0, "bystander")  # ring: 2 -> 0, not through 1
        assert c.stats()["hops"] == 3 and other_c.stats()["hops"] == 2
        c.send(b"before")
        assert s.recv(timeout=5) == b"before"
        os.kill(rt.monitor_pids[1], signal.SIGKILL)
        assert closed_within(s, 5) < 1.0
        assert closed_within(c, 5) < 1.0
        until("the torn circuit's entries are gone", lambda: entries(rt) == {0: 2, 2: 2})
        other_c.send(b"alive")
        assert other_s.recv(timeout=5) == b"alive"
        other_s.send(b"and back")
        assert other_c.recv(timeout=5) == b"and back"


def _fill(ch: mh.Channel) -> int:
    """Write on `ch` until its dispatcher's link to a stopped monitor is full, to
    the last slot (two-slot messages, then one-slot ones); returns how many."""
    written = 0
    for payload in (b"f" * 56, b""):  # 16-byte header + 56 bytes = 2 slots; header alone = 1
        with pytest.raises(mh.TxBusy, match="link to the monitor is full"):
            for _ in range(100_000):
                ch.try_send(payload)
                written += 1
    return written


def test_dummy_ack_that_did_not_fit_is_retried() -> None:
    with runtime([0, 1], "direct") as rt:
        srv, cli = rt.dispatcher(1), rt.dispatcher(0)
        a_c, a_s = bound_pair(srv, cli, "acked", window=4)  # the receiver, a_s, is on srv
        filler_out, filler = bound_pair(cli, srv, "filler", window=4096)  # filler_out is on srv too
        for i in range(4):
            a_c.send(bytes([i]))
        # poll() moves what arrived on srv's link into the channels' queues.
        until("the four messages reach the receiver", lambda: srv.poll(timeout=0.05) == [a_s] and a_s.stats()["queued"] == 4)
        with stopped(rt.monitor_pids[1]):
            written = _fill(filler_out)
            assert written > 100
            for i in range(4):  # both dummies (after 2 and after 4) find the link full
                assert a_s.recv(timeout=1) == bytes([i])
            assert a_s.stats()["dummies_sent"] == 0
            with pytest.raises(mh.TxBusy, match="credit window"):
                a_c.try_send(b"blocked")  # the owed ack has not come: no credit
        # The monitor drains the link; the receiver's next look sends the dummy.
        deadline = time.monotonic() + 5
        while True:
            assert a_s.try_recv() is None
            try:
                a_c.try_send(b"credit is back")
                break
            except mh.TxBusy:
                assert time.monotonic() < deadline, "the owed ack was never sent"
                time.sleep(0.01)
        assert a_s.recv(timeout=5) == b"credit is back"
        assert a_s.stats()["dummies_sent"] == 1
        got = 0
        while got < written:
            got += len(filler.recv_batch(4096, timeout=5))
        assert got == written


def test_close_with_a_full_link_still_tears_down_after_the_data() -> None:
    with runtime([0, 1], "direct") as rt:
        srv, cli = rt.dispatcher(1), rt.dispatcher(0)
        # Both `closing` and `filler` are client ends on cli's link to monitor 0.
        closing, peer = bound_pair(srv, cli, "closing")
        filler, sink_end = bound_pair(srv, cli, "filler", window=4096)
        with stopped(rt.monitor_pids[0]):
            for i in range(3):
                closing.send(bytes([i]), timeout=1)
            written = _fill(filler)
            t0 = time.monotonic()
            closing.close()  # no room for the TEARDOWN: the monitor is asked to send it
            assert time.monotonic() - t0 < 0.1, "close() must not wait for room"
        for i in range(3):
            assert peer.recv(timeout=5) == bytes([i])
        assert closed_within(peer, 2.0) < 2.0
        got = 0
        while got < written:
            got += len(sink_end.recv_batch(4096, timeout=5))
        assert got == written
        until("the closed circuit's entries are gone", lambda: entries(rt) == {0: 2, 1: 2})


def test_virtual_cores_are_pinned_modulo_the_real_cpus() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    cores = list(range(len(cpus) + 4))  # more monitors than CPUs
    with runtime(cores, "ring") as rt:
        for m in rt.status()["monitors"]:
            want = m["core"] if m["core"] in cpus else cpus[m["core"] % len(cpus)]
            assert m["cpu"] == want == rt.cpu_of(m["core"])
            assert os.sched_getaffinity(m["pid"]) == {want}
        c, s = pair(rt, 0, cores[-1], "oversubscribed")
        c.send(b"around")
        assert s.recv(timeout=10) == b"around"


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


def test_bad_routing_topology_and_binds_are_clear_errors() -> None:
    with pytest.raises(mh.RoutingError, match="unknown routing mode"):
        mh.Runtime.start(unique_name(), cores=[0, 1], routing="hypercube")
    with pytest.raises(TypeError, match="topology must be a multihop.Topology"):
        mh.Runtime.start(unique_name(), cores=[0, 1], topology=[[0], [1]])  # type: ignore[arg-type]
    with pytest.raises(mh.RoutingError, match="core 7 is not in the topology"):
        mh.Runtime.start(unique_name(), cores=[0, 7], topology=mh.Topology(sockets=[[0, 1]]))
    with runtime([0, 1], "ring") as rt, rt.dispatcher(0) as d, rt.dispatcher(1) as srv:
        with pytest.raises(mh.BindError, match="no service"):
            d.bind("nobody", transport="multihop", timeout=2)
        svc = srv.export("grumpy", on_connect=lambda info: info["transport"] != "multihop")
        accepted: list[object] = []

        def accept() -> None:
            try:
                accepted.append(svc.accept(timeout=1.5))
            except BaseException as e:  # noqa: BLE001 - recorded and checked below
                accepted.append(e)

        t = threading.Thread(target=accept)
        t.start()
        with pytest.raises(mh.BindError, match="refused"):
            d.bind("grumpy", transport="multihop", timeout=5)
        t.join(10)
        assert len(accepted) == 1 and isinstance(accepted[0], mh.Timeout), accepted
        with pytest.raises(ValueError, match="window"):
            d.bind("grumpy", transport="multihop", window=0)
        assert all(m["data"]["forwarding_entries"] == 0 for m in rt.status()["monitors"])
        assert rt.alive


def test_messages_sent_just_before_close_and_exit_are_delivered() -> None:
    for attempt in range(5):  # the race this guards against was intermittent
        with runtime([0, 1], "direct") as rt, rt.dispatcher(1) as srv:
            svc = srv.export("last-words")
            ready = procs.CTX.Event()
            with procs.child(procs.mh_send_close_exit, rt.name, 0, "last-words", ready, 20) as p:
                ready.set()
                ch = svc.accept(timeout=30)
                p.join(10)
                # Read only once the TEARDOWN has passed both monitors (their entries are gone): the
                # data it followed is all on this end's link, with the close right behind it.
                until("the teardown has passed every monitor", lambda: not any(entries(rt).values()), 10)
                got = [int.from_bytes(ch.recv(timeout=5), "little") for _ in range(20)]
                assert got == list(range(20)), f"attempt {attempt}"
                with pytest.raises(mh.ChannelClosed):
                    ch.recv(timeout=5)
