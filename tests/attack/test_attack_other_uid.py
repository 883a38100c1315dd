"""Another uid against every path of a runtime (issue 18 §8, "what held").

A user made for the test (``useradd``, as root) tries every way in: the Python API, the C ABI,
raw frames on every monitor socket, the tool calls (status, shutdown, routing table), a forged
monitor link, the runtime lock (claim, removal), its files, signals. First against the runtime as
it is (directory mode 0700), then with its directory opened up to everyone: the monitors'
peer-credential check must refuse each attempt with a clear error, and the runtime must go on
unharmed (same monitors, channels still set up).

Where it cannot run: it needs root (to create the user and to drop to it). Run as another user,
it is skipped with that reason (it is never counted as passed). CI runs as root.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import multihop as mh
from session import unique_name

USER = "mh-attacker"
HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it creates a user with useradd and drops to its uid")


@pytest.fixture(scope="module")
def attacker() -> tuple[int, int]:
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        r = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], capture_output=True, text=True, timeout=60
        )
        if r.returncode != 0 and "already exists" not in r.stderr:
            pytest.fail(f"useradd {USER} failed: {r.stderr}")
        pw = pwd.getpwnam(USER)
    assert pw.pw_uid != 0
    return pw.pw_uid, pw.pw_gid


def _attack(rt: mh.Runtime, uid: int, gid: int) -> dict[str, Any]:
    from cdylib import ensure_cdylib

    env = {**os.environ, "MH_MONITOR_PIDS": ",".join(str(p) for p in rt.monitor_pids.values())}
    r = subprocess.run(
        [sys.executable, str(HERE / "other_uid_attacker.py"), str(uid), str(gid), rt.name, str(rt.dir), str(ensure_cdylib()), *map(str, rt.cores)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report: dict[str, Any] = json.loads(r.stdout)
    return report


def _unharmed(rt: mh.Runtime, pids: dict[int, int], name: str) -> None:
    assert rt.alive and rt.monitor_pids == pids
    st = rt.status(limit=0)
    assert st["live"] and all("error" not in m for m in st["monitors"])
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
        svc = srv.export(name)
        for transport in ("ump", "multihop"):
            ch = cli.bind(name, transport=transport, timeout=10)
            ch.send(b"still ours")
            assert svc.accept(timeout=10).recv(timeout=10) == b"still ours"


def _all_refused(report: dict[str, Any]) -> None:
    allowed = {k: v for k, v in report.items() if v[0] != "refused"}
    assert not allowed, f"another uid got through: {allowed}"
    for what, (_, kind, msg) in report.items():
        assert msg.strip(), f"{what}: refused without saying why ({kind})"


def test_another_uid_is_refused_everywhere(attacker: tuple[int, int]) -> None:
    uid, gid = attacker
    rt = mh.Runtime.start(unique_name("uid"), cores=[0, 1])
    try:
        pids = rt.monitor_pids
        report = _attack(rt, uid, gid)
        _all_refused(report)
        assert "belongs to uid" in report["Runtime.attach"][2]
        _unharmed(rt, pids, "closed-dir")

        # Open the directory (and its root) to everyone: now only the monitors' checks stand.
        root = rt.dir.parent
        modes = {p: stat.S_IMODE(p.stat().st_mode) for p in (root, rt.dir)}
        try:
            for p in modes:
                p.chmod(0o777)
            for core in rt.cores:
                (rt.dir / f"mon-{core}.sock").chmod(0o777)
            report = _attack(rt, uid, gid)
        finally:
            for p, m in modes.items():
                p.chmod(m)
        _all_refused(report)
        for core in rt.cores:
            for what in (
                f"Dispatcher.attach core {core}",
                f"monitor_status core {core}",
                f"monitor_shutdown core {core}",
                f"forged monitor link core {core}",
                f"raw frames core {core}",
            ):
                assert "may not attach to a runtime of uid" in report[what][2], (what, report[what])
        assert "ermission denied" in report["read runtime.json"][2]
        refused = sum(m["refused_peers"] for m in rt.status(limit=0)["monitors"])
        assert refused >= 5 * len(rt.cores), "the monitors counted the refused peers"
        _unharmed(rt, pids, "open-dir")
    finally:
        rt.stop()
    assert not rt.dir.exists()


def test_a_monitor_that_cannot_start_its_forwarding_thread_exits_saying_why(attacker: tuple[int, int]) -> None:
    """Issue 18 §7: before the fix the spawn's failure was ignored and the monitor ran with no
    data plane (it never exited: this would time out)."""
    import shutil
    import tempfile

    uid, gid = attacker
    root = Path(tempfile.mkdtemp(prefix="mh-nothreads-"))  # under /tmp: the user can reach it
    try:
        os.chown(root, uid, gid)
        rdir = root / "nothreads"
        r = subprocess.run(
            [sys.executable, str(HERE / "monitor_without_threads.py"), str(uid), str(gid), str(rdir)], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert "cannot start the monitor's forward thread" in r.stderr, r.stderr
        assert not rdir.exists(), "the monitor cleaned up on its way out"
    finally:
        shutil.rmtree(root, ignore_errors=True)
