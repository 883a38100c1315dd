"""Which suites each table and plot of the report is about.

A ``multihop bench all`` trace holds every suite, and their cases share
parameters without measuring the same thing: fanout's round trip is k
sequential round trips, the resources suite's "throughput" is forwarded
messages over an idle period, channels and peers run 0 -> 1 on the machine
while routing runs on a virtual topology.  So each table (and its plot) takes
the bench suites that measure what it shows, and groups by suite.  Suites
that ``multihop bench`` does not have (traces written by hand with
:class:`~multihop.bench.trace.TraceWriter`) are taken everywhere, grouped by
their suite name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column

__all__ = ["BENCH_SUITES", "SCOPES", "covers", "in_scope", "scope_text"]

BENCH_SUITES = ("channels", "hops", "routing", "window", "fanout", "resources", "peers", "dispatch", "ges", "groups", "fabric")
"""The suites of ``multihop bench`` (a test checks this against :data:`multihop.bench.suites.SUITES`)."""

_ALL_BUT_RESOURCES = tuple(s for s in BENCH_SUITES if s != "resources")

SCOPES: dict[str, tuple[str, ...]] = {
    "latency": BENCH_SUITES,
    "throughput": _ALL_BUT_RESOURCES,
    "throughput_by_size": ("channels", "peers"),
    "throughput_by_window": ("window",),
    "cost_per_hop": ("hops", "routing"),
    "core_pairs": ("routing",),
    "baseline_ratios": _ALL_BUT_RESOURCES,
    "run_comparison": _ALL_BUT_RESOURCES,
    "resources": ("resources",),
    "ges_latency": ("ges",),
}
"""Per table: the bench suites it covers (other suites' cases are always covered)."""


def in_scope(table: str) -> Column:
    """A Spark condition on ``suite``: the rows ``table`` is about."""
    from pyspark.sql import functions as F

    suite = F.col("suite")
    return suite.isin(*SCOPES[table]) | ~suite.isin(*BENCH_SUITES)


def scope_text(table: str) -> str:
    """Say which suites ``table`` covers, for the report."""
    suites = SCOPES[table]
    if suites == BENCH_SUITES:
        return "every suite"
    if suites == _ALL_BUT_RESOURCES:
        return "every suite but resources"
    return "suite" + ("s " if len(suites) > 1 else " ") + ", ".join(suites) + " (and suites not from multihop bench)"


def covers(table: str, suite: str | None) -> bool:
    """Whether ``table`` (or its plot) is about ``suite``: the same rule as :func:`in_scope`, in Python."""
    return suite in SCOPES[table] or suite not in BENCH_SUITES
