"""The report's PNG plots, drawn with matplotlib's Agg canvas from the (small) computed tables.

Plots: the latency CDF of every case (one figure per run and suite, split
further when a suite has too many cases for one legend), latency against
hops (with the fitted cost-per-hop lines), throughput against message size,
throughput against window, one heat map of core-pair round trips per
(run, suite, routing mode, transport, size), and memory and CPU of the
measured components.  Each plot takes the suites its
table covers (:mod:`multihop.analysis.scope`).  A plot whose data is absent
is not drawn; a note says so.  No pyplot state is used, so plotting is safe
in any thread and any backend setting.

Readability rules: a title says what the plot shows (the suite and what its
lines differ by), and names a run only when the report has several (the
report names its run once, at the top); every legend entry is distinct (a
series is labelled by the parameters that differ between the series,
``params`` included, not only the typed columns); every line of a
throughput plot says what it is (transport, kind, size); points measured
over several repeats carry their range (min-max) as error bars; log axes
have their ticks at the values measured; quantities of different sizes
(a monitor's RSS and a channel's) get axes of their own.  The ``draw_*``
functions return the figure, so tests can read what it shows.
"""

from __future__ import annotations

import math
import re
import statistics
import textwrap
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from multihop.analysis.fabric import fabric_plots
from multihop.analysis.figures import figure as _figure
from multihop.analysis.figures import save as _save
from multihop.analysis.figures import value_ticks
from multihop.analysis.ges import ges_plots
from multihop.analysis.groups import groups_plots
from multihop.analysis.scope import covers
from multihop.analysis.table import Table

if TYPE_CHECKING:  # matplotlib (the analysis extra) is imported when drawing
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["MAX_LEGEND", "Plot", "PlotSet", "make_plots"]

MAX_LEGEND = 12
"""At most this many legend entries per plot; more cases are split or grouped (see :func:`make_plots`)."""

_CASE_PARAMS = ("transport", "routing", "kind", "size", "hops", "window", "src_core", "dst_core", "fanout")


@dataclass
class Plot:
    """One PNG written into the report directory."""

    file: str
    title: str
    caption: str = ""


@dataclass
class PlotSet:
    """The plots drawn and notes about the ones skipped."""

    plots: list[Plot] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def _legend(ax: Axes, count: int) -> str:
    if 0 < count <= MAX_LEGEND:
        ax.legend(fontsize="small", loc="best")
        return ""
    return f" ({count} series; legend omitted, see the CSV tables)"


def _value(col: str, v: Any) -> str:
    if col == "size":
        return "bind" if v == -1 else f"{v} B"
    if col == "routing" and v is None:
        return "no routing"
    return f"{col} {v}" if col in ("hops", "window", "fanout", "src_core", "dst_core") else str(v)


def _label(row: Mapping[str, Any], cols: Sequence[str]) -> str:
    """A short legend label: the values of ``cols`` (those that vary among the series)."""
    parts = [_value(c, row[c]) for c in cols if row[c] not in (None, -1) or c == "size"]
    return ", ".join(parts) or "all"


def _varying(rows: Sequence[Mapping[str, Any]], cols: Sequence[str]) -> list[str]:
    return [c for c in cols if len({r[c] for r in rows}) > 1]


def _case_params(case: str) -> dict[str, str]:
    """The ``key=value`` pairs of a case name made by :func:`multihop.bench.trace.case_name` ({} for other names)."""
    parts = case.split(",")
    if not all("=" in p for p in parts):
        return {}
    return dict(p.split("=", 1) for p in parts)


_SKIP_IN_LABEL = ("suite", "kind", "src_core", "dst_core", "routing")


def _labels(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """A distinct legend label per case: the typed parameters that vary, then the other ones of its name that vary."""
    cols = _varying(rows, _CASE_PARAMS)
    labels = {r["case"]: _label(r, cols) if cols else "" for r in rows}
    named = {r["case"]: _case_params(str(r["case"])) for r in rows}
    keys = sorted({k for p in named.values() for k in p} - set(_CASE_PARAMS) - set(_SKIP_IN_LABEL))
    extra = [k for k in keys if len({p.get(k) for p in named.values()}) > 1]
    for case in labels:
        more = [f"{k} {named[case][k]}" for k in extra if k in named[case]]
        labels[case] = ", ".join(x for x in (*more, labels[case]) if x) or "all"
    if len(set(labels.values())) < len(labels):  # still alike: the case names say it all
        return {case: str(case) for case in labels}
    return labels


def _runs_note(runs: int, run_id: str) -> str:
    """``" (run ID)"`` for a title when the report has several runs, else nothing: the report names its run once."""
    return f" (run {run_id})" if runs > 1 else ""


def _size_ticks(ax: Axes, sizes: Sequence[int]) -> None:
    """A symmetric-log size axis: 0 B sits at its own tick, left of 1 B, 64 B, 4 KiB ..."""
    ax.set_xscale("symlog", base=2, linthresh=1, linscale=0.5)
    ticks = sorted(set(sizes))
    ax.set_xticks(ticks, [_bytes(s) for s in ticks], fontsize="small")
    ax.set_xlim(-0.5, max(ticks) * 1.5 if ticks and max(ticks) > 0 else 1)


def _bytes(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------- latency CDF


def _cdf_figures(lat: Table) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """The figures: one per (run, suite), split by routing and by binds / messages when too many cases."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in lat.records():
        groups[(r["run_id"], r["suite"])].append(r)
    out: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for key, rows in groups.items():
        if len(rows) <= MAX_LEGEND:
            out[key] = rows
            continue
        for r in rows:
            what = "binds" if r["size"] == -1 else "messages"
            out.setdefault((*key, r["routing"] or "no routing", what), []).append(r)
    return out


def draw_cdf(
    key: tuple[str, ...], rows: Sequence[Mapping[str, Any]], points: Mapping[tuple[str, str], Sequence[tuple[float, float]]], runs: int = 1
) -> tuple[Figure, str, str]:
    """One latency CDF figure: its (run, suite[, routing, binds/messages]) `key`, its cases' latency rows, the CDF points.

    Returns the figure, its title and its caption.
    """
    run_id, suite = key[0], key[1]
    fig = _figure()
    ax = fig.add_subplot()
    by_hops = len(rows) > MAX_LEGEND and len({r["hops"] for r in rows}) <= MAX_LEGEND
    labels = _labels(rows) if not by_hops else {}
    colors: dict[int, Any] = {}
    lo, hi = math.inf, 0.0
    for r in sorted(rows, key=lambda r: (r["hops"], r["case"])):
        pts = sorted(points.get((run_id, r["case"]), []), key=lambda p: p[1])
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        if by_hops:  # one colour and one legend entry per hop count
            first = r["hops"] not in colors
            n = sum(1 for x in rows if x["hops"] == r["hops"])
            label = f"{r['hops']} hop(s), {n} case(s)" if first else None
            line = ax.plot(xs, ys, drawstyle="steps-post", linewidth=0.8, alpha=0.7, label=label, color=colors.get(r["hops"]))[0]
            colors.setdefault(r["hops"], line.get_color())
        else:
            ax.plot(xs, ys, drawstyle="steps-post", linewidth=1.2, label=labels[r["case"]])
        positive = [x for x in xs if x > 0]
        if positive:
            lo, hi = min(lo, min(positive)), max(hi, max(positive))
    if lo < math.inf and hi / lo > 20:
        ax.set_xscale("log")
    ax.set_xlabel("latency (µs)")
    ax.set_ylabel("fraction of messages")
    ax.set_ylim(0, 1.01)
    ax.grid(True, alpha=0.3)
    part = f", {key[2]}, {key[3]}" if len(key) > 2 else ""
    kinds = sorted({r["kind"] for r in rows})
    what = {"rtt": "round trips", "oneway": "one-way delays"}
    body = " and ".join(what.get(k, k) for k in kinds) or "latency"
    varying = "hop count" if by_hops else ", ".join(_varying_names(rows)) or "case"
    title = f"{suite}{part}: {body}, {len(rows)} case(s) by {varying}{_runs_note(runs, run_id)}"
    ax.set_title(textwrap.fill(title, 80), fontsize="medium")  # a long list of parameters wraps, not off the figure
    extra = _legend(ax, len(colors) if by_hops else len(rows))
    how = "one line per case, coloured by hop count" if by_hops else "one line per case"
    return fig, f"Latency CDF: {title}", f"{how[0].upper()}{how[1:]}{extra}."


def _varying_names(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the cases of a figure differ by, in words (typed columns, then parameters of the case names)."""
    names = [c.replace("_", " ") for c in _varying(rows, _CASE_PARAMS) if c not in ("kind",)]
    named = [_case_params(str(r["case"])) for r in rows]
    keys = sorted({k for p in named for k in p} - set(_CASE_PARAMS) - set(_SKIP_IN_LABEL))
    return [k for k in keys if len({p.get(k) for p in named}) > 1] + names


def _cdf_plots(tables: Mapping[str, Table], out: Path, result: PlotSet) -> None:
    cdf = tables.get("latency_cdf")
    lat = tables.get("latency")
    if cdf is None or lat is None or not cdf.rows:
        result.notes.append("Latency CDF plot skipped: no message rows.")
        return
    points: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in cdf.records():
        if r["latency_ns"] is not None:
            points[(r["run_id"], r["case"])].append((r["latency_ns"] / 1000.0, r["quantile"]))
    runs = len({r["run_id"] for r in lat.records()})
    for key, rows in sorted(_cdf_figures(lat).items()):
        fig, title, caption = draw_cdf(key, rows, points, runs)
        name = "latency_cdf_" + "_".join(_slug(str(k)) for k in key) + ".png"
        _save(fig, out / name)
        result.plots.append(Plot(name, title, caption))


# ---------------------------------------------------------------- latency against hops

_HOP_SERIES = ("run_id", "suite", "transport", "routing", "kind", "size", "window", "fanout")


def _hops_plot(tables: Mapping[str, Table], out: Path, result: PlotSet) -> None:
    lat = tables.get("latency")
    rows = [
        r for r in (lat.records() if lat is not None else [])
        if r["hops"] >= 0 and r["size"] >= 0 and r["p50_ns"] is not None and covers("cost_per_hop", r["suite"])
    ]  # fmt: skip
    if not rows:
        result.notes.append("Latency-against-hops plot skipped: no case of the hops or routing suites with a hop count.")
        return
    spread = {(r["run_id"], r["case"]): r for r in (tables["spread"].records() if "spread" in tables else [])}
    series: dict[tuple[Any, ...], list[tuple[int, float, float, float]]] = defaultdict(list)
    first: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        key = tuple(r[c] for c in _HOP_SERIES)
        y = r["p50_ns"] / 1000.0
        sp = spread.get((r["run_id"], r["case"]))
        lo = sp["p50_min_ns"] / 1000.0 if sp and sp["p50_min_ns"] is not None and sp["repeats"] > 1 else y
        hi = sp["p50_max_ns"] / 1000.0 if sp and sp["p50_max_ns"] is not None and sp["repeats"] > 1 else y
        series[key].append((r["hops"], y, min(lo, y), max(hi, y)))
        first.setdefault(key, r)
    fits = {}
    cph = tables.get("cost_per_hop")
    if cph is not None:
        for f in cph.records():
            fits[tuple(f[c] for c in _HOP_SERIES)] = f
    cols = _varying(list(first.values()), _HOP_SERIES) or ["transport"]
    fig = _figure()
    ax = fig.add_subplot()
    for key in sorted(series, key=lambda k: tuple(str(x) for x in k)):
        pts = sorted(series[key])
        bars = ([p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts])
        line = ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=bars, fmt="o", capsize=3, label=_label(first[key], cols)).lines[0]
        fit = fits.get(key)
        if fit is not None and fit["slope_ns_per_hop"] is not None:
            xs = [fit["hops_min"], fit["hops_max"]]
            ys = [(fit["intercept_ns"] + fit["slope_ns_per_hop"] * x) / 1000.0 for x in xs]
            ax.plot(xs, ys, "-", color=line.get_color(), alpha=0.7)
    ax.set_xlabel("monitor hops")
    ax.set_ylabel("median latency (µs)")
    ax.grid(True, alpha=0.3)
    ax.set_title("Latency against hops (points: case medians, bars: range over the repeats; lines: fits)", fontsize="medium")
    extra = _legend(ax, len(series))
    _save(fig, out / "latency_vs_hops.png")
    result.plots.append(
        Plot("latency_vs_hops.png", "Latency against hops",
             f"Median latency of each case of the hops and routing suites (binds left out: see cost_per_hop.csv){extra}.")
    )  # fmt: skip


# ---------------------------------------------------------------- throughput


_KINDS = {"oneway": "one-way", "rtt": "round trips"}
_TRANSPORTS = {"ump": "UMP", "multihop": "multi-hop", "pipe": "Pipe", "queue": "Queue", "zmq": "ZeroMQ"}


def _series_label(r: Mapping[str, Any], x: str, suites: int, runs: int) -> str:
    """What a throughput line is: transport, kind and the parameter that is not on the x axis (+ suite, run if several)."""
    transport = str(r.get("transport") or "")
    parts = [f"{_TRANSPORTS.get(transport, transport)} {_KINDS.get(str(r.get('kind')), r.get('kind'))}".strip()]
    if x != "size" and (r.get("size") or -1) >= 0:
        parts.append(_bytes(int(r["size"])))
    if x != "window" and (r.get("window") or -1) >= 0:
        parts.append(f"window {r['window']}")
    text = ", ".join(parts)
    if suites > 1:
        text = f"{r['suite']}: {text}"
    if runs > 1:
        text += f" (run {r['run_id']})"
    return text


def draw_xy(table: Table, *, x: str, title: str, xlabel: str, axis: Callable[[Axes, list[int]], None]) -> tuple[Figure, str]:
    """A throughput plot of a ``throughput_by_*`` table: one labelled line per series, bars the range over its rows.

    Returns the figure and its caption.
    """
    records = list(table.records())
    streams = [r for r in records if r["kind"] == "oneway"]
    records = streams or records  # a throughput plot is about streams; round trips per second are in the table
    suites = len({r["suite"] for r in records})
    runs = len({r["run_id"] for r in records})
    series: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for r in records:
        y = r["throughput_msgs"]
        lo = r.get("throughput_min")
        hi = r.get("throughput_max")
        series[_series_label(r, x, suites, runs)].append((r[x], y, y if lo is None else min(lo, y), y if hi is None else max(hi, y)))
    fig = _figure()
    ax = fig.add_subplot()
    ranged = False
    for label in sorted(series):
        pts = sorted(series[label])
        bars = ([p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts])
        ranged = ranged or any(b > 0 for side in bars for b in side)
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=bars, fmt="o-", capsize=3, label=label)
    from matplotlib.ticker import EngFormatter

    ax.yaxis.set_major_formatter(EngFormatter())
    axis(ax, [r[x] for r in records])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("throughput (msg/s)")
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    extra = _legend(ax, len(series))
    what = "one-way streams" if streams else "cases"
    bars_text = "; bars: the range (min-max) over its repeats" if ranged else ""
    return fig, f"Median throughput of the {what} at each point{bars_text}{extra}."


def _xy_plot(
    table: Table | None,
    out: Path,
    result: PlotSet,
    *,
    file: str,
    title: str,
    x: str,
    xlabel: str,
    axis: Callable[[Axes, list[int]], None],
    what: str,
) -> None:
    if table is None or not table.rows:
        result.notes.append(f"{title} plot skipped: {what}.")
        return
    fig, caption = draw_xy(table, x=x, title=title, xlabel=xlabel, axis=axis)
    _save(fig, out / file)
    result.plots.append(Plot(file, title, caption))


def _window_ticks(ax: Axes, windows: list[int]) -> None:
    value_ticks(ax, windows)


# ---------------------------------------------------------------- heat maps


def _heatmaps(tables: Mapping[str, Table], out: Path, result: PlotSet) -> None:
    pairs = tables.get("core_pairs")
    if pairs is None or not pairs.rows:
        result.notes.append("Core-pair heat maps skipped: no rtt case of the routing suite names its cores.")
        return
    import numpy as np

    groups: dict[tuple[str, str, str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in pairs.records():
        groups[(r["run_id"], r["suite"], r["routing"], r["transport"], r["size"])].append(r)
    skipped = 0
    runs = len({g[0] for g in groups})
    for (run_id, suite, routing, transport, size), rows in sorted(groups.items()):
        if len({r["src_core"] for r in rows}) < 2 or len({r["dst_core"] for r in rows}) < 2:
            skipped += 1  # one row or one column: the latency table says it better
            continue
        cores = sorted({r["src_core"] for r in rows} | {r["dst_core"] for r in rows})
        index = {c: i for i, c in enumerate(cores)}
        grid = np.full((len(cores), len(cores)), np.nan)
        for r in rows:
            grid[index[r["src_core"]], index[r["dst_core"]]] = r["p50_ns"] / 1000.0
        side = min(10.0, 3.0 + 0.35 * len(cores))
        fig = _figure(side + 1.5, side)
        ax = fig.add_subplot()
        image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", origin="upper")
        ax.set_xticks(range(len(cores)), [str(c) for c in cores], fontsize="small")
        ax.set_yticks(range(len(cores)), [str(c) for c in cores], fontsize="small")
        ax.set_xlabel("destination core")
        ax.set_ylabel("source core")
        if len(cores) <= 12:
            for (i, j), v in np.ndenumerate(grid):
                if not np.isnan(v):
                    # light text on the dark end of viridis, dark on the light end; the cast: matplotlib types
                    # Normalize.__call__ as returning an array-like whatever it is given, a scalar gives a scalar
                    shade = cast(float, image.norm(v))
                    ax.text(j, i, f"{v:.3g}", ha="center", va="center", color="white" if shade < 0.6 else "black", fontsize="x-small")
        what = f"bind time, {transport}" if size < 0 else f"round trips, {transport} {size} B"
        fig.colorbar(image, ax=ax, label="median bind time (µs)" if size < 0 else "median rtt (µs)")
        ax.set_title(f"Core-pair {what}: {routing}\nsuite {suite}{_runs_note(runs, run_id)}", fontsize="medium")
        name = f"heatmap_{_slug(run_id)}_{_slug(suite)}_{_slug(routing)}_{_slug(transport)}_{'bind' if size < 0 else size}.png"
        _save(fig, out / name)
        result.plots.append(
            Plot(
                name,
                f"Core-pair {what}, routing {routing}, suite {suite}{_runs_note(runs, run_id)}",
                "Median (µs) from the source core (row) to the destination core (column); blank: not measured.",
            )
        )
    if skipped:
        result.notes.append(f"{skipped} core-pair group(s) cover a single source or destination core: no heat map drawn for them.")


# ---------------------------------------------------------------- memory and CPU


def draw_resources(rows: Sequence[Mapping[str, Any]]) -> Figure:
    """Memory and CPU of the measured components: a panel per (quantity, component), each with its own axis.

    A monitor's RSS (tens of MiB) and a channel's (a fraction of one) share no
    axis: side by side, the channel's bars would be invisible.  Bars are the
    median over a case's repeats, with their range, and say their value.
    """
    groups = sorted({(r["run_id"], r["suite"], r["routing"] or "no routing") for r in rows})
    components = sorted({r["component"] or "" for r in rows}, key=lambda c: (["monitor", "channel", "idle-monitor"] + [c]).index(c))
    transports = sorted({r["transport"] or "" for r in rows})
    vary = [i for i in range(2) if len({g[i] for g in groups}) > 1] + [2]
    names = [" ".join(g[i] for i in vary) for g in groups]
    cells: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        cells[((r["run_id"], r["suite"], r["routing"] or "no routing"), r["component"] or "", r["transport"] or "")].append(r)
    quantities = (("rss_bytes", "RSS (MiB)", 1 / (1 << 20)), ("cpu_s", "CPU (ms)", 1e3))
    fig = _figure(max(7.5, 3.2 * len(components)), 7.0)
    width = 0.8 / max(1, len(transports))
    for q, (column, ylabel, scale) in enumerate(quantities):
        for c, comp in enumerate(components):
            ax = fig.add_subplot(len(quantities), len(components), q * len(components) + c + 1)
            for j, t in enumerate(transports):
                xs, ys, lo, hi = [], [], [], []
                for i, g in enumerate(groups):
                    values = [float(r[column]) * scale for r in cells.get((g, comp, t), []) if r[column] is not None]
                    if not values:
                        continue
                    mid = statistics.median(values)
                    xs.append(i + (j - (len(transports) - 1) / 2) * width)
                    ys.append(mid)
                    lo.append(mid - min(values))
                    hi.append(max(values) - mid)
                if not xs:
                    continue
                bars = ax.bar(xs, ys, width, yerr=(lo, hi) if any(lo) or any(hi) else None, capsize=2, label=t or "n/a")
                ax.bar_label(bars, fmt="%.3g", fontsize="x-small", padding=2)
            ax.set_xticks(range(len(groups)), names, fontsize="small", rotation=20)
            ax.margins(y=0.2)
            ax.grid(True, axis="y", alpha=0.3)
            ax.set_title(comp or "n/a", fontsize="medium")
            if c == 0:
                ax.set_ylabel(ylabel)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(transports)), fontsize="small")
    fig.suptitle("Memory and CPU per monitor, per channel and per idle monitor (each panel its own scale)", fontsize="medium")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def _resources_plot(tables: Mapping[str, Table], out: Path, result: PlotSet) -> None:
    res = tables.get("resources")
    rows = list(res.records()) if res is not None else []
    if not rows:
        result.notes.append("Memory and CPU plot skipped: no case measured memory or CPU.")
        return
    fig = draw_resources(rows)
    fig.savefig(out / "resources.png", format="png")
    result.plots.append(
        Plot(
            "resources.png",
            "Memory and CPU",
            "RSS and CPU of each measured component, per routing mode: one panel per component, each with its own "
            "scale (a monitor's RSS is a hundred times a channel's); bars: the median over the repeats, with their "
            "range (see resources.csv for what each counts).",
        )
    )


def make_plots(tables: Mapping[str, Table], out_dir: str | Path) -> PlotSet:
    """Draw every plot whose data is present into ``out_dir``; return the plots and skip notes.

    Legends stay readable: series are labelled by the parameters that differ
    between them, a latency CDF with more than :data:`MAX_LEGEND` cases is
    split per routing mode and binds / messages, and one still too crowded
    colours its cases by hop count with one legend entry per hop count.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = PlotSet()
    _cdf_plots(tables, out, result)
    _hops_plot(tables, out, result)
    _xy_plot(
        tables.get("throughput_by_size"), out, result,
        file="throughput_vs_size.png", title="Throughput against message size", x="size",
        xlabel="message size (symmetric log scale: 0 B has its own tick)", axis=_size_ticks,
        what="no case of the channels or peers suites with a size and a throughput",
    )  # fmt: skip
    _xy_plot(
        tables.get("throughput_by_window"), out, result,
        file="throughput_vs_window.png", title="Throughput against window", x="window",
        xlabel="window (messages in flight)", axis=_window_ticks,
        what="no case of the window suite with a window and a throughput",
    )  # fmt: skip
    _heatmaps(tables, out, result)
    _resources_plot(tables, out, result)
    result.plots += [Plot(f, title, caption) for f, title, caption in ges_plots(dict(tables), out)]
    result.plots += [Plot(f, title, caption) for f, title, caption in groups_plots(dict(tables), out)]
    result.plots += [Plot(f, title, caption) for f, title, caption in fabric_plots(dict(tables), out)]
    return result
