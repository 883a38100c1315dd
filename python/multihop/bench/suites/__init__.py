"""Benchmark suites run by ``multihop bench SUITE``; each writes a Parquet trace.

Suites (one module each): ``channels`` (UMP versus multi-hop, sizes 0 B to
64 KiB), ``hops`` (against the number of monitors on the path), ``routing``
(direct, ring and fat-tree: bind time and round trip per core pair),
``window`` (throughput against the credit window), ``fanout`` (one sender, k
receivers), ``resources`` (memory and CPU per channel and per monitor),
``peers`` (Pipe, Queue and ZeroMQ next to ours), ``dispatch`` (RE.VE.N.GE.
news dispatching: saturation next to a plain broker, take-over, macro-sinks),
``ges`` (the GES testbed of the routing paper, live), ``groups`` (one-to-all
shoot-downs through the monitors against core count), ``fabric`` (two machines as
network namespaces: the bridged multi-hop channel next to zenoh-python, NATS and
TCP) and ``all`` (every one, in that order; a suite that cannot run here, such as
``fabric`` without root or with ``--attach``, is left out with a line saying why).
``--quick`` makes each take seconds.

Every suite module has ``NAME``, ``check(options, attached)`` (raises
:class:`~multihop.bench.suites.options.OptionError` naming the suite when the
options or the attached runtime do not fit it), ``steps(ctx)`` and
``run(ctx)``.  All checks run before anything starts.

Round trips are traced by sampling (see :mod:`multihop.bench.suites.common`);
throughput cases record totals.  Every case is measured several times
(:attr:`BenchOptions.repeat_count`: 3 with ``--quick``, 5 otherwise; dispatch,
ges and groups once), interleaved with the suite's other cases, and each
repeat records the load it ran under (:mod:`multihop.bench.load`).  Ctrl-C stops the run cleanly: the runtimes
and every spawned process are stopped, and the cases finished so far are
written (the trace is complete up to the interrupted case).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import multihop as mh
from multihop.bench.progress import Progress
from multihop.bench.suites import channels, dispatch, fabric, fanout, ges, groups, hops, peers, resources, routing, window
from multihop.bench.suites.common import SuiteContext
from multihop.bench.suites.options import BenchOptions, OptionError
from multihop.bench.trace import TraceWriter

__all__ = ["SUITES", "BenchOptions", "OptionError", "choose", "run"]

_MODULES: dict[str, ModuleType] = {m.NAME: m for m in (channels, hops, routing, window, fanout, resources, peers, dispatch, ges, groups, fabric)}

SUITES = (*_MODULES, "all")
"""Suite names ``multihop bench`` accepts, ``all`` last."""


def choose(suite: str, options: BenchOptions, attached: mh.Runtime | None) -> tuple[list[ModuleType], list[str]]:
    """The suite modules to run for ``suite`` (or ``all``), each checked, and a line for each suite ``all`` leaves
    out because it cannot run here (its ``unavailable`` says why: ``fabric`` without root or with ``--attach``).

    Raises:
        OptionError: a chosen suite's ``check`` refused the options or the attached runtime.
    """
    chosen = [_MODULES[name] for name in (_MODULES if suite == "all" else [suite])]
    left_out: list[str] = []
    if suite == "all":
        for module in list(chosen):
            why = module.unavailable(options, attached) if hasattr(module, "unavailable") else None
            if why:
                chosen.remove(module)
                left_out.append(f"suite {module.NAME} left out: {why}")
    for module in chosen:
        module.check(options, attached)
    return chosen, left_out


def run(suite: str, out: str | os.PathLike[str], options: BenchOptions, *, progress: Progress | None = None) -> Path:
    """Run `suite` (or ``all``) and write its trace under `out`; return the run directory.

    Runtimes: with ``options.attach`` every suite runs on that runtime (it is
    left running); otherwise one runtime on ``options.cores`` /
    ``options.routing`` (default cores 0-1, direct) is shared by the suites
    that need no special topology, and ``hops``, ``routing`` and
    ``resources`` start their own.  On ``KeyboardInterrupt`` (or any error)
    everything started is stopped and the cases finished so far are written
    before the exception propagates.

    Raises:
        OptionError: an unknown suite, bad options, or options (or an
            attached runtime) that do not fit a chosen suite; nothing is started.
        RuntimeNotFound: ``options.attach`` names no running runtime.
    """
    if suite not in SUITES:
        raise OptionError(f"unknown suite {suite!r}; available: {', '.join(SUITES)}")
    options.check()
    attached = mh.Runtime.attach(options.attach) if options.attach is not None else None
    chosen, left_out = choose(suite, options, attached)
    progress = progress or Progress(suites=len(chosen))
    for line in left_out:
        progress.message(line)
    with TraceWriter(out, suite=suite) as writer, SuiteContext(writer, options, progress, attached) as ctx:
        try:
            if attached is not None:
                progress.message(f"attached to runtime {attached.name!r}: cores {attached.cores}, routing {attached.routing}")
            for module in chosen:
                progress.suite(module.NAME, module.steps(ctx))
                module.run(ctx)
        except KeyboardInterrupt:
            progress.message(f"interrupted: stopping; the cases finished so far go to {writer.run_dir}")
            raise
        finally:
            progress.close()
    return writer.run_dir
