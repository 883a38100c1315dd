"""Pictures of a broker's connectivity graph and of its unit tree (``multihop ges graph``).

Left: the connectivity graph, one row per level (the vertex, level 0, at the
bottom).  An edge is drawn with an arrow along the direction a shortest path
may take it (from a node to a member of its L_UL set: down a level or across
one); its label is the weight, and ``xN`` when N gateways make it up (the link
count).  Nodes cut off from the vertex (unit partitioned) are red, the vertex
is dark.  Right: the unit tree as this broker knows it: the system, then at
each level the vertex's own unit (bold) among its siblings.

Needs matplotlib (the ``analysis`` extra).
"""

from __future__ import annotations

import math
from pathlib import Path

from multihop.ges.graph import ConnectivityGraph

__all__ = ["draw_graph"]

_LEVEL_NAMES = ["node", "cluster", "super-cluster", "super-super-cluster"]


def _level_name(level: int) -> str:
    return _LEVEL_NAMES[level] if level < len(_LEVEL_NAMES) else f"level-{level} unit"


def draw_graph(g: ConnectivityGraph, path: str | Path, title: str | None = None) -> Path:
    """Draw ``g`` (and its unit tree) into the PNG file ``path``; returns the path."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        from multihop.extras import ExtraMissing, install_hint

        raise ExtraMissing(
            f"drawing a GES graph needs the analysis extra; missing: matplotlib ({e}). Install it with {install_hint('analysis')}"
        ) from None
    rows = g.rows()
    levels = g.levels
    width = max(8.0, 1.6 * max(len(r) for r in rows.values()) + 6)
    fig = Figure(figsize=(width + 5, 1.9 * (levels + 1) + 1.5))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.08, 0.06, width / (width + 5) - 0.09, 0.84))
    tree = fig.add_axes((width / (width + 5) + 0.01, 0.06, 5 / (width + 5) - 0.03, 0.84))
    vertex = g.name(g.vertex)
    fig.suptitle(title or f"connectivity graph at broker {vertex}", fontsize=13)

    pos: dict[str, tuple[float, float]] = {}
    for lvl, names in rows.items():
        n = len(names)
        for i, nm in enumerate(names):
            pos[nm] = ((i + 1) / (n + 1), float(lvl))
    parted = g.unit_partitioned()
    colors = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974", "#64b5cd"]
    for a, b, lvl, w, count in g.edges():
        (xa, ya), (xb, yb) = pos[a], pos[b]
        col = colors[lvl % len(colors)]
        same = ya == yb
        # a is the lower-level end: paths go from b down to a (b's L_UL holds a); same level: both ways
        if same:
            bend = 0.25
            ax.annotate("", xy=(xa, ya), xytext=(xb, yb), arrowprops=dict(arrowstyle="<|-|>", color=col, lw=1.4, connectionstyle=f"arc3,rad={bend}"))
            lx, ly = (xa + xb) / 2, ya + 0.18
        else:
            ax.annotate("", xy=(xa, ya + 0.08), xytext=(xb, yb - 0.08), arrowprops=dict(arrowstyle="-|>", color=col, lw=1.4, shrinkA=8, shrinkB=8))
            lx, ly = xa + (xb - xa) * 0.55, ya + (yb - ya) * 0.55
        label = f"{w:g}" + (f" x{count}" if count > 1 else "")
        ax.text(
            lx, ly, label, fontsize=8, color=col, ha="center", va="center", bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85)
        )
    for nm, (x, y) in pos.items():
        is_v = nm == vertex
        fc = "#222222" if is_v else ("#f4cccc" if nm in parted else "#eef3fb")
        ax.text(
            x,
            y,
            nm,
            ha="center",
            va="center",
            fontsize=9,
            color="white" if is_v else "black",
            bbox=dict(boxstyle="round,pad=0.35", fc=fc, ec="#444444"),
        )
        if not is_v:  # the routing cache: cost of the shortest path and the best hop
            cost, hop = g.cost(nm), g.best_hop(nm)
            sub = "unreachable" if math.isinf(cost) else f"cost {cost:g} via {hop}"
            ax.text(x, y - 0.2, sub, ha="center", va="center", fontsize=7, color="#555555")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6, levels + 0.6)
    ax.set_yticks(range(levels + 1))
    ax.set_yticklabels([f"level {lvl}\n{_level_name(lvl)}" for lvl in range(levels + 1)], fontsize=8)
    ax.set_xticks([])
    for s in ("top", "right", "bottom"):
        ax.spines[s].set_visible(False)
    ax.text(
        0.0,
        -0.55,
        "arrow u -> v: where a shortest path may go: v is in L_UL(u), u is in L_D(v) (both heads: same "
        "level, both ways); label: weight, xN = N gateways; red: partitioned (#L_UL = 0)",
        fontsize=7,
        color="#555555",
    )

    # the unit tree: system at the top, the vertex's own unit at each level among its siblings
    tree.set_axis_off()
    tree.set_title("unit tree known here", fontsize=10)
    own = [g.name(g.vertex) if lvl == 0 else ".".join(vertex.split(".")[: levels + 1 - lvl]) for lvl in range(levels + 1)]
    y = 1.0
    step = 1.0 / (sum(len(r) for r in rows.values()) + levels + 3)
    tree.text(0.0, y, "system", fontsize=9, fontweight="bold")
    for depth, lvl in enumerate(range(levels, -1, -1)):
        # siblings first, then the vertex's own unit, whose children follow it one step in
        sibs = sorted(set(rows[lvl]) - {own[lvl]}) + [own[lvl]]
        for nm in sibs:
            y -= step
            mine = nm == own[lvl]
            tree.text(
                0.05 + 0.07 * depth,
                y,
                ("└ " if mine else "├ ") + f"{nm}  ({_level_name(lvl)})",
                fontsize=8,
                fontweight="bold" if mine else "normal",
                color="#c44e52" if nm in parted else "black",
            )
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out
