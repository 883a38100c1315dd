"""Benchmark suites run by ``multihop bench SUITE``; each writes a Parquet trace.

Suites (one module each): ``channels`` (UMP versus multi-hop, sizes 0 B to
64 KiB), ``hops`` (against the number of monitors on the path), ``routing``
(direct, ring and fat-tree: bind time and round trip per core pair),
``window`` (throughput against the credit window), ``fanout`` (one sender, k
receivers), ``resources`` (memory and CPU per channel and per monitor),
``peers`` (Pipe, Queue and ZeroMQ next to ours) and ``all`` (every one, in
that order).  ``--quick`` makes each take seconds.

Round trips are traced by sampling (see :mod:`multihop.bench.suites.common`);
throughput cases record totals.  Ctrl-C stops the run cleanly: the runtimes
and every spawned process are stopped, and the cases finished so far are
written (the trace is complete up to the interrupted case).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from multihop.bench.progress import Progress
from multihop.bench.suites import channels, fanout, hops, peers, resources, routing, window
from multihop.bench.suites.common import TRACE_EVERY, SuiteContext
from multihop.bench.trace import TraceWriter

_MODULES: dict[str, ModuleType] = {m.NAME: m for m in (channels, hops, routing, window, fanout, resources, peers)}

SUITES = (*_MODULES, "all")
"""Suite names ``multihop bench`` accepts, ``all`` last."""


def run(suite: str, out: str | os.PathLike[str], quick: bool, cores: list[int], routing: str,
        *, progress: Progress | None = None, every: int = TRACE_EVERY) -> Path:
    """Run `suite` (or ``all``) and write its trace under `out`; return the run directory.

    Runtimes are started as needed: one on `cores` with `routing` shared by
    the suites that need no special topology, and virtual-core runtimes for
    ``hops``, ``routing`` and ``resources``.  On ``KeyboardInterrupt`` (or any
    error) everything started is stopped and the cases finished so far are
    written before the exception propagates.

    Raises:
        ValueError: an unknown suite, or fewer than one core.
    """
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; available: {', '.join(SUITES)}")
    if not cores:
        raise ValueError("a benchmark needs at least one core")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"the trace sampling interval must be a positive integer, got {every!r}")
    chosen = list(_MODULES) if suite == "all" else [suite]
    progress = progress or Progress(suites=len(chosen))
    with TraceWriter(out, suite=suite) as writer, SuiteContext(writer, quick, progress, cores, routing, every) as ctx:
        try:
            for name in chosen:
                module = _MODULES[name]
                progress.suite(name, module.steps(quick))
                module.run(ctx)
        except KeyboardInterrupt:
            progress.message(f"interrupted: stopping; the cases finished so far go to {writer.run_dir}")
            raise
        finally:
            progress.close()
    return writer.run_dir
