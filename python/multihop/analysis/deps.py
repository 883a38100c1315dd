"""The analysis extra: what ``multihop analyze`` needs beyond the base install, checked up front.

``pip install 'multihop[analysis]'`` installs PySpark and matplotlib (pyarrow
and numpy are base dependencies).  :func:`require_extras` fails before any
trace is read or JVM started, naming what is missing and the extra to install.
"""

from __future__ import annotations

import importlib

from multihop.errors import MultihopError

__all__ = ["EXTRA", "AnalysisUnavailable", "require_extras"]

EXTRA = "pip install 'multihop[analysis]'"
"""How to install what the analysis needs."""

_NEEDED = ("pyspark", "matplotlib")


class AnalysisUnavailable(MultihopError, RuntimeError):
    """The analysis cannot run here: a package of the analysis extra, Java or Spark is missing or broken."""


def require_extras() -> None:
    """Import the analysis extra's packages; raise if one is missing.

    Raises:
        AnalysisUnavailable: PySpark or matplotlib cannot be imported; the
            message names them and says to run ``pip install 'multihop[analysis]'``.
    """
    missing = []
    for name in _NEEDED:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            missing.append(f"{name} ({exc})")
    if missing:
        raise AnalysisUnavailable(
            f"multihop analyze needs the analysis extra; missing: {', '.join(missing)}. Install it with {EXTRA}"
        )
