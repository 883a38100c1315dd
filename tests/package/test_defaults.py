"""The defaults are defined once (multihop.defaults): the extension agrees with them, and no Python module
restates them."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import multihop as mh
from multihop import _core, aio
from multihop.defaults import DEFAULT_TIMEOUT, DEFAULT_WINDOW
from multihop.flounder import Binding, bind_channel

PACKAGE = Path(mh.__file__).parent


def _default(fn: object, name: str) -> object:
    return inspect.signature(fn).parameters[name].default  # type: ignore[arg-type]


def test_the_extension_has_the_same_defaults() -> None:
    for method in (_core.Dispatcher.bind, _core.Dispatcher.bind_async, _core.Dispatcher._bind_start):
        assert _default(method, "window") == DEFAULT_WINDOW, method
        assert _default(method, "timeout") == DEFAULT_TIMEOUT, method
    assert _default(_core.monitor_status, "timeout") == DEFAULT_TIMEOUT
    assert _default(_core.fabric_status, "timeout") == DEFAULT_TIMEOUT


def test_the_python_calls_take_theirs_from_multihop_defaults() -> None:
    for fn in (aio.bind, Binding.bind, bind_channel):
        assert _default(fn, "window") == DEFAULT_WINDOW and _default(fn, "timeout") == DEFAULT_TIMEOUT, fn
    assert _default(mh.Runtime.attach, "timeout") == DEFAULT_TIMEOUT
    assert _default(mh.Runtime.stop, "timeout") == DEFAULT_TIMEOUT


_RESTATED = re.compile(r"""(\bwindow(: int)? ?= ?16\b|"window": 16\b|\btimeout(: float( \| None)?)? ?= ?5\.0\b)""")


def test_no_module_restates_a_default() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "defaults.py" or path.name.endswith("_if.py"):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _RESTATED.search(line):
                found.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert not found, "read it from multihop.defaults:\n" + "\n".join(found)
