"""A private copy of the plain C-ABI library, for tests that compile and run C.

``test_capi.ensure_cdylib`` builds the plain library (no ``python`` feature)
into ``target/capi``, where maturin never writes. Each C test still links a copy
of its own, so a rebuild during the run cannot change a library a running
program has mapped.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def private_cdylib(dest: Path) -> Path:
    """Copy the plain libmultihop_core.so into directory ``dest`` and return the copy's path.

    Builds it first if needed (see ``test_capi.ensure_cdylib``).
    """
    from test_capi import ensure_cdylib

    data = ensure_cdylib().read_bytes()
    if b"PyInit__core" in data:
        pytest.fail(f"{ensure_cdylib()} was built with the python feature; it must be the plain C-ABI build")
    out = dest / "libmultihop_core.so"
    out.write_bytes(data)
    out.chmod(0o755)
    return out
