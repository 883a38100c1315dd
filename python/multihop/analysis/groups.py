"""The ``groups`` suite's figure: median shoot-down against members, one line per mode (Pipes as baseline)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from multihop.analysis.table import Table

__all__ = ["groups_plots"]


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
    from multihop.analysis.plots import _figure, _save

    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        series[str(r["transport"])].append((int(r["fanout"]), r["p50_ns"] / 1000.0))
    fig = _figure()
    ax: Any = fig.add_subplot(1, 1, 1)
    for name in sorted(series):
        pts = sorted(series[name])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("members (virtual cores beyond the CPUs)")
    ax.set_ylabel("median shoot-down (µs)")
    ax.grid(True, alpha=0.3)
    ax.set_title("One-to-all shoot-down through the monitors")
    ax.legend(fontsize="small")
    _save(fig, out / "groups_shootdown.png")
    return [
        (
            "groups_shootdown.png",
            "Group shoot-down against members",
            "Median round (send to every member, every ack back at the root) per mode: unicast from the root, "
            "the root monitor's broadcast, radix and numa trees forwarded by the monitors, and Pipes.",
        )
    ]
