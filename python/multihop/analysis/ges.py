"""The GES testbed's tables and plots (the routing paper's figures 15-20), computed in Spark.

From the ``ges`` suite's cases (see :mod:`multihop.bench.suites.ges`):

``ges_latency``
    per (run, topology, measuring subscriber, hops, match, size, rate): the publish
    rate achieved, the events the measuring client got, its mean, median and p90
    latency and its throughput (events received per second), and the fewest
    events any other subscriber got.

Plots: mean latency against publish rate, one series per event size, one plot
per matching rate (figures 15-18); throughput at the client against publish
rate at 100 % matching (figure 19); mean latency against broker hops per
matching rate (figure 20).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from multihop.analysis.collect import to_table
from multihop.analysis.figures import figure, save
from multihop.analysis.table import Table

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["GES_COLS", "ges_table", "ges_plots"]

GES_COLS = [
    "run_id", "topology", "measuring", "hops", "match", "size", "rate", "publish_rate", "published",
    "received", "mean_ms", "p50_ms", "p90_ms", "received_per_s", "others_min", "fanout",
]  # fmt: skip


def ges_table(stats: DataFrame | None, cases: DataFrame | None) -> Table | None:
    """The ``ges_latency`` table, or None when the traces have no ``ges`` case."""
    from pyspark.sql import functions as F

    if cases is None:
        return None
    g = cases.where(F.col("suite") == "ges")
    if g.limit(1).count() == 0:
        return None

    def param(name: str, kind: str = "double") -> Any:
        return F.get_json_object("params", f"$.{name}").cast(kind).alias(name)

    df = g.select(
        "run_id",
        "case",
        param("topology", "string"),
        param("measuring", "string"),
        "hops",
        param("match", "int"),
        "size",
        param("rate"),
        param("publish_rate"),
        param("published", "long"),
        F.col("messages").alias("received"),
        F.col("throughput_msgs").alias("received_per_s"),
        param("others_min", "long"),
        "fanout",
    )
    if stats is not None:
        lat = stats.where(F.col("suite") == "ges").select(
            "run_id", "case",
            (F.col("mean_ns") / 1e6).alias("mean_ms"), (F.col("p50_ns") / 1e6).alias("p50_ms"),
            (F.col("p90_ns") / 1e6).alias("p90_ms"),
        )  # fmt: skip
        df = df.join(lat, ["run_id", "case"], "left")
    else:
        df = df.select("*", *(F.lit(None).cast("double").alias(c) for c in ("mean_ms", "p50_ms", "p90_ms")))
    return to_table(
        df.select(*GES_COLS),
        "ges_latency",
        "GES testbed: latency and throughput at the measuring client",
        ["run_id", "topology", "measuring", "match", "size", "rate"],
        doc="The ges suite (the routing paper's section 4): per measuring subscriber and case, the publish rate "
        "achieved, what the client got, its latency (receive - send on one host's clock) and throughput, and the "
        "fewest events any of the other subscribers got. rate 0 = the publisher as fast as it goes.",
    )


def ges_plots(tables: dict[str, Table], out: Path) -> list[tuple[str, str, str]]:
    """Draw the GES figures from ``ges_latency``; returns (file, title, caption) of each plot drawn."""
    t = tables.get("ges_latency")
    if t is None or not t.rows:
        return []
    rows = list(t.records())
    drawn = []
    by_match: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["topology"] == "fig14" and r["mean_ms"] is not None:
            by_match[(r["run_id"], r["match"])].append(r)
    runs = sorted({r["run_id"] for r in rows})
    for (run, match), rs in sorted(by_match.items()):
        fig = figure()
        ax = fig.add_subplot(1, 1, 1)
        for size in sorted({r["size"] for r in rs}):
            pts = sorted((r["publish_rate"], r["mean_ms"]) for r in rs if r["size"] == size)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{size} B")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("publish rate (events/s, achieved)")
        ax.set_ylabel("mean latency (ms)")
        ax.set_title(f"{rs[0]['fanout']} subscribers, {match} % matching, {rs[0]['hops']} broker hops" + (f" ({run})" if len(runs) > 1 else ""))
        ax.legend(fontsize="small")
        file = f"ges_latency_match{match}" + (f"_{run}" if len(runs) > 1 else "") + ".png"
        save(fig, out / file)
        drawn.append(
            (
                file,
                f"GES latency against publish rate, {match} % matching",
                "Figures 15-18 of the routing paper: mean latency at the measuring subscriber, per event size.",
            )
        )
    full = [r for r in rows if r["topology"] == "fig14" and r["match"] == 100 and r["received_per_s"] is not None]
    if full:
        fig = figure()
        ax = fig.add_subplot(1, 1, 1)
        for size in sorted({r["size"] for r in full}):
            pts = sorted((r["publish_rate"], r["received_per_s"]) for r in full if r["size"] == size)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{size} B")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("publish rate (events/s, achieved)")
        ax.set_ylabel("events received per second at the measuring client")
        ax.set_title("GES throughput at the client, 100 % matching")
        ax.legend(fontsize="small")
        save(fig, out / "ges_throughput.png")
        drawn.append(
            ("ges_throughput.png", "GES throughput at the client", "Figure 19 of the routing paper: every other subscriber gets every event too.")
        )
    hops = [r for r in rows if r["topology"] == "fig20" and r["mean_ms"] is not None]
    if hops:
        fig = figure()
        ax = fig.add_subplot(1, 1, 1)
        series: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
        for r in hops:
            series[(r["match"], r["size"])].append((r["hops"], r["mean_ms"]))
        for (match, size), pts in sorted(series.items()):
            by_hop: dict[int, list[float]] = defaultdict(list)
            for h, m in pts:
                by_hop[h].append(m)
            xs = sorted(by_hop)
            ax.plot(xs, [sum(by_hop[h]) / len(by_hop[h]) for h in xs], marker="o", label=f"{match} %, {size} B")
        ax.set_xlabel("broker hops from the publisher (both ends counted)")
        ax.set_ylabel("mean latency (ms), mean over the publish rates")
        ax.set_title("GES latency against broker hops (figure 20 topology)")
        ax.legend(fontsize="small")
        save(fig, out / "ges_latency_hops.png")
        drawn.append(("ges_latency_hops.png", "GES latency against broker hops", "Figures 20-26 of the routing paper."))
    return drawn
