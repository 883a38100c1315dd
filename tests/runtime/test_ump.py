"""UMP channels end to end: real monitors, real processes, real shared memory."""

from __future__ import annotations

import os
import signal
import socket
import time

import numpy as np
import psutil
import pytest

import multihop as mh
import procs
from parked import until_parked
from session import monitor_processes, unique_name


def bind_when_ready(d: mh.Dispatcher, ready, service: str, **kw) -> mh.Channel:  # type: ignore[no-untyped-def]
    assert ready.wait(30), "child did not export in time"
    return d.bind(service, timeout=30, **kw)


def test_echo_between_processes_and_status(rt: mh.Runtime) -> None:
    ready = procs.CTX.Event()
    with procs.child(procs.echo_server, rt.name, 1, "echo", ready) as p:
        with rt.dispatcher(0) as d:
            ch = bind_when_ready(d, ready, "echo")
            for i in range(200):
                msg = os.urandom(i)
                ch.send(msg)
                assert ch.recv(timeout=5) == msg
            st = ch.stats()
            assert (st["sent"], st["received"], st["transport"], st["peer_pid"]) == (200, 200, "ump", p.pid)
            status = rt.status()
            services = [s["name"] for m in status["monitors"] for s in m["services"]]
            assert "echo" in services
            assert any(c["service"] == "echo" for m in status["monitors"] for c in m["channels"])
            ch.close()
            assert ch.closed
        p.join(10)
        assert p.exitcode == 0


def test_million_small_messages_of_random_size_in_order(rt: mh.Runtime) -> None:
    n, seed = 1_000_000, 7
    ready = procs.CTX.Event()
    with procs.child(procs.stream_sender, rt.name, 1, "small", ready, "small", n, seed) as p, rt.dispatcher(0) as d:
        ch = bind_when_ready(d, ready, "small")
        sz = procs.sizes(seed, n, 512)
        i = 0
        deadline = time.monotonic() + 240
        while i < n:
            assert time.monotonic() < deadline, f"stalled at message {i}"
            for m in ch.recv_batch(4096, timeout=10):
                assert m == procs.small_message(i, int(sz[i])), f"message {i} wrong (missing, doubled or corrupt)"
                i += 1
        assert ch.try_recv() is None
        ch.send(b"ack")
        p.join(30)
        assert p.exitcode == 0


def test_two_thousand_large_messages_up_to_one_mib(rt: mh.Runtime) -> None:
    n, seed = 2000, 11
    ready = procs.CTX.Event()
    with procs.child(procs.stream_sender, rt.name, 1, "big", ready, "big", n, seed) as p, rt.dispatcher(0) as d:
        ch = bind_when_ready(d, ready, "big")
        sz = procs.sizes(seed, n, 1 << 20)
        for i in range(n):
            got = ch.recv(timeout=30)
            assert len(got) == int(sz[i]) and got == procs.big_message(i, int(sz[i])), f"message {i}"
        ch.send(b"ack")
        p.join(30)
        assert p.exitcode == 0


def test_unknown_service_and_refused_bind(rt: mh.Runtime) -> None:
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        with pytest.raises(mh.BindError, match='no service "nope"'):
            cli.bind("nope", timeout=2)
        seen = []

        def refuse(info: dict) -> bool:
            seen.append(info)
            return False

        svc = srv.export("picky", on_connect=refuse)
        import threading

        errors: list[BaseException] = []

        def client() -> None:
            try:
                cli.bind("picky", timeout=5)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        t = threading.Thread(target=client)
        t.start()
        with pytest.raises(mh.Timeout):
            svc.accept(timeout=1.0)  # refuses the one client, then times out
        t.join(10)
        assert len(errors) == 1 and isinstance(errors[0], mh.BindError), errors
        assert "refused" in str(errors[0])
        assert seen and seen[0]["service"] == "picky" and seen[0]["client_pid"] == os.getpid()
        # The runtime is unharmed: the next bind still works.
        ok = srv.export("plain")
        accepted: list[mh.Channel] = []
        t = threading.Thread(target=lambda: accepted.append(ok.accept(timeout=5)))
        t.start()
        ch = cli.bind("plain", timeout=5)
        t.join(10)
        ch.send(b"fine")
        assert accepted[0].recv(timeout=1) == b"fine"


def test_bind_completes_once_queued_and_times_out_when_the_backlog_stays_full(rt: mh.Runtime) -> None:
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("deaf", backlog=1)
        first = cli.bind("deaf", timeout=5)  # queued in the backlog: no accept needed
        first.send(b"early")
        assert svc.queued == 1
        t0 = time.monotonic()
        with pytest.raises(mh.Timeout, match="backlog"):
            cli.bind("deaf", timeout=0.5)
        assert time.monotonic() - t0 < 5
        deadline = time.monotonic() + 5
        while svc.waiting:  # the request that timed out is cancelled
            assert time.monotonic() < deadline, "a timed-out request still waits"
            time.sleep(0.005)
        peer = svc.accept(timeout=5)
        assert peer.recv(timeout=1) == b"early", "what the client sent while queued waits in the channel"
        second = cli.bind("deaf", timeout=5)  # accept made room
        peer2 = svc.accept(timeout=5)
        second.send(b"x")
        assert peer2.recv(timeout=1) == b"x"


def test_duplicate_export_and_name_freed_when_exporter_dies(rt: mh.Runtime) -> None:
    ready, done = procs.CTX.Event(), procs.CTX.Event()
    with procs.child(procs.exporter_then_exit, rt.name, 1, "once", ready, done) as p, rt.dispatcher(0) as d:
        assert ready.wait(30)
        with pytest.raises(mh.ExportError, match="already exported"):
            d.export("once")
        done.set()
        p.join(10)
        deadline = time.monotonic() + 5
        while True:
            try:
                d.export("once")
                break
            except mh.ExportError:
                assert time.monotonic() < deadline, "name not freed after its exporter died"
                time.sleep(0.05)
    with rt.dispatcher(0) as d:
        with pytest.raises(mh.ExportError, match="invalid service name"):
            d.export("")


def _pair(rt: mh.Runtime, name: str, **kw) -> tuple[mh.Channel, mh.Channel, mh.Dispatcher, mh.Dispatcher]:  # type: ignore[no-untyped-def]
    import threading

    srv, cli = rt.dispatcher(1), rt.dispatcher(0)
    svc = srv.export(name)
    box: list[mh.Channel] = []
    t = threading.Thread(target=lambda: box.append(svc.accept(timeout=10)))
    t.start()
    c = cli.bind(name, timeout=10, **kw)
    t.join(10)
    return c, box[0], srv, cli


def test_oversized_message_is_refused_and_channel_still_works(rt: mh.Runtime) -> None:
    c, s, *_ = _pair(rt, "small-max", max_message=1000)
    assert c.max_message == 1000
    with pytest.raises(mh.MessageTooLarge, match="1001 bytes exceeds"):
        c.send(b"x" * 1001)
    with pytest.raises(ValueError):
        c.try_send(b"x" * 5000)
    c.send(b"y" * 1000)
    assert s.recv(timeout=2) == b"y" * 1000


def test_try_send_busy_without_loss_and_try_recv_empty(rt: mh.Runtime) -> None:
    c, s, *_ = _pair(rt, "busy", max_message=4096)
    assert s.try_recv() is None
    sent = 0
    with pytest.raises(mh.TxBusy):
        for _ in range(1_000_000):
            c.try_send(sent.to_bytes(8, "little"))
            sent += 1
    assert sent > 0 and c.stats()["busy_count"] >= 1
    with pytest.raises(mh.Timeout):
        c.send(b"more", timeout=0.2)
    for i in range(sent):
        assert s.recv(timeout=2) == i.to_bytes(8, "little")
    assert s.try_recv() is None
    c.send(b"room again", timeout=1)
    assert s.recv(timeout=1) == b"room again"


def test_every_slot_read_goes_back_before_the_receive_call_returns(rt: mh.Runtime) -> None:
    # One thread writes a ring's worth, reads it all back, and writes again: a
    # writer must never wait on slots that were read (but handed back lazily).
    c, s, *_ = _pair(rt, "give-back", max_message=4096)
    per_ring = c.stats()["ring_slots"]
    n = per_ring // 2 - 1  # 64-byte messages take two 56-byte slots each: all but two slots
    for rounds in range(4):
        for _i in range(n):
            c.send(b"x" * 64, timeout=1)
        got = 0
        if rounds % 2:
            while got < n:
                got += len(s.recv_batch(n, timeout=1))
        else:
            for _ in range(n):
                assert s.recv(timeout=1) == b"x" * 64
                got += 1
        assert got == n
    assert s.try_recv() is None


def test_records_and_batches_round_trip(rt: mh.Runtime) -> None:
    c, s, *_ = _pair(rt, "records")
    dt = np.dtype([("seq", "<u8"), ("x", "<f8"), ("tag", "S16")])
    n = 1000  # fits the ring: this one thread both sends and receives
    rows = np.zeros(n, dtype=dt)
    rows["seq"] = np.arange(n)
    rows["x"] = np.linspace(0, 1, n)
    assert c.send_records(rows, timeout=10) == n
    got = []
    for _ in range(n):
        if sum(len(g) for g in got) == n:
            break
        got.append(s.recv_records(n, dt.itemsize, timeout=5))
    back = np.concatenate(got).view(dt).reshape(-1)
    assert np.array_equal(back, rows)
    assert c.send_batch([b"a", bytearray(b"bb"), memoryview(b"ccc")]) == 3
    assert s.recv_batch(10, timeout=1) == [b"a", b"bb", b"ccc"]
    assert s.recv_batch(10, timeout=0.05) == []
    c.send(b"odd size")
    with pytest.raises(mh.ProtocolError, match="record size"):
        s.recv_records(10, 64, timeout=1)
    assert s.recv(timeout=1) == b"odd size"  # nothing lost


def test_bad_arguments_are_clear_errors(rt: mh.Runtime) -> None:
    c, s, *_ = _pair(rt, "args")
    with pytest.raises(TypeError, match="bytes-like"):
        c.send("text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        s.recv(timeout=-1)
    with pytest.raises(ValueError, match="transport"):
        rt.dispatcher(0).bind("args", transport="carrier-pigeon")
    with pytest.raises(ValueError, match="core 7 is not part"):
        rt.dispatcher(7)
    with pytest.raises(mh.Timeout) as ei:
        s.recv(timeout=0.05)
    assert isinstance(ei.value, TimeoutError) and isinstance(ei.value, mh.MultihopError)


def test_close_is_seen_by_the_peer_after_it_drains(rt: mh.Runtime) -> None:
    c, s, *_ = _pair(rt, "closing")
    c.send(b"one")
    c.send(b"two")
    c.close()
    assert s.recv(timeout=1) == b"one"
    assert s.recv(timeout=1) == b"two"
    t0 = time.monotonic()
    with pytest.raises(mh.ChannelClosed, match="peer closed"):
        s.recv(timeout=5)
    assert time.monotonic() - t0 < 1.0
    with pytest.raises(mh.ChannelClosed):
        s.send(b"anyone?")
    with pytest.raises(mh.ChannelClosed, match="closed by this end"):
        c.send(b"x")


def test_peer_killed_mid_stream_raises_channel_closed_within_a_second(rt: mh.Runtime) -> None:
    ready = procs.CTX.Event()
    with procs.child(procs.sleepy_sender, rt.name, 1, "victim", ready) as p, rt.dispatcher(0) as d:
        ch = bind_when_ready(d, ready, "victim")
        for _ in range(1000):
            ch.recv(timeout=5)
        os.kill(p.pid, signal.SIGKILL)
        p.join(5)
        t0 = time.monotonic()
        with pytest.raises(mh.ChannelClosed, match="died"):
            for _ in range(10_000_000):  # drain what it sent before dying
                ch.recv(timeout=5)
        assert time.monotonic() - t0 < 1.0
        with pytest.raises(mh.ChannelClosed):
            ch.send(b"hello?")
    # The monitors survived.
    assert rt.alive and rt.status()["monitors"][1]["pid"] == rt.monitor_pids[1]


def test_sender_sees_killed_receiver(rt: mh.Runtime) -> None:
    ready = procs.CTX.Event()
    with procs.child(procs.blocked_receiver, rt.name, 1, "sink", ready) as p, rt.dispatcher(0) as d:
        svc = d.export("sink")
        ch = svc.accept(timeout=30)
        assert ready.wait(30)
        os.kill(p.pid, signal.SIGKILL)
        p.join(5)
        t0 = time.monotonic()
        with pytest.raises(mh.ChannelClosed, match="died"):
            for _ in range(10_000_000):
                ch.send(b"x" * 100, timeout=5)
        assert time.monotonic() - t0 < 1.0


def test_ctrl_c_interrupts_a_blocked_recv(rt: mh.Runtime) -> None:
    ready = procs.CTX.Event()
    with rt.dispatcher(0) as d:
        svc = d.export("ctrl-c")
        with procs.child(procs.blocked_receiver, rt.name, 1, "ctrl-c", ready) as p:
            ch = svc.accept(timeout=30)
            assert ready.wait(30)
            until_parked(p.pid, p.pid)  # its main thread is blocked in recv (parked on its futex)
            os.kill(p.pid, signal.SIGINT)
            p.join(5)
            assert p.exitcode == 42, "recv did not raise KeyboardInterrupt promptly"
            ch.close()


def test_attach_to_missing_runtime_is_a_clear_error() -> None:
    with pytest.raises(mh.RuntimeNotFound, match="no runtime named 'ghost'"):
        mh.Runtime.attach("ghost")
    with pytest.raises(ValueError, match="invalid runtime name"):
        mh.Runtime.attach("../etc")


def test_duplicate_runtime_name_is_refused(rt: mh.Runtime) -> None:
    with pytest.raises(mh.RuntimeExists):
        mh.Runtime.start(rt.name, cores=[0, 1])
    assert rt.alive


def test_garbage_on_a_monitor_socket_does_not_hurt_it(rt: mh.Runtime) -> None:
    for frame in (b"", b"\x00\xff garbage", b'{"op":"bind"}', b'{"op":"hello","role":"dispatcher","core":0}' + b"x"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(str(rt.dir / "mon-0.sock"))
        s.send(frame)
        s.settimeout(2)
        try:
            s.recv(4096)
        except (socket.timeout, ConnectionError):
            pass
        s.close()
    st = rt.status()["monitors"][0]
    assert st["bad_frames"] >= 2 and rt.alive


def test_stop_leaves_nothing_behind() -> None:
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    rt = mh.Runtime.start(unique_name("leak"), cores=[0, 1, 2])  # core 2 is virtual on 2 CPUs
    pids = list(rt.monitor_pids.values())
    assert all(psutil.pid_exists(p) for p in pids)
    c, s, *_ = _pair(rt, "leak", max_message=64 << 10)
    c.send(b"x")
    assert s.recv(timeout=1) == b"x"
    rt.stop()
    assert not rt.dir.exists()
    assert not [p for p in monitor_processes() if p.pid in pids]
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    # Other processes on the machine (multiprocessing's semaphores) come and go.
    new = {n for n in after - before if not n.startswith("sem.mp-")}
    assert not new, f"named shared memory appeared: {new}"


def test_owner_exit_takes_the_runtime_down() -> None:
    q = procs.CTX.Queue()
    with procs.child(procs.start_and_abandon, os.environ["MULTIHOP_RUNTIME_ROOT"], unique_name("orphan"), q) as p:
        directory, pids = q.get(timeout=30)
        p.join(10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        if not alive and not os.path.exists(directory):
            break
        time.sleep(0.05)
    assert not alive, f"monitors outlived their owner: {alive}"
    assert not os.path.exists(directory)


def _attach_as(uid: int, directory: str, open_socket: bool) -> int:
    """Fork, drop to `uid`, try to attach; exit code 0 = refused with a clear error."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.setgid(uid)
            os.setuid(uid)
            try:
                mh.Dispatcher.attach(directory, 0)
                code = 1  # attached: wrong
            except mh.MultihopError as e:
                msg = str(e)
                code = 0 if (("may not attach" in msg) if open_socket else ("belongs to another user" in msg)) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another uid (65534)")
def test_attach_from_another_uid_is_refused(rt: mh.Runtime) -> None:
    # The 0700 runtime directory stops it first ...
    assert _attach_as(65534, str(rt.dir), open_socket=False) == 0
    # ... and with the directory opened up, the monitor's SO_PEERCRED check does.
    os.chmod(rt.dir.parent, 0o755)
    os.chmod(rt.dir, 0o755)
    os.chmod(rt.dir / "mon-0.sock", 0o777)
    try:
        assert _attach_as(65534, str(rt.dir), open_socket=True) == 0
    finally:
        os.chmod(rt.dir, 0o700)
        os.chmod(rt.dir.parent, 0o700)
    assert rt.status()["monitors"][0]["refused_peers"] == 1


def test_a_name_is_free_again_as_soon_as_its_dispatcher_detaches(rt: mh.Runtime) -> None:
    """Leaving a dispatcher's ``with`` block withdraws its names before it returns: exporting the same name at once
    (from another dispatcher, on another core) never finds it still taken."""
    for i in range(40):
        with rt.dispatcher(i % 2) as d:
            d.export("again")
