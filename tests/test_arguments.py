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
from multihop import _core
from chanpair import channel_pair
from conftest import monitor_processes, unique_name

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

        _named(ValueError, "max_message must be in 1..=", lambda: bind(max_message=0))
        _named(ValueError, "max_message", lambda: bind(max_message=-1))
        _named(ValueError, "max_message", lambda: bind(max_message=2**70))
        _named(ValueError, "window must be in 1..=4096", lambda: bind(window=0))
        _named(ValueError, "window", lambda: bind(window=-1))
        _named(ValueError, "window must be in 1..=4096", lambda: bind(window=2**20))
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
