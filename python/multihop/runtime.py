"""Runtime: start, attach to, inspect and stop a named runtime.

A runtime is one monitor process per core (``python -m multihop.monitor``),
each pinned to a real CPU (virtual cores beyond the machine's are pinned
modulo the real ones), plus a directory of mode 0700 with their sockets.
The first core's monitor is the *initial* monitor: it keeps the name
registry.

A runtime started by a program lives as long as that program (the monitors
watch it through a pidfd) unless started with ``detached=True``, as
``multihop up`` does; a detached runtime lives until ``stop()`` /
``multihop down``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Sequence

import psutil

from multihop import _core
from multihop.errors import MonitorError, RuntimeExists, RuntimeNotFound
from multihop.paths import check_name, monitor_socket, runtime_dir
from multihop.rts import hand_off, links, routing_table
from multihop.topology import Topology

__all__ = ["Runtime", "Dispatcher"]

Dispatcher = _core.Dispatcher

_META = "runtime.json"


def _real_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def _cpu_for(core: int, cpus: Sequence[int]) -> int:
    """The real CPU a (possibly virtual) core's monitor is pinned to."""
    return core if core in cpus else cpus[core % len(cpus)]


def _machine_topology(cores: Sequence[int], cpus: Sequence[int]) -> Topology:
    """The sysfs topology of `cores`; a virtual core joins the socket of the CPU it is pinned to."""
    machine = Topology.from_sysfs()
    sockets: dict[int, list[int]] = {}
    for core in cores:
        placed = core if core in machine else _cpu_for(core, cpus)
        index = machine.socket_of(placed) if placed in machine else 0
        sockets.setdefault(index, []).append(core)
    return Topology([sockets[i] for i in sorted(sockets)])


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
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
    ) -> "Runtime":
        """Start runtime `name` with one monitor per core; returns when all are ready.

        `cores` defaults to the topology's cores (the machine's CPUs).  Cores
        beyond the machine's are virtual: their monitors are pinned modulo the
        real CPUs.  `topology` is a :class:`Topology` (declared, or None for
        the machine's from sysfs, where a virtual core joins the socket of the
        CPU it is pinned to).  `routing` is one of ``direct``, ``ring``,
        ``fat-tree``.  The routing-table set-up (:func:`multihop.rts.hand_off`)
        gives the whole table to the first core's monitor; the others fetch
        their rows from it as they boot.

        Raises:
            TypeError: `topology` is not a Topology.
            RoutingError: an unknown routing mode, or a core outside the topology.
            RuntimeExists: a live runtime has that name.
            MonitorError: a monitor failed to start (the message has its log).
        """
        check_name(name)
        if topology is not None and not isinstance(topology, Topology):
            raise TypeError(
                f"topology must be a multihop.Topology, e.g. Topology(sockets=[[0, 1], [2, 3]]), or None; "
                f"got {type(topology).__name__} {topology!r}"
            )
        cpus = _real_cpus()
        if cores is None:
            cores = list(topology.cores) if topology is not None else cpus
        cores = [int(c) for c in cores]
        if not cores:
            raise ValueError("a runtime needs at least one core")
        if len(set(cores)) != len(cores) or any(c < 0 for c in cores):
            raise ValueError(f"cores must be distinct non-negative integers, got {cores}")
        if topology is None:
            topology = _machine_topology(cores, cpus)
        table = routing_table(topology, routing, cores)  # validates cores against the topology

        directory = runtime_dir(name)
        if directory.exists():
            if cls._probe(directory) is not None:
                raise RuntimeExists(f"runtime {name!r} is already running (directory {directory})")
            shutil.rmtree(directory, ignore_errors=True)  # stale: its monitors are gone
        directory.mkdir(mode=0o700, parents=True)

        meta: dict[str, Any] = {
            "name": name,
            "cores": cores,
            "routing": routing,
            "topology": topology.to_dict(),
            "table": {str(s): {str(d): n for d, n in row.items()} for s, row in table.items()},
            "owner_pid": None if detached else os.getpid(),
            "detached": detached,
            "created": time.time(),
            "monitors": [],
        }
        procs: dict[int, subprocess.Popen[bytes]] = {}
        rt = cls(name, directory, meta, procs)
        try:
            # The initial monitor first: the RTS hands it the whole table, and
            # every later monitor fetches its own row from it when it boots.
            rt._spawn(cores[0], cores[0], _cpu_for(cores[0], cpus), detached)
            rt._wait_ready([cores[0]], timeout)
            hand_off(monitor_socket(directory, cores[0]), table, timeout=timeout)
            for core in cores[1:]:
                rt._spawn(core, cores[0], _cpu_for(core, cpus), detached)
            rt._wait_ready(cores[1:], timeout)
            rt._wait_links(table, timeout)
            _write_json(directory / _META, meta)
        except BaseException:
            rt.stop(timeout=2.0)
            raise
        return rt

    def _spawn(self, core: int, initial: int, cpu: int, detached: bool) -> None:
        cmd = [
            sys.executable, "-m", "multihop.monitor",
            "--dir", str(self.dir), "--core", str(core),
            "--initial-core", str(initial), "--cpu", str(cpu),
        ]
        if not detached:
            cmd += ["--owner-pid", str(os.getpid())]
        # An owned runtime's monitors get their own process group (Ctrl-C at
        # the terminal goes to the program, which stops them in order) but stay
        # in its session: with autogroup scheduling a session is a scheduling
        # group, and a monitor polling at SCHED_IDLE yields the CPU only to
        # threads of its own group. A detached runtime is a daemon: its own
        # session, so it outlives the terminal.
        session = {"start_new_session": True} if detached else {"process_group": 0}
        with open(self.dir / f"mon-{core}.log", "wb") as log:
            self._procs[core] = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True, **session
            )
        self._meta["monitors"].append({"core": core, "cpu": cpu, "pid": self._procs[core].pid})

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
                        _core.monitor_status(str(sock), timeout=1.0)
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
                st = _core.monitor_status(str(monitor_socket(self.dir, core)), timeout=2.0)
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

    @staticmethod
    def _probe(directory: Path) -> dict[str, Any] | None:
        """The metadata of a live runtime in `directory`, or None if it is stale."""
        try:
            meta = json.loads((directory / _META).read_text())
            first = meta["cores"][0]
            _core.monitor_status(str(monitor_socket(directory, first)), timeout=2.0)
            return meta
        except Exception:
            return None

    @classmethod
    def attach(cls, name: str) -> "Runtime":
        """Attach to a running runtime of this user. Raises RuntimeNotFound."""
        directory = runtime_dir(name)
        if not directory.is_dir():
            raise RuntimeNotFound(f"no runtime named {name!r} (looked for {directory}); start one with multihop up {name}")
        meta = cls._probe(directory)
        if meta is None:
            raise RuntimeNotFound(f"runtime {name!r} is not running (its directory {directory} is stale)")
        return cls(name, directory, meta, None)

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
        """The real CPU the monitor of `core` is pinned to."""
        for m in self._meta["monitors"]:
            if m["core"] == core:
                return int(m["cpu"])
        raise ValueError(f"core {core} is not part of runtime {self.name!r}; its cores are {self.cores}")

    def dispatcher(self, core: int, *, pin: bool = False) -> _core.Dispatcher:
        """Attach this process to the monitor of `core` (a context manager).

        With ``pin=True`` the calling thread is also pinned to that core's CPU.
        """
        cpu = self.cpu_of(core)
        d = _core.Dispatcher.attach(str(self.dir), core)
        if pin:
            os.sched_setaffinity(0, {cpu})
        return d

    def status(self) -> dict[str, Any]:
        """A dict: name, directory, cores, routing, and each monitor's status."""
        monitors = []
        for core in self.cores:
            try:
                st = _core.monitor_status(str(monitor_socket(self.dir, core)), timeout=2.0)
            except Exception as e:
                st = {"core": core, "error": str(e)}
            monitors.append(st)
        return {
            "name": self.name,
            "dir": str(self.dir),
            "cores": self.cores,
            "routing": self.routing,
            "detached": self._meta.get("detached", False),
            "owner_pid": self._meta.get("owner_pid"),
            "monitors": monitors,
        }

    @property
    def alive(self) -> bool:
        """Whether every monitor process is running."""
        return not self._stopped and all(_alive(p) for p in self.monitor_pids.values())

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every monitor and remove the runtime directory. Idempotent.

        Monitors are asked to shut down, then killed if they have not exited
        within `timeout` seconds.  Channels already bound keep working (no
        monitor is on a UMP channel's path) until their ends close.
        """
        if self._stopped:
            return
        self._stopped = True
        pids = self.monitor_pids
        for core in self.cores:
            sock = monitor_socket(self.dir, core)
            if sock.exists():
                try:
                    _core.monitor_shutdown(str(sock), timeout=1.0)
                except Exception:
                    pass
        deadline = time.monotonic() + timeout
        for core, pid in pids.items():
            proc = self._procs.get(core)
            while True:
                done = proc.poll() is not None if proc is not None else not _alive(pid)
                if done:
                    break
                if time.monotonic() > deadline:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    if proc is not None:
                        proc.wait(timeout=5)
                    break
                time.sleep(0.005)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self._owned:
            self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "running"
        return f"<Runtime {self.name!r} cores={self.cores} routing={self.routing} {state}>"
