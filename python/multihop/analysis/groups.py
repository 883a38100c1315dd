"""The ``groups`` suite's figure: median shoot-down against members, one line per mode (Pipes as baseline)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # matplotlib (the analysis extra) is imported when drawing
    from matplotlib.figure import Figure

from multihop.analysis.figures import figure, save, value_ticks
from multihop.analysis.table import Table

__all__ = ["draw_groups", "groups_plots"]


def groups_plots(tables: dict[str, Table], out: Path) -> list[tuple[str, str, str]]:
    """Draw the shoot-down figure from ``latency``; returns (file, title, caption) of each plot drawn."""
    lat = tables.get("latency")
    rows = [
        r
        for r in (lat.records() if lat is not None else [])
        if r["suite"] == "groups" and r["kind"] == "rtt" and r["p50_ns"] is not None and r["fanout"] > 0
    ]
    if not rows:
        return []
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        series[str(r["transport"])].append((int(r["fanout"]), r["p50_ns"] / 1000.0))
    fig = draw_groups(series)
    save(fig, out / "groups_shootdown.png")
    return [
        (
            "groups_shootdown.png",
            "Group shoot-down against members",
            "Median round (send to every member, every ack back at the root) per mode: unicast from the root, "
            "the root monitor's broadcast, radix and numa trees forwarded by the monitors, and Pipes.",
        )
    ]


def draw_groups(series: dict[str, list[tuple[int, float]]]) -> Figure:
    """The shoot-down figure: median round against members, one line per mode; ticks at the member counts measured."""
    fig = figure()
    ax = fig.add_subplot(1, 1, 1)
    for name in sorted(series):
        pts = sorted(series[name])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    value_ticks(ax, [p[0] for pts in series.values() for p in pts], log_from=4)
    ax.set_xlabel("members (virtual cores beyond the CPUs)")
    ax.set_ylabel("median shoot-down (µs)")
    ax.grid(True, alpha=0.3)
    ax.set_title("One-to-all shoot-down through the monitors")
    ax.legend(fontsize="small")
    return fig
