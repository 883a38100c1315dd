"""Suite ``ges``: the GES testbed of the routing paper, live (section 4, figures 14-20).

22 broker processes in the topology of figure 14 (the measuring subscriber 9
broker hops from the publisher) with 100 subscribing clients (5 on every other
broker; :mod:`multihop.bench.ges.testbed`), then figure 20 (measuring subscribers 4,
2 and 1 hops away).  Per case: a matching rate, an event size (payload bytes,
the first 8 the send time) and a publish rate (0: as fast as the publisher
goes); each measuring subscriber's received events are message rows
(``kind = oneway``, latency = receive - send on one clock), and its totals a
case row (messages received over the time from the first to the last one: the
throughput at the client).  Typed columns: ``transport = ges``, ``size`` the
event size, ``hops`` the brokers on the path (both ends counted, as the paper
does), ``fanout`` the subscribing clients.  Parameters beyond them:
``topology``, ``measuring``, ``match`` (%), ``rate`` (asked, events/s), ``engine``
(the brokers' event path: ``native``, the native engine, or ``python``, the
reference; ``nats`` for NATS), and, measured, ``publish_rate``, ``others_min``
(the fewest events any other subscriber got: every one gets every matching
event) and ``broker_cpu_us`` (the brokers' CPU per published event, all
together, from their processes' counters).

Figure 14's cases run once per engine (:data:`ENGINES`: the native engine and
the Python event path, side by side), and, when the ``ges-bench`` extra is
installed, on NATS too (``transport = nats``: 3 clustered servers on loopback,
the same clients; :mod:`multihop.bench.ges.nats_peer`; ``hops`` 3, the servers on
the path); figure 20's with the native engine.

``--quick``: matching 100 and 10 %, sizes 50 and 500 B, rates 100/s and flat out;
figure 20 at 10/s.  The full run sweeps 100/50/25/10 %, 30-500 B and 1/s up to
flat out.  The suite starts its own runtime (cores ``--cores``, default 0-1),
or runs on ``--attach``'s.  Each case is measured once (``repeat`` 0), with
the load over it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import multihop as mh
from multihop.bench.ges.nats_peer import NatsTestbed, nats_available
from multihop.bench.ges.testbed import EXAMPLES, CaseResult, Testbed
from multihop.bench.suites.common import SuiteContext, sampling
from multihop.bench.suites.options import SHARED_CORES, BenchOptions
from multihop.bench.trace import case_name
from multihop.ges.topology import Topology

NAME = "ges"

#: the brokers' event paths figure 14 runs with, side by side (figure 20: the first)
ENGINES = ("native", "python")

FIG14 = ("fig14", "paper_fig14.toml", ("1.6.1.10",))
FIG20 = ("fig20", "paper_fig20.toml", ("1.6.1.10", "1.5.1.1", "1.5.1.22"))


def _cases(quick: bool) -> tuple[list[tuple[int, int, float, int]], list[tuple[int, int, float, int]]]:
    """(match %, size B, rate /s, events) for figure 14 and for figure 20."""
    if quick:
        fig14 = [(m, s, r, n) for m in (100, 10) for s in (50, 500) for r, n in ((100.0, 100), (0.0, 2000))]
        return fig14, [(50, 50, 10.0, 20)]
    rates = ((1.0, 5), (10.0, 30), (100.0, 300), (500.0, 1000), (1000.0, 2000), (2000.0, 4000), (0.0, 10000))
    fig14 = [(m, s, r, n) for m in (100, 50, 25, 10) for s in (30, 50, 100, 250, 500) for r, n in rates]
    fig20 = [(m, s, r, n) for m in (50, 10) for s in (50, 500) for r, n in rates[:5]]
    return fig14, fig20


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Nothing to check: brokers spread over whatever cores the runtime has."""


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    a, b = _cases(ctx.quick)
    return len(a) * len(ENGINES) + len(b) + (len(a) if not nats_available() else 0)


def hops_between(topo: Topology, a: str, b: str) -> int:
    """Brokers on the shortest gateway path from ``a`` to ``b``, both counted (1 when a == b)."""
    adj: dict[str, list[str]] = {str(x): [] for x in topo.brokers}
    for g in topo.gateways.values():
        adj[str(g.a)].append(str(g.b))
        adj[str(g.b)].append(str(g.a))
    dist = {a: 1}
    frontier = [a]
    while frontier:
        nxt = []
        for x in frontier:
            for y in adj[x]:
                if y not in dist:
                    dist[y] = dist[x] + 1
                    nxt.append(y)
        frontier = nxt
    return dist.get(b, -1)


def run(ctx: SuiteContext) -> None:
    """Both topologies, every case: figure 14 with each engine, then NATS, figure 20 with the native engine."""
    fig14, fig20 = _cases(ctx.quick)
    for (label, file, measuring), cases, engines in ((FIG14, fig14, ENGINES), (FIG20, fig20, ENGINES[:1])):
        topo = Topology.load(EXAMPLES / file)
        for engine in engines:
            name = ctx.attached.name if ctx.attached is not None else f"bench-ges-{label}-{engine}-{__import__('os').getpid()}"
            cores = list(ctx.options.cores or SHARED_CORES)
            with Testbed(name, topo, measuring=measuring, cores=cores, engine=engine) as tb:
                for match, size, rate, count in cases:
                    ctx.progress.step(f"{label}, {engine} engine: {match} % matching, {size} B, " + (f"{rate:g}/s" if rate else "flat out"))
                    with sampling() as s:
                        res = tb.run_case(match, size, rate, count)
                    _record(ctx, res, s.columns(), topology=label, engine=engine, transport="ges", fanout=tb.subscribers,
                            hops=lambda m, tb=tb, topo=topo: hops_between(topo, tb.publisher_at, m))  # fmt: skip
        if label == "fig14" and not nats_available():
            with NatsTestbed() as nt:
                for match, size, rate, count in cases:
                    ctx.progress.step(f"{label}, NATS: {match} % matching, {size} B, " + (f"{rate:g}/s" if rate else "flat out"))
                    with sampling() as s:
                        res = nt.run_case(match, size, rate, count)
                    _record(ctx, res, s.columns(), topology=label, engine="nats", transport="nats", fanout=nt.subscribers, hops=lambda m: 3)


def _record(
    ctx: SuiteContext, res: CaseResult, load: dict[str, Any] | None, *, topology: str, engine: str, transport: str, fanout: int, hops: Any
) -> None:
    others = min((min(v) for v in res.background.values()), default=-1)
    for measuring, (send, recv) in res.measured.items():
        base: dict[str, Any] = {
            "suite": NAME, "transport": transport, "topology": topology, "measuring": measuring, "engine": engine,
            "hops": hops(measuring), "size": res.size, "match": res.match, "rate": res.rate, "fanout": fanout, "kind": "oneway",
        }  # fmt: skip
        name = case_name(base)
        params = dict(
            base,
            publish_rate=round(res.publish_rate, 1),
            others_min=others,
            published=res.published,
            broker_cpu_us=round(res.broker_cpu_per_event * 1e6, 2),
        )
        if len(send):
            ctx.writer.add_messages(name, params, send, recv, kind="oneway", seq=np.arange(len(send), dtype=np.int64), every=1, suite=NAME)
        span = int(recv.max() - recv.min()) if len(recv) > 1 else 1
        ctx.writer.add_case(
            name, params, messages=len(recv), duration_ns=max(span, 1), nbytes=len(recv) * res.size, kind="oneway", suite=NAME, load=load
        )
