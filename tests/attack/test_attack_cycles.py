"""Start/stop cycles counting what is left, and many channels checked for loss, duplication and order.

Issue 18 §8: "no growth over 200 start/stop cycles (fds, files, shared memory, processes)" and
"3,200,000 messages over 64 channels, 0 lost, duplicated or reordered" must keep holding. The
quick versions run here; ``benches/bench_attack.py`` runs 200 start/stop cycles, 50
``multihop up``/``down`` cycles and 64 channels x 50,000 messages.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import multihop as mh
import procs
from session import monitor_processes, unique_name

ROOT = Path(os.environ["MULTIHOP_RUNTIME_ROOT"])


def _snapshot() -> dict[str, object]:
    """What this process and the runtime root hold: descriptors, threads, children, files."""
    import psutil

    me = psutil.Process()
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": me.num_threads(),
        "children": sorted(c.pid for c in me.children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE),
        "monitors": sorted(p.pid for p in monitor_processes()),
        "files": sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*")) if ROOT.exists() else [],
        "shm": sorted(n for n in os.listdir("/dev/shm") if "multihop" in n) if os.path.isdir("/dev/shm") else [],
        "memfds": sum(1 for fd in os.listdir("/proc/self/fd") if "multihop" in _target(fd)),
    }


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _cycle(name: str, i: int) -> None:
    """Start a runtime, use one channel of each transport, stop it; every handle dropped on return."""
    with mh.Runtime.start(name, cores=[0, 1, 2]) as rt, rt.dispatcher(2) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("cycle")
        for transport in ("ump", "multihop"):
            ch = cli.bind("cycle", transport=transport, timeout=10)
            ch.send(b"%d" % i)
            assert svc.accept(timeout=10).recv(timeout=10) == b"%d" % i
            ch.close()
    assert not rt.dir.exists(), f"cycle {i}: {rt.dir} left behind"


def _settled() -> dict[str, object]:
    """The snapshot once dropped handles are collected and their threads have ended (bounded)."""
    import gc
    import time

    gc.collect()
    deadline = time.monotonic() + 5
    snap = _snapshot()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        again = _snapshot()
        if again == snap:
            break
        snap = again
    return snap


def test_start_use_stop_cycles_leave_nothing_behind() -> None:
    name = unique_name("cycle")
    _cycle(name, -1)  # imports, the process doorbell and thread pools settle first
    before = _settled()
    for i in range(15):
        _cycle(name, i)
    after = _settled()
    assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}


def test_multihop_up_and_down_cycles_leave_nothing_behind() -> None:
    cli = [sys.executable, "-m", "multihop.cli"]
    name = unique_name("updown")
    before = _snapshot()
    for _i in range(4):
        up = subprocess.run([*cli, "up", name, "--cores", "0-1"], capture_output=True, text=True, timeout=60)
        assert up.returncode == 0, up.stderr
        again = subprocess.run([*cli, "up", name, "--cores", "0-1"], capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and "RuntimeExists" in again.stderr, again.stderr
        down = subprocess.run([*cli, "down", name], capture_output=True, text=True, timeout=60)
        assert down.returncode == 0, down.stderr
        gone = subprocess.run([*cli, "down", name], capture_output=True, text=True, timeout=60)
        assert gone.returncode == 1 and "RuntimeNotFound" in gone.stderr, gone.stderr
    after = _snapshot()
    assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}


def test_many_multihop_channels_lose_duplicate_and_reorder_nothing() -> None:
    """16 channels x 5,000 messages each way between two processes, every message checked."""
    k, n = 16, 5_000
    name = unique_name("many")
    with mh.Runtime.start(name, cores=[0, 1]) as rt:
        ready, result, done = procs.CTX.Event(), procs.CTX.Queue(), procs.CTX.Barrier(2)
        with (
            procs.child(procs.mh_stream_peer, name, 1, "server", "streams", k, n, ready, result, done),
            procs.child(procs.mh_stream_peer, name, 0, "client", "streams", k, n, ready, result, done),
        ):
            got = dict((role, (sent, recvd)) for role, sent, recvd in (result.get(timeout=240), result.get(timeout=240)))
        for role in ("client", "server"):
            sent, recvd = got[role]
            assert sent == [n] * k and recvd == [n] * k, (role, sent, recvd)
        assert all(m["data"]["dropped"] == 0 for m in rt.status(limit=0)["monitors"])
