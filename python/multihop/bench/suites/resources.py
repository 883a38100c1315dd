"""Suite ``resources``: memory and CPU per channel and per monitor, for each routing mode (psutil).

For each routing mode on a virtual topology (4 cores in 2 sockets with
``--quick``, 8 otherwise; ``--cores``, ``--routing`` and ``--attach`` as for
the ``routing`` suite, see :func:`multihop.bench.suites.routing.plan`) and
each transport, with an echo server on every core, this process opens C channels spread over all core pairs and runs m
round trips on each.  Recorded cases (``kind = "oneway"``; the ``component``
parameter says which):

* ``monitor``: ``rss_bytes`` the mean RSS of a monitor with the channels open,
  ``cpu_s`` the mean CPU seconds of a monitor during the traffic,
  ``messages`` the messages the monitors forwarded (over all monitors);
* ``channel``: ``rss_bytes`` the growth of the summed RSS of every process
  involved (monitors, echo server, this one) per channel, ``cpu_s`` their
  CPU seconds during the traffic per channel, ``messages`` per channel;
* ``idle-monitor``: ``cpu_s`` the mean CPU seconds of a monitor over an idle
  period after the traffic (0.5 s with ``--quick``, 2 s otherwise), with the channels still open.

RSS counts the pages a process has touched, shared ring pages included (in
every process that maps them), so it is what the machine pays, not what a
ring could hold.  ``links`` (a parameter) is the number of monitor-to-monitor
links the mode's table created.  It needs at least two cores.  Per mode,
each transport is measured ``--repeats`` times (channels opened and closed
each time), the repeat loop outermost.
"""

from __future__ import annotations

import time
from typing import Any

import psutil

import multihop as mh
from multihop import rts
from multihop.bench.suites.common import SuiteContext, need_cores, record_totals, sampling
from multihop.bench.suites.echo_server import echo_server, service_name
from multihop.bench.suites.options import BenchOptions
from multihop.bench.suites.routing import plan
from multihop.defaults import DEFAULT_WINDOW

NAME = "resources"
TRANSPORTS = ("ump", "multihop")


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """Two cores at least: channels go between distinct cores."""
    cores = attached.cores if attached is not None else options.cores
    if cores is not None:  # else the default virtual topology (4 or 8 cores)
        need_cores(NAME, "channels between distinct cores", cores, attached)


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports."""
    return ctx.repeats * len(plan(ctx)[2]) * len(TRANSPORTS)


def _usage(procs: list[psutil.Process]) -> tuple[int, float]:
    """Summed RSS (bytes) and CPU seconds (user + system) of `procs`."""
    rss, cpu = 0, 0.0
    for p in procs:
        with p.oneshot():
            rss += p.memory_info().rss
            t = p.cpu_times()
            cpu += t.user + t.system
    return rss, cpu


def _forwarded(rt: mh.Runtime) -> int:
    return sum(int(m.get("data", {}).get("forwarded", 0)) for m in rt.status()["monitors"])


def run(ctx: SuiteContext) -> None:
    """Every routing mode and transport: open C channels, run traffic, measure."""
    cores, topo, modes = plan(ctx)
    n_chan, n_rtt = (16, 200) if ctx.quick else (64, 2000)
    pairs = [(s, d) for s in cores for d in cores if s != d]
    for mode in modes:
        links = len(rts.links(rts.routing_table(topo, mode, cores)))
        with ctx.own_runtime(NAME, cores, mode, topo) as rt, echo_server(rt) as server:
            monitors = [psutil.Process(pid) for pid in rt.monitor_pids.values()]
            everyone = monitors + [psutil.Process(server.pid), psutil.Process()]
            ds = {c: rt.dispatcher(c) for c in cores}
            try:
                for rep in range(ctx.repeats):
                    for transport in TRANSPORTS:
                        ctx.progress.step(f"{mode}, {transport}: {n_chan} channels, repeat {rep + 1}/{ctx.repeats}")
                        params = {
                            "suite": NAME,
                            "transport": transport,
                            "routing": mode,
                            "size": 64,
                            "window": DEFAULT_WINDOW if transport == "multihop" else -1,
                            "channels": n_chan,
                            "links": links,
                        }
                        chosen = [pairs[i % len(pairs)] for i in range(n_chan)]
                        _measure(ctx, rt, ds, chosen, transport, params, monitors, everyone, n_rtt, 0.5 if ctx.quick else 2.0, rep)
            finally:
                for d in ds.values():
                    d.detach()


def _measure(
    ctx: SuiteContext,
    rt: mh.Runtime,
    ds: dict[int, mh.Dispatcher],
    pairs: list[tuple[int, int]],
    transport: str,
    params: dict[str, Any],
    monitors: list[psutil.Process],
    everyone: list[psutil.Process],
    n_rtt: int,
    idle_s: float,
    rep: int,
) -> None:
    rss0, _ = _usage(everyone)
    chans = [ds[s].bind(service_name(d), transport=transport, window=DEFAULT_WINDOW, timeout=30) for s, d in pairs]
    try:
        msg = b"x" * 64
        fwd0 = _forwarded(rt)
        _, cpu_all0 = _usage(everyone)
        _, cpu_mon0 = _usage(monitors)
        with sampling(rt, pids=[p.pid for p in everyone]) as busy:
            t0 = time.monotonic_ns()
            for ch in chans:
                for _ in range(n_rtt):
                    ch.send(msg, timeout=30)
                    ch.recv(timeout=30)
            duration = time.monotonic_ns() - t0
        rss_mon, cpu_mon1 = _usage(monitors)
        rss1, cpu_all1 = _usage(everyone)
        forwarded = _forwarded(rt) - fwd0
        n, c = len(monitors), len(chans)
        load = busy.columns()
        record_totals(
            ctx, dict(params, component="monitor"), "oneway", forwarded, duration, rss_bytes=rss_mon // n, cpu_s=(cpu_mon1 - cpu_mon0) / n,
            repeat=rep, load=load,
        )  # fmt: skip
        record_totals(
            ctx, dict(params, component="channel"), "oneway", 2 * n_rtt, duration, rss_bytes=max(rss1 - rss0, 0) // c,
            cpu_s=(cpu_all1 - cpu_all0) / c, repeat=rep, load=load,
        )  # fmt: skip
        time.sleep(0.1)  # past any spin phase
        with sampling(rt, pids=[p.pid for p in everyone]) as quiet:
            _, idle0 = _usage(monitors)
            t1 = time.monotonic_ns()
            time.sleep(idle_s)
            _, idle1 = _usage(monitors)
            idle_ns = time.monotonic_ns() - t1
        record_totals(
            ctx, dict(params, component="idle-monitor"), "oneway", 0, idle_ns, rss_bytes=rss_mon // n, cpu_s=(idle1 - idle0) / n,
            repeat=rep, load=quiet.columns(),
        )  # fmt: skip
    finally:
        for ch in chans:
            ch.close()
