"""A private copy of the plain C-ABI library, for tests that compile and run C.

maturin builds the Python extension into the same ``target/`` directory, so at
any moment ``target/release/libmultihop_core.so`` may become a build with the
``python`` feature (which needs libpython and cannot link into a C program).
``test_capi.ensure_cdylib`` rebuilds the plain library when it finds one; a
rebuild by maturin can still land between that check and a link.  So a C test
links and runs against a copy taken in one read and checked to be plain.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def private_cdylib(dest: Path, attempts: int = 3) -> Path:
    """Copy the plain libmultihop_core.so into directory ``dest`` and return the copy's path.

    Builds it first if needed (``cargo build --release -p multihop-core``); tries
    ``attempts`` times if a maturin build keeps replacing it.
    """
    from test_capi import ensure_cdylib

    for _ in range(attempts):
        data = ensure_cdylib().read_bytes()
        if b"PyInit__core" not in data:
            out = dest / "libmultihop_core.so"
            out.write_bytes(data)
            out.chmod(0o755)
            return out
    pytest.fail(f"target/release/libmultihop_core.so was rebuilt with the python feature {attempts} times in a row; "
                "set MULTIHOP_CDYLIB to a plain build")
