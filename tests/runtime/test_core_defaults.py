"""The engine's defaults are defined once (core-rs/base/src/defaults.rs, issue 25) and exported by `_core`; the
literals that `_core`'s signatures show Python (pyo3 renders only literals) must be those values."""

from __future__ import annotations

import inspect

from multihop import _core


def _default(fn: object, name: str) -> object:
    return inspect.signature(fn).parameters[name].default  # type: ignore[arg-type]


def test_core_exports_the_engines_defaults() -> None:
    assert (_core.DEFAULT_WINDOW, _core.MAX_WINDOW) == (16, 4096)
    assert (_core.DEFAULT_TIMEOUT, _core.REQUEST_TIMEOUT, _core.CLOSE_HELD_WAIT) == (5.0, 10.0, 5.0)
    assert (_core.MAX_BATCH, _core.HELD_FRAMES) == (64, 4)
    assert (_core.DEFAULT_MAX_MESSAGE, _core.LIMIT_MAX_MESSAGE) == (1 << 20, 64 << 20)
    assert (_core.DEFAULT_BACKLOG, _core.MAX_BACKLOG) == (16, 65536)
    assert (_core.MAX_HANDLES, _core.DEFAULT_HANDLE_ROOM) == (32, 1024)


def test_signature_defaults_are_the_exported_ones() -> None:
    for method in (_core.Dispatcher.bind, _core.Dispatcher.bind_async, _core.Dispatcher._bind_start):
        assert _default(method, "window") == _core.DEFAULT_WINDOW, method
        assert _default(method, "timeout") == _core.DEFAULT_TIMEOUT, method
    assert _default(_core.Dispatcher.export, "backlog") == _core.DEFAULT_BACKLOG
    assert _default(_core.Channel.close, "timeout") == _core.CLOSE_HELD_WAIT
