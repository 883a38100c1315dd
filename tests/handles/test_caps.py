"""Handles (file descriptors) over channels: issue 16 §1, TN-006 2.7.

Real runtimes, real monitors, real processes: handles travel out of band through the monitors'
control sockets and must arrive with exactly their message, in order; refusals must name their
reason and leave the channel working; nothing may leak in any monitor.
"""

from __future__ import annotations

import mmap
import os
import signal
import socket
import threading
import time
from typing import Any, Iterator

import pytest

import caps_procs
import multihop as mh
from procs import CTX
from session import unique_name


def fd_count(pid: int) -> int:
    """Open descriptors of process `pid` (/proc/<pid>/fd)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def held_by(pid: int, kind: str) -> int:
    """How many of process `pid`'s descriptors are `kind` (their /proc link contains it)."""
    n = 0
    for f in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += kind in os.readlink(f"/proc/{pid}/fd/{f}")
        except OSError:
            pass
    return n


def memfd(text: bytes) -> int:
    fd = os.memfd_create("test-data")
    os.write(fd, text)
    return fd


def read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 1 << 16)


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def own_fds(kind: str) -> list[int]:
    """This process's descriptors whose /proc link contains `kind` (listing /proc opens one more)."""
    out = []
    for f in os.listdir("/proc/self/fd"):
        try:
            if kind in os.readlink(f"/proc/self/fd/{f}"):
                out.append(int(f))
        except OSError:
            pass
    return out


def monitor_pids(rt: mh.Runtime) -> list[int]:
    return [m["pid"] for m in rt.status(limit=0)["monitors"] if "pid" in m]


@pytest.fixture
def ring3() -> Iterator[mh.Runtime]:
    """Three cores in a ring: 0 -> 1 -> 2, so a channel from core 0 to core 2 crosses 3 monitors."""
    r = mh.Runtime.start(unique_name("caps"), cores=[0, 1, 2], routing="ring")
    try:
        yield r
    finally:
        r.stop()


def pair(rt: mh.Runtime, transport: str, cli_core: int = 0, srv_core: int = 1, name: str = "caps") -> tuple:
    srv = rt.dispatcher(core=srv_core)
    svc = srv.export(name)
    cli = rt.dispatcher(core=cli_core)
    ch = cli.bind(name, transport=transport, timeout=10)
    peer = svc.accept(timeout=10)
    return ch, peer, (srv, svc, cli)


def test_memfd_written_by_one_process_is_read_by_another_through_three_monitors(ring3: mh.Runtime) -> None:
    srv = ring3.dispatcher(core=2)
    svc = srv.export("pages")
    out = CTX.Queue()
    p = CTX.Process(target=caps_procs.memfd_writer, args=(ring3.name, 0, "pages", b"written in core 0", out))
    p.start()
    try:
        ch = svc.accept(timeout=20)
        data, handles = ch.recv_with_handles(timeout=20)
        assert data == b"here is a page" and len(handles) == 1
        assert out.get(timeout=20) == ("gave", False)  # give_away closed the writer's copy
        with handles[0] as h:
            m = mmap.mmap(h.fileno(), 4096)  # the same pages, shared with the writer
            assert m[:17] == b"written in core 0"
            m[4096 - 16 : 4096 - 7] = b"read by 2"
            ch.send(b"answered")
            assert out.get(timeout=20) == ("done", 3, b"read by 2")
            m.close()
        assert h.closed
    finally:
        p.join(20)
        if p.is_alive():
            p.kill()
    assert p.exitcode == 0


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_cap_is_duplicated_and_give_away_closes_the_senders_copy(rt: mh.Runtime, transport: str) -> None:
    ch, peer, _keep = pair(rt, transport)
    fd = memfd(b"kept")
    ch.send(b"dup", handles=[fd])
    assert is_open(fd)  # a cap: the sender keeps its descriptor
    data, [h] = peer.recv_with_handles(timeout=10)
    assert data == b"dup" and read_all(h.fileno()) == b"kept" and h.fileno() != fd
    # A received Handle sent back, given away, is closed; an int given away is closed too.
    a, b = socket.socketpair()
    ch.send(b"mixed", handles=[fd, a], give_away=[True, True])
    assert not is_open(fd) and a.fileno() == -1  # the socket object itself was closed
    peer.send(b"back", handles=[h], give_away=True)
    assert h.closed
    data, hs = peer.recv_with_handles(timeout=10)
    assert data == b"mixed" and len(hs) == 2
    hs[1].detach() and None  # take the socket end over as a plain descriptor
    back, [h2] = ch.recv_with_handles(timeout=10)
    assert back == b"back" and read_all(h2.fileno()) == b"kept"
    b.close()
    st = ch.stats()
    assert st["handles_sent"] == 3 and st["handles_received"] == 1
    assert peer.try_recv_with_handles() is None


def made_by(call: Any, kind: str) -> tuple[Any, list[int]]:
    """call()'s result, and the descriptors of `kind` it made in this process (new since before it).

    Only what this library made counts: a process may hold another copy's (the plain C library the
    C ABI tests load in this very process keeps its own table of what it made).
    """
    before = set(own_fds(kind))
    out = call()
    return out, [fd for fd in own_fds(kind) if fd not in before]


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_refused_handles_name_the_reason_and_leave_the_channel_working(rt: mh.Runtime, transport: str) -> None:
    # the sockets this test's dispatchers open (their control sockets); the process may hold more than a
    # message's MAX_HANDLES of other sockets, left by the tests that ran before in the same session
    sockets_before = set(own_fds("socket:"))
    srv = rt.dispatcher(core=1)
    svc = srv.export("caps")
    cli, cli_segments = made_by(lambda: rt.dispatcher(core=0), "memfd:multihop:")  # its link to monitor 0
    (ch, peer), more = made_by(lambda: (cli.bind("caps", transport=transport, timeout=10), svc.accept(timeout=10)), "memfd:multihop:")
    _keep = (srv, svc, cli)
    good = memfd(b"good")

    def still_works(tag: bytes) -> None:
        ch.send(tag)
        assert peer.recv_with_handles(timeout=10) == (tag, [])

    # A runtime-owned handle: this process's own ring segments and control sockets, checked here
    # first (every one of them, by identity) and, bypassing that, by the sending side's monitor
    # (the ones it has seen: here the client's link, which monitor 0 maps).
    assert cli_segments
    for fd in cli_segments + more:
        with pytest.raises(mh.CapSendError) as e:
            ch.send(b"x", handles=[good, fd])
        if e.value.reason == "not_open" and not is_open(fd):
            continue  # a segment of this process that went away since the listing
        assert (e.value.reason, e.value.index) == ("runtime_owned", 1)
        assert "runtime's shared-memory segment" in str(e.value)
    with pytest.raises(mh.CapSendError, match="runtime's shared-memory segment") as e:
        ch._send_handles_unchecked(b"x", [good, cli_segments[0]])
    assert (e.value.reason, e.value.index) == ("runtime_owned", 1)
    ctl = [fd for fd in own_fds("socket:") if fd not in sockets_before]
    assert ctl and len(ctl) <= mh.MAX_HANDLES, ctl
    with pytest.raises(mh.CapSendError) as e:
        ch._send_handles_unchecked(b"x", ctl)
    assert e.value.reason == "runtime_owned" and "control socket" in str(e.value)
    still_works(b"after runtime-owned")
    # A closed handle, and too many.
    dead = memfd(b"")
    os.close(dead)
    with pytest.raises(mh.CapSendError, match="is not open") as e:
        ch.send(b"x", handles=[good, good, dead])
    assert (e.value.reason, e.value.index) == ("not_open", 2)
    with pytest.raises(mh.CapSendError, match="at most 32") as e:
        ch.send(b"x", handles=[good] * (mh.MAX_HANDLES + 1))
    assert e.value.reason == "too_many"
    with pytest.raises(mh.CapSendError) as e:
        ch._send_handles_unchecked(b"x", [good] * (mh.MAX_HANDLES + 1))
    assert e.value.reason == "too_many"
    assert isinstance(e.value, OSError)
    still_works(b"after closed and too many")
    # A receiver with no room: it keeps at most 2 handles for messages it has not read.
    peer.handle_room = 2
    ch.send(b"one", handles=[good, good])
    with pytest.raises(mh.CapSendError, match="no room") as e:
        ch.send(b"two", handles=[good])
    assert e.value.reason == "no_room"
    assert peer.pending_handles == 2
    data, hs = peer.recv_with_handles(timeout=10)
    assert data == b"one" and [read_all(h.fileno()) for h in hs] == [b"good", b"good"]
    ch.send(b"two", handles=[good])  # room again
    assert peer.recv_with_handles(timeout=10)[0] == b"two"
    still_works(b"after no room")
    assert is_open(good)  # refused sends never take the sender's handles
    status = rt.status(limit=0)["monitors"]
    assert sum(m["handles"]["refused"] for m in status) >= 3  # the unchecked ones were refused by a monitor
    os.close(good)


def test_receiver_with_a_full_descriptor_table_refuses(rt: mh.Runtime) -> None:
    ready, limited, out = CTX.Event(), CTX.Event(), CTX.Queue()
    p = CTX.Process(target=caps_procs.starved_receiver, args=(rt.name, 1, "starved", ready, limited, out))
    p.start()
    try:
        assert ready.wait(20)
        cli = rt.dispatcher(core=0)
        ch = cli.bind("starved", transport="multihop", timeout=10)
        assert limited.wait(20)  # the receiver accepted and lowered its limit
        fd = memfd(b"z")
        with pytest.raises(mh.CapSendError, match="descriptor table is full") as e:
            ch.send(b"too many for it", handles=[fd] * mh.MAX_HANDLES)
        assert e.value.reason == "no_room"
        ch.send(b"plain")
        assert out.get(timeout=20) == (b"plain", 0)
        ch.send(b"after", handles=[fd])
        assert out.get(timeout=20) == (b"after", 1)
        os.close(fd)
    finally:
        p.join(20)
        if p.is_alive():
            p.kill()
    assert p.exitcode == 0


def test_receiver_killed_with_handles_in_flight_leaks_nothing_in_any_monitor(ring3: mh.Runtime) -> None:
    cli = ring3.dispatcher(core=0)
    # Warm the monitors' relay connections up with another channel first (they are kept).
    warm_srv = ring3.dispatcher(core=2)
    warm_svc = warm_srv.export("warm")
    w = cli.bind("warm", transport="multihop", timeout=10)
    fd = memfd(b"in flight")
    w.send(b"w", handles=[fd])
    warm_peer = warm_svc.accept(timeout=10)
    assert warm_peer.recv_with_handles(timeout=10)[0] == b"w"
    mons = monitor_pids(ring3)
    assert len(mons) == 3
    baseline = {pid: fd_count(pid) for pid in mons}
    ready = CTX.Event()
    p = CTX.Process(target=caps_procs.hoarder, args=(ring3.name, 2, "victim", ready))
    p.start()
    sent, errors = [0], []
    try:
        assert ready.wait(20)
        # A window wide enough that the flood never waits for credit: when the receiver dies, one
        # group is on its way through the monitors and dozens sit in its inbox.
        ch = cli.bind("victim", transport="multihop", timeout=10, window=4096)

        def flood() -> None:
            try:
                for _ in range(10_000):
                    ch.send(b"h", handles=[fd, fd, fd], timeout=10)
                    sent[0] += 1
            except (mh.ChannelClosed, mh.CapSendError, mh.Timeout) as e:
                errors.append(e)

        t = threading.Thread(target=flood)
        t.start()
        deadline = time.monotonic() + 20
        while sent[0] < 30 and time.monotonic() < deadline and t.is_alive():
            time.sleep(0.01)
        assert sent[0] >= 30, "the flood did not get going"
        os.kill(p.pid, signal.SIGKILL)  # with handles held by it and on their way to it
        t.join(30)
        assert not t.is_alive() and errors, "the sender did not learn the receiver died"
        ch.close()
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()

    # Every monitor is back to (at most) where it was: no handle, socket or segment of the dead one
    # kept, and not one descriptor of the handles' memfd anywhere in a monitor. (At most: the
    # baseline may include the end of a status connection the monitor had not closed yet.)
    def settled() -> bool:
        return all(fd_count(pid) <= baseline[pid] and not held_by(pid, "memfd:test-data") for pid in mons)

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not settled():
        time.sleep(0.05)
    assert {pid: held_by(pid, "memfd:test-data") for pid in mons} == {pid: 0 for pid in mons}
    assert all(fd_count(pid) <= baseline[pid] for pid in mons), ({pid: fd_count(pid) for pid in mons}, baseline)
    w.send(b"alive", handles=[fd])  # and the runtime still carries handles
    assert warm_peer.recv_with_handles(timeout=10)[0] == b"alive"
    os.close(fd)


@pytest.mark.parametrize(("transport", "n"), [("multihop", 100_000), ("ump", 20_000)])
def test_messages_with_interleaved_handles_keep_their_order(rt: mh.Runtime, transport: str, n: int) -> None:
    srv = rt.dispatcher(core=1)
    svc = srv.export("ordered")
    every = 50
    p = CTX.Process(target=caps_procs.ordered_sender, args=(rt.name, 0, "ordered", transport, n, every))
    p.start()
    try:
        ch = svc.accept(timeout=20)
        for i in range(n):
            data, hs = ch.recv_with_handles(timeout=30)
            assert data == i.to_bytes(8, "little"), f"message {i} out of order: {data!r}"
            want = 0 if i % every else (2 if (i // every) % 3 == 0 else 1)
            assert len(hs) == want, f"message {i} came with {len(hs)} handles, not {want}"
            for j, h in enumerate(hs):
                assert read_all(h.fileno()) == data + bytes([j])
                h.close()
        assert ch.pending_handles == 0
        with pytest.raises(mh.ChannelClosed):
            ch.recv_with_handles(timeout=30)
    finally:
        p.join(30)
        if p.is_alive():
            p.kill()
    assert p.exitcode == 0


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_plain_receives_close_handles_and_a_closed_end_releases_what_it_held(rt: mh.Runtime, transport: str) -> None:
    ch, peer, _keep = pair(rt, transport)
    fd = memfd(b"x")
    before = fd_count(os.getpid())
    ch.send(b"a", handles=[fd])
    ch.send(b"b", handles=[fd, fd])
    assert peer.recv(timeout=10) == b"a"  # the message without its handles: they are closed
    assert peer.recv_batch(4, timeout=10) == [b"b"]
    st = peer.stats()
    assert (st["handles_discarded"], st["handles_pending"]) == (3, 0)
    for _ in range(5):
        ch.send(b"c", handles=[fd])
    deadline = time.monotonic() + 10
    while peer.pending_handles < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert peer.pending_handles == 5 and fd_count(os.getpid()) == before + 5
    peer.close()  # torn down with handles waiting: they are closed at once
    assert fd_count(os.getpid()) == before
    with pytest.raises((mh.CapSendError, mh.ChannelClosed)) as e:
        ch.send(b"late", handles=[fd], timeout=5)  # refused ("closed"), or the close is seen first
    assert isinstance(e.value, mh.ChannelClosed) or e.value.reason == "closed"
    os.close(fd)


def test_handle_objects(tmp_path) -> None:
    f = os.open(tmp_path / "f", os.O_CREAT | os.O_RDWR)
    h = mh.Handle(f)
    assert int(h) == f and h.fileno() == f and os.fstat(h).st_size == 0 and "f" in repr(h)
    assert h.detach() == f and h.closed
    with pytest.raises(ValueError):
        h.fileno()
    with mh.Handle(f) as h2:
        pass
    assert h2.closed and not is_open(f)
    with pytest.raises(ValueError, match="not open"):
        mh.Handle(f)


# ---- issue 26 §2, §4: repeated descriptors, and refusals that say what is wrong ------------------


class _Passed:
    """A descriptor passed as an object: fileno(), and a close() that counts itself and, as a handle
    arriving in another thread would, puts something else under the freed number at once."""

    def __init__(self, fd: int, stand_in: int) -> None:
        self.fd, self.stand_in, self.closes = fd, stand_in, 0

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        self.closes += 1
        os.close(self.fd)
        os.dup2(self.stand_in, self.fd)  # the number is taken again, by someone else's file


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_a_repeated_descriptor_given_away_travels_per_entry_and_is_closed_once(rt: mh.Runtime, transport: str) -> None:
    ch, peer, _keep = pair(rt, transport)
    stand_in = os.open("/dev/null", os.O_RDONLY)
    try:
        # The same descriptor twice, as an object and as its number: closed once, through the object.
        p = _Passed(memfd(b"twice"), stand_in)
        ch.send(b"both", handles=[p, p.fd], give_away=True)
        assert p.closes == 1, "given away once, closed once"
        assert is_open(p.fd) and os.path.samestat(os.fstat(p.fd), os.fstat(stand_in)), "the file now under the number was closed"
        os.close(p.fd)
        data, hs = peer.recv_with_handles(timeout=10)
        assert data == b"both" and [read_all(h.fileno()) for h in hs] == [b"twice", b"twice"]
        # The same object twice.
        q = _Passed(memfd(b"again"), stand_in)
        ch.send(b"same object", handles=[q, q], give_away=[True, True])
        assert q.closes == 1
        os.close(q.fd)
        assert [read_all(h.fileno()) for h in peer.recv_with_handles(timeout=10)[1]] == [b"again", b"again"]
        # Given away in one entry and kept in the other: refused before anything travels.
        fd = memfd(b"kept")
        with pytest.raises(ValueError, match=rf"handles\[0\] and handles\[1\] are the same descriptor {fd}"):
            ch.send(b"x", handles=[fd, fd], give_away=[True, False])
        assert is_open(fd) and peer.try_recv_with_handles() is None
        ch.send(b"kept twice", handles=[fd, fd])  # not given away: duplicated per entry, yours to keep
        assert is_open(fd) and len(peer.recv_with_handles(timeout=10)[1]) == 2
        os.close(fd)
    finally:
        os.close(stand_in)


def test_handle_arguments_say_what_is_wrong(rt: mh.Runtime) -> None:
    ch, peer, _keep = pair(rt, "multihop")
    fd = memfd(b"x")
    try:
        with pytest.raises(ValueError, match=r"handles\[0\] is 1099511627776, out of range: a descriptor is an int in 0\.\.=2147483647"):
            ch.send(b"x", handles=[2**40])
        with pytest.raises(ValueError, match=r"handles\[1\] is -3, out of range"):
            ch.send(b"x", handles=[fd, -3])
        with pytest.raises(TypeError, match="give_away must be a bool or a sequence of bools"):
            ch.send(b"x", handles=[fd], give_away="yes")
        with pytest.raises(TypeError, match=r"give_away\[0\] must be a bool, got int"):
            ch.send(b"x", handles=[fd], give_away=[1])
        with pytest.raises(TypeError, match="give_away must be a bool or a sequence of bools"):
            ch.send(b"x", handles=[fd], give_away=1)
        with pytest.raises(ValueError, match="give_away has 2 entries for 1 handles"):
            ch.send(b"x", handles=[fd], give_away=[True, False])
        with pytest.raises(TypeError, match="handles must be a list of descriptors, got str"):
            ch.send(b"x", handles="3")
        assert is_open(fd) and peer.try_recv_with_handles() is None, "nothing travelled"
    finally:
        os.close(fd)


def test_runtime_owned_is_decided_by_identity_not_by_name(rt: mh.Runtime) -> None:
    (ch, peer, _keep), pidfds = made_by(lambda: pair(rt, "ump"), "anon_inode:[pidfd]")
    _, segments = made_by(lambda: pair(rt, "ump", name="caps2"), "memfd:multihop:")
    # A user's memfd named like the runtime's segments is the user's: it travels.
    mine = os.memfd_create("multihop:mine")
    os.write(mine, b"user data")
    ch.send(b"named like ours", handles=[mine], give_away=True)
    data, [h] = peer.recv_with_handles(timeout=10)
    assert data == b"named like ours" and read_all(h.fileno()) == b"user data"
    h.close()
    # The library's own pidfds (it watches its peers and monitors with them) never leave.
    assert pidfds, "the UMP end and the dispatchers watch their peers through pidfds"
    for fd in pidfds:
        with pytest.raises(mh.CapSendError, match="runtime's pidfd") as e:
            ch.send(b"x", handles=[fd])
        assert e.value.reason == "runtime_owned"
    # A user's own pidfd (of the very same process) is the user's.
    users = os.pidfd_open(os.getpid())
    ch.send(b"user pidfd", handles=[users], give_away=True)
    assert len(peer.recv_with_handles(timeout=10)[1]) == 1
    # A duplicate of a runtime segment is the same file: refused.
    dup = os.dup(segments[0])
    try:
        with pytest.raises(mh.CapSendError, match="runtime's shared-memory segment") as e:
            ch.send(b"x", handles=[dup])
        assert e.value.reason == "runtime_owned"
    finally:
        os.close(dup)
    assert peer.try_recv_with_handles() is None


def test_the_runtimes_own_async_bell_is_refused_as_runtime_owned(rt: mh.Runtime) -> None:
    from multihop import _core

    ch, peer, _keep = pair(rt, "multihop")
    bell = _core.AsyncBell()
    with pytest.raises(mh.CapSendError, match="runtime's async doorbell") as e:
        ch.send(b"x", handles=[bell.fileno()])
    assert (e.value.reason, e.value.index) == ("runtime_owned", 0)
    ch.send(b"still works")
    assert peer.recv_with_handles(timeout=10) == (b"still works", [])
