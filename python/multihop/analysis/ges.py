"""The GES testbed's tables and plots (the routing paper's figures 15-20), computed in Spark.

From the ``ges`` suite's cases (see :mod:`multihop.bench.suites.ges`):

``ges_latency``
    per (run, topology, engine, measuring subscriber, hops, match, size, rate): the
    publish rate achieved, the events the measuring client got, its mean, median
    and p90 latency and its throughput (events received per second), the fewest
    events any other subscriber got, and the brokers' CPU per event. ``engine``
    is the brokers' event path (``native``, ``python``) or ``nats`` (the NATS
    cluster beside figure 14); traces from before there were engines are ``python``.

Plots: mean latency against publish rate, one series per engine and event size,
one plot per matching rate (figures 15-18); throughput at the client against
publish rate at 100 % matching, per engine and size (figure 19); mean latency
against broker hops per engine and matching rate (figure 20); and the native
engine, the Python path and NATS side by side at figure 14's flat-out and
lowest-rate cases (latency, throughput, brokers' CPU per event).
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
    "run_id", "topology", "engine", "measuring", "hops", "match", "size", "rate", "publish_rate", "published",
    "received", "mean_ms", "p50_ms", "p90_ms", "received_per_s", "others_min", "broker_cpu_us", "fanout",
]  # fmt: skip

#: series order and names in the plots
ENGINE_LABELS = {"native": "GES native", "python": "GES Python", "nats": "NATS"}


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
        F.coalesce(F.get_json_object("params", "$.engine"), F.lit("python")).alias("engine"),
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
        param("broker_cpu_us"),
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
        ["run_id", "topology", "engine", "measuring", "match", "size", "rate"],
        doc="The ges suite (the routing paper's section 4): per engine (native, python; nats: the NATS cluster), "
        "measuring subscriber and case, the publish rate achieved, what the client got, its latency (receive - "
        "send on one host's clock) and throughput, the fewest events any of the other subscribers got, and the "
        "brokers' CPU per event (all together). rate 0 = the publisher as fast as it goes.",
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
        for engine, size in _series(rs):
            pts = sorted((r["publish_rate"], r["mean_ms"]) for r in rs if r["size"] == size and r["engine"] == engine)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{_label(engine)}, {size} B")
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
                "Figures 15-18 of the routing paper: mean latency at the measuring subscriber, per engine and event size.",
            )
        )
    full = [r for r in rows if r["topology"] == "fig14" and r["match"] == 100 and r["received_per_s"] is not None]
    if full:
        fig = figure()
        ax = fig.add_subplot(1, 1, 1)
        for engine, size in _series(full):
            pts = sorted((r["publish_rate"], r["received_per_s"]) for r in full if r["size"] == size and r["engine"] == engine)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{_label(engine)}, {size} B")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("publish rate (events/s, achieved)")
        ax.set_ylabel("events received per second at the measuring client")
        ax.set_title("Throughput at the client, 100 % matching: GES native, GES Python, NATS")
        ax.legend(fontsize="small")
        save(fig, out / "ges_throughput.png")
        drawn.append(
            ("ges_throughput.png", "GES throughput at the client", "Figure 19 of the routing paper: every other subscriber gets every event too.")
        )
    hops = [r for r in rows if r["topology"] == "fig20" and r["mean_ms"] is not None]
    if hops:
        fig = figure()
        ax = fig.add_subplot(1, 1, 1)
        series: dict[tuple[str, int, int], list[tuple[int, float]]] = defaultdict(list)
        for r in hops:
            series[(r["engine"], r["match"], r["size"])].append((r["hops"], r["mean_ms"]))
        for (engine, match, size), pts in sorted(series.items()):
            by_hop: dict[int, list[float]] = defaultdict(list)
            for h, m in pts:
                by_hop[h].append(m)
            xs = sorted(by_hop)
            ax.plot(xs, [sum(by_hop[h]) / len(by_hop[h]) for h in xs], marker="o", label=f"{_label(engine)}, {match} %, {size} B")
        ax.set_xlabel("broker hops from the publisher (both ends counted)")
        ax.set_ylabel("mean latency (ms), mean over the publish rates")
        ax.set_title("GES latency against broker hops (figure 20 topology)")
        ax.legend(fontsize="small")
        save(fig, out / "ges_latency_hops.png")
        drawn.append(("ges_latency_hops.png", "GES latency against broker hops", "Figures 20-26 of the routing paper."))
    side = _side_by_side(rows, out)
    if side is not None:
        drawn.append(side)
    return drawn


def _label(engine: str) -> str:
    return ENGINE_LABELS.get(engine, engine)


def _series(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(engine, size) of the rows, engines in :data:`ENGINE_LABELS`' order."""
    order = {e: k for k, e in enumerate(ENGINE_LABELS)}
    return sorted({(r["engine"], r["size"]) for r in rows}, key=lambda x: (order.get(x[0], len(order)), x[0], x[1]))


def _side_by_side(rows: list[dict[str, Any]], out: Path) -> tuple[str, str, str] | None:
    """Bars: the engines (and NATS) at figure 14's 100 % cases of the smallest size: mean latency at the lowest
    rate, throughput at the client flat out, brokers' CPU per event flat out (each bar the mean over the runs)."""
    fig14 = [r for r in rows if r["topology"] == "fig14" and r["match"] == 100]
    engines = [e for e in ENGINE_LABELS if any(r["engine"] == e for r in fig14)]
    if len(engines) < 2:
        return None
    size = min(r["size"] for r in fig14)
    fig14 = [r for r in fig14 if r["size"] == size]
    rates = sorted({r["rate"] for r in fig14 if r["rate"]})
    panels: list[tuple[str, list[float]]] = []

    def mean_of(engine: str, rate: float, key: str) -> float:
        xs = [r[key] for r in fig14 if r["engine"] == engine and r["rate"] == rate and r[key] is not None]
        return sum(xs) / len(xs) if xs else 0.0

    if rates:
        panels.append((f"mean latency (ms), {rates[0]:g} events/s", [mean_of(e, rates[0], "mean_ms") for e in engines]))
    panels.append(("events/s at the client, flat out", [mean_of(e, 0.0, "received_per_s") for e in engines]))
    panels.append(("brokers' CPU per event (us), flat out", [mean_of(e, 0.0, "broker_cpu_us") for e in engines]))
    fig = figure(width=4.0 * len(panels), height=3.6)
    for k, (title, values) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        bars = ax.bar([_label(e) for e in engines], values, color=["C0", "C1", "C2"][: len(engines)])
        ax.bar_label(bars, fmt="%.3g", fontsize="small")
        ax.set_title(title, fontsize="small")
    fig.suptitle(f"Figure 14, 100 % matching, {size} B: GES native, GES Python, NATS")
    save(fig, out / "ges_engines.png")
    return (
        "ges_engines.png",
        "GES native, GES Python and NATS side by side",
        "The routing paper's testbed (figure 14): the brokers' event path in Rust, in Python, and a NATS cluster "
        "with the same clients: latency at the lowest rate, throughput at the client and the brokers' CPU per event "
        "flat out (NATS: its 3 servers').",
    )
