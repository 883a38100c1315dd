"""Garbage frames and idle connections on every control socket (issue 18 §8, issue 17 §7).

Every monitor's socket gets, from processes of the runtime's own user (who pass the credential
check): raw datagrams that break the piece framing, frames that are not JSON, JSON that is no
message, a valid hello followed by junk, a frame cut off by a hang-up, a frame over the size a
monitor reads, descriptors nobody asked for, and hundreds of connections that never speak. The
runtime must count what it refused, hang up on the idle, and keep setting up UMP and multi-hop
channels in milliseconds; no monitor may die.
"""

from __future__ import annotations

import json
import os
import random
import socket
import time

import pytest

import multihop as mh
from liveness_util import until
from session import unique_name

PIECE_MORE, PIECE_LAST = b"\x00", b"\x01"


def _conn(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(path)
    return s


def _frame(obj: object) -> bytes:
    return PIECE_LAST + json.dumps(obj).encode()


def _garbage(rng: random.Random) -> list[bytes]:
    """One connection's worth of junk datagrams, of every kind."""
    kind = rng.randrange(7)
    if kind == 0:
        return [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))]
    if kind == 1:
        return [PIECE_LAST + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))]
    if kind == 2:
        return [_frame({"op": rng.choice(["nope", "bind", "Status", "welcome"]), "req": rng.randrange(10)})]
    if kind == 3:
        return [_frame({"op": "hello", "role": "tool", "core": 0}), PIECE_LAST + b"{not json"]
    if kind == 4:
        return [_frame({"op": "hello", "role": "dispatcher", "core": 0}), _frame({"op": "bind", "req": "x"}), b"\x07junk"]
    if kind == 5:
        return [_frame([1, 2, 3]), _frame({"op": "hello", "role": "monitor", "core": 2**40})]
    return [PIECE_MORE + b'{"op": "hello", ']  # then hang up mid-frame


def _counts(rt: mh.Runtime) -> dict[int, tuple[int, int]]:
    return {m["core"]: (m["bad_frames"], m["idle_hangups"]) for m in rt.status(limit=0)["monitors"]}


def _bind_both(rt: mh.Runtime, name: str) -> float:
    """Seconds to bind and use one UMP and one multi-hop channel across the two monitors."""
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export(name)
        t0 = time.monotonic()
        for transport in ("ump", "multihop"):
            ch = cli.bind(name, transport=transport, timeout=10)
            ch.send(b"ok")
            assert svc.accept(timeout=10).recv(timeout=10) == b"ok"
        return time.monotonic() - t0


def test_garbage_frames_on_every_control_socket_leave_the_runtime_working() -> None:
    rt = mh.Runtime.start(unique_name("garbage"), cores=[0, 1])
    rng = random.Random(18)
    try:
        pids = rt.monitor_pids
        sent = 0
        for core in rt.cores:
            path = str(rt.dir / f"mon-{core}.sock")
            for _ in range(300):
                s = _conn(path)
                for d in _garbage(rng):
                    try:
                        s.send(d)
                        sent += 1
                    except (BrokenPipeError, ConnectionResetError):
                        break
                # Hang up our side and read until the monitor hangs up too: it has
                # then handled everything we sent.
                s.shutdown(socket.SHUT_WR)
                try:
                    while s.recv(65536):
                        pass
                except ConnectionResetError:
                    pass  # it hung up with some of our junk unread (after an unusable hello)
                s.close()
            # A frame over what a monitor reads (16 MiB), in pieces.
            s = _conn(path)
            s.send(_frame({"op": "hello", "role": "tool", "core": 0}))
            s.recv(4096)
            chunk = PIECE_MORE + b"x" * 32_000
            for _ in range(17 * 1024 * 1024 // 32_000):
                s.send(chunk)
            s.send(PIECE_LAST + b"}")
            assert b"over" in s.recv(65536), "the oversized frame is refused, saying why"
            s.close()
            # Descriptors nobody asked for, on a frame that is junk.
            s = _conn(path)
            r, w = os.pipe()
            try:
                socket.send_fds(s, [PIECE_LAST + b"{}"], [r, w, r, w])
                socket.send_fds(s, [PIECE_MORE + b"{}"], [r])
            except OSError:
                pass
            finally:
                os.close(r)
                os.close(w)
                s.close()
        assert all(bad >= 300 for bad, _ in _counts(rt).values()), _counts(rt)
        assert rt.alive and rt.monitor_pids == pids
        took = _bind_both(rt, "after-garbage")
        assert took < 5, f"binds took {took:.2f} s after the garbage"
        assert sent >= 600
    finally:
        rt.stop()
    assert not rt.dir.exists()


def test_idle_connections_are_hung_up_and_do_not_block_anyone() -> None:
    rt = mh.Runtime.start(unique_name("idle"), cores=[0, 1])
    idle: list[socket.socket] = []
    try:
        for core in rt.cores:
            path = str(rt.dir / f"mon-{core}.sock")
            for i in range(300):
                s = _conn(path)
                if i % 3 == 0:  # said hello as a tool, then nothing
                    s.send(_frame({"op": "hello", "role": "tool", "core": 0}))
                idle.append(s)
        took = _bind_both(rt, "among-idle")
        assert took < 5, f"binds took {took:.2f} s among 600 idle connections"
        # A connection that never says hello is hung up within the hello timeout (5 s).
        silent = idle[1]
        silent.settimeout(20)
        t0 = time.monotonic()
        assert silent.recv(4096) == b"", "the monitor hangs up on a silent connection"
        assert time.monotonic() - t0 < 15
        until("the hang-ups are counted", lambda: sum(h for _, h in _counts(rt).values()) >= 400, seconds=20)
        assert rt.alive
    finally:
        for s in idle:
            s.close()
        rt.stop()
    assert not rt.dir.exists()


@pytest.mark.parametrize("role", ["dispatcher", "tool"])
def test_requests_that_make_no_sense_get_an_error_not_a_crash(role: str) -> None:
    rt = mh.Runtime.start(unique_name("nonsense"), cores=[0, 1])
    try:
        path = str(rt.dir / "mon-1.sock")
        s = _conn(path)
        s.send(_frame({"op": "hello", "role": role, "core": 1}))
        assert b"welcome" in s.recv(65536)
        nonsense = [
            {"op": "bind", "req": 1, "name": "", "iref": 0, "transport": "ump", "chan": 1, "timeout_ms": 10, "client_pid": 1, "client_core": 0},
            {"op": "connect_reply", "conn": 12345, "accept": True, "reason": "", "vci": 99},
            {"op": "closed", "chan": 7, "teardown": 12345},
            {
                "op": "bind_hop",
                "req": 2,
                "iref": 1,
                "service": "x",
                "target_core": 9,
                "from_core": 0,
                "chan": 1,
                "window": 1,
                "vci": 1,
                "hops": 1,
                "client_pid": 1,
                "client_core": 0,
                "timeout_ms": 10,
            },
            {"op": "register", "req": 3, "name": "x", "core": 1, "pid": 1},
            {"op": "link_open", "req": 4, "from_core": 0},
            {"op": "dispatcher_link", "req": 5},
            {"op": "unexport", "req": 6, "iref": 42},
            {"op": "set_table", "req": 7, "table": [[5, [[5, 5]]]]},
        ]
        for msg in nonsense:
            s.send(_frame(msg))
        s.settimeout(2)
        replies = 0
        try:
            while True:
                if s.recv(65536):
                    replies += 1
        except (TimeoutError, socket.timeout):
            pass
        assert replies >= 4, "each request that expects an answer gets one (an error)"
        s.close()
        assert rt.alive
        assert _bind_both(rt, "after-nonsense") < 5
    finally:
        rt.stop()
