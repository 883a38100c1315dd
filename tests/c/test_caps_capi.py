"""Handles through the C ABI (mh_send_handles / mh_recv_handles) with a Python peer in another process."""

from __future__ import annotations

import os

import pytest

import multihop as mh
from test_capi import CODES, C, c, capi, finished, served  # noqa: F401  (fixtures)


def is_open(fd: int, ino: int | None = None) -> bool:
    """Whether ``fd`` is open (and, with ``ino``, still the file of that inode: a descriptor given away may have its
    number reused at once by any thread of this process opening something, which is not the file still being here)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return ino is None or st.st_ino == ino


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_c_and_python_pass_descriptors_both_ways(c: C, rt: mh.Runtime, transport: str) -> None:
    ffi, lib = c.ffi, c.lib
    with served(c, rt, [("handles_back", 2), ("wait_closed",)], transport) as (p, h):
        ch = h.ptr
        a, b = os.memfd_create("c-side-a"), os.memfd_create("c-side-b")
        os.write(a, b"A")
        os.write(b, b"B")
        ino_b = os.fstat(b).st_ino
        fds = ffi.new("int[]", [a, b])
        c.ok(lib.mh_send_handles(ch, b"two", 3, fds, 2, 0b10, 10_000))  # b given away, a kept
        assert is_open(a) and not is_open(b, ino_b)
        buf, n = ffi.new("uint8_t[]", 64), ffi.new("size_t *")
        got, nfds = ffi.new("int[]", lib.MH_MAX_HANDLES), ffi.new("size_t *")
        assert lib.mh_recv_handles(ch, buf, 64, n, got, 4, nfds, 1000) == CODES["MH_E_INVALID"]
        assert "MH_MAX_HANDLES" in c.err()
        c.ok(lib.mh_recv_handles(ch, buf, 64, n, got, lib.MH_MAX_HANDLES, nfds, 10_000))
        assert bytes(ffi.buffer(buf, n[0])) == b"back:two" and nfds[0] == 2
        back = [got[0], got[1]]
        for fd, want in zip(back, [b"A+py", b"B+py"], strict=True):
            os.lseek(fd, 0, os.SEEK_SET)
            assert os.read(fd, 16) == want
            os.close(fd)
        # Refused: a closed descriptor, too many (nothing sent; the channel goes on).
        dead = os.memfd_create("dead")
        os.close(dead)
        bad = ffi.new("int[]", [a, dead])
        assert lib.mh_send_handles(ch, b"x", 1, bad, 2, 0, 1000) == CODES["MH_E_CAP"]
        assert "not open" in c.err()
        many = ffi.new("int[]", [a] * (lib.MH_MAX_HANDLES + 1))
        assert lib.mh_send_handles(ch, b"x", 1, many, lib.MH_MAX_HANDLES + 1, 0, 1000) == CODES["MH_E_CAP"]
        one = ffi.new("int[]", [a])
        c.ok(lib.mh_send_handles(ch, b"one", 3, one, 1, 0, 10_000))
        c.ok(lib.mh_recv_handles(ch, buf, 64, n, got, lib.MH_MAX_HANDLES, nfds, 10_000))
        assert bytes(ffi.buffer(buf, n[0])) == b"back:one" and nfds[0] == 1
        os.lseek(got[0], 0, os.SEEK_SET)
        assert os.read(got[0], 16) == b"A+py+py"
        os.close(got[0])
        os.close(a)
        h.close()
    assert finished(p) == 0


def test_c_a_repeated_descriptor_given_away_is_closed_once_and_must_agree(c: C, rt: mh.Runtime) -> None:
    # Issue 26 §2 in C: fds[] may list a descriptor twice; it travels per entry and, given away, is
    # closed once; given away in one entry and kept in another is refused before anything travels.
    from test_capi import unique_name

    name = unique_name("capi-dup")
    srv = rt.dispatcher(1)
    svc = srv.export(name)
    try:
        d0 = c.attach(rt.name, 0)
        ch = c.bind(d0, name, transport="ump")
        peer = svc.accept(timeout=10)
        fd = os.memfd_create("twice")
        os.write(fd, b"T")
        twice = c.ffi.new("int[]", [fd, fd])
        assert c.lib.mh_send_handles(ch, b"x", 1, twice, 2, 0b01, 1000) == CODES["MH_E_INVALID"]
        assert f"fds[0] and fds[1] are the same descriptor {fd}" in c.err()
        assert is_open(fd) and peer.try_recv_with_handles() is None
        c.ok(c.lib.mh_send_handles(ch, b"both", 4, twice, 2, 0b11, 10_000))
        assert not is_open(fd)
        data, hs = peer.recv_with_handles(timeout=10)
        assert data == b"both" and [os.pread(h.fileno(), 8, 0) for h in hs] == [b"T", b"T"]
        for h in hs:
            h.close()
        c.lib.mh_close(ch)
        c.lib.mh_detach(d0)
    finally:
        srv.detach()
