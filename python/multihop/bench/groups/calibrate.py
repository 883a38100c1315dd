"""Calibration: measure a live runtime's message costs per core pair and store them as a machine model.

:func:`calibrate` starts one agent process per core (:mod:`multihop.bench.groups.agent`,
pinned to the core's CPU, attached to the core's monitor), and has each agent
measure, over the runtime's own channels (UMP by default, or multi-hop through
the monitors), every pair it is asked for:

* the round trip a -> b -> a: the median of ``rounds`` one-member
  shoot-downs, timed by the very loops the live shoot-down runs
  (:mod:`multihop.bench.groups.probe`);
* ``send(a, b)``: a's time per ``send`` of an 8-byte message while the ring
  has room (median of bursts), and ``recv(a, b)``: b's time per ``recv`` of a
  message already in its ring.  These split the round trip: when the four of
  them (both directions) add up to more than it (a call costs less inside a
  round trip than in a burst, where every receive is timed alone), they are
  scaled down to fit it;
* what is left of the round trip is split evenly into the two directions: the
  ``latency`` of a pair on two CPUs, or, for two virtual cores on one CPU,
  the cost of handing the CPU over (the model's ``switch``: that pair's
  latency is then 0, the simulator charges the switch).

So a one-member shoot-down predicted from the model is the calibrated round
trip; what the model adds is how the costs compose with many members.

Pairs not measured (``pairs="from"`` measures only those of one core) get the
median of the measured pairs of the same kind: same CPU, same socket, or
other socket.  The model's topology is the runtime's; ``cpu_of`` is where
its monitors are pinned.

The model is stored as TOML: by default per machine, where it outlives the
runtime (``multihop down`` removes the runtime's directory): at
:func:`stored_path` ``(name)``, ``<model dir>/<host>/<runtime name>/groups-model.toml``,
the model directory being ``$MULTIHOP_MODEL_DIR``, else
``$XDG_DATA_HOME/multihop/models``, else ``~/.local/share/multihop/models``
(:func:`model_dir`).  :func:`stored_model` reads it back when a runtime of that
name runs again (and, as before, a model left in the runtime's directory).  Or
at a path the user gives (loadable with :func:`~multihop.groups.model.load_model`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import multihop as mh
from multihop.bench.groups.agent import run_agent, service_name
from multihop.bench.peers import spawned
from multihop.groups.errors import ModelError
from multihop.groups.model import MachineModel
from multihop.groups.stored import MODEL_DIR_ENV, STORED_NAME, kept_path, model_dir, stored_model, stored_path

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event

__all__ = ["calibrate", "stored_model", "stored_path", "kept_path", "model_dir", "MODEL_DIR_ENV", "STORED_NAME", "Measured"]

Measured = dict[tuple[int, int], tuple[float, float, float]]
"""(a, b) -> (send ns, recv ns, round trip ns) as the agents measured them."""


def calibrate(
    rt: mh.Runtime,
    cores: Sequence[int] | None = None,
    *,
    pairs: str = "all",
    source: int | None = None,
    rounds: int = 300,
    bursts: int = 9,
    burst: int = 64,
    transport: str = "ump",
    out: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> MachineModel:
    """Measure ``rt``'s cores and return (and store) their machine model.

    Args:
        rt: a running runtime.
        cores: the cores to measure (default: all of the runtime's).
        pairs: ``"all"`` (every ordered pair) or ``"from"`` (only pairs to and
            from ``source``; the rest are filled by kind, see the module docstring).
        source: the core of ``pairs="from"`` (default: the first core).
        rounds, bursts, burst: how many round trips, and how many bursts of
            how many sends, per pair.
        transport: ``"ump"`` (direct rings: what a dispatcher-level tree
            costs) or ``"multihop"`` (through the monitors on the routing path).
        out: where to store the model (default: :func:`stored_path` of the runtime's name, which
            outlives the runtime).
        progress: called with a line per pair measured.

    Raises:
        ModelError: fewer than two cores, a core the runtime lacks, or an unknown ``pairs``.
    """
    chosen = list(rt.cores if cores is None else cores)
    if len(chosen) < 2 or len(set(chosen)) != len(chosen):
        raise ModelError(f"calibration needs two or more distinct cores, got {chosen}")
    missing = [c for c in chosen if c not in rt.cores]
    if missing:
        raise ModelError(f"cores {missing} are not in runtime {rt.name!r} (its cores: {rt.cores})")
    if pairs not in ("all", "from"):
        raise ModelError(f"pairs is 'all' or 'from', got {pairs!r}")
    if transport not in ("ump", "multihop"):
        raise ModelError(f"transport is 'ump' or 'multihop', got {transport!r}")
    src = chosen[0] if source is None else source
    if src not in chosen:
        raise ModelError(f"source core {src} is not among the calibrated cores {chosen}")
    wanted = [(a, b) for a in chosen for b in chosen if a != b and (pairs == "all" or src in (a, b))]
    measured = measure(rt, chosen, wanted, rounds=rounds, bursts=bursts, burst=burst, transport=transport, progress=progress)
    model = derive(rt, chosen, measured, transport)
    model.save(Path(out) if out is not None else kept_path(rt.name, STORED_NAME))
    return model


def measure(
    rt: mh.Runtime,
    cores: Sequence[int],
    wanted: Sequence[tuple[int, int]],
    *,
    rounds: int,
    bursts: int,
    burst: int,
    transport: str = "ump",
    progress: Callable[[str], None] | None = None,
    spin_us: int | None = None,
    one_way: bool = False,
    cpus: dict[int, int] | None = None,
) -> Measured:
    """Run the agents and measure each pair of ``wanted``, one at a time (nothing else runs meanwhile).

    ``spin_us``: how long the agents' receives spin before parking (default: the runtime's default).
    ``one_way``: run the one-way probe instead (each pair's third figure is then its median one-way ns,
    the first two 0).  ``cpus``: pin the agents of these cores to these CPUs instead of their cores' CPUs
    (two cores' agents on one CPU measure a hand-over on one CPU on any machine).
    """
    prefix = f"mh-calib-{os.getpid()}-{time.monotonic_ns()}"
    spread = len(os.sched_getaffinity(0)) > 1
    out: Measured = {}
    with contextlib.ExitStack() as stack:
        readies = []
        for core in cores:
            ready = _event()
            stack.enter_context(
                spawned(
                    run_agent,
                    rt.name,
                    core,
                    (cpus or {}).get(core, rt.cpu_of(core)) if spread else None,
                    prefix,
                    rounds,
                    bursts,
                    burst,
                    ready,
                    transport,
                    spin_us,
                    grace=10.0,
                )
            )
            readies.append(ready)
        for core, ready in zip(cores, readies, strict=True):
            if not ready.wait(60):
                raise mh.MonitorError(f"the calibration agent of core {core} did not start within 60 s")
        d = stack.enter_context(rt.dispatcher(cores[0]))
        control = {core: d.bind(service_name(prefix, core), transport="ump", timeout=30) for core in cores}
        try:
            for i, (a, b) in enumerate(wanted):
                control[b].send(b"S" + struct.pack("<I", a))  # b serves a, in its main thread
                control[a].send((b"W" if one_way else b"M") + struct.pack("<I", b))
                reply = control[a].recv(timeout=120)
                if control[b].recv(timeout=120) != b"s":
                    raise mh.ProtocolError(f"calibration agent of core {b} did not finish serving")
                out[(a, b)] = struct.unpack("<ddd", reply[1:25])
                if progress is not None:
                    s, r, t = out[(a, b)]
                    progress(f"[{i + 1}/{len(wanted)}] {a} -> {b}: send {s:.0f} ns, recv {r:.0f} ns, round trip {t:.0f} ns")
        finally:
            for ch in control.values():
                with contextlib.suppress(mh.MultihopError):
                    ch.send(b"Q")
                ch.close()
    return out


def _event() -> Event:
    """An Event the spawned agents can share."""
    import multiprocessing as mp

    return mp.get_context("spawn").Event()


def derive(rt: mh.Runtime, cores: Sequence[int], measured: Measured, transport: str = "ump") -> MachineModel:
    """The machine model of ``cores`` from the measured pairs (see the module docstring)."""
    topo = rt.topology.restrict(cores)
    cpu_of = {c: rt.cpu_of(c) for c in cores}

    def kind(a: int, b: int) -> str:
        if cpu_of[a] == cpu_of[b]:
            return "cpu"
        return "socket" if topo.socket_of(a) == topo.socket_of(b) else "remote"

    by_kind: dict[str, list[tuple[float, float, float]]] = {}
    for (a, b), v in measured.items():
        by_kind.setdefault(kind(a, b), []).append(v)
    every = list(measured.values())

    def get(a: int, b: int) -> tuple[float, float, float]:
        if (a, b) in measured:
            return measured[(a, b)]
        pool = by_kind.get(kind(a, b)) or every
        s, r, t = (statistics.median(v[i] for v in pool) for i in range(3))  # the pool's send, recv, latency
        return s, r, t

    order = topo.cores
    n = len(order)
    send = [[0.0] * n for _ in range(n)]
    recv = [[0.0] * n for _ in range(n)]
    lat = [[0.0] * n for _ in range(n)]
    switches = []
    for i, a in enumerate(order):
        for j, b in enumerate(order):
            if i == j:
                continue
            s_ab, r_ab, rtt_ab = get(a, b)
            s_ba, r_ba, rtt_ba = get(b, a)
            rtt = (rtt_ab + rtt_ba) / 2
            costs = s_ab + r_ab + s_ba + r_ba
            # the round trip is measured end to end; the burst figures only split it: when they add up
            # to more than it (a call costs less in a round trip than in a burst), they are scaled to fit
            fit = min(1.0, rtt / costs) if costs > 0 else 1.0
            send[i][j], recv[i][j] = s_ab * fit, r_ab * fit
            rest = max(0.0, (rtt - costs * fit) / 2)
            if cpu_of[a] == cpu_of[b]:
                switches.append(rest)
            else:
                lat[i][j] = rest
    description = (
        f"calibrated over {transport} channels on {socket.gethostname()} with runtime {rt.name!r} at "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {len(measured)} pairs measured, "
        f"{n * (n - 1) - len(measured)} filled by kind"
    )
    return MachineModel(
        "calibrated",
        topo,
        tuple(map(tuple, send)),
        tuple(map(tuple, recv)),
        tuple(map(tuple, lat)),
        cpu_of,
        statistics.median(switches) if switches else 0.0,
        description,
    )
