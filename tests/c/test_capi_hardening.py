"""The C ABI's backlog, batch, flush and closed calls (issue 18 §2, §4, §6; issue 17 §7), both ends in C.

The library is the plain cdylib, loaded through cffi from the real header (see test_capi.py).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import multihop as mh
from liveness_util import stopped, until
from test_capi import CODES, C, c, capi, unique_name  # noqa: F401  (fixtures)

TRANSPORTS = ["ump", "multihop"]


def _pair(c: C, rt: mh.Runtime, transport: str, backlog: int | None = None) -> tuple[Any, Any, Any]:
    """(service, client end, service end): bind first, then accept, in this one thread."""
    name = unique_name("capi")
    d1, d0 = c.attach(rt.name, 1), c.attach(rt.name, 0)
    svc = c.ffi.new("mh_service **")
    if backlog is None:
        c.ok(c.lib.mh_export(d1, name.encode(), svc))
    else:
        c.ok(c.lib.mh_export_backlog(d1, name.encode(), backlog, svc))
    client = c.bind(d0, name, transport=transport)  # completes once queued: nobody is in mh_accept
    out = c.ffi.new("mh_channel **")
    c.ok(c.lib.mh_accept(svc[0], 5000, out))
    return svc[0], client, out[0]


def _batch(c: C, msgs: list[bytes | None], lens: list[int] | None = None) -> tuple[Any, Any, Any]:
    keep = [c.ffi.from_buffer(m) if m else c.ffi.NULL for m in msgs]
    ptrs = c.ffi.new("const void *[]", keep)
    n = c.ffi.new("size_t[]", lens if lens is not None else [len(m or b"") for m in msgs])
    return ptrs, n, keep


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_c_binds_then_accepts_in_one_thread(c: C, rt: mh.Runtime, transport: str) -> None:
    _, client, server = _pair(c, rt, transport)
    assert c.send(client, b"hello from C") == 0
    assert c.recv(server) == (0, b"hello from C")
    assert c.lib.mh_closed(client) == 0
    c.lib.mh_close(server)
    until("the client end sees the close", lambda: c.lib.mh_closed(client) == 1)
    assert c.recv(client, timeout_ms=1000)[0] == CODES["MH_E_CLOSED"]
    c.lib.mh_close(client)
    assert c.lib.mh_closed(c.ffi.NULL) == CODES["MH_E_INVALID"]


def test_export_backlog_range(c: C, rt: mh.Runtime) -> None:
    d = c.attach(rt.name, 1)
    out = c.ffi.new("mh_service **")
    assert c.lib.mh_export_backlog(d, b"zero", 0, out) == CODES["MH_E_INVALID"]
    assert "backlog must be from 1 to 65536 connections" in c.err() and out[0] == c.ffi.NULL


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_send_batch_is_checked_whole_before_anything_goes(c: C, rt: mh.Runtime, transport: str) -> None:
    _, client, server = _pair(c, rt, transport)
    sent = c.ffi.new("size_t *")
    too_big = b"x" * (c.lib.mh_max_message(client) + 1)
    ptrs, n, _keep = _batch(c, [b"a", b"b", too_big])
    assert c.lib.mh_send_batch(client, ptrs, n, 3, 1000, sent) == CODES["MH_E_TOO_LARGE"]
    assert sent[0] == 0 and "message 2 of the batch" in c.err()
    ptrs, n, _keep = _batch(c, [b"a", None], lens=[1, 5])
    assert c.lib.mh_send_batch(client, ptrs, n, 2, 1000, sent) == CODES["MH_E_INVALID"]
    assert sent[0] == 0 and "msgs[1] is NULL" in c.err()
    assert c.recv(server, timeout_ms=100)[0] == CODES["MH_E_TIMEOUT"], "nothing of either batch arrived"
    ptrs, n, _keep = _batch(c, [b"one", b"", b"three"])
    c.ok(c.lib.mh_send_batch(client, ptrs, n, 3, 1000, sent))
    assert sent[0] == 3
    assert [c.recv(server)[1] for _ in range(3)] == [b"one", b"", b"three"]


def test_send_batch_cut_short_by_a_close_says_how_many_went(c: C, rt: mh.Runtime) -> None:
    # Credit window 16; a batch goes in frames of up to 64 messages, one credit each.
    _, client, server = _pair(c, rt, "multihop")
    sent = c.ffi.new("size_t *")
    ptrs, n, _keep = _batch(c, [b"m%d" % i for i in range(2000)])
    rc: list[int] = []
    t = threading.Thread(target=lambda: rc.append(c.lib.mh_send_batch(client, ptrs, n, 2000, 30_000, sent)))
    t.start()

    def forwarded_to_the_service() -> tuple[int, int]:
        (m,) = [m for m in rt.status(limit=0)["monitors"] if m["core"] == 1]
        return int(m["data"]["forwarded"]), int(m["data"]["forwarded_messages"])

    until("a window of 16 frames has reached the service's monitor", lambda: forwarded_to_the_service()[1] >= 16 * 64)
    assert forwarded_to_the_service() == (16, 16 * 64)
    c.lib.mh_close(server)
    t.join(30)
    assert rc == [CODES["MH_E_CLOSED"]] and sent[0] == 16 * 64


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_flush_returns_once_consumed_and_times_out_with_the_count(c: C, rt: mh.Runtime, transport: str) -> None:
    _, client, server = _pair(c, rt, transport)
    left = c.ffi.new("size_t *")
    for m in (b"1", b"2", b"3"):
        assert c.send(client, m) == 0
    assert c.lib.mh_flush(client, 200, left) == CODES["MH_E_TIMEOUT"]
    assert left[0] == 3 and "3 of the messages" in c.err()
    got: list[Any] = []

    def serve() -> None:  # a server loop: receives, so its library runs
        for _ in range(4):
            got.append(c.recv(server, timeout_ms=10_000)[1])

    t = threading.Thread(target=serve)
    t.start()
    c.ok(c.lib.mh_flush(client, 10_000, left))
    assert left[0] == 0
    assert c.send(client, b"end") == 0
    t.join(10)
    assert got == [b"1", b"2", b"3", b"end"]


def test_mh_close_says_how_many_held_messages_did_not_leave(c: C, rt: mh.Runtime) -> None:
    # Issue 26 §1, in C. The client's first-hop monitor is stopped: the window's 16 messages of
    # 12 KiB wait in the link (3,520 of the 4,096 slots its soft capacity lets small messages use),
    # then 40 of 100 KiB are held (4 frames of 10, 1 MiB each); no held frame fits what is left of
    # the link, so the close cannot hand them on and must say so.
    name = unique_name("capi-held")
    srv = rt.dispatcher(1)
    svc = srv.export(name)
    try:
        d0 = c.attach(rt.name, 0)
        ch = c.bind(d0, name, transport="multihop")
        server = svc.accept(timeout=10)
        lost = c.ffi.new("size_t *")
        with stopped(rt.monitor_pids[0]):
            for i in range(16):
                assert c.send(ch, bytes([i]) * 12_288, timeout_ms=5000) == 0, c.err()
            for i in range(40):
                assert c.send(ch, bytes([100 + i]) * 102_400, timeout_ms=5000) == 0, c.err()
            assert c.lib.mh_close_timeout(ch, 300, lost) == CODES["MH_E_HELD_LOST"]
            assert lost[0] == 40 and "40 held message(s) did not leave" in c.err()
            assert "did not leave" in c.ffi.string(c.lib.mh_strerror(CODES["MH_E_HELD_LOST"])).decode()
        got = [server.recv(timeout=10) for _ in range(16)]
        assert got == [bytes([i]) * 12_288 for i in range(16)]
        with pytest.raises(mh.ChannelClosed):
            server.recv(timeout=10)
        # A close that hands everything on says nothing, and sets *lost to 0.
        ch2 = c.bind(d0, name, transport="multihop")
        svc.accept(timeout=10)
        lost[0] = 99
        c.ok(c.lib.mh_close_timeout(ch2, -1, lost))
        assert lost[0] == 0
        assert c.lib.mh_close_timeout(c.ffi.NULL, 0, lost) == CODES["MH_E_INVALID"]
        c.lib.mh_detach(d0)
    finally:
        srv.detach()
