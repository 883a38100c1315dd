"""Consistency: a figure measured by two suites of one run must agree, or the report says why not.

Two cases of different suites of the same run measure the same figure when
their parameters (the ``params`` JSON) are equal but for ``suite``: the
``channels`` and ``peers`` suites both run UMP and multi-hop round trips and
window-16 streams of 64 B between cores 0 and 1 over the shared runtime, with
the same code; the ``window`` suite's window-16 stream is the channels
suite's multi-hop stream.  For each such pair the ``consistency`` table gives
both figures (median and range over their repeats) and applies the spread
rule (:mod:`multihop.analysis.spread`): they **agree** when their ranges
overlap, **disagree** when they do not, and are **not determined** with fewer
than two repeats on a side.

A disagreement is explained from what the trace recorded of each side's
repeats, when it can be: more foreign CPU behind the slower figure
(median over its repeats, at least :data:`FOREIGN_GAP` CPUs more), or its
monitors parking on a larger share of the frames they forwarded (at least
:data:`PARKS_GAP` more: a monitor polls only while nothing else wants its
CPU, see ``docs/design.md`` section 5, so each hop of a parked path pays a
wake-up), and, over the repeats of both sides together, whether the figure
worsens as the foreign CPU grows (correlation of 0.7 or more).  Otherwise it
says that the recorded load does not explain it, and whether both sides ran
under heavy foreign load, where figures vary with how much others take.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from multihop.analysis.findings import format_amount, format_range
from multihop.analysis.scope import BENCH_SUITES
from multihop.analysis.spread import CLEAR, NOT_DETERMINED, Spread, compare, heavy
from multihop.analysis.table import Table

__all__ = ["COLUMNS", "FOREIGN_GAP", "PARKS_GAP", "consistency_table", "describe", "heavy_of", "summary_cells"]

FOREIGN_GAP = 0.2
"""CPUs of foreign load (median over the repeats) by which a slower figure's side must exceed the other's to be blamed."""

PARKS_GAP = 0.2
"""Share of forwarded frames by which a slower figure's monitors must have parked more to be blamed."""

COLUMNS = [
    "run_id", "figure", "unit", "suite_a", "value_a", "min_a", "max_a", "repeats_a", "suite_b", "value_b",
    "min_b", "max_b", "repeats_b", "ratio", "verdict", "agree", "why", "case_a", "case_b",
]  # fmt: skip
"""Columns of the ``consistency`` table."""

_NAMES = {"ump": "UMP", "multihop": "multi-hop", "pipe": "Pipe", "queue": "Queue", "zmq": "ZeroMQ"}


def describe(params: Mapping[str, Any]) -> str:
    """A figure's name from its case parameters: ``multi-hop round trip, 64 B`` or ``multi-hop one-way, 64 B, window 16``."""
    transport = str(params.get("transport") or "")
    what = "round trip" if params.get("kind") == "rtt" else "one-way"
    parts = [f"{_NAMES.get(transport, transport)} {what}".strip()]
    size = params.get("size")
    if isinstance(size, int) and size >= 0:
        parts.append(f"{size} B")
    if params.get("kind") == "oneway" and isinstance(params.get("window"), int) and params["window"] >= 0:
        parts.append(f"window {params['window']}")
    for key in ("fanout", "load", "layout", "op", "component"):
        if params.get(key) not in (None, -1):
            parts.append(f"{key} {params[key]}")
    return ", ".join(parts)


def _key(row: Mapping[str, Any]) -> str | None:
    try:
        p = json.loads(row.get("params") or "")
    except ValueError:
        return None
    if not isinstance(p, dict):
        return None
    p.pop("suite", None)
    p["kind"] = row.get("kind")
    return json.dumps(p, sort_keys=True)


def _metric(kind: Any) -> tuple[str, str, bool]:
    """(column, unit, lower is better) of the figure a case of `kind` is compared on."""
    return ("p50_ns", "ns", True) if kind == "rtt" else ("throughput_msgs", "msg/s", False)


def _by_repeat(rows: Sequence[Mapping[str, Any]], column: str) -> dict[int, float]:
    by: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if r.get(column) is not None:
            by[int(r.get("repeat") or 0)].append(float(r[column]))
    return {k: statistics.median(v) for k, v in by.items()}


def _median(rows: Sequence[Mapping[str, Any]], column: str) -> float | None:
    values = [float(r[column]) for r in rows if r.get(column) is not None]
    return statistics.median(values) if values else None


def _parks(rows: Sequence[Mapping[str, Any]]) -> float | None:
    parks = sum(int(r["monitor_parks"]) for r in rows if r.get("monitor_parks") is not None)
    frames = sum(int(r["monitor_forwarded"]) for r in rows if r.get("monitor_forwarded") is not None)
    return parks / frames if frames > 0 else None


def _why(
    slow: Sequence[Mapping[str, Any]], fast: Sequence[Mapping[str, Any]], column: str, lower: bool, names: tuple[str, str], cpus: int | None
) -> str:
    """Why the `slow` side's figure is worse than the `fast` side's, from what the trace recorded.

    `lower`: whether lower is better for `column`; `cpus`: the machine's, for what heavy load is.
    """
    reasons = []
    fs, ff = _median(slow, "foreign_cpu"), _median(fast, "foreign_cpu")
    if fs is not None and ff is not None and fs - ff >= FOREIGN_GAP:
        reasons.append(f"{names[0]} was measured with more foreign CPU (median {fs:.2f} against {ff:.2f} CPUs)")
    ps, pf = _parks(slow), _parks(fast)
    if ps is not None and pf is not None and ps - pf >= PARKS_GAP:
        reasons.append(
            f"its monitors parked on {ps:.0%} of the frames they forwarded against {pf:.0%} in {names[1]}: a monitor "
            "polls only while nothing else wants its CPU, so under load every hop pays a wake-up (docs/design.md §5)"
        )
    both = [r for r in (*slow, *fast) if r.get(column) is not None and r.get("foreign_cpu") is not None]
    if len(both) >= 4 and len({r["foreign_cpu"] for r in both}) > 1 and len({r[column] for r in both}) > 1:
        corr = statistics.correlation([float(r["foreign_cpu"]) for r in both], [float(r[column]) for r in both])
        if (corr if lower else -corr) >= 0.7:  # worse with more foreign load: an explanation; the other way, none
            reasons.append(f"over the repeats of both, the figure worsens with the foreign CPU (correlation {corr:+.2f})")
    if reasons:
        return "; ".join(reasons)
    out = "not explained by the recorded load: neither the foreign CPU nor the monitors' parking differs enough"
    heavy = [heavy_of(rows, cpus) for rows in (slow, fast)]
    if all(heavy) and fs is not None and ff is not None:
        out += f"; both were measured under heavy foreign load (median {fs:.2f} and {ff:.2f} CPUs), where figures vary with how much others take"
    return out


def heavy_of(rows: Sequence[Mapping[str, Any]], cpus: int | None) -> bool:
    """Whether a repeat of `rows` ran under heavy foreign load (:func:`multihop.analysis.spread.heavy`)."""
    return any(heavy(r.get("foreign_cpu"), cpus) for r in rows)


def consistency_table(tables: Mapping[str, Table]) -> Table | None:
    """The ``consistency`` table from the ``repeats`` table, or None when no figure is measured by two suites."""
    rep = tables.get("repeats")
    if rep is None:
        return None
    groups: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in rep.records():
        key = _key(r)
        if key is not None and r.get("suite"):
            groups[(r["run_id"], key)][r["suite"]].append(r)
    order = {s: i for i, s in enumerate(BENCH_SUITES)}
    machines = tables.get("machines")
    cpus = {r["run_id"]: r.get("cores") for r in machines.records()} if machines is not None else {}
    out = []
    for (run, key), by_suite in sorted(groups.items()):
        if len(by_suite) < 2:
            continue
        params = json.loads(key)
        column, unit, lower = _metric(params.get("kind"))
        suites = sorted(by_suite, key=lambda s: (order.get(s, len(order)), s))
        a_name = suites[0]
        a = by_suite[a_name]
        sa = Spread.of(list(_by_repeat(a, column).values()))
        if not sa.n:
            continue
        for b_name in suites[1:]:
            b = by_suite[b_name]
            sb = Spread.of(list(_by_repeat(b, column).values()))
            if not sb.n:
                continue
            verdict = compare(sa, sb)
            agree = {CLEAR: "no", NOT_DETERMINED: "not determined"}.get(verdict, "yes")
            why = ""
            if verdict == CLEAR:
                assert sa.median is not None and sb.median is not None
                a_worse = sa.median > sb.median if lower else sa.median < sb.median
                slow, fast = (a, b) if a_worse else (b, a)
                names = (a_name, b_name) if a_worse else (b_name, a_name)
                why = _why(slow, fast, column, lower, names, cpus.get(run))
            ratio = sa.median / sb.median if sa.median is not None and sb.median else None
            out.append(
                (
                    run, describe(params), unit, a_name, sa.median, sa.low, sa.high, sa.n, b_name, sb.median, sb.low, sb.high,
                    sb.n, ratio, verdict, agree, why, a[0]["case"], b[0]["case"],
                )
            )  # fmt: skip
    if not out:
        return None
    return Table(
        "consistency",
        "Consistency: one figure, two suites",
        list(COLUMNS),
        out,
        doc="Cases of different suites of one run with the same parameters measure the same figure (round trips: "
        "the median latency; streams: the throughput). They agree when their ranges over the repeats overlap; when "
        "they do not, 'why' says what the trace recorded of the load of each (foreign CPU, the monitors' parking).",
    )


def summary_cells(table: Table, runs: int = 1) -> tuple[list[str], list[list[str]]]:
    """Header and body of the consistency table for reading (a Run column only when there are several runs)."""
    header = (["Run"] if runs > 1 else []) + ["Figure", "Suite", "Figure there", "Suite", "Figure there", "Agree", "Why not"]
    body = []

    def cell(v: Any, lo: Any, hi: Any, n: Any, unit: str) -> str:
        return f"{format_amount(v, unit)} ({format_range(lo, hi, unit)}, {n}x)"

    for r in table.records():
        unit = r["unit"]
        body.append(
            ([r["run_id"]] if runs > 1 else [])
            + [
                r["figure"], r["suite_a"], cell(r["value_a"], r["min_a"], r["max_a"], r["repeats_a"], unit), r["suite_b"],
                cell(r["value_b"], r["min_b"], r["max_b"], r["repeats_b"], unit), r["agree"], r["why"],
            ]
        )  # fmt: skip
    return header, body
