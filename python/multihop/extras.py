"""The optional parts of the install (the package's extras) and the check a command makes before it needs one.

``pip install multihop`` installs what channels, monitors and runtimes need
(numpy, psutil, and the Rust extension).  The rest is in extras, as polars
and pydantic do it:

==================  ============================================  ================================================
extra               installs                                      for
==================  ============================================  ================================================
``bench``           pyarrow, pyzmq                                ``multihop bench`` (Parquet traces; ZeroMQ in
                                                                  the peers suite)
``analysis``        pyarrow, pyspark, matplotlib (and Java 17+)   ``multihop analyze``
``zmq``             pyzmq                                         the peers suite's ZeroMQ case alone
``fabric``          multihop-fabric: the ``multihop-bridge``      ``Runtime.start(..., fabric=...)``: runtimes on
                    binary (Rust, over the zenoh crate)           several machines (docs/fabric.md)
``fabric-bench``    eclipse-zenoh                                 benches/bench_fabric.py's zenoh baseline
``test``            pytest and plugins, hypothesis, cffi, and     the test suite (``bash .ci/setup`` installs it)
                    everything above
==================  ============================================  ================================================

A command that needs an extra calls :func:`require` before it imports
anything of it, so a missing package is one clear line naming the extra
(``multihop bench needs the bench extra; missing: pyarrow (...). Install it
with pip install 'multihop[bench]'``), not a traceback from deep inside.
"""

from __future__ import annotations

import importlib

from multihop.errors import MultihopError

__all__ = ["EXTRAS", "ExtraMissing", "install_hint", "missing", "require"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "bench": ("pyarrow",),
    "analysis": ("pyarrow", "pyspark", "matplotlib"),
}
"""Per extra, the modules a command cannot run without (optional ones, like pyzmq, are not listed)."""


class ExtraMissing(MultihopError, ImportError):
    """A command needs an extra of the install that is not (fully) installed; the message says which and how."""


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'multihop[EXTRA]'``."""
    return f"pip install 'multihop[{extra}]'"


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here, each with the reason (``"pyarrow (No module ...)"``)."""
    out = []
    for name in EXTRAS[extra]:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            out.append(f"{name} ({exc})")
    return out


def require(extra: str, command: str, error: type[MultihopError] = ExtraMissing) -> None:
    """Raise ``error`` naming ``extra`` and how to install it unless every module of ``extra`` imports.

    Args:
        extra: a key of :data:`EXTRAS`.
        command: what needs it, for the message (``"multihop bench"``).
        error: the class to raise (a command may have its own).
    """
    gone = missing(extra)
    if gone:
        raise error(f"{command} needs the {extra} extra; missing: {', '.join(gone)}. Install it with {install_hint(extra)}")
