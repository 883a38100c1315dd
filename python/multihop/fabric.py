"""A runtime's fabric: runtimes on several machines joined over Eclipse Zenoh (docs/fabric.md).

:class:`Fabric` holds the settings a runtime joins a fabric with; ``Runtime.start(name, fabric=Fabric(...))``
starts the runtime's bridge (``multihop-bridge``, a Rust binary over the ``zenoh`` crate) after its monitors and
stops it with them.  Services exported with ``d.export(name, fabric=True)`` are bound from other runtimes as
``d.bind("name@RUNTIME", transport="multihop")``; a plain name stays local.  :func:`status` is the bridge's view
(peers, the services each exports, bridged channels with their counters), which ``multihop status`` shows.

The bridge binary is found, in order: ``$MULTIHOP_BRIDGE``; ``multihop-bridge`` on ``PATH`` or beside the
interpreter (what the ``fabric`` extra installs: the ``multihop-fabric`` wheel); the build of a source checkout (``target/bridge/multihop-bridge``, made by ``bash .ci/setup``).
A runtime started with a fabric and without any of them stops before starting anything, naming the extra.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multihop import _core
from multihop.defaults import DEFAULT_TIMEOUT
from multihop.errors import MonitorError
from multihop.extras import ExtraMissing, install_hint

__all__ = ["DEFAULT_LEASE", "Fabric", "add_arguments", "bridge_binary", "from_arguments", "status"]

DEFAULT_LEASE = 3.0
"""Seconds without a sign of life after which a peer runtime is dead (its channels closed within lease + 1 s)."""

#: The bridge's log in the runtime directory (its stdout and stderr).
BRIDGE_LOG = "bridge.log"

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_ENDPOINT = re.compile(r"^(tcp|tls)/[^\s]+:[0-9]{1,5}$")


def _endpoints(value: Sequence[str] | str, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    out = []
    for e in value:
        if not isinstance(e, str):
            raise TypeError(f"{what} must be endpoint strings like 'tcp/10.213.0.1:7447', got {type(e).__name__} {e!r}")
        if not _ENDPOINT.match(e):
            raise ValueError(f"{what}: {e!r} is not an endpoint: name it PROTOCOL/HOST:PORT with PROTOCOL tcp or tls, e.g. 'tcp/10.213.0.1:7447'")
        out.append(e)
    return tuple(out)


@dataclass(frozen=True)
class Fabric:
    """The fabric a runtime joins: its name, where its bridge listens and whom it connects to.

    ``listen`` and ``connect`` are Zenoh endpoints (``tcp/HOST:PORT``, or ``tls/HOST:PORT`` with the three
    certificate files); peers are found only through them (multicast scouting is off unless asked for).
    ``lease`` (seconds, default 3) bounds how long a dead peer goes unnoticed.  Every argument is checked here:
    TypeError or ValueError naming it.
    """

    name: str
    listen: Sequence[str] = field(default_factory=tuple)
    connect: Sequence[str] = field(default_factory=tuple)
    lease: float = DEFAULT_LEASE
    multicast_scouting: bool = False
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"fabric name must be 1-64 of A-Z a-z 0-9 _ . -, got {self.name!r}")
        object.__setattr__(self, "listen", _endpoints(self.listen, "listen"))
        object.__setattr__(self, "connect", _endpoints(self.connect, "connect"))
        if isinstance(self.lease, bool) or not isinstance(self.lease, (int, float)):
            raise TypeError(f"lease must be seconds (a number), got {type(self.lease).__name__} {self.lease!r}")
        if not 0.3 <= float(self.lease) <= 60:
            raise ValueError(f"lease must be from 0.3 to 60 seconds (the bridge's bounds), got {self.lease}")
        if not isinstance(self.multicast_scouting, bool):
            raise TypeError(f"multicast_scouting must be a bool, got {type(self.multicast_scouting).__name__}")
        tls = (self.tls_ca, self.tls_cert, self.tls_key)
        if any(t is not None for t in tls) and not all(isinstance(t, str) for t in tls):
            raise ValueError("tls_ca, tls_cert and tls_key go together (PEM file paths)")
        if any(e.startswith("tls/") for e in (*self.listen, *self.connect)) and self.tls_ca is None:
            raise ValueError("tls/ endpoints need tls_ca, tls_cert and tls_key")

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON-able data (kept in the runtime's metadata)."""
        return {
            "name": self.name,
            "listen": list(self.listen),
            "connect": list(self.connect),
            "lease": float(self.lease),
            "multicast_scouting": self.multicast_scouting,
            "tls_ca": self.tls_ca,
            "tls_cert": self.tls_cert,
            "tls_key": self.tls_key,
        }

    def bridge_command(self, binary: str, runtime: str, runtime_dir: Path, core: int) -> list[str]:
        """The command line of the bridge of runtime ``runtime`` (directory ``runtime_dir``, initial core ``core``)."""
        cmd = [binary, "--fabric", self.name, "--runtime", runtime, "--runtime-dir", str(runtime_dir), "--core", str(core)]
        for e in self.listen:
            cmd += ["--listen", e]
        for e in self.connect:
            cmd += ["--connect", e]
        cmd += ["--lease-ms", str(int(float(self.lease) * 1000))]
        if self.multicast_scouting:
            cmd.append("--multicast-scouting")
        if self.tls_ca is not None:
            cmd += ["--tls-ca", self.tls_ca, "--tls-cert", str(self.tls_cert), "--tls-key", str(self.tls_key)]
        return cmd


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The command line's fabric options (``multihop up``, ``multihop ges up``): --fabric, --listen, --connect, --lease."""
    p.add_argument(
        "--fabric",
        default=None,
        metavar="NAME",
        help="join fabric NAME: runtimes on other machines bind this one's exported services (docs/fabric.md)",
    )
    p.add_argument(
        "--listen", action="append", default=[], metavar="ENDPOINT", help="with --fabric: listen on ENDPOINT, e.g. tcp/10.213.0.1:7447 (repeatable)"
    )
    p.add_argument("--connect", action="append", default=[], metavar="ENDPOINT", help="with --fabric: connect to ENDPOINT (repeatable)")
    p.add_argument(
        "--lease",
        type=float,
        default=DEFAULT_LEASE,
        metavar="SECONDS",
        help=f"with --fabric: a silent peer is dead after this long (default: {DEFAULT_LEASE})",
    )


def from_arguments(a: argparse.Namespace, prog: str) -> Fabric | None:
    """The :class:`Fabric` the options of :func:`add_arguments` name (None without --fabric); SystemExit naming
    ``prog`` for --listen / --connect without --fabric."""
    if a.fabric is not None:
        return Fabric(a.fabric, listen=a.listen, connect=a.connect, lease=a.lease)
    if a.listen or a.connect:
        raise SystemExit(f"{prog}: --listen and --connect need --fabric NAME")
    return None


def bridge_binary() -> str:
    """The ``multihop-bridge`` binary to run (see the module's docstring); ExtraMissing naming the extra if none."""
    env = os.environ.get("MULTIHOP_BRIDGE")
    if env:
        if not os.access(env, os.X_OK):
            raise ExtraMissing(
                f"MULTIHOP_BRIDGE={env} is not an executable file; unset it to use the fabric extra's bridge ({install_hint('fabric')})"
            )
        return env
    found = shutil.which("multihop-bridge")
    if found:
        return found
    # The fabric extra's wheel puts it with the environment's scripts, next to the interpreter (a venv's bin/),
    # which need not be on PATH.
    beside = Path(sys.executable).parent / "multihop-bridge"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    here = Path(__file__).resolve()
    for up in here.parents[:4]:
        cand = up / "target" / "bridge" / "multihop-bridge"
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    raise ExtraMissing(
        "a runtime with a fabric needs the fabric extra (the multihop-bridge binary); none found "
        f"($MULTIHOP_BRIDGE unset, not on PATH, no source build). Install it with {install_hint('fabric')}, "
        "or build it in a checkout with: cargo build -p multihop-fabric --features zenoh --profile bridge"
    )


def start_bridge(fabric: Fabric, binary: str, runtime: str, runtime_dir: Path, core: int, timeout: float) -> subprocess.Popen[bytes]:
    """Start the runtime's bridge and wait until it serves its control socket; MonitorError with its log if not."""
    sock = runtime_dir / "fabric.sock"
    log_path = runtime_dir / BRIDGE_LOG
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(
            fabric.bridge_command(binary, runtime, runtime_dir, core),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            close_fds=True,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise MonitorError(f"the fabric bridge of runtime {runtime!r} exited with {proc.returncode} at start:\n{_tail(log_path)}")
        if sock.exists() and b'"ready"' in log_path.read_bytes():
            return proc
        if time.monotonic() > deadline:
            stop_bridge(proc, 1.0)
            raise MonitorError(f"the fabric bridge of runtime {runtime!r} not ready after {timeout} s:\n{_tail(log_path)}")
        time.sleep(0.01)


def stop_bridge(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM (it withdraws its tokens and closes its session), then SIGKILL after ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(timeout=DEFAULT_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def status(runtime_dir: str | os.PathLike[str], timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """The bridge's view of the runtime in ``runtime_dir``: peers, their services, bridged channels, counters.

    MonitorError when the runtime has no fabric.
    """
    return _core.fabric_status(str(runtime_dir), timeout)
