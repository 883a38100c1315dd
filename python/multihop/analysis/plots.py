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
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

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


def _figure(width: float = 7.5, height: float = 4.8) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="png")


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
    for key, rows in sorted(_cdf_figures(lat).items()):
        run_id, suite = key[0], key[1]
        fig = _figure()
        ax = fig.add_subplot()
        by_hops = len(rows) > MAX_LEGEND and len({r["hops"] for r in rows}) <= MAX_LEGEND
        cols = _varying(rows, _CASE_PARAMS) if not by_hops else []
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
                ax.plot(xs, ys, drawstyle="steps-post", linewidth=1.2, label=_label(r, cols) if cols else r["case"])
            positive = [x for x in xs if x > 0]
            if positive:
                lo, hi = min(lo, min(positive)), max(hi, max(positive))
        if lo < math.inf and hi / lo > 20:
            ax.set_xscale("log")
        ax.set_xlabel("latency (µs)")
        ax.set_ylabel("fraction of messages")
        ax.set_ylim(0, 1.01)
        ax.grid(True, alpha=0.3)
        part = f", {key[2]} {key[3]}" if len(key) > 2 else ""
        title = f"Latency CDF, run {run_id}, suite {suite}{part}"
        ax.set_title(title, fontsize="medium")
        extra = _legend(ax, len(colors) if by_hops else len(rows))
        name = "latency_cdf_" + "_".join(_slug(str(k)) for k in key) + ".png"
        _save(fig, out / name)
        how = "one line per case, coloured by hop count" if by_hops else "one line per case"
        result.plots.append(Plot(name, title, f"{how[0].upper()}{how[1:]}{extra}."))


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
    series: dict[tuple[Any, ...], list[tuple[int, float]]] = defaultdict(list)
    first: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        key = tuple(r[c] for c in _HOP_SERIES)
        series[key].append((r["hops"], r["p50_ns"] / 1000.0))
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
        line = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", label=_label(first[key], cols))[0]
        fit = fits.get(key)
        if fit is not None and fit["slope_ns_per_hop"] is not None:
            xs = [fit["hops_min"], fit["hops_max"]]
            ys = [(fit["intercept_ns"] + fit["slope_ns_per_hop"] * x) / 1000.0 for x in xs]
            ax.plot(xs, ys, "-", color=line.get_color(), alpha=0.7)
    ax.set_xlabel("monitor hops")
    ax.set_ylabel("median latency (µs)")
    ax.grid(True, alpha=0.3)
    ax.set_title("Latency against hops (points: case medians; lines: least-squares fits)", fontsize="medium")
    extra = _legend(ax, len(series))
    _save(fig, out / "latency_vs_hops.png")
    result.plots.append(
        Plot("latency_vs_hops.png", "Latency against hops",
             f"Median latency of each case of the hops and routing suites (binds left out: see cost_per_hop.csv){extra}.")
    )  # fmt: skip


# ---------------------------------------------------------------- throughput


def _xy_plot(
    table: Table | None,
    out: Path,
    result: PlotSet,
    *,
    file: str,
    title: str,
    x: str,
    xlabel: str,
    series_cols: Sequence[str],
    axis: Callable[[Axes, list[int]], None],
    what: str,
) -> None:
    if table is None or not table.rows:
        result.notes.append(f"{title} plot skipped: {what}.")
        return
    records = list(table.records())
    streams = [r for r in records if r["kind"] == "oneway"]
    records = streams or records  # a throughput plot is about streams; round trips per second are in the table
    cols = _varying(records, series_cols) or [series_cols[1]]
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        series[_label(r, cols)].append((r[x], r["throughput_msgs"]))
    fig = _figure()
    ax = fig.add_subplot()
    for label in sorted(series):
        pts = sorted(series[label])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
    from matplotlib.ticker import EngFormatter

    ax.yaxis.set_major_formatter(EngFormatter())
    axis(ax, [r[x] for r in records])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("throughput (msg/s)")
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    extra = _legend(ax, len(series))
    _save(fig, out / file)
    what = "one-way streams" if streams else "cases"
    result.plots.append(Plot(file, title, f"Mean throughput of the {what} at each point{extra}."))


def _window_ticks(ax: Axes, windows: list[int]) -> None:
    ticks = sorted(set(windows))
    if ticks and min(ticks) > 0 and max(ticks) / min(ticks) >= 16:
        ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(w) for w in ticks])


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
        ax.set_title(f"Core-pair {what}: {routing}\nsuite {suite}, run {run_id}", fontsize="medium")
        name = f"heatmap_{_slug(run_id)}_{_slug(suite)}_{_slug(routing)}_{_slug(transport)}_{'bind' if size < 0 else size}.png"
        _save(fig, out / name)
        result.plots.append(
            Plot(
                name,
                f"Core-pair {what}, routing {routing}, suite {suite}, run {run_id}",
                "Median (µs) from the source core (row) to the destination core (column); blank: not measured.",
            )
        )
    if skipped:
        result.notes.append(f"{skipped} core-pair group(s) cover a single source or destination core: no heat map drawn for them.")


# ---------------------------------------------------------------- memory and CPU


def _resources_plot(tables: Mapping[str, Table], out: Path, result: PlotSet) -> None:
    res = tables.get("resources")
    rows = list(res.records()) if res is not None else []
    if not rows:
        result.notes.append("Memory and CPU plot skipped: no case measured memory or CPU.")
        return
    groups = sorted({(r["run_id"], r["suite"], r["routing"] or "no routing") for r in rows})
    series = sorted({(r["transport"] or "", r["component"] or "") for r in rows})
    vary = [i for i in range(2) if len({g[i] for g in groups}) > 1] + [2]
    names = [" ".join(g[i] for i in vary) for g in groups]
    cell = {((r["run_id"], r["suite"], r["routing"] or "no routing"), (r["transport"] or "", r["component"] or "")): r for r in rows}
    fig = _figure(max(7.5, 1.2 * len(groups) * len(series) / 2), 5.5)
    width = 0.8 / max(1, len(series))
    for k, (column, ylabel, scale) in enumerate((("rss_bytes", "RSS (MiB)", 1 / (1 << 20)), ("cpu_s", "CPU (s)", 1.0))):
        ax = fig.add_subplot(1, 2, k + 1)
        for j, key in enumerate(series):
            ys = [(cell[(g, key)][column] or 0) * scale if (g, key) in cell else 0 for g in groups]
            ax.bar([i + (j - (len(series) - 1) / 2) * width for i in range(len(groups))], ys, width, label=f"{key[0]} {key[1]}".strip())
        ax.set_xticks(range(len(groups)), names, fontsize="small", rotation=20)
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_title("memory" if k == 0 else "CPU", fontsize="medium")
    handles, labels = fig.axes[0].get_legend_handles_labels()
    legend_rows = (len(series) + 2) // 3
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(series)), fontsize="small")
    fig.suptitle("Memory and CPU per monitor, per channel and per idle monitor", fontsize="medium")
    fig.tight_layout(rect=(0, 0.05 + 0.05 * legend_rows, 1, 1))
    fig.savefig(out / "resources.png", format="png")
    result.plots.append(
        Plot(
            "resources.png",
            "Memory and CPU",
            "RSS and CPU seconds of each measured component, per routing mode (see resources.csv for what each counts).",
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
    multi = ["run_id"]
    _cdf_plots(tables, out, result)
    _hops_plot(tables, out, result)
    _xy_plot(
        tables.get("throughput_by_size"), out, result,
        file="throughput_vs_size.png", title="Throughput against message size", x="size",
        xlabel="message size (symmetric log scale: 0 B has its own tick)",
        series_cols=[*multi, "suite", "transport", "kind", "window"], axis=_size_ticks,
        what="no case of the channels or peers suites with a size and a throughput",
    )  # fmt: skip
    _xy_plot(
        tables.get("throughput_by_window"), out, result,
        file="throughput_vs_window.png", title="Throughput against window", x="window",
        xlabel="window (messages in flight)",
        series_cols=[*multi, "suite", "transport", "kind", "size"], axis=_window_ticks,
        what="no case of the window suite with a window and a throughput",
    )  # fmt: skip
    _heatmaps(tables, out, result)
    _resources_plot(tables, out, result)
    from multihop.analysis.ges import ges_plots

    result.plots += [Plot(f, title, caption) for f, title, caption in ges_plots(dict(tables), out)]
    from multihop.analysis.groups import groups_plots

    result.plots += [Plot(f, title, caption) for f, title, caption in groups_plots(dict(tables), out)]
    return result
