"""The report's PNG plots, drawn with matplotlib's Agg canvas from the (small) computed tables.

Plots: the latency CDF of every case (one figure per run), latency against
hops (with the fitted cost-per-hop lines), throughput against message size,
throughput against window, and one heat map of core-pair round trips per
(run, routing mode).  A plot whose data is absent is not drawn; a note says so.
No pyplot state is used, so plotting is safe in any thread and any backend setting.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multihop.analysis.table import Table

__all__ = ["Plot", "PlotSet", "make_plots"]

_MAX_LEGEND = 12


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


def _figure(width: float = 7.5, height: float = 4.8) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="png")


def _legend(ax: Any, count: int) -> str:
    if 0 < count <= _MAX_LEGEND:
        ax.legend(fontsize="small", loc="best")
        return ""
    return f" ({count} series; legend omitted, see the CSV tables)"


def _label(parts: list[Any], multi_run: bool, run_id: str) -> str:
    text = " ".join(str(p) for p in parts if p not in (None, "", -1))
    return f"{run_id}: {text}" if multi_run else text


def _cdf_plots(tables: Mapping[str, Table], out: Path, result: PlotSet) -> None:
    cdf = tables.get("latency_cdf")
    lat = tables.get("latency")
    if cdf is None or lat is None or not cdf.rows:
        result.notes.append("Latency CDF plot skipped: no message rows.")
        return
    suite_of = {(r["run_id"], r["case"]): r["suite"] for r in lat.records()}
    curves: dict[tuple[str, str], dict[str, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for run_id, case, q, v in cdf.rows:
        if v is not None:
            curves[(run_id, suite_of.get((run_id, case), ""))][case].append((v / 1000.0, q))
    for run_id, suite in sorted(curves):
        cases = curves[(run_id, suite)]
        fig = _figure()
        ax = fig.add_subplot()
        lo, hi = math.inf, 0.0
        for case in sorted(cases):
            pts = sorted(cases[case], key=lambda p: p[1])
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            ax.plot(xs, ys, drawstyle="steps-post", linewidth=1.2, label=case)
            positive = [x for x in xs if x > 0]
            if positive:
                lo, hi = min(lo, min(positive)), max(hi, max(positive))
        if lo < math.inf and hi / lo > 20:
            ax.set_xscale("log")
        ax.set_xlabel("latency (µs)")
        ax.set_ylabel("fraction of messages")
        ax.set_ylim(0, 1.01)
        ax.grid(True, alpha=0.3)
        title = f"Latency CDF, run {run_id}, suite {suite}"
        ax.set_title(title)
        extra = _legend(ax, len(cases))
        name = f"latency_cdf_{_slug(run_id)}_{_slug(suite)}.png"
        _save(fig, out / name)
        result.plots.append(Plot(name, title, f"One line per case{extra}."))


def _hops_plot(tables: Mapping[str, Table], out: Path, result: PlotSet, multi_run: bool) -> None:
    lat = tables.get("latency")
    rows = [r for r in lat.records() if r["hops"] >= 0] if lat is not None else []
    if not rows:
        result.notes.append("Latency-against-hops plot skipped: no case with a hop count.")
        return
    series: dict[tuple[Any, ...], list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        series[(r["run_id"], r["transport"], r["size"], r["kind"])].append(
            (r["hops"], r["p50_ns"] / 1000.0)
        )
    fits = {}
    cph = tables.get("cost_per_hop")
    if cph is not None:
        for f in cph.records():
            fits[(f["run_id"], f["transport"], f["size"], f["kind"])] = f
    fig = _figure()
    ax = fig.add_subplot()
    for key in sorted(series, key=lambda k: tuple(str(x) for x in k)):
        run_id, transport, size, kind = key
        pts = sorted(series[key])
        label = _label([transport, f"{size} B" if size >= 0 else None, kind], multi_run, run_id)
        line = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", label=label)[0]
        fit = fits.get(key)
        if fit is not None and fit["slope_ns_per_hop"] is not None:
            xs = [fit["hops_min"], fit["hops_max"]]
            ys = [(fit["intercept_ns"] + fit["slope_ns_per_hop"] * x) / 1000.0 for x in xs]
            ax.plot(xs, ys, "-", color=line.get_color(), alpha=0.7)
    ax.set_xlabel("monitor hops")
    ax.set_ylabel("median latency (µs)")
    ax.grid(True, alpha=0.3)
    ax.set_title("Latency against hops (points: case medians; lines: least-squares fits)")
    extra = _legend(ax, len(series))
    _save(fig, out / "latency_vs_hops.png")
    result.plots.append(
        Plot("latency_vs_hops.png", "Latency against hops", f"Median latency of each case{extra}.")
    )


def _xy_plot(
    table: Table | None,
    out: Path,
    result: PlotSet,
    *,
    file: str,
    title: str,
    x: str,
    xlabel: str,
    series_of: Callable[[dict[str, Any]], str],
    multi_run: bool,
    what: str,
) -> None:
    if table is None or not table.rows:
        result.notes.append(f"{title} plot skipped: {what}.")
        return
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in table.records():
        label = series_of(r)
        series[f"{r['run_id']}: {label}" if multi_run else label].append(
            (r[x], r["throughput_msgs"])
        )
    fig = _figure()
    ax = fig.add_subplot()
    xs_all = []
    for label in sorted(series):
        pts = sorted(series[label])
        xs_all += [p[0] for p in pts]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
    from matplotlib.ticker import EngFormatter

    ax.yaxis.set_major_formatter(EngFormatter())
    positive = [v for v in xs_all if v > 0]
    if positive and max(positive) / min(positive) >= 16:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("throughput (msg/s)")
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    extra = _legend(ax, len(series))
    _save(fig, out / file)
    result.plots.append(Plot(file, title, f"Mean throughput of the cases at each point{extra}."))


def _heatmaps(tables: Mapping[str, Table], out: Path, result: PlotSet) -> None:
    pairs = tables.get("core_pairs")
    if pairs is None or not pairs.rows:
        result.notes.append(
            "Core-pair heat maps skipped: no rtt messages with src_core and dst_core."
        )
        return
    import numpy as np

    groups: dict[tuple[str, str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in pairs.records():
        groups[(r["run_id"], r["routing"], r["transport"], r["size"])].append(r)
    skipped = 0
    for (run_id, routing, transport, size), rows in sorted(groups.items()):
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
                    shade = image.norm(
                        v
                    )  # light text on the dark end of viridis, dark on the light end
                    color = "white" if shade < 0.6 else "black"
                    ax.text(
                        j, i, f"{v:.3g}", ha="center", va="center", color=color, fontsize="x-small"
                    )
        what = f"bind time, {transport}" if size < 0 else f"round trips, {transport} {size} B"
        fig.colorbar(image, ax=ax, label="median bind time (µs)" if size < 0 else "median rtt (µs)")
        ax.set_title(f"Core-pair {what}: {routing}, run {run_id}", fontsize="medium")
        name = f"heatmap_{_slug(run_id)}_{_slug(routing)}_{_slug(transport)}_{'bind' if size < 0 else size}.png"
        _save(fig, out / name)
        result.plots.append(
            Plot(
                name,
                f"Core-pair {what}, routing {routing}, run {run_id}",
                "Median (µs) from the source core (row) to the destination core (column); blank: not measured.",
            )
        )
    if skipped:
        result.notes.append(
            f"{skipped} core-pair group(s) cover a single source or destination core: no heat map drawn for them."
        )


def _size_series(r: dict[str, Any]) -> str:
    window = f" window {r['window']}" if r["window"] >= 0 else ""
    return f"{r['transport']} {r['kind']}{window}"


def _window_series(r: dict[str, Any]) -> str:
    return f"{r['transport']} {r['size']} B" if r["size"] >= 0 else str(r["transport"])


def make_plots(tables: Mapping[str, Table], out_dir: str | Path) -> PlotSet:
    """Draw every plot whose data is present into ``out_dir``; return the plots and skip notes."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = PlotSet()
    runs: set[str] = set()
    for t in tables.values():
        if "run_id" in t.columns:
            runs.update(t.column("run_id"))
    multi_run = len(runs) > 1
    _cdf_plots(tables, out, result)
    _hops_plot(tables, out, result, multi_run)
    _xy_plot(
        tables.get("throughput_by_size"), out, result,
        file="throughput_vs_size.png", title="Throughput against message size", x="size",
        xlabel="message size (bytes)",
        series_of=_size_series,
        multi_run=multi_run, what="no case with a size and a throughput",
    )  # fmt: skip
    _xy_plot(
        tables.get("throughput_by_window"), out, result,
        file="throughput_vs_window.png", title="Throughput against window", x="window",
        xlabel="window (messages in flight)",
        series_of=_window_series,
        multi_run=multi_run, what="no case with a window and a throughput",
    )  # fmt: skip
    _heatmaps(tables, out, result)
    return result
