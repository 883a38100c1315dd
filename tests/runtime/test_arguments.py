"""Argument errors are the library's errors, checked before anything starts (issue 18 §5).

Every bad argument gives ValueError or TypeError (or the library's own error) naming the
argument, never a bare OverflowError or UnicodeEncodeError from a conversion; the same ranges
hold on both transports; and nothing starts first (no monitor spawned, no bind attempted).
Before the fix: ``recv_batch(-1)`` raised OverflowError, a lone surrogate a UnicodeEncodeError,
``Runtime.start(cores=[2**70])`` spawned a monitor first, and a multi-hop ``bind(max_message=0)``
was accepted.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest

import multihop as mh
from chanpair import channel_pair
from multihop import _core
from session import monitor_processes, unique_name

SURROGATE = "bad\udc80name"


def _named(exc: type[BaseException], words: str, call: Callable[[], Any]) -> BaseException:
    """Run `call`, expect exactly `exc` (not a UnicodeError, not OverflowError) naming `words`."""
    with pytest.raises(exc) as e:
        call()
    assert not isinstance(e.value, (UnicodeError, OverflowError)), f"{type(e.value).__name__}: {e.value}"
    assert words in str(e.value), f"{type(e.value).__name__}: {e.value!r} does not name {words!r}"
    return e.value


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_channel_arguments(rt: mh.Runtime, transport: str) -> None:
    with channel_pair(rt, transport) as (client, server):
        _named(ValueError, "max_count", lambda: server.recv_batch(-1))
        _named(ValueError, "max_count", lambda: server.recv_batch(2**70))
        _named(TypeError, "max_count", lambda: server.recv_batch("3"))
        _named(TypeError, "max_count", lambda: server.recv_batch(True))
        _named(ValueError, "max_count", lambda: server.recv_records(-1, 8))
        _named(ValueError, "record_size", lambda: server.recv_records(1, -1))
        _named(ValueError, "record_size", lambda: server.recv_records(1, 2**40))
        _named(ValueError, "max_count x record_size", lambda: server.recv_records(2**24, 2**20))
        for bad in (-1.0, math.nan):
            _named(ValueError, "timeout", lambda bad=bad: client.send(b"x", timeout=bad))
            _named(ValueError, "timeout", lambda bad=bad: server.recv(timeout=bad))
            _named(ValueError, "timeout", lambda bad=bad: client.flush(timeout=bad))
            _named(ValueError, "timeout", lambda bad=bad: client.send_batch([b"x"], timeout=bad))
        _named(TypeError, "bytes-like", lambda: client.send("text"))
        # Nothing was sent or taken by any of it.
        client.send(b"fine")
        assert server.recv(timeout=5) == b"fine"
        assert server.try_recv() is None


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_bind_arguments_have_the_same_ranges_on_both_transports(rt: mh.Runtime, transport: str) -> None:
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("args")
        before = [m["binds_ok"] + m["binds_failed"] for m in rt.status(limit=0)["monitors"]]

        def bind(**kw: Any) -> mh.Channel:
            return cli.bind(**{"name": "args", "transport": transport, "timeout": 5, **kw})

        _named(ValueError, "max_message must be an int from 1 to ", lambda: bind(max_message=0))
        _named(ValueError, "max_message", lambda: bind(max_message=-1))
        _named(ValueError, "max_message", lambda: bind(max_message=2**70))
        _named(ValueError, "window must be an int from 1 to 4096", lambda: bind(window=0))
        _named(ValueError, "window", lambda: bind(window=-1))
        _named(ValueError, "window must be an int from 1 to 4096", lambda: bind(window=2**20))
        _named(ValueError, "timeout", lambda: bind(timeout=-1))
        _named(ValueError, "service name", lambda: bind(name=SURROGATE))
        _named(TypeError, "service name", lambda: bind(name=42))
        _named(ValueError, "iref", lambda: cli.bind(iref=-1, transport=transport))
        _named(ValueError, "transport", lambda: bind(transport="tcp"))
        _named(TypeError, "transport", lambda: bind(transport=5))
        _named(TypeError, "exactly one of name or iref", lambda: cli.bind(transport=transport))
        after = [m["binds_ok"] + m["binds_failed"] for m in rt.status(limit=0)["monitors"]]
        assert after == before, "a bad argument reached a monitor"
        ch = bind(max_message=1000, window=4)  # the edges of the ranges are fine
        peer = svc.accept(timeout=5)
        ch.send(b"y" * ch.max_message)
        assert len(peer.recv(timeout=5)) == ch.max_message


def test_export_arguments(rt: mh.Runtime) -> None:
    with rt.dispatcher(0) as d:
        _named(ValueError, "service name", lambda: d.export(SURROGATE))
        _named(TypeError, "service name", lambda: d.export(b"bytes"))
        _named(ValueError, "backlog", lambda: d.export("x", backlog=0))
        _named(ValueError, "backlog", lambda: d.export("x", backlog=-1))
        _named(ValueError, "backlog", lambda: d.export("x", backlog=2**70))
        _named(TypeError, "on_connect", lambda: d.export("x", on_connect=5))
        _named(mh.ExportError, "invalid service name", lambda: d.export(""))
        assert d.export("x", backlog=1).backlog == 1  # the name was never taken by the bad calls


def test_runtime_arguments_are_checked_before_any_monitor_starts() -> None:
    before = {p.pid for p in monitor_processes()}
    name = unique_name("args")
    _named(ValueError, "core 1180591620717411303424 is out of range", lambda: mh.Runtime.start(name, cores=[2**70]))
    _named(ValueError, "out of range", lambda: mh.Runtime.start(name, cores=[0, -1]))
    _named(TypeError, "cores must be ints", lambda: mh.Runtime.start(name, cores=["0"]))
    _named(TypeError, "cores must be ints", lambda: mh.Runtime.start(name, cores=[0.5]))
    _named(TypeError, "cores must be a sequence", lambda: mh.Runtime.start(name, cores="0-1"))
    _named(ValueError, "distinct", lambda: mh.Runtime.start(name, cores=[0, 0]))
    _named(ValueError, "at least one core", lambda: mh.Runtime.start(name, cores=[]))
    _named(ValueError, "timeout", lambda: mh.Runtime.start(name, cores=[0], timeout=-1))
    _named(TypeError, "timeout", lambda: mh.Runtime.start(name, cores=[0], timeout="5"))
    _named(mh.RoutingError, "unknown routing mode", lambda: mh.Runtime.start(name, cores=[0], routing="bogus"))
    _named(ValueError, "invalid runtime name", lambda: mh.Runtime.start(SURROGATE, cores=[0]))
    _named(ValueError, "invalid runtime name", lambda: mh.Runtime.attach("../etc"))
    _named(ValueError, "timeout", lambda: mh.Runtime.attach(name, timeout=math.nan))
    assert {p.pid for p in monitor_processes()} == before, "a monitor was spawned for bad arguments"
    assert _core.runtime_state(str(mh.paths.runtime_dir(name))) == "absent", "a directory was made for bad arguments"


def test_runtime_method_arguments(rt: mh.Runtime) -> None:
    _named(ValueError, "core 99 is not part of runtime", lambda: rt.dispatcher(99))
    _named(ValueError, "limit", lambda: rt.status(limit=-1))
    _named(ValueError, "timeout", lambda: rt.stop(timeout=-1))
    _named(ValueError, "core", lambda: _core.Dispatcher.attach(str(rt.dir), -1))
    assert rt.alive


# ---- issue 26 §4: type errors are TypeErrors, ranges are said in words ------------------------------


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_bind_ranges_are_said_in_words(rt: mh.Runtime, transport: str) -> None:
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        srv.export("words")

        def bind(**kw: Any) -> mh.Channel:
            return cli.bind(**{"name": "words", "transport": transport, "timeout": 5, **kw})

        e = _named(ValueError, "window must be an int from 1 to 4096", lambda: bind(window=-1))
        assert "-1 is not a valid window" in str(e) and "4294967295" not in str(e)
        assert "1099511627776 is not a valid window" in str(_named(ValueError, "window", lambda: bind(window=2**40)))
        limit = 1 << 26 if transport == "ump" else 1 << 20
        e = _named(ValueError, f"max_message must be an int from 1 to {limit} bytes on a {transport} channel, got -1", lambda: bind(max_message=-1))
        assert "18446744073709551615" not in str(e)
        _named(TypeError, "timeout must be a number of seconds or None, got str '1'", lambda: bind(timeout="1"))
        _named(TypeError, "timeout must be a number of seconds or None, got bool True", lambda: bind(timeout=True))
        _named(TypeError, "window must be an int, got str", lambda: bind(window="16"))
        # bind_async checks them the same way, when it is called (it raised OverflowError for 2**70).
        _named(ValueError, "2361183241434822606848 is not a valid window", lambda: cli.bind_async("words", transport=transport, window=2**71))
        _named(TypeError, "timeout must be a number of seconds or None", lambda: cli.bind_async("words", transport=transport, timeout="1"))


def test_runtime_arguments_of_the_wrong_type_are_type_errors(rt: mh.Runtime) -> None:
    for bad in ("0", None, 1.0, True):
        _named(TypeError, f"core must be an int, got {type(bad).__name__}", lambda bad=bad: rt.dispatcher(core=bad))
        _named(TypeError, "core must be an int", lambda bad=bad: rt.cpu_of(bad))
    _named(ValueError, "core 7 is not part of runtime", lambda: rt.dispatcher(core=7))
    _named(TypeError, "pin must be True or False, got str 'yes'", lambda: rt.dispatcher(0, pin="yes"))
    _named(TypeError, "limit must be an int >= 0 or None, got str", lambda: rt.status(limit="x"))
    _named(ValueError, "limit must be an int >= 0 or None", lambda: rt.status(limit=-1))
    _named(TypeError, "the runtime name must be a str, got int 3", lambda: mh.Runtime.attach(3))  # type: ignore[arg-type]
    name = unique_name("types")
    _named(TypeError, "routing must be a str", lambda: mh.Runtime.start(name, cores=[0], routing=3))  # type: ignore[arg-type]
    _named(TypeError, "detached must be True or False", lambda: mh.Runtime.start(name, cores=[0], detached="yes"))  # type: ignore[arg-type]
    _named(ValueError, "fd must be an int from 0 to 2147483647, got -1", lambda: mh.Handle(-1))
    _named(ValueError, "backlog must be an int from 1 to 65536", lambda: rt.dispatcher(0).export("w", backlog=0))
    assert rt.alive


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_arrays_of_references_are_refused_naming_their_dtype(rt: mh.Runtime, transport: str) -> None:
    import numpy as np

    with channel_pair(rt, transport) as (client, server):
        _named(TypeError, "dtype object", lambda: client.send_records(np.array([object(), object()], dtype=object)))
        with_refs = np.zeros(2, dtype=[("Output", "i4"), ("ref", "O")])
        e = _named(TypeError, "holds references to Python objects", lambda: client.send_records(with_refs))
        assert "ref" in str(e), "the dtype is named"
        _named(TypeError, "dtype object", lambda: client.send(memoryview(np.array([None], dtype=object))))
        _named(TypeError, "dtype object", lambda: client.send_batch([b"fine", np.array([1, None], dtype=object)]))
        _named(TypeError, "message 1 of the batch", lambda: client.send_batch([b"fine", 3]))
        _named(TypeError, "messages must be an iterable of bytes-like objects, got int", lambda: client.send_batch(3))
        _named(TypeError, "records must be a C-contiguous array of rows", lambda: client.send_records(3))
        # A field named with an O is no object; plain dtypes go.
        plain = np.zeros(3, dtype=[("Output", "i4"), ("Other", "f8")])
        assert client.send_records(plain, timeout=5) == 3
        assert [len(server.recv(timeout=5)) for _ in range(3)] == [12] * 3
        assert server.try_recv() is None, "nothing of the refused calls was sent"
