"""The plain C-ABI library, and a private copy of it for tests that compile and run C.

``ensure_cdylib`` builds the plain library (no ``python`` feature)
into ``target/capi``, where maturin never writes. Each C test still links a copy
of its own, so a rebuild during the run cannot change a library a running
program has mapped.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CAPI_TARGET = ROOT / "target" / "capi"
LIBDIR = CAPI_TARGET / "release"
LIBPATH = LIBDIR / "libmultihop_core.so"


def _sources_mtime() -> float:
    # every crate of the engine's workspace (core-rs/base, dispatcher, monitor, testkit and the bindings)
    files = [*(ROOT / "core-rs").rglob("*.rs"), *(ROOT / "core-rs").rglob("Cargo.toml"), ROOT / "Cargo.toml"]
    return max(f.stat().st_mtime for f in files if f.exists())


def _needs_build() -> str | None:
    """Why the cdylib must be (re)built, or None."""
    if not LIBPATH.exists():
        return "missing"
    if LIBPATH.stat().st_mtime < _sources_mtime():
        return "older than the sources"
    return None


def ensure_cdylib() -> Path:
    """The plain cdylib, built with ``cargo build --release -p multihop-core --target-dir target/capi`` if needed.

    ``MULTIHOP_CDYLIB=/path/to/libmultihop_core.so`` uses that library as it is (no build).
    """
    override = os.environ.get("MULTIHOP_CDYLIB")
    if override:
        return Path(override)
    why = _needs_build()
    if why is not None:
        r = subprocess.run(
            ["cargo", "build", "--release", "-p", "multihop-core", "--target-dir", str(CAPI_TARGET)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if r.returncode != 0:
            pytest.fail(f"cargo build of libmultihop_core.so ({why}) failed:\n{r.stderr[-4000:]}")
        if LIBPATH.exists() and LIBPATH.stat().st_mtime < _sources_mtime():
            os.utime(LIBPATH)  # cargo found it fresh (a source was touched, not changed)
    return LIBPATH


def private_cdylib(dest: Path) -> Path:
    """Copy the plain libmultihop_core.so into directory ``dest`` and return the copy's path.

    Builds it first if needed (see ``ensure_cdylib``).
    """
    data = ensure_cdylib().read_bytes()
    if b"PyInit__core" in data:
        pytest.fail(f"{ensure_cdylib()} was built with the python feature; it must be the plain C-ABI build")
    out = dest / "libmultihop_core.so"
    out.write_bytes(data)
    out.chmod(0o755)
    return out
