"""Where runtimes live on disk.

A runtime is a directory of mode 0700 holding one Unix socket per monitor
(``mon-<core>.sock``), the monitors' logs, and ``runtime.json``.  It sits
under ``$XDG_RUNTIME_DIR/multihop`` when that is set and usable, else under
``<tempdir>/multihop-<uid>``.  ``MULTIHOP_RUNTIME_ROOT`` overrides both (tests
use it to keep runtimes apart).  No shared memory is reachable through it:
segments are passed as file descriptors over the sockets.

``core-rs/base/src/paths.rs`` is this module's twin for the C ABI (``mh_attach``);
``tests/c/test_capi.py`` checks that both name the same directory.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

from multihop.errors import MultihopError

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")  # whole name: fullmatch


def _private_dir(path: Path) -> Path:
    """Create `path` (mode 0700) if needed and check nobody else can use it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise MultihopError(f"runtime root {path} belongs to uid {st.st_uid}, not to us (uid {os.getuid()})")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def runtime_root() -> Path:
    """The directory under which this user's runtimes live (created 0700)."""
    override = os.environ.get("MULTIHOP_RUNTIME_ROOT")
    if override:
        return _private_dir(Path(override))
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg) and os.access(xdg, os.W_OK):
        return _private_dir(Path(xdg) / "multihop")
    return _private_dir(Path(tempfile.gettempdir()) / f"multihop-{os.getuid()}")


def check_name(name: str) -> str:
    """Return `name` if it is a valid runtime name, else raise ValueError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"invalid runtime name {name!r}: use 1-64 characters from A-Z a-z 0-9 _ . -, not starting with . or -")
    return name


def runtime_dir(name: str) -> Path:
    """The directory of runtime `name` (not created)."""
    return runtime_root() / check_name(name)


def monitor_socket(directory: Path, core: int) -> Path:
    """Socket path of the monitor of `core`."""
    return directory / f"mon-{core}.sock"
