"""Suite ``dispatch``: RE.VE.N.GE. news dispatching, live (see :mod:`multihop.bench.news.measure`).

On the shared runtime (``--cores`` / ``--routing``, or the attached one), each
case with its own dispatch system (peers started and stopped by the case):

* ``path=dispatch`` / ``path=plain``: one source as fast as it can, k sinks
  (1 and 10; 100 without ``--quick``), 64-byte news, one peer; sampled
  deliveries are ``oneway`` rows (send = when the news entered, receive = when
  the sink got it), the totals count deliveries; each dispatch case names the
  plain-broker case of the same k as its baseline;
* ``op=takeover``: 3 peers, the peer serving some sinks is SIGKILLed; one
  ``rtt`` row per orphaned sink from the kill to its first news from a survivor;
* ``op=macro``: the paper's macro-sink benchmark compressed 30x (1 peer with
  ``--quick``, up to 4 sinks; else 1, 2 and 3 peers, up to 64): the case
  records the step before the threshold (``fanout`` = macro-sinks served,
  deliveries and duration of that step) and its sampled latencies.

Each case is measured once (``repeat`` 0: the cases take seconds each and the
report reads no finding off them), with the load over it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import multihop as mh
from multihop.bench.suites.common import SuiteContext, record_samples, sampling
from multihop.bench.suites.options import BenchOptions
from multihop.bench.trace import case_name

NAME = "dispatch"


def _sinks(quick: bool) -> tuple[int, ...]:
    return (1, 10) if quick else (1, 10, 100)


def _macro_peers(quick: bool) -> tuple[int, ...]:
    return (1,) if quick else (1, 2, 3)


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Nothing to check: the suite runs on the shared runtime (``--cores``/``--routing``, or the attached one)."""


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return 2 * len(_sinks(ctx.quick)) + 1 + len(_macro_peers(ctx.quick))


def _oneway(
    ctx: SuiteContext,
    params: dict[str, Any],
    samples: np.ndarray,
    messages: int,
    seconds: float,
    size: int,
    baseline: str | None = None,
    load: dict[str, Any] | None = None,
) -> str:
    p = dict(params, kind="oneway")
    name = case_name(p)
    if len(samples):
        ctx.writer.add_messages(name, p, samples[:, 0], samples[:, 1], kind="oneway", every=1, suite=NAME)
    ctx.writer.add_case(
        name, p, messages=messages, duration_ns=max(1, int(seconds * 1e9)), nbytes=messages * size, kind="oneway", suite=NAME, baseline=baseline,
        load=load,
    )  # fmt: skip
    return name


def run(ctx: SuiteContext) -> None:
    """Saturation (dispatch and plain), take-over, macro-sinks."""
    from multihop.bench.news import measure

    rt = ctx.runtime()
    secs = 1.0 if ctx.quick else 3.0
    base = {"suite": NAME, "transport": "ump", "routing": rt.routing, "size": 64, "hops": 0}
    for k in _sinks(ctx.quick):
        ctx.progress.step(f"plain broker, {k} sink(s)")
        with sampling(rt) as s:
            b = measure.plain_saturation(rt.name, k, seconds=secs, every=ctx.every)
        plain = _oneway(ctx, dict(base, path="plain", fanout=k, peers=0), b.samples, b.deliveries, b.seconds, 64, load=s.columns())
        ctx.progress.step(f"dispatch, {k} sink(s)")
        with sampling(rt) as s:
            d = measure.saturation(rt.name, k, seconds=secs, every=ctx.every)
        _oneway(ctx, dict(base, path="dispatch", fanout=k, peers=1), d.samples, d.deliveries, d.seconds, 64, baseline=plain, load=s.columns())
    ctx.progress.step("take-over after SIGKILL, 3 peers")
    with sampling(rt) as s:
        t = measure.takeover(rt.name, how="kill")
    if t.times_ns:
        record_samples(
            ctx, dict(base, op="takeover", peers=3, fanout=t.sinks, size=-1), [t.kill_ns] * len(t.times_ns), [t.kill_ns + x for x in t.times_ns],
            load=s.columns(),
        )  # fmt: skip
    for peers in _macro_peers(ctx.quick):
        ctx.progress.step(f"macro-sinks, {peers} peer(s)")
        with sampling(rt) as s:
            r = measure.macro_sinks(rt.name, peers, compress=30.0, size=1024, max_sinks=4 if ctx.quick else 64)
        good = r.last_good
        if good is None:
            continue
        params = dict(base, op="macro", peers=peers, fanout=good.sinks, size=1024, compress=30, threshold=r.threshold.sinks if r.threshold else -1)
        samples = np.asarray(good.samples, dtype=np.int64).reshape(-1, 2)
        _oneway(ctx, params, samples, good.delivered, good.seconds, 1024, load=s.columns())
