"""Suite ``groups``: one-to-all shoot-downs through the monitors against core count, Pipes as baseline.

For each core count (virtual cores on declared sockets: 2, 4, 8, 16, 32;
``--quick``: 2 and 4), on a runtime of its own (root core 0, a member process
on every other core; :mod:`multihop.bench.groups.shootdown`), every round of each
mode is traced as a round trip (``transport`` = ``group-unicast``,
``group-broadcast``, ``group-radix``, ``group-numa``, or ``pipe`` for the
``multiprocessing`` baseline; ``fanout`` = members), and the largest size
records one-way throughput of a one-sender group in fifo and total order
(``group-fifo``, ``group-total``; ``messages`` counts deliveries).  With
``--attach`` it runs one size: the attached runtime's cores.  Each case is
measured once (``repeat`` 0; its rounds are the samples), with the load over it.
"""

from __future__ import annotations

import multihop as mh
from multihop.bench.groups.shootdown import MODES, measure_group_shootdown, measure_pipe_shootdown, measure_throughput
from multihop.bench.suites.common import SuiteContext, record_samples, record_totals, sampling
from multihop.bench.suites.options import BenchOptions

NAME = "groups"


def _sizes(ctx: SuiteContext) -> list[int]:
    if ctx.attached is not None:
        return [len(ctx.attached.cores)]
    return [2, 4] if ctx.quick else [2, 4, 8, 16, 32]


def topology(n: int) -> mh.Topology:
    """n virtual cores: one socket below 8 cores, else 4 sockets of n/4 (multi-socket shapes for numa)."""
    if n < 8:
        return mh.Topology([list(range(n))])
    per = n // 4
    return mh.Topology([list(range(s * per, (s + 1) * per)) for s in range(4)])


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Nothing to check: the suite starts runtimes of its own (or uses every core of the attached one)."""


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return len(_sizes(ctx)) * (len(MODES) + 1) + 2


def run(ctx: SuiteContext) -> None:
    """Every size and mode, then the throughput of fifo against total order at the largest size."""
    rounds = 20 if ctx.quick else 200
    sizes = _sizes(ctx)
    for n in sizes:
        cores = list(range(n))
        with ctx.own_runtime(NAME, cores, "direct", topology(n)) as rt:
            root, members = rt.cores[0], rt.cores[1:]
            base = {"suite": NAME, "routing": rt.routing, "size": 0, "src_core": root, "fanout": len(members), "window": 64, "cores": len(rt.cores)}
            for mode in MODES:
                ctx.progress.step(f"{n} cores, {mode}")
                with sampling(rt) as load:
                    r = measure_group_shootdown(rt, root, members, mode, rounds=rounds)
                ends = [s + t for s, t in zip(r.starts, r.times, strict=True)]
                record_samples(ctx, dict(base, transport=f"group-{mode}"), list(r.starts), ends, load=load.columns())
            ctx.progress.step(f"{n} cores, pipe")
            with sampling(rt) as load:
                r = measure_pipe_shootdown(rt, root, members, rounds=rounds)
            record_samples(
                ctx,
                dict(base, transport="pipe", window=-1),
                list(r.starts),
                [s + t for s, t in zip(r.starts, r.times, strict=True)],
                load=load.columns(),
            )
            if n == sizes[-1]:
                k = min(3, len(members))
                count = 2000 if ctx.quick else 20_000
                for order in ("fifo", "total"):
                    ctx.progress.step(f"throughput, {order}")
                    with sampling(rt) as load:
                        deliveries, ns = measure_throughput(rt, root, members[:k], order, n=count)
                    params = dict(base, transport=f"group-{order}", size=64, fanout=k, order=order)
                    record_totals(ctx, params, "oneway", deliveries, ns, load=load.columns())
