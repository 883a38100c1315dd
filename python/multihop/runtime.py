"""Runtime: start, attach to, inspect and stop a named runtime.

A runtime is one monitor process per core (``python -m multihop.monitor``),
each pinned to a real CPU (virtual cores beyond the machine's are pinned
modulo the real ones), plus a directory of mode 0700 with their sockets.
The machine's CPUs are those the process may be scheduled on, its cgroup's
cpuset (:func:`multihop.topology.machine_cpus`), not the starting thread's
affinity mask: a program pinned to one CPU still gets one CPU per monitor.
When cores must share a CPU, ``start`` warns (RuntimeWarning, naming them)
and ``status()`` says so (``shared_cpus``).
The first core's monitor is the *initial* monitor: it keeps the name
registry.

A runtime started by a program lives as long as that program (the monitors
watch it through a pidfd) unless started with ``detached=True``, as
``multihop up`` does; a detached runtime lives until ``stop()`` /
``multihop down``.

Liveness is a lock, never a status request: the starter takes an exclusive
``flock`` on ``<dir>/lock`` and passes that very open file to every monitor,
which holds it for its whole life (``core-rs/base/src/liveness.rs``).  A runtime
is live while the lock is held; ``start`` of a live name raises
RuntimeExists, ``attach`` of a name that is not live raises RuntimeNotFound,
and a directory is emptied or removed only by whoever holds the lock.
``stop`` kills a monitor only after checking it is the process it started
(its pidfd, and the start time recorded at spawn).
"""

from __future__ import annotations

import importlib
import json
import math
import numbers
import os
import select
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any, Sequence

from multihop import _core
from multihop.defaults import DEFAULT_TIMEOUT
from multihop.deprecation import warn_deprecated
from multihop.errors import MonitorError, RuntimeExists, RuntimeNotFound, Timeout
from multihop.fabric import Fabric, bridge_binary, start_bridge, stop_bridge
from multihop.paths import check_name, monitor_socket, runtime_dir
from multihop.rts import hand_off, links, routing_table
from multihop.topology import Topology, machine_cpus

__all__ = ["Runtime", "Dispatcher"]

Dispatcher = _core.Dispatcher

_META = "runtime.json"
# Largest core id (real or virtual) a runtime may use.
MAX_CORE = 65535
#: seconds Runtime.stop waits for a monitor it had to SIGKILL to be gone
KILLED_EXIT_WAIT = 30.0


def _cpu_for(core: int, cpus: Sequence[int]) -> int:
    """The real CPU a (possibly virtual) core's monitor is pinned to."""
    return core if core in cpus else cpus[core % len(cpus)]


def _shared_cpus(placement: dict[int, int]) -> dict[int, list[int]]:
    """CPU -> the cores whose monitors share it (only CPUs with two or more), from core -> CPU."""
    on: dict[int, list[int]] = {}
    for core, cpu in sorted(placement.items()):
        on.setdefault(cpu, []).append(core)
    return {cpu: cores for cpu, cores in sorted(on.items()) if len(cores) > 1}


def _say_shared(shared: dict[int, list[int]], ncpus: int, ncores: int) -> str:
    """One sentence naming which cores share which CPU."""
    parts = "; ".join(f"cores {', '.join(map(str, cores))} share CPU {cpu}" for cpu, cores in shared.items())
    return (
        f"{parts}: the machine (this process's cgroup cpuset) has {ncpus} CPU(s) for {ncores} core(s), so their "
        f"monitors take turns on a CPU, and messages between them wait for each other's turn"
    )


def _machine_topology(cores: Sequence[int], cpus: Sequence[int]) -> Topology:
    """The sysfs topology of `cores`; a virtual core joins the socket of the CPU it is pinned to."""
    machine = Topology.from_sysfs()
    sockets: dict[int, list[int]] = {}
    for core in cores:
        placed = core if core in machine else _cpu_for(core, cpus)
        index = machine.socket_of(placed) if placed in machine else 0
        sockets.setdefault(index, []).append(core)
    return Topology([sockets[i] for i in sorted(sockets)])


def _start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot, /proc/PID/stat field 22), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    if fields[0] in (b"Z", b"X"):  # exited, not reaped yet
        return None
    return int(fields[19])


def _is_process(pid: int, start: int | None) -> bool:
    """Whether `pid` is running and is the process that started at `start` (not a reused pid)."""
    now = _start_ticks(pid)
    return now is not None and (start is None or now == start)


def _kill_verified(pid: int, start: int | None, wait: float = 5.0) -> bool:
    """SIGKILL process `pid` only if it is still the one that started at `start`.

    The pidfd is opened before the check, so the signal can only reach the
    process that was checked (a pid reused after the check would give a
    pidfd of an exited process, and the kill fails harmlessly). Returns
    whether a process was killed.
    """
    if start is None:
        return False  # no identity to check against: never kill blind
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        if _start_ticks(pid) != start:
            return False
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            return False
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(int(wait * 1000))  # readable once it has exited
        return True
    finally:
        os.close(fd)


def _check_cores(cores: Sequence[int]) -> list[int]:
    """`cores` as a list of distinct ints in 0..MAX_CORE, or ValueError/TypeError naming the bad one."""
    if isinstance(cores, (str, bytes)) or not hasattr(cores, "__iter__"):
        raise TypeError(f"cores must be a sequence of ints, got {type(cores).__name__} {cores!r}")
    out: list[int] = []
    for c in cores:
        if isinstance(c, bool) or not isinstance(c, numbers.Integral):
            raise TypeError(f"cores must be ints, got {type(c).__name__} {c!r}")
        if not 0 <= int(c) <= MAX_CORE:
            raise ValueError(f"core {int(c)} is out of range 0..{MAX_CORE}")
        out.append(int(c))
    if not out:
        raise ValueError("a runtime needs at least one core")
    if len(set(out)) != len(out):
        raise ValueError(f"cores must be distinct, got {out}")
    return out


def _check_core(core: object) -> int:
    """`core` as an int (TypeError for anything else, a bool included); whether the runtime has it is the caller's check."""
    if isinstance(core, bool) or not isinstance(core, numbers.Integral):
        raise TypeError(f"core must be an int, got {type(core).__name__} {core!r}")
    return int(core)


def _check_bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def _check_name_type(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"the runtime name must be a str, got {type(name).__name__} {name!r}")
    return name


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds, got {type(timeout).__name__} {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
    return float(timeout)


def _private_file(path: Path) -> int:
    """Open `path` for writing, created mode 0600 (nothing of a runtime is readable by others,
    even if its directory is opened up)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    with os.fdopen(_private_file(tmp), "w") as f:
        f.write(json.dumps(data, indent=2))
    os.replace(tmp, path)


class Runtime:
    """A named runtime: its monitors, directory and registry.

    Use :meth:`start` or :meth:`attach`; both return a context manager (a
    runtime this object started is stopped on exit).
    """

    def __init__(self, name: str, directory: Path, meta: dict[str, Any], procs: dict[int, subprocess.Popen[bytes]] | None) -> None:
        self.name = name
        self.dir = directory
        self._meta = meta
        self._procs = procs if procs is not None else {}
        self._owned = procs is not None
        self._stopped = False
        self._bridge: subprocess.Popen[bytes] | None = None

    # ---- construction -------------------------------------------------

    @classmethod
    def start(
        cls,
        name: str,
        cores: Sequence[int] | None = None,
        routing: str = "direct",
        topology: Topology | None = None,
        *,
        detached: bool = False,
        timeout: float = 15.0,
        fabric: Fabric | None = None,
    ) -> "Runtime":
        """Start runtime `name` with one monitor per core; returns when all are ready.

        With `fabric` (a :class:`multihop.Fabric`), the runtime joins that
        fabric: its bridge starts after the monitors (attached to the first
        core's) and stops with them; services exported with
        ``export(name, fabric=True)`` are reachable from the fabric's other
        runtimes as ``name@THIS_RUNTIME`` (docs/fabric.md).  Without the
        fabric extra (the ``multihop-bridge`` binary) nothing starts:
        ExtraMissing names it.

        `cores` defaults to the topology's cores (the machine's CPUs: those
        this process may be scheduled on, its cgroup's cpuset, whatever the
        calling thread's affinity).  Cores beyond the machine's are virtual:
        their monitors are pinned modulo the real CPUs, and ``start`` warns
        (RuntimeWarning) naming which cores share which CPU.  `topology` is a :class:`Topology` (declared, or None for
        the machine's from sysfs, where a virtual core joins the socket of the
        CPU it is pinned to).  `routing` is one of ``direct``, ``ring``,
        ``fat-tree``.  The routing-table set-up (:func:`multihop.rts.hand_off`)
        gives the whole table to the first core's monitor; the others fetch
        their rows from it as they boot.

        Raises:
            TypeError: `topology` is not a Topology, a core is not an int.
            ValueError: a bad name, core (0..MAX_CORE, distinct) or timeout.
            RoutingError: an unknown routing mode, or a core outside the topology.
            RuntimeExists: a live runtime has that name (its lock is held).
            MonitorError: a monitor (or the fabric's bridge) failed to start (the message has its log).
            ExtraMissing: `fabric` given without the fabric extra.

        Every argument is checked before anything starts.
        """
        check_name(_check_name_type(name))
        timeout = _check_timeout(timeout)
        _check_bool(detached, "detached")
        if fabric is not None and not isinstance(fabric, Fabric):
            raise TypeError(
                f"fabric must be a multihop.Fabric, e.g. Fabric('lab', listen=['tcp/10.213.0.1:7447']), or None; got {type(fabric).__name__} {fabric!r}"
            )
        bridge = bridge_binary() if fabric is not None else None
        if not isinstance(routing, str):
            raise TypeError(f"routing must be a str (direct, ring or fat-tree), got {type(routing).__name__} {routing!r}")
        if topology is not None and not isinstance(topology, Topology):
            raise TypeError(
                f"topology must be a multihop.Topology, e.g. Topology(sockets=[[0, 1], [2, 3]]), or None; got {type(topology).__name__} {topology!r}"
            )
        cpus = machine_cpus()  # what the process may run on, not this thread's affinity mask
        if cores is None:
            cores = list(topology.cores) if topology is not None else cpus
        cores = _check_cores(cores)
        if topology is None:
            topology = _machine_topology(cores, cpus)
        table = routing_table(topology, routing, cores)  # validates cores against the topology
        shared = _shared_cpus({core: _cpu_for(core, cpus) for core in cores})
        if shared:
            warnings.warn(_say_shared(shared, len(cpus), len(cores)), RuntimeWarning, stacklevel=2)

        directory = runtime_dir(name)
        try:
            # Creates the directory (0700), locks it, empties a dead runtime's leftovers.
            lock_fd = _core.runtime_claim(str(directory))
        except RuntimeExists:
            raise RuntimeExists(
                f"runtime {name!r} is already running or starting (its monitors hold {directory / 'lock'}); "
                f"attach to it, or stop it first (multihop down {name})"
            ) from None

        meta: dict[str, Any] = {
            "name": name,
            "cores": cores,
            "routing": routing,
            "topology": topology.to_dict(),
            "table": {str(s): {str(d): n for d, n in row.items()} for s, row in table.items()},
            "owner_pid": None if detached else os.getpid(),
            "detached": detached,
            "created": time.time(),
            "ready": False,
            "monitors": [],
            "fabric": fabric.to_dict() if fabric is not None else None,
            "bridge": None,
        }
        procs: dict[int, subprocess.Popen[bytes]] = {}
        rt = cls(name, directory, meta, procs)
        try:
            _write_json(directory / _META, meta)
            # The initial monitor first: the RTS hands it the whole table, and
            # every later monitor fetches its own row from it when it boots.
            rt._spawn(cores[0], cores[0], _cpu_for(cores[0], cpus), detached, lock_fd)
            rt._wait_ready([cores[0]], timeout)
            hand_off(monitor_socket(directory, cores[0]), table, timeout=timeout)
            for core in cores[1:]:
                rt._spawn(core, cores[0], _cpu_for(core, cpus), detached, lock_fd)
            os.close(lock_fd)  # the monitors hold the lock now
            lock_fd = -1
            rt._wait_ready(cores[1:], timeout)
            rt._wait_links(table, timeout)
            if fabric is not None and bridge is not None:
                rt._bridge = start_bridge(fabric, bridge, name, directory, cores[0], timeout)
                meta["bridge"] = {"pid": rt._bridge.pid, "start_ticks": _start_ticks(rt._bridge.pid)}
            meta["ready"] = True
            _write_json(directory / _META, meta)
        except BaseException:
            if lock_fd >= 0:
                os.close(lock_fd)
            rt.stop(timeout=2.0)
            raise
        return rt

    def _spawn(self, core: int, initial: int, cpu: int, detached: bool, lock_fd: int) -> None:
        cmd = [
            sys.executable,
            "-m",
            "multihop.monitor",
            "--dir",
            str(self.dir),
            "--core",
            str(core),
            "--initial-core",
            str(initial),
            "--cpu",
            str(cpu),
            "--lock-fd",
            str(lock_fd),
        ]
        if not detached:
            cmd += ["--owner-pid", str(os.getpid())]
        # Every monitor leads a session of its own (owned and detached alike):
        # with autogroup scheduling a session is a scheduling group, and the
        # monitor keeps its own group light (sched/session.rs) so its polling
        # gives way to every process on its CPU, whoever started them. Ctrl-C
        # at the terminal goes to the program, which stops an owned runtime's
        # monitors in order; a detached runtime outlives the terminal.
        with os.fdopen(_private_file(self.dir / f"mon-{core}.log"), "wb") as log:
            self._procs[core] = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True, pass_fds=(lock_fd,), start_new_session=True
            )
        pid = self._procs[core].pid
        # Our unreaped child: its pid cannot be reused while we read this.
        self._meta["monitors"].append({"core": core, "cpu": cpu, "pid": pid, "start_ticks": _start_ticks(pid)})
        _write_json(self.dir / _META, self._meta)

    def _wait_ready(self, cores: Sequence[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for core in cores:
            proc = self._procs[core]
            sock = monitor_socket(self.dir, core)
            while True:
                if proc.poll() is not None:
                    raise MonitorError(f"monitor for core {core} exited with {proc.returncode} at start:\n{self._log_tail(core)}")
                if sock.exists():
                    try:
                        _core.monitor_status(str(sock), timeout=1.0, limit=0)
                        break
                    except Exception:
                        pass
                if time.monotonic() > deadline:
                    raise MonitorError(f"monitor for core {core} not ready after {timeout} s:\n{self._log_tail(core)}")
                time.sleep(0.005)

    def _wait_links(self, table: dict[int, dict[int, int]], timeout: float) -> None:
        """Wait until every monitor-to-monitor link the table names is up."""
        deadline = time.monotonic() + timeout
        want = links(table)
        while True:
            up: set[tuple[int, int]] = set()
            for core in self.cores:
                # A monitor still starting on a loaded machine may take a while to answer: it gets what is left
                # of the start's deadline (a fixed 2 s per question failed starts under a load of 25 on 2 CPUs).
                left = max(0.1, deadline - time.monotonic())
                try:
                    st = _core.monitor_status(str(monitor_socket(self.dir, core)), timeout=left, limit=0)
                except Timeout:
                    raise Timeout(f"monitor of core {core} did not answer within {timeout} s of the start") from None
                up |= {(min(core, p), max(core, p)) for p in st["monitor_links_up"]}
            if want <= up:
                return
            if time.monotonic() > deadline:
                raise MonitorError(f"monitor links not up after {timeout} s: missing {sorted(want - up)}")
            time.sleep(0.01)

    def _log_tail(self, core: int, lines: int = 20) -> str:
        try:
            text = (self.dir / f"mon-{core}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    @classmethod
    def attach(cls, name: str, *, timeout: float = DEFAULT_TIMEOUT) -> "Runtime":
        """Attach to a running runtime of this user. Raises RuntimeNotFound.

        A runtime is running while its monitors hold its lock, whatever its
        monitors answer (a busy one, or one with 100,000 channels, is still
        running). One that is still starting is waited for, at most
        `timeout` seconds.
        """
        check_name(_check_name_type(name))
        timeout = _check_timeout(timeout)
        directory = runtime_dir(name)
        deadline = time.monotonic() + timeout
        while True:
            state = _core.runtime_state(str(directory))
            if state == "absent":
                raise RuntimeNotFound(f"no runtime named {name!r} (looked for {directory}); start one with multihop up {name}")
            if state == "stale":
                raise RuntimeNotFound(f"runtime {name!r} is not running (no monitor holds {directory / 'lock'}; the directory is stale)")
            try:
                meta = json.loads((directory / _META).read_text())
                if meta.get("ready"):
                    return cls(name, directory, meta, None)
            except (OSError, ValueError):
                pass  # being written
            if time.monotonic() > deadline:
                raise RuntimeNotFound(f"runtime {name!r} is live but did not finish starting within {timeout} s")
            time.sleep(0.01)

    # ---- use ----------------------------------------------------------

    @property
    def cores(self) -> list[int]:
        """The runtime's cores, in order (the first holds the registry)."""
        return list(self._meta["cores"])

    @property
    def routing(self) -> str:
        """The routing mode: direct, ring or fat-tree."""
        return str(self._meta["routing"])

    @property
    def topology(self) -> Topology:
        """The (possibly virtual) topology the routing tables were built for."""
        return Topology.from_dict(self._meta["topology"])

    @property
    def monitor_pids(self) -> dict[int, int]:
        """core -> monitor pid."""
        return {m["core"]: m["pid"] for m in self._meta["monitors"]}

    def cpu_of(self, core: int) -> int:
        """The real CPU the monitor of `core` is pinned to (TypeError if `core` is not an int, ValueError if not the runtime's)."""
        core = _check_core(core)
        for m in self._meta["monitors"]:
            if m["core"] == core:
                return int(m["cpu"])
        raise ValueError(f"core {core} is not part of runtime {self.name!r}; its cores are {self.cores}")

    def dispatcher(self, core: int, *, pin: bool = False) -> _core.Dispatcher:
        """Attach this process to the monitor of `core` (a context manager).

        With ``pin=True`` the calling thread is also pinned to that core's CPU.
        TypeError if `core` is not an int or `pin` not a bool; ValueError if
        `core` is not one of the runtime's.
        """
        _check_bool(pin, "pin")
        cpu = self.cpu_of(core)
        d = _core.Dispatcher.attach(str(self.dir), core)
        if pin:
            os.sched_setaffinity(0, {cpu})
        return d

    @property
    def routing_table(self) -> dict[int, dict[int, int]]:
        """The routing table the monitors were given: source core -> {destination core: next-hop core}."""
        return {int(s): {int(d): int(n) for d, n in row.items()} for s, row in self._meta["table"].items()}

    def monitor_running(self, core: int) -> bool:
        """Whether the monitor process of `core` is still running, and is the one started (its pid and start time)."""
        core = _check_core(core)
        for m in self._meta["monitors"]:
            if m["core"] == core:
                return _is_process(m["pid"], m.get("start_ticks"))
        raise ValueError(f"core {core} is not part of runtime {self.name!r}; its cores are {self.cores}")

    def monitor_group(self, core: int, body: str, timeout: float = 10.0) -> str:
        """Send the monitor of `core` one multicast-group table request and return its reply (JSON text both ways).

        The monitors' group tables (fan-out entries per view, the credits per tree edge, the closing marks
        of a dead member) are installed and read through this call by the groups application's service
        (:mod:`multihop.groups.gsd`, ``docs/groups.md`` §5). Raises MonitorError if the monitor refuses.
        """
        core = _check_core(core)
        if core not in self.cores:
            raise ValueError(f"core {core} is not part of runtime {self.name!r}; its cores are {self.cores}")
        return _core.monitor_group(str(monitor_socket(self.dir, core)), body, _check_timeout(timeout))

    def group(self, name: str, order: str = "fifo", tree: str = "numa", **kwargs: Any) -> Any:
        """Deprecated (goes in the next release): ``multihop.groups.group(rt, name, ...)``, which this calls.

        The core imports no application (``docs/architecture.md``); until this shim goes, it finds the groups
        application by its module name.
        """
        warn_deprecated("Runtime.group(name, ...) is deprecated: call multihop.groups.group(rt, name, ...) (the same function)")
        groups = importlib.import_module("multihop.groups.endpoint")
        return groups.group(self, name, order, tree, **kwargs)

    def status(self, limit: int | None = None, *, timeout: float = 10.0) -> dict[str, Any]:
        """A dict: name, directory, cores, routing, and each monitor's status.

        ``cpus`` maps each core (as a str) to the CPU its monitor is pinned to;
        ``shared_cpus`` maps each CPU that two or more cores' monitors share
        to those cores (empty when every monitor has a CPU of its own).

        Each monitor's lists (dispatchers, services, channels, registry) hold
        at most `limit` entries (None: all; the reply streams whatever its
        size); its ``counts`` are always whole. A monitor that does not answer
        within `timeout` seconds shows as ``{"core": c, "error": ...}``: that
        says nothing about liveness (``"live"``, :attr:`alive`).
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, numbers.Integral)):
            raise TypeError(f"limit must be an int >= 0 or None, got {type(limit).__name__} {limit!r}")
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be an int >= 0 or None (None: every entry), got {limit!r}")
        timeout = _check_timeout(timeout)
        monitors = []
        for core in self.cores:
            try:
                st = _core.monitor_status(str(monitor_socket(self.dir, core)), timeout=timeout, limit=limit)
            except Exception as e:
                st = {"core": core, "error": str(e)}
            monitors.append(st)
        placement = {m["core"]: int(m["cpu"]) for m in self._meta["monitors"]}
        return {
            "name": self.name,
            "dir": str(self.dir),
            "cores": self.cores,
            "cpus": {str(core): cpu for core, cpu in sorted(placement.items())},
            "shared_cpus": {str(cpu): cores for cpu, cores in _shared_cpus(placement).items()},
            "routing": self.routing,
            "detached": self._meta.get("detached", False),
            "owner_pid": self._meta.get("owner_pid"),
            "live": _core.runtime_state(str(self.dir)) == "live",
            "monitors": monitors,
        }

    @property
    def alive(self) -> bool:
        """Whether every monitor process is running (each checked against its start time)."""
        return not self._stopped and all(_is_process(m["pid"], m.get("start_ticks")) for m in self._meta["monitors"])

    def stop(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Stop every monitor and remove the runtime directory. Idempotent.

        Monitors are asked to shut down, then killed if they have not exited
        within `timeout` seconds, each only after checking that its pid is
        still the monitor that was started (pidfd and start time), never an
        unrelated process that reused the pid. The directory is removed once
        no monitor holds the runtime lock. Channels already bound keep
        working (no monitor is on a UMP channel's path) until their ends close.
        """
        timeout = _check_timeout(timeout)
        if self._stopped:
            return
        self._stopped = True
        self._stop_bridge(timeout)
        for core in self.cores:
            sock = monitor_socket(self.dir, core)
            if sock.exists():
                try:
                    _core.monitor_shutdown(str(sock), timeout=1.0)
                except Exception:
                    pass
        deadline = time.monotonic() + timeout
        for m in self._meta["monitors"]:
            proc = self._procs.get(m["core"])
            while True:
                done = proc.poll() is not None if proc is not None else not _is_process(m["pid"], m.get("start_ticks"))
                if done:
                    break
                if time.monotonic() > deadline:
                    if proc is not None:
                        proc.kill()  # our unreaped child: the pid cannot have been reused
                        try:
                            # A killed process exits once it gets a CPU to unwind on; a monitor polls
                            # at idle priority, so on a saturated machine that can take seconds.
                            proc.wait(timeout=KILLED_EXIT_WAIT)
                        except subprocess.TimeoutExpired:
                            pass  # it is dying; Popen reaps it later, and the lock keeps the directory until then
                    else:
                        _kill_verified(m["pid"], m.get("start_ticks"))
                    break
                time.sleep(0.005)
        try:
            _core.runtime_remove_if_unheld(str(self.dir))
        except MonitorError:
            pass

    def _stop_bridge(self, timeout: float) -> None:
        """The fabric's bridge goes first (SIGTERM: it withdraws its tokens, so peers learn at once)."""
        if self._bridge is not None:
            # It delivers what the channels sent for up to DRAIN (5 s), then withdraws its tokens.
            stop_bridge(self._bridge, max(timeout, 8.0))
            return
        b = self._meta.get("bridge")
        if not b:
            return
        pid, start = int(b["pid"]), b.get("start_ticks")
        if not _is_process(pid, start) or start is None:
            return
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        try:
            if _start_ticks(pid) == start:
                signal.pidfd_send_signal(fd, signal.SIGTERM)
        except ProcessLookupError:
            return
        finally:
            os.close(fd)
        deadline = time.monotonic() + max(timeout, 8.0)
        while _is_process(pid, start) and time.monotonic() < deadline:
            time.sleep(0.01)
        _kill_verified(pid, start)

    @property
    def fabric(self) -> Fabric | None:
        """The fabric this runtime joined (None: it is on this machine alone)."""
        f = self._meta.get("fabric")
        return Fabric(**f) if f else None

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self._owned:
            self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "running"
        return f"<Runtime {self.name!r} cores={self.cores} routing={self.routing} {state}>"
