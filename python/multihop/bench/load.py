"""What else ran while a case was measured: the machine's load, the CPU others used, the monitors' state.

A benchmark on a shared machine measures the machine as much as the code: on
the 2-vCPU VM this project is built on, other people's builds take one or
both CPUs for minutes.  So every repeat of a case records, in the trace's
load columns (:data:`multihop.bench.trace.LOAD_COLUMNS`):

``busy_cpu``
    CPUs busy machine-wide over the repeat, from the first line of
    ``/proc/stat`` (user + nice + system + irq + softirq; steal and idle not
    counted), divided by the wall time: 1.0 is one CPU's worth.
``own_cpu``
    CPUs used by the benchmark's own processes over the same window: this
    process and every live descendant (user + system time, and the time of
    the children they reaped), plus the processes named by ``pids`` (the
    monitors of an attached runtime), plus what this process's reaped
    children used (``os.times()``), so a server that exits inside the window
    is still counted.
``foreign_cpu``
    ``busy_cpu - own_cpu``, clamped at 0: the CPU everything else took.
``load1``
    the 1-minute load average when the repeat ends (a lagging average:
    ``foreign_cpu`` is the figure for the window itself).
``monitor_forwarded``, ``monitor_parks``, ``monitor_weight``
    with a runtime: the frames its monitors forwarded during the repeat, the
    times their forwarders parked on a doorbell (slept, so the next frame
    needed a wake-up), and their scheduling groups' weight at the start and
    the end (``light``: nice 19, the forwarder may poll; ``fair``: nice 0,
    it parks instead of polling, which a monitor does when something else
    starves it on its CPU; ``mixed``: anything else).  Parks per forwarded
    frame near 1 mean every hop paid a futex wake-up.

``load_window_s``
    how long the window of the CPU figures is.  The counters come from
    ``/proc`` in clock ticks (1/100 s): over a window of a few milliseconds
    (three binds) one tick would read as several CPUs.  So the CPU figures of
    a repeat shorter than :data:`MIN_WINDOW_S` are over the last
    :data:`MIN_WINDOW_S` up to its end, reaching back to an earlier snapshot
    (every probe keeps its snapshots): the load around the repeat, not one
    tick.  Over half a second the CPU figures are good to a few hundredths of
    a CPU.  The monitors' counters are exact and always over the repeat alone.

Nothing is sampled while a case runs: one snapshot when it starts, one when
it ends.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import psutil

__all__ = ["MIN_WINDOW_S", "LoadProbe", "LoadSample", "MonitorState", "Sampled", "monitor_state", "sampling"]

_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0

MIN_WINDOW_S = 0.5
"""The shortest window the CPU figures are computed over (see ``load_window_s`` above)."""

_CPUS = os.cpu_count() or 1


@dataclass(frozen=True)
class _Snap:
    """A snapshot of the CPU counters: when, the machine's busy seconds, the benchmark's own seconds."""

    t: float
    busy: float
    own: float
    key: tuple[int, ...]


_HISTORY: deque[_Snap] = deque(maxlen=512)
"""Recent snapshots of every probe, oldest first: where a short window reaches back to."""


def _reach_back(key: tuple[int, ...], start: _Snap, t_end: float) -> _Snap:
    """The snapshot a window ending at `t_end` starts from: `start`, or an earlier one of the same processes
    (the latest at least :data:`MIN_WINDOW_S` before `t_end`, else the oldest) when `start` is too recent."""
    if t_end - start.t >= MIN_WINDOW_S:
        return start
    same = [s for s in _HISTORY if s.key == key and s.t < start.t]
    if not same:
        return start
    enough = [s for s in same if t_end - s.t >= MIN_WINDOW_S]
    return enough[-1] if enough else same[0]


class _HasStatus(Protocol):
    """What :func:`monitor_state` needs of a runtime (a :class:`multihop.Runtime`)."""

    def status(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class MonitorState:
    """A runtime's monitors at one moment: forwarded frames, parks, and each one's scheduling weight."""

    forwarded: int
    parks: int
    weights: tuple[str, ...]


def monitor_state(runtime: _HasStatus) -> MonitorState | None:
    """The monitors' counters and weights from ``runtime.status()``, or None if it cannot be read."""
    try:
        monitors = runtime.status().get("monitors", [])
    except Exception:  # a monitor that does not answer: no state, the case still counts
        return None
    forwarded = parks = 0
    weights = []
    for m in monitors:
        data = m.get("data") or {}
        forwarded += int(data.get("forwarded", 0) or 0)
        parks += int(data.get("parks", 0) or 0)
        weight = ((data.get("sched_group") or {}).get("weight") or "").split(" ")[0]
        weights.append(weight or "unknown")
    return MonitorState(forwarded, parks, tuple(weights))


def _weight(before: MonitorState, after: MonitorState) -> str:
    seen = set(before.weights) | set(after.weights)
    return seen.pop() if len(seen) == 1 and seen <= {"light", "fair"} else "mixed"


def _machine_busy_s() -> float:
    """Seconds of CPU the machine spent busy since boot (all CPUs), from ``/proc/stat``."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = f.readline().split()
    # cpu user nice system idle iowait irq softirq steal guest guest_nice (guest is already in user)
    ticks = [int(x) for x in fields[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = ticks
    return (user + nice + system + irq + softirq) / _TICK


def _cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0))


def _own_s(extra: Iterable[int]) -> float:
    """CPU seconds used so far by this process, its live descendants, their reaped children and `extra`."""
    me = psutil.Process()
    procs = {me.pid: me}
    try:
        for child in me.children(recursive=True):
            procs.setdefault(child.pid, child)
    except psutil.Error:
        pass
    for pid in extra:
        if pid not in procs:
            try:
                procs[pid] = psutil.Process(pid)
            except psutil.Error:
                continue
    total = 0.0
    for p in procs.values():
        try:
            total += _cpu_s(p)
        except psutil.Error:
            continue  # gone meanwhile: if it was a child of ours, its time is in its reaper's children_* now
    return total


@dataclass
class LoadSample:
    """The load of one sampling window (see the module docstring for each figure)."""

    wall_s: float
    busy_cpu: float
    own_cpu: float
    foreign_cpu: float
    load1: float
    window_s: float = 0.0
    monitor_forwarded: int | None = None
    monitor_parks: int | None = None
    monitor_weight: str | None = None

    def columns(self) -> dict[str, Any]:
        """The trace's load columns (:data:`multihop.bench.trace.LOAD_COLUMNS`) of this sample."""
        return {
            "load1": self.load1,
            "busy_cpu": self.busy_cpu,
            "own_cpu": self.own_cpu,
            "foreign_cpu": self.foreign_cpu,
            "load_window_s": self.window_s,
            "monitor_forwarded": self.monitor_forwarded,
            "monitor_parks": self.monitor_parks,
            "monitor_weight": self.monitor_weight,
        }


@dataclass
class LoadProbe:
    """Snapshots at the start and the end of a window: :meth:`start`, then :meth:`stop` gives the sample.

    Args:
        runtime: the runtime whose monitors the case uses (their counters and weights), or None.
        pids: more processes that count as the benchmark's own (besides the runtime's monitors,
            which are this process's children when it started the runtime, and not otherwise).
        extra_cpu: a running total of CPU seconds used by processes of the benchmark that end
            inside the window without being this process's children (daemons): its change
            counts as own.
    """

    runtime: Any = None
    pids: tuple[int, ...] = ()
    extra_cpu: Callable[[], float] | None = None
    _start: _Snap | None = field(default=None, repr=False)
    _mon0: MonitorState | None = field(default=None, repr=False)

    def _extra(self) -> tuple[int, ...]:
        pids = tuple(self.pids)
        if self.runtime is not None:
            pids += tuple(int(p) for p in getattr(self.runtime, "monitor_pids", {}).values())
        return pids

    def _key(self) -> tuple[int, ...]:
        # Snapshots of other processes' sets, or with a running total of their own, are not comparable.
        return (-1,) if self.extra_cpu is not None else tuple(sorted(set(self._extra())))

    def _snap(self) -> _Snap:
        own = _own_s(self._extra()) + (self.extra_cpu() if self.extra_cpu else 0.0)
        snap = _Snap(time.monotonic(), _machine_busy_s(), own, self._key())
        _HISTORY.append(snap)
        return snap

    def start(self) -> None:
        """Take the first snapshot (monitors first: a status request is not part of the window's work)."""
        self._mon0 = monitor_state(self.runtime) if self.runtime is not None else None
        self._start = self._snap()

    def stop(self) -> LoadSample:
        """Take the second snapshot; return the window's load (CPU figures over at least :data:`MIN_WINDOW_S`)."""
        if self._start is None:
            raise RuntimeError("LoadProbe.stop() before start()")
        end = self._snap()
        mon1 = monitor_state(self.runtime) if self.runtime is not None else None
        begin = _reach_back(end.key, self._start, end.t)
        window = max(end.t - begin.t, 1e-9)
        busy = min(max(end.busy - begin.busy, 0.0) / window, float(_CPUS))
        own = max(end.own - begin.own, 0.0) / window
        wall = max(end.t - self._start.t, 1e-9)
        sample = LoadSample(wall, busy, own, max(busy - own, 0.0), os.getloadavg()[0], window)
        if self._mon0 is not None and mon1 is not None:
            sample.monitor_forwarded = max(mon1.forwarded - self._mon0.forwarded, 0)
            sample.monitor_parks = max(mon1.parks - self._mon0.parks, 0)
            sample.monitor_weight = _weight(self._mon0, mon1)
        return sample


@dataclass
class Sampled:
    """What :func:`sampling` yields: ``sample`` is set when the block ends."""

    sample: LoadSample | None = None

    def columns(self) -> dict[str, Any] | None:
        """The load columns of the sample, or None if the block has not ended."""
        return self.sample.columns() if self.sample is not None else None


@contextmanager
def sampling(runtime: Any = None, pids: Iterable[int] = (), extra_cpu: Callable[[], float] | None = None) -> Iterator[Sampled]:
    """Sample the load over the block: ``with sampling(rt) as s: ...``, then ``s.sample`` (see :class:`LoadProbe`)."""
    probe = LoadProbe(runtime, tuple(pids), extra_cpu)
    out = Sampled()
    probe.start()
    try:
        yield out
    finally:
        out.sample = probe.stop()
