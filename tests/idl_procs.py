"""Functions the Flounder binding tests run in child processes (importable by spawn; no session import,
which would give the child a runtime root of its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import multihop as mh
import multihop.idl as idl

ECHO_IF = Path(__file__).resolve().parent.parent / "flounder-idl" / "echo.if"


class Echo:
    """A handler object of echo.if: echo returns its bytes, say answers."""

    def echo(self, request: bytes) -> bytes:
        return request

    def say(self, text: str) -> str:
        return f"you said {text}"


def served(name: str, core: int, service: str, ready: Any, stop: Any) -> None:
    """Export `service` of echo.if with an Echo handler until `stop` is set; exit 0 if no handler failed."""
    rt = mh.Runtime.attach(name)
    mod = idl.load(ECHO_IF)
    with rt.dispatcher(core) as d, mod.EchoBinding.export(d, service, Echo()) as server:
        ready.set()
        stop.wait(120)
        assert not server.errors, server.errors
