"""The C ABI (core-rs/include/multihop.h) driven from Python through cffi, against Python peers.

The library is the plain cdylib (no Python feature), built by ``ensure_cdylib`` (tests/cdylib.py) into a target
directory of its own, ``target/capi``, when it is missing or older than the Rust sources: maturin
builds the Python extension (the same crate with the ``python`` feature, which needs libpython)
into ``target/``, and must never replace the library a C program links. ``MULTIHOP_CDYLIB`` names a
prebuilt one instead.  Its declarations come
from the real header, so the header and the library are checked together.  Peers are Python
services and clients in spawned processes, attached to the same runtime.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import cffi  # noqa: E402  (the test extra)
import pytest

import multihop as mh  # noqa: E402
import procs  # noqa: E402
from cdylib import ensure_cdylib  # noqa: E402
from parked import until_parked  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "core-rs" / "include" / "multihop.h"

CODES = {
    "MH_OK": 0,
    "MH_E_TIMEOUT": -1,
    "MH_E_CLOSED": -2,
    "MH_E_BUSY": -3,
    "MH_E_TOO_LARGE": -4,
    "MH_E_INVALID": -5,
    "MH_E_PROTOCOL": -6,
    "MH_E_BIND": -7,
    "MH_E_NOT_FOUND": -8,
    "MH_E_EXPORT": -9,
    "MH_E_MONITOR": -10,
    "MH_E_OS": -11,
    "MH_E_INTERNAL": -12,
    "MH_E_EXISTS": -13,
    "MH_E_CAP": -14,
    "MH_E_HELD_LOST": -15,
}


def unique_name(prefix: str = "t") -> str:
    """session's unique_name, imported late: spawned children import this module, and importing
    session there would point them at a fresh runtime root."""
    from session import unique_name as un

    return un(prefix)


# ---- building and loading the library ------------------------------------------------------


def header_cdef(header: Path = HEADER) -> str:
    """The header as a cffi cdef: comments, C++ guards and other preprocessor lines dropped."""
    src = re.sub(r"/\*.*?\*/", "", header.read_text(), flags=re.S)
    src = re.sub(r"#ifdef __cplusplus.*?#endif", "", src, flags=re.S)
    return "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith("#") or ln.startswith("#define MH_"))


@pytest.fixture(scope="session")
def capi() -> Any:
    """(ffi, lib) over the freshly built cdylib."""
    path = ensure_cdylib()
    ffi = cffi.FFI()
    ffi.cdef(header_cdef())
    return ffi, ffi.dlopen(str(path))


class C:
    """Thin helpers over the raw functions: out-pointers, buffers, messages."""

    def __init__(self, capi: Any) -> None:
        self.ffi, self.lib = capi

    def err(self) -> str:
        return self.ffi.string(self.lib.mh_last_error()).decode()

    def ok(self, rc: int) -> None:
        assert rc == 0, f"rc {rc}: {self.err()}"

    def attach(self, name: str, core: int) -> Any:
        out = self.ffi.new("mh_dispatcher **")
        self.ok(self.lib.mh_attach(name.encode(), core, out))
        return out[0]

    def bind(self, d: Any, service: str, timeout_ms: int = 10_000, transport: str = "ump") -> Any:
        out = self.ffi.new("mh_channel **")
        self.ok(self.lib.mh_bind(d, service.encode(), transport.encode(), timeout_ms, out))
        return out[0]

    def send(self, ch: Any, data: bytes, timeout_ms: int = 10_000) -> int:
        return int(self.lib.mh_send(ch, data, len(data), timeout_ms))

    def recv(self, ch: Any, cap: int = 1 << 20, timeout_ms: int = 10_000) -> tuple[int, bytes | int]:
        """(rc, message) on success, (rc, needed length) on MH_E_TOO_LARGE, (rc, b"") otherwise."""
        buf = self.ffi.new("uint8_t[]", max(cap, 1))
        n = self.ffi.new("size_t *")
        rc = int(self.lib.mh_recv(ch, buf, cap, n, timeout_ms))
        if rc == 0:
            return rc, bytes(self.ffi.buffer(buf, n[0]))
        if rc == CODES["MH_E_TOO_LARGE"]:
            return rc, int(n[0])
        return rc, b""


@pytest.fixture
def c(capi: Any) -> C:
    return C(capi)


# ---- the Python peers (run in spawned processes) -------------------------------------------


def py_service(name: str, core: int, service: str, ready: Any, script: list[tuple[Any, ...]]) -> None:
    """Export `service`, accept one client, then play `script`; any mismatch exits non-zero."""
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(service)
        ready.set()
        ch = svc.accept(timeout=30)
        for step in script:
            op, *args = step
            if op == "echo":  # (count, prefix): answer each message with prefix + message
                for _ in range(args[0]):
                    ch.send(args[1] + ch.recv(timeout=30), timeout=30)
            elif op == "send":
                ch.send(args[0], timeout=30)
            elif op == "expect":
                got = ch.recv(timeout=30)
                assert got == args[0], f"expected {args[0][:40]!r}, got {got[:40]!r}"
            elif op == "drain_until":  # read (bounded) until a marker message
                for _ in range(1_000_000):
                    if ch.recv(timeout=30) == args[0]:
                        break
            elif op == "close":
                ch.close()
            elif op == "wait_closed":
                try:
                    ch.recv(timeout=30)
                except mh.ChannelClosed:
                    pass
                else:
                    raise AssertionError("expected ChannelClosed")
            elif op == "sleep":
                time.sleep(args[0])
            elif op == "handles_back":  # (count,): each message's handles: append to them, send back
                for _ in range(args[0]):
                    data, hs = ch.recv_with_handles(timeout=30)
                    for h in hs:
                        os.lseek(h.fileno(), 0, os.SEEK_END)
                        os.write(h.fileno(), b"+py")
                    ch.send(b"back:" + data, handles=hs, give_away=True, timeout=30)
            elif op == "wait_event":  # (event,): the client says when
                assert args[0].wait(30), "the client never set the event"
            elif op == "expect_seq":  # (count,): messages 0..count-1 as 4-byte little-endian numbers, in order
                for i in range(args[0]):
                    got = ch.recv(timeout=30)
                    assert got == i.to_bytes(4, "little"), f"message {i}: got {got!r}"
            else:
                raise ValueError(op)


def py_client(name: str, core: int, service: str, go: Any, count: int) -> None:
    """Bind to `service` (exported from C) and check `count` echoes, then close."""
    rt = mh.Runtime.attach(name)
    assert go.wait(30)
    with rt.dispatcher(core) as d:
        ch = d.bind(service, timeout=30)
        for i in range(count):
            msg = i.to_bytes(4, "little") * (i % 50)
            ch.send(msg, timeout=30)
            assert ch.recv(timeout=30) == b"C:" + msg
        ch.close()


class Chan:
    """A C channel handle that is closed (and freed) exactly once."""

    def __init__(self, c: C, ptr: Any) -> None:
        self.c, self.ptr = c, ptr

    def close(self) -> None:
        if self.ptr is not None:
            ptr, self.ptr = self.ptr, None
            self.c.ok(self.c.lib.mh_close(ptr))


@contextmanager
def served(c: C, rt: mh.Runtime, script: list[tuple[Any, ...]], transport: str = "ump") -> Iterator[tuple[Any, Chan]]:
    """A Python service on core 1 playing `script`, and a C channel bound to it from core 0."""
    service = unique_name("svc")
    ready = procs.CTX.Event()
    with procs.child(py_service, rt.name, 1, service, ready, script) as p:
        assert ready.wait(30), "the Python service did not export in time"
        d = c.attach(rt.name, 0)
        ch = Chan(c, None)
        try:
            ch.ptr = c.bind(d, service, transport=transport)
            yield p, ch
        finally:
            ch.close()
            c.lib.mh_detach(d)
            p.join(30)  # a service that saw the close exits now; one that does not is killed


def finished(p: Any) -> int | None:
    p.join(30)
    return p.exitcode


# ---- tests ---------------------------------------------------------------------------------


def test_codes_match_the_header_and_the_idl_stubs(c: C) -> None:
    for k, v in CODES.items():
        assert getattr(c.lib, k) == v, k
    descriptions = {c.ffi.string(c.lib.mh_strerror(v)) for v in CODES.values()}
    assert len(descriptions) == len(CODES)
    assert c.ffi.string(c.lib.mh_strerror(-99)) == b"unknown error code"


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_send_and_recv_both_ways_with_a_python_service(c: C, rt: mh.Runtime, transport: str) -> None:
    sizes = [0, 1, 55, 56, 57, 64, 1000, 4096, 65536, 300_000, (1 << 20) - 3]  # the last echo is 1 MiB
    msgs = [bytes((i * 7 + j) & 0xFF for j in range(s)) if s < 5000 else os.urandom(s) for i, s in enumerate(sizes)]
    script = [("echo", len(msgs), b"re:"), ("send", b"from python"), ("wait_closed",)]
    with served(c, rt, script, transport) as (p, h):
        ch = h.ptr
        assert c.lib.mh_max_message(ch) == 1 << 20
        for m in msgs:
            assert c.send(ch, m) == 0, c.err()
            assert c.recv(ch, cap=1 << 20) == (0, b"re:" + m)
        assert c.recv(ch) == (0, b"from python")
        h.close()
    assert finished(p) == 0


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_too_large_keeps_the_message(c: C, rt: mh.Runtime, transport: str) -> None:
    big = bytes(range(256)) * 4
    with served(c, rt, [("send", big), ("send", b"next"), ("wait_closed",)], transport) as (p, h):
        ch = h.ptr
        assert c.recv(ch, cap=10) == (c.lib.MH_E_TOO_LARGE, 1024)
        assert "1024 bytes" in c.err() and "stays" in c.err()
        # cap 0 with a NULL buffer asks for the size, and keeps the message too.
        n = c.ffi.new("size_t *")
        assert c.lib.mh_recv(ch, c.ffi.NULL, 0, n, 1000) == c.lib.MH_E_TOO_LARGE and n[0] == 1024
        assert c.recv(ch, cap=1023) == (c.lib.MH_E_TOO_LARGE, 1024)
        assert c.recv(ch, cap=1024) == (0, big)
        assert c.recv(ch, cap=4) == (0, b"next")
        # Over the channel's maximum on send: refused before anything is written.
        too_big = b"x" * ((1 << 20) + 1)
        assert c.send(ch, too_big) == c.lib.MH_E_TOO_LARGE
        assert "exceeds the channel maximum" in c.err()
    assert finished(p) == 0


def test_a_multihop_mh_send_holds_what_finds_no_credit_and_keeps_the_order(c: C, rt: mh.Runtime) -> None:
    """mh_send on a multi-hop channel whose window (16) is used up holds the message for the next credit
    (core-rs/dispatcher/src/multihop/held.rs) and returns at once, up to 4 frames of 64; the messages arrive in order."""
    n, gate = 400, procs.CTX.Event()
    with served(c, rt, [("wait_event", gate), ("expect_seq", n), ("send", b"done"), ("wait_closed",)], "multihop") as (p, h):
        ch = h.ptr
        for i in range(16 + 256):  # the service reads nothing yet: without holding the 17th would time out
            assert c.send(ch, i.to_bytes(4, "little"), timeout_ms=200) == 0, (i, c.err())
        unconsumed = c.ffi.new("size_t *")
        assert c.lib.mh_flush(ch, 0, unconsumed) == c.lib.MH_E_TIMEOUT and unconsumed[0] == 16 + 256
        gate.set()
        for i in range(16 + 256, n):  # these wait while the held frames are full, then go
            assert c.send(ch, i.to_bytes(4, "little")) == 0, (i, c.err())
        assert c.recv(ch) == (0, b"done")
        assert c.lib.mh_flush(ch, 10_000, unconsumed) == 0, c.err()
    assert finished(p) == 0


def test_timeouts_and_busy(c: C, rt: mh.Runtime) -> None:
    full = procs.CTX.Event()  # the service reads nothing until the client is blocked on a full ring
    with served(c, rt, [("wait_event", full), ("drain_until", b"end"), ("send", b"done"), ("wait_closed",)]) as (p, h):
        ch = h.ptr
        # Nothing to read: a bounded wait, and timeout 0 does not wait at all.
        t0 = time.monotonic()
        assert c.recv(ch, timeout_ms=200)[0] == c.lib.MH_E_TIMEOUT
        assert time.monotonic() - t0 >= 0.19
        assert "within 200 ms" in c.err()
        assert c.recv(ch, timeout_ms=0)[0] == c.lib.MH_E_TIMEOUT
        assert "no message waiting" in c.err()
        # Fill the ring without waiting (the service reads nothing yet): MH_E_BUSY.
        sent, rc = 0, 0
        for _ in range(200_000):
            rc = c.send(ch, b"f" * 40, timeout_ms=0)
            if rc != 0:
                break
            sent += 1
        assert rc == c.lib.MH_E_BUSY, (rc, c.err())
        assert sent > 100
        assert c.send(ch, b"f" * 40, timeout_ms=20) == c.lib.MH_E_TIMEOUT
        assert "no room" in c.err()
        # A blocking send waits for the service to make room: the service starts draining only once
        # this thread is parked in that send.
        me = threading.get_native_id()
        waker = threading.Thread(target=lambda: (until_parked(os.getpid(), me), full.set()), daemon=True)
        waker.start()
        assert c.send(ch, b"end", timeout_ms=20_000) == 0, c.err()
        waker.join(30)
        assert full.is_set()
        assert c.recv(ch, timeout_ms=20_000) == (0, b"done")
    assert finished(p) == 0


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_closed_peer_gives_closed_after_draining(c: C, rt: mh.Runtime, transport: str) -> None:
    with served(c, rt, [("send", b"last words"), ("close",)], transport) as (p, h):
        ch = h.ptr
        assert c.recv(ch) == (0, b"last words")
        assert c.recv(ch, timeout_ms=10_000)[0] == c.lib.MH_E_CLOSED
        assert "closed" in c.err()
        assert c.send(ch, b"anyone?") == c.lib.MH_E_CLOSED
        assert finished(p) == 0


def test_dead_peer_gives_closed(c: C, rt: mh.Runtime) -> None:
    with served(c, rt, [("sleep", 60)]) as (p, h):
        ch = h.ptr
        p.kill()
        p.join(10)
        t0 = time.monotonic()
        assert c.recv(ch, timeout_ms=10_000)[0] == c.lib.MH_E_CLOSED
        assert time.monotonic() - t0 < 9, "death was only noticed at the timeout"
        assert "died" in c.err()


def test_c_exports_and_accepts_a_python_client(c: C, rt: mh.Runtime) -> None:
    d = c.attach(rt.name, 1)
    svc = c.ffi.new("mh_service **")
    service = unique_name("csvc")
    try:
        c.ok(c.lib.mh_export(d, service.encode(), svc))
        # The name is taken now.
        other = c.ffi.new("mh_service **")
        assert c.lib.mh_export(d, service.encode(), other) == c.lib.MH_E_EXPORT
        assert service in c.err() and other[0] == c.ffi.NULL
        # Nobody binds yet: accept times out.
        out = c.ffi.new("mh_channel **")
        assert c.lib.mh_accept(svc[0], 100, out) == c.lib.MH_E_TIMEOUT and out[0] == c.ffi.NULL
        go = procs.CTX.Event()
        with procs.child(py_client, rt.name, 0, service, go, 120) as p:
            go.set()
            c.ok(c.lib.mh_accept(svc[0], 30_000, out))
            ch = out[0]
            try:
                for _ in range(120):
                    rc, m = c.recv(ch, timeout_ms=30_000)
                    assert rc == 0, c.err()
                    assert c.send(ch, b"C:" + m) == 0, c.err()
                assert c.recv(ch, timeout_ms=30_000)[0] == c.lib.MH_E_CLOSED
            finally:
                c.lib.mh_close(ch)
            assert finished(p) == 0
    finally:
        c.lib.mh_service_free(svc[0])
        c.lib.mh_detach(d)


def test_blocked_recv_in_a_thread_is_woken(c: C, rt: mh.Runtime) -> None:
    # cffi releases the GIL around the call: the wait parks, the message wakes it.
    with served(c, rt, [("expect", b"go"), ("send", b"wake up"), ("wait_closed",)]) as (p, h):
        ch = h.ptr
        got: list[Any] = []
        tid: list[int] = []
        t = threading.Thread(target=lambda: (tid.append(threading.get_native_id()), got.append(c.recv(ch, timeout_ms=20_000))))
        t.start()
        for _ in range(3000):  # bounded: the thread records its id first thing
            if tid:
                break
            time.sleep(0.001)
        until_parked(os.getpid(), tid[0])  # the recv really waits (parked on its futex) before anything is sent
        assert got == []
        assert c.send(ch, b"go") == 0
        t.join(30)
        assert not t.is_alive() and got == [(0, b"wake up")]
    assert finished(p) == 0


def test_unknown_runtime_core_and_service(c: C, rt: mh.Runtime) -> None:
    out = c.ffi.new("mh_dispatcher **")
    missing = unique_name("no-such-runtime")
    assert c.lib.mh_attach(missing.encode(), 0, out) == c.lib.MH_E_NOT_FOUND
    assert out[0] == c.ffi.NULL
    assert f'no runtime named "{missing}"' in c.err() and str(mh.paths.runtime_dir(missing)) in c.err()
    assert c.lib.mh_attach(rt.name.encode(), 7, out) == c.lib.MH_E_NOT_FOUND
    assert "core 7" in c.err()
    assert c.lib.mh_attach(b"../etc", 0, out) == c.lib.MH_E_INVALID
    assert "invalid runtime name" in c.err()
    d = c.attach(rt.name, 0)
    try:
        ch = c.ffi.new("mh_channel **")
        assert c.lib.mh_bind(d, b"nobody-exports-this", b"ump", 2000, ch) == c.lib.MH_E_BIND
        assert "nobody-exports-this" in c.err() and ch[0] == c.ffi.NULL
        assert c.lib.mh_bind(d, b"x", b"carrier-pigeon", 2000, ch) == c.lib.MH_E_INVALID
        assert "carrier-pigeon" in c.err()
    finally:
        c.lib.mh_detach(d)


def test_null_pointers_and_bad_strings_are_invalid(c: C, rt: mh.Runtime) -> None:
    ffi, lib, NULL = c.ffi, c.lib, c.ffi.NULL
    INVALID = lib.MH_E_INVALID
    d_out, s_out, ch_out = ffi.new("mh_dispatcher **"), ffi.new("mh_service **"), ffi.new("mh_channel **")
    n = ffi.new("size_t *")
    buf = ffi.new("uint8_t[16]")

    def bad(rc: int, *words: str) -> None:
        assert rc == INVALID, (rc, c.err())
        for w in words:
            assert w in c.err(), (w, c.err())

    bad(lib.mh_attach(NULL, 0, d_out), "mh_attach", "runtime_name is NULL")
    bad(lib.mh_attach(rt.name.encode(), 0, NULL), "out is NULL")
    bad(lib.mh_attach(b"\xff\xfe", 0, d_out), "not valid UTF-8")
    bad(lib.mh_export(NULL, b"x", s_out), "mh_export", "d is NULL")
    bad(lib.mh_accept(NULL, 0, ch_out), "s is NULL")
    bad(lib.mh_bind(NULL, b"x", b"ump", 0, ch_out), "mh_bind", "d is NULL")
    bad(lib.mh_send(NULL, b"x", 1, 0), "ch is NULL")
    bad(lib.mh_recv(NULL, buf, 16, n, 0), "mh_recv", "ch is NULL")
    bad(lib.mh_close(NULL), "mh_close")
    bad(lib.mh_runtime_dir(NULL, NULL, 0, n), "runtime_name is NULL")
    assert lib.mh_max_message(NULL) == 0
    lib.mh_detach(NULL)
    lib.mh_service_free(NULL)
    d = c.attach(rt.name, 0)
    try:
        bad(lib.mh_export(d, NULL, s_out), "name is NULL")
        bad(lib.mh_export(d, b"x", NULL), "out is NULL")
        bad(lib.mh_bind(d, NULL, b"ump", 0, ch_out), "name is NULL")
        bad(lib.mh_bind(d, b"x", NULL, 0, ch_out), "transport is NULL")
        bad(lib.mh_bind(d, b"\xc3\x28", b"ump", 0, ch_out), "name is not valid UTF-8")
        with served(c, rt, [("expect", b""), ("expect", b"still fine"), ("wait_closed",)]) as (p, h):
            ch = h.ptr
            bad(lib.mh_send(ch, NULL, 5, 0), "data")
            assert lib.mh_send(ch, NULL, 0, 0) == 0  # an empty message needs no buffer
            bad(lib.mh_recv(ch, NULL, 16, n, 0), "buf")
            bad(lib.mh_recv(ch, buf, 16, NULL, 0), "len is NULL")
            assert c.send(ch, b"still fine") == 0  # the channel is unharmed
        assert finished(p) == 0
    finally:
        lib.mh_detach(d)


def test_last_error_is_per_thread(c: C) -> None:
    c.lib.mh_attach(c.ffi.NULL, 0, c.ffi.new("mh_dispatcher **"))
    mine = c.err()
    other: list[str] = []
    t = threading.Thread(target=lambda: other.append(c.err()))
    t.start()
    t.join(10)
    assert "NULL" in mine and other == ["no error"]


def test_detached_dispatcher_keeps_its_channels(c: C, rt: mh.Runtime) -> None:
    service = unique_name("svc")
    ready = procs.CTX.Event()
    with procs.child(py_service, rt.name, 1, service, ready, [("echo", 1, b"+"), ("wait_closed",)]) as p:
        assert ready.wait(30)
        d = c.attach(rt.name, 0)
        ch = c.bind(d, service)
        c.lib.mh_detach(d)
        try:
            assert c.send(ch, b"after detach") == 0
            assert c.recv(ch) == (0, b"+after detach")
        finally:
            c.lib.mh_close(ch)
        assert finished(p) == 0


# ---- the runtime directory: Rust twin vs Python ---------------------------------------------

_PROBE = r"""
import json, sys, cffi
from multihop.paths import runtime_dir
ffi = cffi.FFI()
ffi.cdef("int mh_runtime_dir(const char *, char *, size_t, size_t *); const char *mh_last_error(void);")
lib = ffi.dlopen(sys.argv[1])
out = {}
for name in sys.argv[2:]:
    buf = ffi.new("char[4096]"); n = ffi.new("size_t *")
    rc = lib.mh_runtime_dir(name.encode(), buf, 4096, n)  # Rust first: it creates the root
    rs = ffi.string(buf).decode() if rc == 0 else ("ValueError" if rc == -5 else ffi.string(lib.mh_last_error()).decode())
    try:
        py = str(runtime_dir(name))
    except ValueError as e:
        py = "ValueError"
    out[name] = [py, rs]
print(json.dumps(out))
"""


def _probe(capi_path: Path, env: dict[str, str], cwd: Path, names: list[str]) -> dict[str, list[str]]:
    r = subprocess.run([sys.executable, "-c", _PROBE, str(capi_path), *names], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_runtime_dir_matches_python(capi: Any, tmp_path: Path) -> None:
    capi_path = ensure_cdylib()
    base = {k: v for k, v in os.environ.items() if k not in ("MULTIHOP_RUNTIME_ROOT", "XDG_RUNTIME_DIR", "TMPDIR", "TEMP", "TMP")}
    (tmp_path / "xdg").mkdir()
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp2").mkdir()
    (tmp_path / "ro").mkdir(mode=0o500)
    (tmp_path / "cwd").mkdir()
    t = str(tmp_path)
    envs = [
        {"MULTIHOP_RUNTIME_ROOT": f"{t}/root"},
        {"MULTIHOP_RUNTIME_ROOT": f"{t}//root2/./x/", "XDG_RUNTIME_DIR": f"{t}/xdg"},
        {"MULTIHOP_RUNTIME_ROOT": "", "XDG_RUNTIME_DIR": f"{t}/xdg"},
        {"XDG_RUNTIME_DIR": f"{t}/xdg/", "TMPDIR": f"{t}/tmp"},
        {"XDG_RUNTIME_DIR": "xdg"},  # relative: resolved against the working directory by both
        {"XDG_RUNTIME_DIR": f"{t}/missing", "TMPDIR": f"{t}/tmp"},
        {"XDG_RUNTIME_DIR": f"{t}/tmp/file", "TMPDIR": f"{t}/tmp/../tmp2"},
        {"TMPDIR": f"{t}/nowhere", "TEMP": f"{t}/tmp2"},
        {"TMPDIR": "tmp", "TMP": f"{t}/tmp2"},  # relative TMPDIR: made absolute
    ]
    if os.getuid() != 0:  # root may write anywhere
        envs.append({"XDG_RUNTIME_DIR": f"{t}/ro", "TMPDIR": f"{t}/ro", "TEMP": f"{t}/tmp"})
    (tmp_path / "tmp" / "file").write_text("")
    names = ["demo", "t-1.2_x", "a" * 64, "a" * 65, ".hidden", "a\n", "a/b", "ü"]
    for extra in envs:
        cwd = tmp_path if extra.get("XDG_RUNTIME_DIR") == "xdg" or extra.get("TMPDIR") == "tmp" else tmp_path / "cwd"
        got = _probe(capi_path, {**base, **extra}, cwd, names)
        for name, (py, rs) in got.items():
            assert py == rs, f"env {extra}, name {name!r}: Python {py!r}, Rust {rs!r}"
        assert got["demo"][0] != "ValueError" and got["a\n"][0] == "ValueError"
    # The root is created 0700 by the Rust side as well.
    got = _probe(capi_path, {**base, "MULTIHOP_RUNTIME_ROOT": f"{t}/fresh/root"}, tmp_path, ["x"])
    assert got["x"] == [f"{t}/fresh/root/x"] * 2
    assert (os.stat(f"{t}/fresh/root").st_mode & 0o777) == 0o700


def test_an_accept_with_no_deadline_ends_when_the_monitor_dies(c: C) -> None:
    """mh_accept waits on the backlog's condition variable with no slice to end (only a 60 s safety net):
    the monitor's death must wake it. A C thread blocked in mh_accept(..., -1) returns MH_E_MONITOR once
    the monitor of its core is killed, long before any slice would have ended."""
    rt = mh.Runtime.start(unique_name("cacc"), cores=[0, 1])
    d = svc = None
    try:
        d = c.attach(rt.name, 1)
        out_svc = c.ffi.new("mh_service **")
        c.ok(c.lib.mh_export(d, unique_name("waits").encode(), out_svc))
        svc = out_svc[0]
        got: list[int] = []
        out = c.ffi.new("mh_channel **")
        t = threading.Thread(target=lambda: got.append(int(c.lib.mh_accept(svc, -1, out))), daemon=True)
        t.start()  # cffi releases the GIL around the call
        assert t.native_id is not None
        until_parked(os.getpid(), t.native_id)  # in FUTEX_WAIT: the condition variable
        os.kill(rt.monitor_pids[1], signal.SIGKILL)
        t0 = time.monotonic()
        t.join(20)
        assert not t.is_alive(), "mh_accept did not return when the monitor died"
        assert got == [CODES["MH_E_MONITOR"]] and time.monotonic() - t0 < 10, (got, time.monotonic() - t0)
    finally:
        if svc is not None:
            c.lib.mh_service_free(svc)
        if d is not None:
            c.lib.mh_detach(d)
        rt.stop()
