"""Process layouts: who started the runtime and the channel's ends, measured side by side.

How fast a channel through the monitors is must not depend on who started
whom, so the benchmarks run the same cases in each of these layouts (issue 17
section 1):

=================== ============================================ ==========================================
layout              runtime                                      endpoints
=================== ============================================ ==========================================
``same-session``    ``Runtime.start`` by this process            children of this process (its session)
``other-sessions``  ``Runtime.start`` by this process            each in a session of its own (``setsid``,
                                                                 as a supervisor or test harness starts them)
``detached``        ``multihop up`` (``detached=True``)          children of this process
``service-manager`` ``multihop up``                              daemons, as cron or a service manager starts
                                                                 them: double fork, ``setsid``, no controlling
                                                                 terminal, stdio on ``/dev/null``, cwd ``/``
=================== ============================================ ==========================================

Every case is two fresh processes (``python -m multihop.bench.layout_end``):
the server, then the client, each started the layout's way and pinned to its
core's CPU (client on the first core, server on the second). The baseline,
``multiprocessing`` Pipe (a socket pair), runs between two processes started
the same way in the same run.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import multihop as mh
from multihop.defaults import DEFAULT_WINDOW

__all__ = ["LAYOUTS", "Layout", "LayoutFigures", "LayoutRun", "layout", "measure"]


@dataclass(frozen=True)
class Layout:
    """One way of starting the runtime and the ends: `detached` runtime or not, and how ends start."""

    name: str
    detached: bool
    start: str  # "child", "setsid" or "daemon"
    what: str


LAYOUTS = (
    Layout("same-session", False, "child", "runtime owned by the bench, ends in its session"),
    Layout("other-sessions", False, "setsid", "runtime owned by the bench, each end in a session of its own"),
    Layout("detached", True, "child", "detached runtime (multihop up), ends in the bench's session"),
    Layout("service-manager", True, "daemon", "detached runtime, ends started as daemons (cron, service manager)"),
)
"""The layouts every figure is printed for, best-known first."""


def layout(name: str) -> Layout:
    """The layout called `name`. Raises ValueError naming the known ones."""
    for lay in LAYOUTS:
        if lay.name == name:
            return lay
    raise ValueError(f"unknown layout {name!r}; known: {', '.join(x.name for x in LAYOUTS)}")


def _daemonize_and_exec(argv: list[str]) -> None:
    """Become a daemon the classic way (as cron and service managers do), then exec `argv`."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()  # a new session: no controlling terminal
    if os.fork() > 0:
        os._exit(0)  # the daemon is not a session leader: it can never get a terminal back
    os.chdir("/")
    os.umask(0o022)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.execv(argv[0], argv)


class _End:
    """A started end: its report pipe and pid (a daemon's pid comes on the pipe)."""

    def __init__(self, read_fd: int, proc: subprocess.Popen[bytes]) -> None:
        self.fd = read_fd
        self.proc = proc
        self.pid: int | None = None
        self._buf = b""

    def line(self, deadline: float) -> str:
        """The next line the end reports; MonitorError if it exits or the deadline passes first."""
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise mh.MonitorError("a layout end did not report in time")
            r, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if r:
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    raise mh.MonitorError("a layout end exited without reporting")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def kill(self) -> float:
        """Kill the end if it still runs (its pid was verified when it reported it).

        Returns the CPU seconds a daemonized end used (read just before it is
        killed: nobody here reaps it, so its time would be lost), else 0.
        """
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        used = 0.0
        if self.pid is not None and self.pid != self.proc.pid and _holds(self.pid, self.fd):
            used = _cpu_s(self.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        os.close(self.fd)
        return used


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` used so far, or 0 if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


class LayoutRun:
    """A layout set up for a run: its runtime (started here, stopped by ``close``) and its cases.

    Use as a context manager. ``case(...)`` runs one server and one client the
    layout's way and returns the client's figure.  ``daemon_cpu_s`` adds up the
    CPU seconds of the ends that ran as daemons (not this process's children,
    so a load probe would count them as someone else's).
    """

    def __init__(self, lay: Layout, cores: tuple[int, int] = (0, 1), routing: str = "direct") -> None:
        self.layout = lay
        self.cores = cores
        name = f"layout-{lay.name}-{os.getpid()}"
        self.rt = mh.Runtime.start(name, cores=list(cores), routing=routing, detached=lay.detached)
        self._seq = 0
        self.daemon_cpu_s = 0.0

    def close(self) -> None:
        """Stop the runtime (owned or detached alike)."""
        self.rt.stop()

    def __enter__(self) -> LayoutRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, args: list[str], pass_fds: tuple[int, ...], env: dict[str, str] | None = None) -> _End:
        r, w = os.pipe()
        cmd = [sys.executable, "-m", "multihop.bench.layout_end", "--report", str(w), *args]
        how = self.layout.start
        if how == "daemon":
            code = "import sys; from multihop.bench.layouts import _daemonize_and_exec as d; d(sys.argv[1:])"
            cmd = [sys.executable, "-c", code, *cmd]
        proc = subprocess.Popen(
            cmd, pass_fds=(w, *pass_fds), stdin=subprocess.DEVNULL, start_new_session=(how == "setsid"), env={**os.environ, **(env or {})}
        )
        os.close(w)
        end = _End(r, proc)
        try:
            first = end.line(time.monotonic() + 60)
            if not first.startswith("pid "):
                raise mh.MonitorError(f"a layout end started badly: {first}")
            end.pid = int(first.split()[1])
        except BaseException:
            end.kill()
            raise
        return end

    def case(
        self,
        transport: str,
        work: str,
        n: int,
        size: int = 64,
        window: int = DEFAULT_WINDOW,
        timeout: float = 300.0,
        env: dict[str, str] | None = None,
    ) -> float:
        """Run one case (`transport` multihop, ump or pipe; `work` rtt, stream or batch); the client's figure.

        Round trips in microseconds (median), streams in messages per second.
        `env`: extra environment of both ends (``{"MULTIHOP_HOLD": "0"}``: the strict baseline).
        Raises MonitorError when an end fails or does not finish within `timeout`.
        """
        return float(self.case_result(transport, work, n, size, window, timeout, env)["value"])

    def case_result(
        self,
        transport: str,
        work: str,
        n: int,
        size: int = 64,
        window: int = DEFAULT_WINDOW,
        timeout: float = 300.0,
        env: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Like :meth:`case`, the client's whole report: ``value``, and for ``rtt`` ``send_ns`` / ``recv_ns``."""
        self._seq += 1
        service = f"layout-{self._seq}"
        common = ["--transport", transport, "--work", work, "--n", str(n), "--size", str(size), "--window", str(window)]
        srv_core, cli_core = self.cores[1], self.cores[0]
        pair: tuple[socket.socket, socket.socket] | None = None
        s_fds: tuple[int, ...]
        c_fds: tuple[int, ...]
        if transport == "pipe":
            pair = socket.socketpair()
            s_args = ["--pipe-fd", str(pair[0].fileno()), "--cpu", str(self.rt.cpu_of(srv_core))]
            c_args = ["--pipe-fd", str(pair[1].fileno()), "--cpu", str(self.rt.cpu_of(cli_core))]
            s_fds, c_fds = (pair[0].fileno(),), (pair[1].fileno(),)
        else:
            where = ["--runtime", self.rt.name, "--service", service]
            s_args, c_args = [*where, "--core", str(srv_core)], [*where, "--core", str(cli_core)]
            s_fds = c_fds = ()
        deadline = time.monotonic() + timeout
        ends: list[_End] = []
        try:
            server = self._start(["--role", "server", *common, *s_args], s_fds, env)
            ends.append(server)
            _expect_ready(server, deadline)
            client = self._start(["--role", "client", *common, *c_args], c_fds, env)
            ends.append(client)
            if pair is not None:
                for s in pair:
                    s.close()
                pair = None
            result = json.loads(client.line(deadline))
            if "error" in result:
                raise mh.MonitorError(f"layout {self.layout.name}: {transport} {work} client failed: {result['error']}")
            return dict(result)
        finally:
            if pair is not None:
                for s in pair:
                    s.close()
            for end in ends:
                self.daemon_cpu_s += end.kill()


def _holds(pid: int, read_fd: int) -> bool:
    """Whether process `pid` still holds the write end of our report pipe (so it is our end, not a reused pid)."""
    try:
        ino = os.fstat(read_fd).st_ino
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == f"pipe:[{ino}]":
                return True
    return False


def _expect_ready(end: _End, deadline: float) -> None:
    line = end.line(deadline)
    if line != "ready":
        raise mh.MonitorError(f"layout server failed: {line}")


@contextlib.contextmanager
def running(name: str, cores: tuple[int, int] = (0, 1)) -> Iterator[LayoutRun]:
    """`LayoutRun` of the layout called `name` for the block."""
    with LayoutRun(layout(name), cores) as run:
        yield run


@dataclass(frozen=True)
class LayoutFigures:
    """One layout's figures, with Pipe between ends started the same way in the same run."""

    layout: str
    rtt_us: float
    pipe_rtt_us: float
    stream: float
    pipe_stream: float
    batch: float

    def line(self) -> str:
        """One printed row: ours, Pipe's and the ratios (goals: round trip <= 0.5x Pipe, stream >= 5x)."""
        return (
            f"  {self.layout:<16} rtt {self.rtt_us:7.1f} us ({self.rtt_us / self.pipe_rtt_us:5.2f}x Pipe {self.pipe_rtt_us:6.1f})"
            f"   one-way w16 {self.stream:11,.0f} msg/s ({self.stream / self.pipe_stream:5.2f}x Pipe {self.pipe_stream:9,.0f})"
            f"   batches of 16 {self.batch:11,.0f} msg/s ({self.batch / self.pipe_stream:5.2f}x)"
        )


def measure(name: str, n_rtt: int, n_stream: int, repeat: int = 1) -> LayoutFigures:
    """Median figures of layout `name`: multi-hop round trip, stream and batches against Pipe's, `repeat` runs."""
    import statistics

    with running(name) as run:

        def med(transport: str, work: str, n: int) -> float:
            return statistics.median(run.case(transport, work, n) for _ in range(repeat))

        return LayoutFigures(
            name,
            med("multihop", "rtt", n_rtt),
            med("pipe", "rtt", n_rtt),
            med("multihop", "stream", n_stream),
            med("pipe", "stream", n_stream),
            med("multihop", "batch", n_stream),
        )
