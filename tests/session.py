"""The test session's private runtime root, unique runtime names, and the monitors it started.

Importing this module points ``MULTIHOP_RUNTIME_ROOT`` at a fresh private directory (children inherit it):
tests/conftest.py imports it first, so every test of the session shares the one root. A module that spawned
children import must not import this one at its top (a child would get a fresh root): import it late, inside
the function that needs it.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path

import psutil

ROOT = Path(tempfile.mkdtemp(prefix="mh-test-root-"))
os.environ["MULTIHOP_RUNTIME_ROOT"] = str(ROOT)  # children inherit it

_counter = itertools.count()


def monitor_processes() -> list[psutil.Process]:
    """Live (non-zombie) monitor processes that belong to this test session."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = p.info["cmdline"] or []
            if "multihop.monitor" in cmd and str(ROOT) in " ".join(cmd) and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def unique_name(prefix: str = "t") -> str:
    """A runtime name no other test uses."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}"
