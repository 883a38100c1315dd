"""The names of the benchmark suites, importable without the bench extra (``multihop --help`` lists them).

:mod:`multihop.bench.suites` runs them (and needs pyarrow for its traces);
a test checks that both name the same suites in the same order.
"""

from __future__ import annotations

__all__ = ["SUITES"]

SUITES = ("channels", "hops", "routing", "window", "fanout", "resources", "peers", "dispatch", "ges", "groups", "fabric", "all")
"""Suite names ``multihop bench`` accepts, ``all`` last."""
