"""Figures of the report: a matplotlib figure off any display, saved as PNG, and ticks at the measured values.

Shared by :mod:`~multihop.analysis.plots` and the per-application plots (:mod:`~multihop.analysis.ges`,
:mod:`~multihop.analysis.groups`). matplotlib (the analysis extra) is imported when a figure is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # matplotlib (the analysis extra) is imported when drawing
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["figure", "save", "value_ticks"]


def figure(width: float = 7.5, height: float = 4.8) -> Figure:
    """A figure of ``width`` x ``height`` inches at 100 dpi, drawn by the Agg canvas (no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: Path) -> None:
    """Lay ``fig`` out tightly and write it to ``path`` as PNG."""
    fig.tight_layout()
    fig.savefig(path, format="png")


def value_ticks(ax: Axes, values: Sequence[int], log_from: float = 16) -> None:
    """Ticks at the values measured and nowhere else; a log-2 axis when they span `log_from` times or more."""
    from matplotlib.ticker import NullLocator

    ticks = sorted(set(values))
    if ticks and min(ticks) > 0 and max(ticks) / min(ticks) >= log_from:
        ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(w) for w in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
