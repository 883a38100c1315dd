"""The report's first screen: per suite, the headline figures, each with its baseline and the ratio.

Read off the tables the analysis already computed in Spark (a few rows each:
``latency``, ``throughput``, ``cost_per_hop``, ``resources``), per run, so this
is plain Python over collected rows.  What each suite leads with:

==========  ===========================================================================
suite       headline (against)
==========  ===========================================================================
channels    multi-hop round trip and one-way throughput at the smallest size >= 64 B
            (the UMP case of the same size)
peers       UMP and multi-hop round trip and one-way throughput
            (``multiprocessing.Pipe``, same size)
hops        cost per monitor hop: the least-squares slope of the round trip
            (the round trip through the fewest monitors)
routing     per routing mode, the median over core pairs of the round trip and of the
            bind time (``direct``)
window      the best credit window's one-way throughput (window 16, the default; else
            the smallest window)
fanout      per transport, the publish round trip to the most receivers (one receiver)
resources   per routing mode, memory per multi-hop channel (per UMP channel), and the
            CPU an idle monitor uses
==========  ===========================================================================

A figure whose data is missing is left out; a suite with none of its data
has no line.  Ratios are figure / baseline; ``reading`` says it in words
(``"27x faster"``, ``"13x slower"``, ``"1.4x more"``), knowing whether lower
(latency, memory) or higher (throughput) is better.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from multihop.analysis.table import Table

__all__ = ["COLUMNS", "Finding", "find", "findings_table", "format_amount"]

COLUMNS = ["run_id", "suite", "finding", "value", "unit", "baseline", "baseline_value", "ratio", "reading"]
"""Columns of the ``findings`` table (and ``findings.csv``)."""

_ORDER = ("channels", "peers", "hops", "routing", "window", "fanout", "resources")


@dataclass(frozen=True)
class Finding:
    """One headline figure: what, how much, against what, and how to read the ratio."""

    run_id: str
    suite: str
    finding: str
    value: float
    unit: str  # "ns", "msg/s", "B", "ns/hop" or "cpu" (a fraction of one CPU)
    baseline: str = ""
    baseline_value: float | None = None
    lower_is_better: bool = True

    @property
    def ratio(self) -> float | None:
        """``value / baseline_value``, or None without a (non-zero) baseline."""
        if self.baseline_value is None or self.baseline_value == 0:
            return None
        return self.value / self.baseline_value

    @property
    def reading(self) -> str:
        """The ratio in words: faster/slower for time, more/less for amounts."""
        r = self.ratio
        if r is None or r <= 0:
            return ""
        timed = self.unit in ("ns", "ns/hop", "msg/s")
        if self.unit == "ns/hop":
            return f"+{r * 100:.0f} % per hop"
        if abs(r - 1) < 0.005:
            return "the same"
        up, down = ("slower", "faster") if self.lower_is_better else ("faster", "slower")
        if not timed:
            up, down = "more", "less"
        return f"{_times(r)} {up}" if r > 1 else f"{_times(1 / r)} {down}"

    def row(self) -> tuple[Any, ...]:
        """The row of the ``findings`` table."""
        return (self.run_id, self.suite, self.finding, self.value, self.unit, self.baseline, self.baseline_value, self.ratio, self.reading)


def _times(r: float) -> str:
    return f"{r:.0f}x" if r >= 9.95 else f"{r:.1f}x" if r >= 1.995 else f"{r:.2f}x"


def format_amount(value: float | None, unit: str) -> str:
    """A figure with its unit for reading: ``12.4 µs``, ``0.58 M msg/s``, ``359 KiB``, ``0.5 % CPU``."""
    if value is None:
        return ""
    if unit in ("ns", "ns/hop"):
        suffix = "/hop" if unit == "ns/hop" else ""
        a = abs(value)
        if a >= 1e9:
            return f"{value / 1e9:.3g} s{suffix}"
        if a >= 1e6:
            return f"{value / 1e6:.3g} ms{suffix}"
        if a >= 1e3:
            return f"{value / 1e3:.3g} µs{suffix}"
        return f"{value:.3g} ns{suffix}"
    if unit == "msg/s":
        if value >= 1e6:
            return f"{value / 1e6:.3g} M msg/s"
        if value >= 1e3:
            return f"{value / 1e3:.3g} k msg/s"
        return f"{value:.3g} msg/s"
    if unit == "B":
        for factor, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if abs(value) >= factor:
                return f"{value / factor:.3g} {name}"
        return f"{value:.0f} B"
    if unit == "cpu":
        return f"{value * 100:.2g} % of a CPU"
    return f"{value:.3g} {unit}"


# -- selecting rows -------------------------------------------------------------------------------


def _rows(tables: Mapping[str, Table], name: str) -> list[dict[str, Any]]:
    t = tables.get(name)
    return list(t.records()) if t is not None else []


def _pick(rows: Iterable[dict[str, Any]], **want: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r.get(k) == v for k, v in want.items())]


def _size(rows: Sequence[dict[str, Any]]) -> int | None:
    """The headline message size: 64 B if measured, else the smallest size >= 64, else the largest."""
    sizes = sorted({int(r["size"]) for r in rows if r.get("size") is not None and int(r["size"]) >= 0})
    if not sizes:
        return None
    if 64 in sizes:
        return 64
    above = [s for s in sizes if s >= 64]
    return above[0] if above else sizes[-1]


def _one(rows: Sequence[dict[str, Any]], column: str) -> float | None:
    """The value of ``column`` in the rows (the median if several cases match), or None."""
    values = [float(r[column]) for r in rows if r.get(column) is not None]
    return statistics.median(values) if values else None


_NAMES = {"ump": "UMP", "multihop": "multi-hop", "pipe": "Pipe", "queue": "Queue", "zmq": "ZeroMQ"}


def _name(transport: str) -> str:
    return _NAMES.get(transport, transport)


# -- per suite ------------------------------------------------------------------------------------


def _versus(run: str, suite: str, lat: list[dict[str, Any]], thr: list[dict[str, Any]], ours: Sequence[str], base: str) -> list[Finding]:
    """Round trip (p50) and one-way throughput of each of ``ours`` against transport ``base``, same size."""
    out: list[Finding] = []
    size = _size([*lat, *thr])
    if size is None:
        return out
    rtt = {t: _one(_pick(lat, transport=t, kind="rtt", size=size), "p50_ns") for t in (*ours, base)}
    one = {t: _one(_pick(thr, transport=t, kind="oneway", size=size), "throughput_msgs") for t in (*ours, base)}
    for t in ours:
        if (r := rtt[t]) is not None:
            out.append(Finding(run, suite, f"{_name(t)} round trip, {size} B (p50)", r, "ns", f"{_name(base)} round trip", rtt[base]))
    for t in ours:
        if (o := one[t]) is not None:
            out.append(Finding(run, suite, f"{_name(t)} one-way, {size} B", o, "msg/s", f"{_name(base)} one-way", one[base], lower_is_better=False))
    return out


def _hops(run: str, lat: list[dict[str, Any]], cost: list[dict[str, Any]]) -> list[Finding]:
    fits = sorted(_pick(cost, suite="hops", kind="rtt"), key=lambda r: (r.get("transport") != "multihop", r["size"]))
    if not fits:
        return []
    fit = fits[0]
    fewest = _one(_pick(lat, suite="hops", kind="rtt", transport=fit["transport"], size=fit["size"], hops=fit["hops_min"]), "p50_ns")
    r2 = fit.get("r2")
    fit_text = f"hops {fit['hops_min']}-{fit['hops_max']}" + (f", r² {r2:.2f}" if r2 is not None else "")
    return [
        Finding(
            run,
            "hops",
            f"round-trip cost per monitor hop, {fit['size']} B ({fit_text})",
            float(fit["slope_ns_per_hop"]),
            "ns/hop",
            f"round trip through {fit['hops_min']} monitor(s)",
            fewest,
        )
    ]


def _routing(run: str, lat: list[dict[str, Any]]) -> list[Finding]:
    rows = _pick(lat, suite="routing", kind="rtt")
    if not rows:
        return []
    modes = sorted({r["routing"] for r in rows if r.get("routing")}, key=lambda m: (m != "direct", m))
    out: list[Finding] = []
    size = _size([r for r in rows if r["size"] >= 0])
    for what, sel, label in (("round trip", size, f"{size} B"), ("bind time", -1, "bind")):
        if sel is None:
            continue
        per_mode = {m: _one(_pick(rows, routing=m, size=sel), "p50_ns") for m in modes}
        base = per_mode.get("direct")
        for m in modes:
            value = per_mode[m]
            if value is None or (m == "direct" and len(modes) > 1):
                continue
            text = f"{m}: {what}, median over core pairs" + (f", {label}" if sel >= 0 else "")
            out.append(Finding(run, "routing", text, value, "ns", "direct" if m != "direct" else "", base if m != "direct" else None))
    return out


def _window(run: str, thr: list[dict[str, Any]]) -> list[Finding]:
    rows = [r for r in _pick(thr, suite="window", kind="oneway") if r.get("throughput_msgs") is not None]
    if not rows:
        return []
    size = _size(rows)
    by_window: dict[int, float] = {}
    for w in sorted({int(r["window"]) for r in _pick(rows, size=size)}):
        v = _one(_pick(rows, size=size, window=w), "throughput_msgs")
        if v is not None:
            by_window[w] = v
    best = max(by_window, key=lambda w: by_window[w])
    base_w = 16 if 16 in by_window and best != 16 else min(by_window)
    base = by_window[base_w] if base_w != best else None
    return [
        Finding(
            run,
            "window",
            f"best window: {best}, one-way {size} B",
            by_window[best],
            "msg/s",
            f"window {base_w}" if base is not None else "",
            base,
            lower_is_better=False,
        )
    ]


def _fanout(run: str, lat: list[dict[str, Any]]) -> list[Finding]:
    rows = _pick(lat, suite="fanout", kind="rtt")
    out = []
    for t in sorted({r["transport"] for r in rows if r.get("transport")}, key=lambda t: (t != "ump", t)):
        ks = sorted({int(r["fanout"]) for r in _pick(rows, transport=t) if int(r["fanout"]) > 0})
        if not ks:
            continue
        top, one = _one(_pick(rows, transport=t, fanout=ks[-1]), "p50_ns"), _one(_pick(rows, transport=t, fanout=ks[0]), "p50_ns")
        if top is not None:
            out.append(
                Finding(
                    run,
                    "fanout",
                    f"{_name(t)} publish round trip to {ks[-1]} receivers",
                    top,
                    "ns",
                    f"{ks[0]} receiver(s)" if len(ks) > 1 else "",
                    one if len(ks) > 1 else None,
                )
            )
    return out


def _resources(run: str, res: list[dict[str, Any]]) -> list[Finding]:
    out = []
    modes = sorted({r["routing"] for r in res if r.get("routing")}, key=lambda m: (m != "direct", m))
    for m in modes:
        mh = _one(_pick(res, routing=m, transport="multihop", component="channel"), "rss_bytes")
        ump = _one(_pick(res, routing=m, transport="ump", component="channel"), "rss_bytes")
        if mh is not None:
            out.append(
                Finding(
                    run, "resources", f"{m}: memory per multi-hop channel (RSS growth)", mh, "B", "per UMP channel" if ump is not None else "", ump
                )
            )
    idle = [r for r in res if r.get("component") == "idle-monitor" and r.get("cpu_s") is not None and r.get("duration_ns")]
    if idle:
        worst = max(idle, key=lambda r: r["cpu_s"] / r["duration_ns"])
        out.append(
            Finding(run, "resources", f"CPU of an idle monitor (worst mode: {worst['routing']})", worst["cpu_s"] * 1e9 / worst["duration_ns"], "cpu")
        )
    return out


def _virtual(findings: list[Finding], rows: list[dict[str, Any]], cpus: int | None) -> list[Finding]:
    """Say "virtual cores" in findings measured on cores beyond the machine's CPUs (monitors sharing CPUs)."""
    cores = {int(r[c]) for r in rows for c in ("src_core", "dst_core") if r.get(c) is not None}
    if cpus is None or not cores or max(cores) < cpus:
        return findings
    return [replace(f, finding=f"{f.finding} [virtual cores 0-{max(cores)} on {cpus} CPUs]") for f in findings]


def find(tables: Mapping[str, Table]) -> list[Finding]:
    """Every headline finding of the tables, run by run, suites in ``bench all`` order.

    Findings of suites measured on virtual cores (more cores than the run's
    machine has CPUs: ``hops``, ``routing``) say so.
    """
    lat, thr = _rows(tables, "latency"), _rows(tables, "throughput")
    cost, res = _rows(tables, "cost_per_hop"), _rows(tables, "resources")
    cpus = {r["run_id"]: r.get("cores") for r in _rows(tables, "machines")}
    runs = sorted({r["run_id"] for r in (*lat, *thr, *cost, *res)})
    by_suite: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    for run in runs:
        rl = _pick(lat, run_id=run)
        rt = _pick(thr, run_id=run)
        by_suite[(run, "channels")] = _versus(run, "channels", _pick(rl, suite="channels"), _pick(rt, suite="channels"), ["multihop"], "ump")
        peers = [t for t in ("ump", "multihop") if _pick(rl, suite="peers", transport=t) or _pick(rt, suite="peers", transport=t)]
        by_suite[(run, "peers")] = _versus(run, "peers", _pick(rl, suite="peers"), _pick(rt, suite="peers"), peers, "pipe")
        by_suite[(run, "hops")] = _virtual(_hops(run, rl, _pick(cost, run_id=run)), _pick(rl, suite="hops"), cpus.get(run))
        by_suite[(run, "routing")] = _virtual(_routing(run, rl), _pick(rl, suite="routing"), cpus.get(run))
        by_suite[(run, "window")] = _window(run, rt)
        by_suite[(run, "fanout")] = _fanout(run, rl)
        by_suite[(run, "resources")] = _resources(run, _pick(res, run_id=run))
    return [f for run in runs for suite in _ORDER for f in by_suite[(run, suite)]]


def findings_table(tables: Mapping[str, Table]) -> Table:
    """The ``findings`` table: one row per :class:`Finding` of :func:`find`."""
    return Table(
        "findings",
        "Findings",
        list(COLUMNS),
        [f.row() for f in find(tables)],
        doc="Per suite, the headline figures with their baseline and ratio (figure / baseline), read off the tables below.",
    )
