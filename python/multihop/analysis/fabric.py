"""The ``fabric`` suite's figure: round trip and one-way throughput between two machines, one bar per peer."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # matplotlib (the analysis extra) is imported when drawing
    from matplotlib.figure import Figure

from multihop.analysis.figures import figure, save
from multihop.analysis.table import Table

__all__ = ["draw_fabric", "fabric_plots"]

#: the peers in the order the figure shows them (ours first, then the baseline, then the others)
ORDER = ("runtime", "bridge", "zenoh", "nats", "tcp")


def fabric_plots(tables: dict[str, Table], out: Path) -> list[tuple[str, str, str]]:
    """Draw the fabric figure from ``latency`` and ``throughput``; returns (file, title, caption) of each plot drawn."""
    lat = tables.get("latency")
    tp = tables.get("throughput")
    rtt = {
        str(r["transport"]): r["p50_ns"] / 1000.0
        for r in (lat.records() if lat is not None else [])
        if r["suite"] == "fabric" and r["kind"] == "rtt" and r["p50_ns"] is not None
    }
    per_repeat: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in tp.records() if tp is not None else []:
        if r["suite"] == "fabric" and r["kind"] == "oneway" and r["throughput_msgs"] is not None:
            per_repeat[str(r["transport"]), int(r["size"])].append(float(r["throughput_msgs"]))
    oneway = {k: statistics.median(v) for k, v in per_repeat.items()}
    if not rtt and not oneway:
        return []
    save(draw_fabric(rtt, oneway), out / "fabric.png")
    return [
        (
            "fabric.png",
            "Between two machines: the bridged multi-hop channel and its baselines",
            "Two network namespaces over a veth pair. Left: median round trip of 64 B per peer (all round trips of "
            "all repeats). Right: one-way messages per second at 64 B and 4 KiB (median over the repeats). runtime: "
            "the bridged multi-hop channel through the Python API (monitors and a bridge on each machine); bridge: the "
            "two bridges alone; zenoh: zenoh-python's own put/subscriber (the baseline of the ratio table); nats, tcp.",
        )
    ]


def _order(names: set[str]) -> list[str]:
    return [n for n in ORDER if n in names] + sorted(names - set(ORDER))


def draw_fabric(rtt: dict[str, float], oneway: dict[tuple[str, int], float]) -> Figure:
    """Two panels: median round trip (us) per peer; one-way msg/s per peer and size (log scale)."""
    fig = figure(11.0, 4.6)
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    peers = _order(set(rtt))
    left.bar(peers, [rtt[p] for p in peers], color="tab:blue")
    for i, p in enumerate(peers):
        left.annotate(f"{rtt[p]:,.0f}", (i, rtt[p]), ha="center", va="bottom", fontsize="small")
    left.set_ylabel("median round trip, 64 B (µs)")
    left.set_title("Round trip")
    left.grid(True, axis="y", alpha=0.3)
    sizes = sorted({s for _, s in oneway})
    peers = _order({p for p, _ in oneway})
    width = 0.8 / max(1, len(sizes))
    for j, size in enumerate(sizes):
        xs = [i + (j - (len(sizes) - 1) / 2) * width for i in range(len(peers))]
        ys = [oneway.get((p, size), 0.0) for p in peers]
        right.bar(xs, ys, width=width, label=f"{size:,} B")
    right.set_xticks(range(len(peers)), peers)
    right.set_yscale("log")
    right.set_ylabel("messages per second")
    right.set_title("One way")
    right.grid(True, axis="y", alpha=0.3)
    right.legend(fontsize="small")
    return fig
