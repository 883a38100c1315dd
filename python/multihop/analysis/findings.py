"""The report's first screen: per suite, the headline figures, each with its spread, baseline and verdict.

Read off the ``repeats`` table (one row per repeat of every case:
:mod:`multihop.analysis.repeats`), run by run, so this is plain Python over
collected rows.  Every figure is a set of values, one per repeat: the finding
gives their median and range, and its baseline's, and says how they compare
by the rule of :mod:`multihop.analysis.spread` (ranges that do not overlap:
the difference is stated; ranges that overlap: ``no clear difference``;
fewer than two repeats: ``not determined``).  What each suite leads with:

==========  ===========================================================================
suite       headline (against)
==========  ===========================================================================
channels    multi-hop round trip and one-way throughput at the smallest size >= 64 B
            (the UMP case of the same size)
peers       UMP and multi-hop round trip and one-way throughput
            (``multiprocessing.Pipe``, same size)
hops        cost per monitor hop: per repeat, the least-squares slope of the round
            trip's median against the monitors on the path (its range must exclude 0),
            as a share of the round trip through the fewest monitors
routing     per routing mode, the median over core pairs of the round trip and of the
            bind time, per repeat (``direct``)
window      the best credit window's one-way throughput (window 16, the default; else
            the smallest window), named only when its range is above every other
            window's; otherwise the windows it cannot be told from
fanout      per transport, the publish round trip to the most receivers (one receiver)
resources   per routing mode, memory per multi-hop channel (per UMP channel), and the
            CPU an idle monitor uses
==========  ===========================================================================

A figure whose data is missing is left out; a suite with none of its data
has no line.  Ratios are figure / baseline (medians over the repeats); the
reading says it in words (``"27x faster (21-33x)"``, ``"no clear difference
(0.7-1.4x)"``), knowing whether lower (latency, memory) or higher
(throughput) is better.  Each finding carries the most foreign CPU of the
repeats it was read from and whether that is heavy load
(:func:`multihop.analysis.spread.heavy`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from multihop.analysis.spread import CLEAR, NO_CLEAR, NOT_DETERMINED, RULE, Spread, compare, heavy, ratio_range
from multihop.analysis.table import Table

__all__ = ["COLUMNS", "Finding", "find", "findings_table", "format_amount", "format_range"]

COLUMNS = [
    "run_id", "suite", "finding", "value", "value_min", "value_max", "repeats", "unit", "baseline",
    "baseline_value", "baseline_min", "baseline_max", "baseline_repeats", "ratio", "ratio_min", "ratio_max",
    "verdict", "reading", "foreign_cpu_max", "heavy_load",
]  # fmt: skip
"""Columns of the ``findings`` table (and ``findings.csv``)."""

_ORDER = ("channels", "peers", "hops", "routing", "window", "fanout", "resources")


@dataclass(frozen=True)
class Finding:
    """One headline figure: its values over the repeats, what it is compared with, and how to read it.

    ``base`` holds the baseline's values over the repeats (None: no baseline).
    With ``slope`` the figure is a cost per hop: it is judged against 0 (its
    range must exclude 0) and read as a share of the baseline (the round trip
    through the fewest monitors), ``ratios`` being that share per repeat.
    """

    run_id: str
    suite: str
    finding: str
    spread: Spread
    unit: str  # "ns", "msg/s", "B", "ns/hop" or "cpu" (a fraction of one CPU)
    baseline: str = ""
    base: Spread | None = None
    lower_is_better: bool = True
    slope: bool = False
    ratios: tuple[float, ...] = ()
    foreign_cpu: float | None = None
    cpus: int | None = None
    note: str = field(default="", compare=False)

    @property
    def value(self) -> float | None:
        """The median over the repeats."""
        return self.spread.median

    @property
    def baseline_value(self) -> float | None:
        """The baseline's median over its repeats, or None."""
        return self.base.median if self.base is not None else None

    @property
    def ratio(self) -> float | None:
        """``value / baseline_value`` (medians), or None without a (non-zero) baseline."""
        v, b = self.value, self.baseline_value
        if v is None or b is None or b == 0:
            return None
        return v / b

    @property
    def ratio_range(self) -> tuple[float, float] | None:
        """The ratio's range over the repeats: per-repeat shares for a slope, else min/max to max/min."""
        if self.slope:
            return (min(self.ratios), max(self.ratios)) if self.ratios else None
        if self.base is None:
            return None
        return ratio_range(self.spread, self.base)

    @property
    def verdict(self) -> str:
        """:data:`~multihop.analysis.spread.CLEAR`, ``no clear difference`` or ``not determined``; "" without a comparison."""
        if self.slope:
            zero = Spread((0.0, 0.0))
            return compare(self.spread, zero) if self.spread.n else NOT_DETERMINED
        if self.base is None:
            return ""
        return compare(self.spread, self.base)

    @property
    def heavy_load(self) -> bool | None:
        """Whether a repeat it was read from ran under heavy foreign load (None: not measured)."""
        return heavy(self.foreign_cpu, self.cpus)

    @property
    def reading(self) -> str:
        """The comparison in words, with the ratio's range; what the rule allows, nothing more."""
        verdict = self.verdict
        if verdict == "":
            return ""
        if verdict == NOT_DETERMINED:
            n = self.spread.n if self.base is None or self.slope else min(self.spread.n, self.base.n)
            return f"not determined ({n} repeat{'' if n == 1 else 's'})"
        rng = self.ratio_range
        if self.slope:
            r = self.ratio
            lo, hi = rng if rng is not None else (None, None)
            span = _span(lo, hi, _pct, " %", " to ") if lo is not None and hi is not None else ""
            if verdict == CLEAR and r is not None:
                return f"{r * 100:+.0f} % per hop" + (f" ({span})" if span else "")
            if span:
                return f"no clear difference ({span} per hop)"
            return NO_CLEAR
        r = self.ratio
        if r is None or r <= 0 or rng is None:
            return verdict if verdict != CLEAR else ""
        lo, hi = rng
        if verdict == NO_CLEAR:
            return f"no clear difference ({_span(lo, hi, _num, 'x')})"
        timed = self.unit in ("ns", "msg/s")
        up, down = ("slower", "faster") if self.lower_is_better else ("faster", "slower")
        if not timed:
            up, down = "more", "less"
        if r >= 1:
            return f"{_times(r)} {up} ({_span(lo, hi, _num, 'x')})"
        return f"{_times(1 / r)} {down} ({_span(1 / hi, 1 / lo, _num, 'x')})"

    def row(self) -> tuple[Any, ...]:
        """The row of the ``findings`` table."""
        rng = self.ratio_range
        b = self.base
        return (
            self.run_id, self.suite, self.finding, self.value, self.spread.low, self.spread.high, self.spread.n, self.unit,
            self.baseline, self.baseline_value, b.low if b else None, b.high if b else None, b.n if b else None,
            self.ratio, rng[0] if rng else None, rng[1] if rng else None, self.verdict, self.reading,
            self.foreign_cpu, self.heavy_load,
        )  # fmt: skip


def _times(r: float) -> str:
    return f"{r:.0f}x" if r >= 9.95 else f"{r:.1f}x" if r >= 1.995 else f"{r:.2f}x"


def _num(r: float, digits: int = 2) -> str:
    return f"{r:.0f}" if r >= 10**digits - 0.05 else f"{r:.{digits}g}"


def _span(lo: float, hi: float, fmt: Callable[[float, int], str], suffix: str, sep: str = "-") -> str:
    """``lo-hi`` with more digits while fewer print them alike; one figure when they stay alike."""
    for digits in (2, 3, 4):
        a, b = fmt(lo, digits), fmt(hi, digits)
        if a != b:
            return f"{a}{sep}{b}{suffix}"
    return f"{fmt(lo, 4)}{suffix} in every repeat"


def _pct(r: float, digits: int) -> str:
    return f"{r * 100:+.{max(digits - 2, 0)}f}"


_SCALES: dict[str, tuple[tuple[float, str], ...]] = {
    "ns": ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns")),
    "msg/s": ((1e6, "M msg/s"), (1e3, "k msg/s"), (1.0, "msg/s")),
    "B": ((float(1 << 30), "GiB"), (float(1 << 20), "MiB"), (float(1 << 10), "KiB"), (1.0, "B")),
}


def _scale(value: float, unit: str) -> tuple[float, str]:
    """The divisor and the unit name a figure of `unit` is read in (``ns/hop`` as ``ns``, per hop)."""
    scales = _SCALES[unit.replace("/hop", "")]
    for factor, name in scales:
        if abs(value) >= factor:
            return factor, name
    return scales[-1]


def format_amount(value: float | None, unit: str) -> str:
    """A figure with its unit for reading: ``12.4 µs``, ``0.58 M msg/s``, ``359 KiB``, ``0.5 % CPU``."""
    if value is None:
        return ""
    if unit == "cpu":
        return f"{value * 100:.2g} % of a CPU"
    if unit.replace("/hop", "") not in _SCALES:
        return f"{value:.3g} {unit}"
    factor, name = _scale(value, unit)
    suffix = "/hop" if unit.endswith("/hop") else ""
    number = f"{value:.0f}" if name == "B" else f"{value / factor:.3g}"
    return f"{number} {name}{suffix}"


def format_range(low: float | None, high: float | None, unit: str) -> str:
    """A range of figures for reading in the larger one's unit, ``0.98-1.02 µs`` (one figure when equal); "" when unknown."""
    if low is None or high is None:
        return ""
    a, b = format_amount(low, unit), format_amount(high, unit)
    if a == b:
        return a
    if unit == "cpu":
        return f"{low * 100:.2g}-{high * 100:.2g} % of a CPU"
    if unit.replace("/hop", "") not in _SCALES:
        return f"{a} to {b}"
    factor, name = _scale(max(abs(low), abs(high)), unit)
    suffix = "/hop" if unit.endswith("/hop") else ""
    return f"{low / factor:.3g}-{high / factor:.3g} {name}{suffix}"


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


def _per_repeat(rows: Sequence[dict[str, Any]], value: Callable[[dict[str, Any]], float | None]) -> dict[int, float]:
    """Per repeat, the median of `value` over the rows of that repeat (several cases: e.g. core pairs)."""
    by: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        v = value(r)
        if v is not None:
            by[int(r.get("repeat") or 0)].append(float(v))
    return {rep: statistics.median(vs) for rep, vs in sorted(by.items())}


def _col(column: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda r: r.get(column)


def _spread(rows: Sequence[dict[str, Any]], column: str) -> Spread:
    return Spread.of(list(_per_repeat(rows, _col(column)).values()))


def _foreign(*groups: Sequence[dict[str, Any]]) -> float | None:
    values = [float(r["foreign_cpu"]) for g in groups for r in g if r.get("foreign_cpu") is not None]
    return max(values) if values else None


_NAMES = {"ump": "UMP", "multihop": "multi-hop", "pipe": "Pipe", "queue": "Queue", "zmq": "ZeroMQ"}


def _name(transport: str) -> str:
    return _NAMES.get(transport, transport)


# -- per suite ------------------------------------------------------------------------------------


@dataclass
class _Run:
    """One run's rows and machine."""

    run: str
    rows: list[dict[str, Any]]
    cpus: int | None

    def finding(self, suite: str, text: str, mine: Sequence[dict[str, Any]], column: str, unit: str, **kw: Any) -> Finding:
        base_rows: Sequence[dict[str, Any]] = kw.pop("base_rows", ())
        base = _spread(base_rows, column) if base_rows else None
        return Finding(self.run, suite, text, _spread(mine, column), unit, base=base, foreign_cpu=_foreign(mine, base_rows), cpus=self.cpus, **kw)


def _versus(run: _Run, suite: str, ours: Sequence[str], base: str) -> list[Finding]:
    """Round trip (p50) and one-way throughput of each of ``ours`` against transport ``base``, same size."""
    rows = _pick(run.rows, suite=suite)
    out: list[Finding] = []
    size = _size([r for r in rows if r.get("transport") in (*ours, base)])
    if size is None:
        return out
    for kind, column, what, lower in (("rtt", "p50_ns", "round trip", True), ("oneway", "throughput_msgs", "one-way", False)):
        unit = "ns" if kind == "rtt" else "msg/s"
        b = [r for r in _pick(rows, transport=base, kind=kind, size=size) if r.get(column) is not None]
        for t in ours:
            mine = [r for r in _pick(rows, transport=t, kind=kind, size=size) if r.get(column) is not None]
            if not mine:
                continue
            label = f"{_name(t)} {what}, {size} B" + (" (p50)" if kind == "rtt" else "")
            baseline = f"{_name(base)} {what}" if b else ""
            out.append(run.finding(suite, label, mine, column, unit, base_rows=b, baseline=baseline, lower_is_better=lower))
    return out


def _fit(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of y against x, or None with fewer than two distinct x."""
    xs = [p[0] for p in points]
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(p[1] for p in points)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def _r2(points: Sequence[tuple[float, float]]) -> float | None:
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return statistics.correlation(xs, ys) ** 2


def _hops(run: _Run) -> list[Finding]:
    """Cost per hop: per repeat, the slope of the case medians against hops, relative to the fewest hops."""
    rows = [r for r in _pick(run.rows, suite="hops", kind="rtt") if r.get("p50_ns") is not None and (r.get("hops") or -1) >= 0]
    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r.get("transport"), r.get("size"))].append(r)
    keys = sorted(groups, key=lambda k: (k[0] != "multihop", k[1] if k[1] is not None else 0))
    keys = [k for k in keys if len({r["hops"] for r in groups[k]}) >= 2]
    if not keys:
        return []
    transport, size = keys[0]
    mine = groups[(transport, size)]
    hop_values = sorted({int(r["hops"]) for r in mine})
    fewest = hop_values[0]
    slopes, shares, base, points = [], [], [], []
    for rep in sorted({int(r.get("repeat") or 0) for r in mine}):
        pts = [(float(r["hops"]), float(r["p50_ns"])) for r in mine if int(r.get("repeat") or 0) == rep]
        points += pts
        slope = _fit(pts)
        low = [y for x, y in pts if x == fewest]
        if slope is None or not low:
            continue
        slopes.append(slope)
        base.append(statistics.median(low))
        if base[-1] > 0:
            shares.append(slope / base[-1])
    if not slopes:
        return []
    r2 = _r2(points)
    fit_text = f"hops {fewest}-{hop_values[-1]}" + (f", r² {r2:.2f} over the repeats' medians" if r2 is not None else "")
    return [
        Finding(
            run.run, "hops", f"round-trip cost per monitor hop, {size} B ({fit_text})", Spread.of(slopes), "ns/hop",
            f"round trip through {fewest} monitor(s)", Spread.of(base), slope=True, ratios=tuple(shares),
            foreign_cpu=_foreign(mine), cpus=run.cpus,
        )
    ]  # fmt: skip


def _routing(run: _Run) -> list[Finding]:
    rows = _pick(run.rows, suite="routing", kind="rtt")
    if not rows:
        return []
    modes = sorted({r["routing"] for r in rows if r.get("routing")}, key=lambda m: (m != "direct", m))
    out: list[Finding] = []
    size = _size([r for r in rows if (r.get("size") or -1) >= 0])
    for what, sel, label in (("round trip", size, f"{size} B"), ("bind time", -1, "bind")):
        if sel is None:
            continue
        direct = _pick(rows, routing="direct", size=sel)
        for m in modes:
            mine = [r for r in _pick(rows, routing=m, size=sel) if r.get("p50_ns") is not None]
            if not mine or (m == "direct" and len(modes) > 1):
                continue
            text = f"{m}: {what}, median over core pairs" + (f", {label}" if sel >= 0 else "")
            against = direct if m != "direct" else []
            out.append(run.finding("routing", text, mine, "p50_ns", "ns", base_rows=against, baseline="direct" if against else ""))
    return out


def _window(run: _Run) -> list[Finding]:
    rows = [r for r in _pick(run.rows, suite="window", kind="oneway") if r.get("throughput_msgs") is not None and (r.get("window") or -1) >= 0]
    if not rows:
        return []
    size = _size(rows)
    rows = _pick(rows, size=size)
    by_window = {w: _pick(rows, window=w) for w in sorted({int(r["window"]) for r in rows})}
    spreads = {w: _spread(rs, "throughput_msgs") for w, rs in by_window.items()}
    best = max(spreads, key=lambda w: spreads[w].median or 0.0)
    ties = [w for w in spreads if w != best and compare(spreads[best], spreads[w]) != CLEAR]
    base_w = 16 if 16 in spreads and best != 16 else min(spreads)
    if not ties:
        text = f"best window: {best}, one-way {size} B"
    elif all(compare(spreads[best], spreads[w]) == NOT_DETERMINED for w in ties):
        text = f"best window: not determined (highest median: window {best}), one-way {size} B"
    else:
        text = f"best window: no clear difference between windows {', '.join(str(w) for w in sorted([best, *ties]))}, one-way {size} B"
    base_rows = by_window[base_w] if base_w != best else []
    return [
        run.finding(
            "window", text, by_window[best], "throughput_msgs", "msg/s", base_rows=base_rows,
            baseline=f"window {base_w}" if base_rows else "", lower_is_better=False,
        )
    ]  # fmt: skip


def _fanout(run: _Run) -> list[Finding]:
    rows = [r for r in _pick(run.rows, suite="fanout", kind="rtt") if r.get("p50_ns") is not None]
    out = []
    for t in sorted({r["transport"] for r in rows if r.get("transport")}, key=lambda t: (t != "ump", t)):
        ks = sorted({int(r["fanout"]) for r in _pick(rows, transport=t) if int(r.get("fanout") or -1) > 0})
        if not ks:
            continue
        top = _pick(rows, transport=t, fanout=ks[-1])
        one = _pick(rows, transport=t, fanout=ks[0]) if len(ks) > 1 else []
        text = f"{_name(t)} publish round trip to {ks[-1]} receivers"
        out.append(run.finding("fanout", text, top, "p50_ns", "ns", base_rows=one, baseline=f"{ks[0]} receiver(s)" if one else ""))
    return out


def _cpu_share(r: dict[str, Any]) -> float | None:
    if r.get("cpu_s") is None or not r.get("duration_ns"):
        return None
    return float(r["cpu_s"]) * 1e9 / float(r["duration_ns"])


def _resources(run: _Run) -> list[Finding]:
    res = _pick(run.rows, suite="resources")
    out = []
    modes = sorted({r["routing"] for r in res if r.get("routing")}, key=lambda m: (m != "direct", m))
    for m in modes:
        mh = [r for r in _pick(res, routing=m, transport="multihop", component="channel") if r.get("rss_bytes") is not None]
        ump = [r for r in _pick(res, routing=m, transport="ump", component="channel") if r.get("rss_bytes") is not None]
        if mh:
            text = f"{m}: memory per multi-hop channel (RSS growth)"
            out.append(run.finding("resources", text, mh, "rss_bytes", "B", base_rows=ump, baseline="per UMP channel" if ump else ""))
    idle = [r for r in res if r.get("component") == "idle-monitor" and _cpu_share(r) is not None]
    if idle:
        groups = sorted({(r.get("routing") or "", r.get("transport") or "") for r in idle})
        per = {g: _pick(idle, routing=g[0] or None, transport=g[1] or None) for g in groups}
        shares = {g: Spread.of(list(_per_repeat(rs, _cpu_share).values())) for g, rs in per.items()}
        worst = max(shares, key=lambda g: shares[g].median or 0.0)
        text = f"CPU of an idle monitor (worst mode: {worst[0]})"
        out.append(Finding(run.run, "resources", text, shares[worst], "cpu", foreign_cpu=_foreign(per[worst]), cpus=run.cpus))
    return out


def _virtual(findings: list[Finding], rows: list[dict[str, Any]], cpus: int | None) -> list[Finding]:
    """Say "virtual cores" in findings measured on cores beyond the machine's CPUs (monitors sharing CPUs)."""
    cores = {int(r[c]) for r in rows for c in ("src_core", "dst_core") if r.get(c) is not None}
    if cpus is None or not cores or max(cores) < cpus:
        return findings
    return [replace(f, finding=f"{f.finding} [virtual cores 0-{max(cores)} on {cpus} CPUs]") for f in findings]


def find(tables: Mapping[str, Table]) -> list[Finding]:
    """Every headline finding of the ``repeats`` table, run by run, suites in ``bench all`` order.

    Findings of suites measured on virtual cores (more cores than the run's
    machine has CPUs: ``hops``, ``routing``) say so.
    """
    rows = _rows(tables, "repeats")
    cpus = {r["run_id"]: r.get("cores") for r in _rows(tables, "machines")}
    runs = sorted({r["run_id"] for r in rows})
    by_suite: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    for name in runs:
        run = _Run(name, _pick(rows, run_id=name), cpus.get(name))
        by_suite[(name, "channels")] = _versus(run, "channels", ["multihop"], "ump")
        peers = [t for t in ("ump", "multihop") if _pick(run.rows, suite="peers", transport=t)]
        by_suite[(name, "peers")] = _versus(run, "peers", peers, "pipe")
        by_suite[(name, "hops")] = _virtual(_hops(run), _pick(run.rows, suite="hops"), run.cpus)
        by_suite[(name, "routing")] = _virtual(_routing(run), _pick(run.rows, suite="routing"), run.cpus)
        by_suite[(name, "window")] = _window(run)
        by_suite[(name, "fanout")] = _fanout(run)
        by_suite[(name, "resources")] = _resources(run)
    return [f for run in runs for suite in _ORDER for f in by_suite[(run, suite)]]


def findings_table(tables: Mapping[str, Table]) -> Table:
    """The ``findings`` table: one row per :class:`Finding` of :func:`find`."""
    return Table(
        "findings",
        "Findings",
        list(COLUMNS),
        [f.row() for f in find(tables)],
        doc="Per suite, the headline figures (median over the repeats, and their range) with their baseline and "
        "the ratio of the medians, read off the repeats of the cases below. " + RULE,
    )
