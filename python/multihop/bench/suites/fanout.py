"""Suite ``fanout``: one sender, k receivers (the one-to-many cost).

Receivers are separate processes (echo servers), spread over the run's cores
after the sender's.  For each transport and k:

* ``rtt`` (publish round trip): the sender sends one 64-byte message on each
  of its k channels, then waits for the k echoes; traced like any round trip,
  with ``fanout = k``;
* ``oneway``: the sender sends n messages on each channel (consumed without
  echo), then one marker per channel, and waits for the k marker echoes;
  ``messages`` counts deliveries (n * k).

Every case is measured ``--repeats`` times, the repeat loop outermost.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import multihop as mh
from multihop.bench.suites.common import SuiteContext, record_rtt, record_totals, sampling
from multihop.bench.suites.echo_server import SINK, echo_server, service_name
from multihop.bench.suites.options import BenchOptions
from multihop.defaults import DEFAULT_WINDOW

NAME = "fanout"
TRANSPORTS = ("ump", "multihop")


def _fanouts(quick: bool) -> tuple[int, ...]:
    return (1, 2, 4) if quick else (1, 2, 4, 8)


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Nothing to check: the suite runs on the shared runtime (``--cores``/``--routing``, or the attached one)."""


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return ctx.repeats * len(TRANSPORTS) * len(_fanouts(ctx.quick))


def run(ctx: SuiteContext) -> None:
    """Every transport and fan-out; the receivers are started once for the suite."""
    rt = ctx.runtime()
    n_rtt, n_one = (800, 2000) if ctx.quick else (4000, 20_000)
    ks = _fanouts(ctx.quick)
    src = rt.cores[0]
    others = rt.cores[1:] or rt.cores
    receivers = [(i, others[i % len(others)]) for i in range(max(ks))]
    old = os.sched_getaffinity(0)
    with contextlib.ExitStack() as stack:
        for i, core in receivers:
            stack.enter_context(echo_server(rt, [core], prefix=f"fanout{i}"))
        d = rt.dispatcher(src, pin=len(old) > 1)
        stack.callback(os.sched_setaffinity, 0, old)
        stack.callback(d.detach)
        for rep in range(ctx.repeats):
            for transport in TRANSPORTS:
                for k in ks:
                    ctx.progress.step(f"{transport}, {k} receiver(s), repeat {rep + 1}/{ctx.repeats}")
                    chans = [
                        d.bind(service_name(core, f"fanout{i}"), transport=transport, window=DEFAULT_WINDOW, timeout=30) for i, core in receivers[:k]
                    ]
                    try:
                        _case(ctx, rt, chans, transport, src, n_rtt, n_one, rep)
                    finally:
                        for ch in chans:
                            ch.close()


def _case(ctx: SuiteContext, rt: mh.Runtime, chans: list[mh.Channel], transport: str, src: int, n_rtt: int, n_one: int, rep: int) -> None:
    k = len(chans)
    params: dict[str, Any] = {
        "suite": NAME,
        "transport": transport,
        "routing": rt.routing,
        "size": 64,
        "src_core": src,
        "fanout": k,
        "window": DEFAULT_WINDOW if transport == "multihop" else -1,
        "hops": max(int(ch.stats()["hops"]) for ch in chans),
    }

    def publish(m: bytes) -> None:
        for ch in chans:
            ch.send(m, timeout=30)

    def collect() -> None:
        for ch in chans:
            ch.recv(timeout=30)

    record_rtt(ctx, params, publish, collect, n_rtt, 64, repeat=rep, runtime=rt)
    data = SINK + b"x" * 63
    with sampling(rt) as s:
        t0 = time.monotonic_ns()
        for _ in range(n_one):
            publish(data)
        publish(b"end")
        collect()
        duration = time.monotonic_ns() - t0
    record_totals(ctx, params, "oneway", n_one * k, duration, repeat=rep, load=s.columns())
