"""The analysis extra: what ``multihop analyze`` needs beyond the base install, checked up front.

``pip install 'multihop[analysis]'`` installs pyarrow, PySpark and matplotlib
(see :mod:`multihop.extras`).  :func:`require_extras` fails before any trace
is read or JVM started, naming what is missing and the extra to install.
"""

from __future__ import annotations

from multihop.errors import MultihopError
from multihop.extras import install_hint, require

__all__ = ["EXTRA", "AnalysisUnavailable", "require_extras"]

EXTRA = install_hint("analysis")
"""How to install what the analysis needs."""


class AnalysisUnavailable(MultihopError, RuntimeError):
    """The analysis cannot run here: a package of the analysis extra, Java or Spark is missing or broken."""


def require_extras() -> None:
    """Import the analysis extra's packages; raise if one is missing.

    Raises:
        AnalysisUnavailable: pyarrow, PySpark or matplotlib cannot be imported;
            the message names them and says to run ``pip install 'multihop[analysis]'``.
    """
    require("analysis", "multihop analyze", AnalysisUnavailable)
