"""A dispatch domain's peers as processes: start them, add, kill or retire one, stop them all.

>>> with mh.Runtime.start("news", cores=[0, 1]) as rt:           # doctest: +SKIP
...     with news.start("news", peers=3) as system:
...         system.peers                       # PeerProcess: id, pid, core
...         system.kill(system.peers[0])       # SIGKILL: the others take over
...         system.add_peer()                  # joins while news flow
...         system.status()                    # every peer's status

A system started by a program stops when the program exits (its peers watch
it), unless ``detached=True`` (what ``multihop news up`` does).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Sequence

import multihop as mh
from multihop.defaults import DEFAULT_TIMEOUT
from multihop.news.admin import peer_status, shutdown_peer
from multihop.news.config import PeerConfig
from multihop.news.errors import DispatchError
from multihop.news.ids import Nid, hex_id, new_identity
from multihop.news.naming import DEFAULT_SYSTEM, check_system, listed_peers, peer_dir
from multihop.news.peer_process import SECRET_ENV

__all__ = ["System", "PeerProcess", "start"]


@dataclass
class PeerProcess:
    """One peer process of a system."""

    id: Nid
    core: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """Whether the process runs."""
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The end of the peer's log."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class System:
    """The peers of one dispatch system on one runtime (see the module docstring)."""

    def __init__(
        self,
        runtime: str,
        system: str = DEFAULT_SYSTEM,
        config: PeerConfig | None = None,
        *,
        transport: str = "ump",
        detached: bool = False,
        cores: Sequence[int] | None = None,
    ) -> None:
        self.runtime = mh.Runtime.attach(runtime)
        self.system = check_system(system)
        self.config = config or PeerConfig()
        self.transport = transport
        self.detached = detached
        self.cores = list(cores) if cores is not None else self.runtime.cores
        self.peers: list[PeerProcess] = []
        self._next_core = 0

    def add_peer(self, core: int | None = None, timeout: float = 15.0, wait_active: bool = True) -> PeerProcess:
        """Start one more peer (it joins the others) and wait until it is active.

        Raises DispatchError with the peer's log if it exits or is not active in time.
        """
        if core is None:
            core = self.cores[self._next_core % len(self.cores)]
            self._next_core += 1
        me, secret = new_identity("peer")
        logdir = peer_dir(self.runtime, self.system, "log")
        logdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        log = logdir / f"{hex_id(me)}.log"
        cmd = [
            sys.executable,
            "-m",
            "multihop.news.peer_process",
            "--runtime",
            self.runtime.name,
            "--system",
            self.system,
            "--core",
            str(core),
            "--id",
            hex_id(me),
            "--config",
            json.dumps(self.config.to_dict()),
            "--transport",
            self.transport,
        ]
        if not self.detached:
            cmd += ["--owner-pid", str(os.getpid())]
        session: dict[str, Any] = {"start_new_session": True} if self.detached else {"process_group": 0}
        env = dict(os.environ, **{SECRET_ENV: secret.hex()})  # the peer's proof of its id: not on its command line
        with open(log, "ab") as logf:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=logf, close_fds=True, env=env, **session)
        peer = PeerProcess(me, core, proc, log)
        self.peers.append(peer)
        try:
            self._wait_ready(peer, timeout)
            if wait_active:
                self.wait_active(peer, timeout)
        except BaseException:
            self.kill(peer)
            raise
        return peer

    def _wait_ready(self, peer: PeerProcess, timeout: float) -> None:
        assert peer.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(peer.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if peer.proc.poll() is not None:
                    raise DispatchError(f"peer exited with {peer.proc.returncode} at start:\n{peer.log_tail()}")
                if left <= 0:
                    raise DispatchError(f"peer not ready after {timeout} s:\n{peer.log_tail()}")
                if sel.select(min(left, 0.1)):
                    line = peer.proc.stdout.readline()
                    if line.startswith(b"ready"):
                        return
        finally:
            sel.close()

    def wait_active(self, peer: PeerProcess, timeout: float = 15.0) -> None:
        """Wait until ``peer`` serves partitions (its snapshot is in)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if peer_status(self.runtime, self.system, peer.id, timeout=2.0)["active"]:
                    return
            except mh.MultihopError:
                pass
            if not peer.alive:
                raise DispatchError(f"peer {hex_id(peer.id)} exited with {peer.proc.returncode}:\n{peer.log_tail()}")
            if time.monotonic() > deadline:
                raise DispatchError(f"peer {hex_id(peer.id)} not active after {timeout} s:\n{peer.log_tail()}")
            time.sleep(0.02)

    def kill(self, peer: PeerProcess, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (default SIGKILL) to a peer and reap it if it was a kill."""
        if peer.alive:
            try:
                os.kill(peer.pid, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGKILL:
            peer.proc.wait(timeout=10)
            if peer.proc.stdout is not None:
                peer.proc.stdout.close()

    def retire(self, peer: PeerProcess, timeout: float = 10.0) -> None:
        """Make a peer leave gracefully and wait for it to exit (killed if it does not in time)."""
        if peer.alive:
            try:
                shutdown_peer(self.runtime, self.system, peer.id, timeout=min(timeout, DEFAULT_TIMEOUT))
            except mh.MultihopError:
                os.kill(peer.pid, signal.SIGTERM)
            try:
                peer.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill(peer)
        if peer.proc.stdout is not None:
            peer.proc.stdout.close()

    def status(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Each live peer's status by id (an ``error`` entry for one that does not answer)."""
        out: dict[str, Any] = {}
        for peer in self.peers:
            if not peer.alive:
                continue
            try:
                out[hex_id(peer.id)] = peer_status(self.runtime, self.system, peer.id, timeout)
            except (mh.MultihopError, OSError) as e:
                out[hex_id(peer.id)] = {"error": f"{type(e).__name__}: {e}"}
        return out

    @property
    def live(self) -> list[PeerProcess]:
        """The peers whose processes run."""
        return [p for p in self.peers if p.alive]

    def stop(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Stop every peer: SIGTERM (a graceful leave), then SIGKILL after ``timeout``."""
        for peer in self.live:
            try:
                os.kill(peer.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        for peer in self.peers:
            try:
                peer.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(peer)
            if peer.proc.stdout is not None:
                peer.proc.stdout.close()
        listed_peers(self.runtime, self.system)  # sweeps the entries of peers that did not remove theirs

    def __enter__(self) -> "System":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if not self.detached:
            self.stop()


def start(
    runtime: str,
    peers: int = 1,
    *,
    system: str = DEFAULT_SYSTEM,
    config: PeerConfig | None = None,
    transport: str = "ump",
    detached: bool = False,
    cores: Sequence[int] | None = None,
    timeout: float = 15.0,
) -> System:
    """Start ``peers`` dispatch peers of ``system`` on runtime ``runtime``, one after another; return the :class:`System`.

    Each is active (serving partitions) when this returns.  Peers are placed on
    ``cores`` (default: the runtime's) round-robin.  Raises ValueError for a bad
    count or system name, RuntimeNotFound, and DispatchError (with the peer's
    log) if a peer fails; peers started before the failure are stopped.
    """
    if isinstance(peers, bool) or not isinstance(peers, int) or not 1 <= peers <= 64:
        raise ValueError(f"peers must be an integer in 1..64, got {peers!r}")
    s = System(runtime, system, config, transport=transport, detached=detached, cores=cores)
    if listed_peers(s.runtime, s.system):
        raise DispatchError(f"dispatch system {system!r} already runs on runtime {runtime!r}; add peers to it with System.add_peer, or stop it first")
    try:
        for _ in range(peers):
            s.add_peer(timeout=timeout)
    except BaseException:
        s.stop()
        raise
    return s
