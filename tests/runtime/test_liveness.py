"""A live runtime is never taken over: liveness is the monitors' lock, status scales, stop kills only its own.

Issue 18 §1 and §7 (Runtime.stop after pid reuse). Every test here fails on the code before the
fix: liveness was a status request (a busy, stopped or very large monitor looked dead, and a
second ``start`` deleted the live runtime's directory), a status reply had to fit one datagram,
and ``stop`` SIGKILLed whatever process had a monitor's old pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

import multihop as mh
from liveness_util import process_gone, stopped, until
from multihop import _core
from session import unique_name


def test_a_runtime_whose_monitors_cannot_answer_is_still_live_and_never_taken_over() -> None:
    rt = mh.Runtime.start(unique_name("live"), cores=[0, 1])
    try:
        pids = list(rt.monitor_pids.values())
        with stopped(*pids):
            # No monitor answers a status request now, yet the runtime is live.
            assert _core.runtime_state(str(rt.dir)) == "live"
            with pytest.raises(mh.RuntimeExists, match="already running"):
                mh.Runtime.start(rt.name, cores=[0, 1])
            attached = mh.Runtime.attach(rt.name)
            assert attached.monitor_pids == rt.monitor_pids
            st = rt.status(timeout=0.3)
            assert st["live"] and all("error" in m for m in st["monitors"])
            assert all(not process_gone(p) for p in pids), "nothing was killed"
        # Resumed, the same runtime serves binds: it was never replaced.
        with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
            svc = srv.export("still-here")
            ch = cli.bind("still-here", timeout=5)
            ch.send(b"ok")
            assert svc.accept(timeout=5).recv(timeout=5) == b"ok"
        assert rt.monitor_pids == {m["core"]: m["pid"] for m in rt.status()["monitors"]}
    finally:
        rt.stop()
    assert not rt.dir.exists()


def test_status_and_attach_work_far_beyond_one_datagram() -> None:
    """4,000 multi-hop channels on one monitor pair: a status of ~1 MB streams in pieces."""
    n = 4000
    rt = mh.Runtime.start(unique_name("many"), cores=[0, 1])
    try:
        with rt.dispatcher(1) as srv, rt.dispatcher(0) as cli:
            svc = srv.export("many", backlog=n)
            ends = [cli.bind("many", transport="multihop", timeout=30) for _ in range(n)]
            peers = [svc.accept(timeout=30) for _ in range(n)]
            st = mh.Runtime.attach(rt.name).status()
            by_core = {m["core"]: m for m in st["monitors"]}
            assert len(json.dumps(st)) > 600_000
            for core in (0, 1):
                assert by_core[core]["counts"]["channels"] == n
                assert len(by_core[core]["channels"]) == n
                assert by_core[core]["data"]["forwarding_entries"] == 2 * n
            short = rt.status(limit=3)["monitors"][1]
            assert short["counts"]["channels"] == n and len(short["channels"]) == 3
            cli_out = subprocess.run([sys.executable, "-m", "multihop.cli", "status", rt.name], capture_output=True, text=True, timeout=60)
            assert cli_out.returncode == 0, cli_out.stderr
            assert f"channels={n}" in cli_out.stdout and f"and {n - 20:,} more channels" in cli_out.stdout
            ends[-1].send(b"last")
            assert peers[-1].recv(timeout=5) == b"last"
    finally:
        rt.stop()


def test_stop_of_an_attached_runtime_never_kills_a_process_that_reused_a_monitor_pid() -> None:
    rt = mh.Runtime.start(unique_name("reuse"), cores=[0, 1])
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        other = mh.Runtime.attach(rt.name)
        # As if monitor 0 had died and its pid now named an unrelated process.
        other._meta["monitors"][0]["pid"] = bystander.pid
        with stopped(rt.monitor_pids[rt.cores[0]]):  # the real one does not answer the shutdown either
            other.stop(timeout=0.3)
            assert bystander.poll() is None, "stop() killed a process that merely had a monitor's pid"
    finally:
        bystander.kill()
        bystander.wait()
        rt.stop()
    assert not rt.dir.exists()


def test_stop_of_an_attached_runtime_kills_its_stuck_monitors_after_checking_them() -> None:
    name = unique_name("stuck")
    up = subprocess.run([sys.executable, "-m", "multihop.cli", "up", name, "--cores", "0-1"], capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    rt = mh.Runtime.attach(name)
    pids = list(rt.monitor_pids.values())
    try:
        os.kill(pids[1], signal.SIGSTOP)  # it cannot answer the shutdown request
        rt.stop(timeout=0.3)
        until("the stopped monitor is killed", lambda: process_gone(pids[1]))
        until("the runtime directory is removed", lambda: not rt.dir.exists())
    finally:
        for p in pids:
            if not process_gone(p):
                os.kill(p, signal.SIGKILL)


def test_kill_9_of_every_monitor_leaves_a_stale_directory_that_start_takes_over() -> None:
    rt = mh.Runtime.start(unique_name("stale"), cores=[0, 1])
    pids = list(rt.monitor_pids.values())
    for p in pids:
        os.kill(p, signal.SIGKILL)
    for proc in rt._procs.values():
        proc.wait(10)
    assert rt.dir.exists() and _core.runtime_state(str(rt.dir)) == "stale"
    with pytest.raises(mh.RuntimeNotFound, match="not running"):
        mh.Runtime.attach(rt.name)
    again = mh.Runtime.start(rt.name, cores=[0, 1])
    try:
        assert set(again.monitor_pids.values()).isdisjoint(pids)
        assert mh.Runtime.attach(rt.name).monitor_pids == again.monitor_pids
    finally:
        again.stop()
        rt.stop()
    assert not rt.dir.exists()


def test_the_directory_stays_while_any_monitor_holds_the_lock() -> None:
    rt = mh.Runtime.start(unique_name("hold"), cores=[0, 1])
    try:
        with stopped(rt.monitor_pids[1]):
            _core.monitor_shutdown(str(rt.dir / "mon-0.sock"), timeout=5)
            rt._procs[0].wait(10)
            assert rt.dir.is_dir() and _core.runtime_state(str(rt.dir)) == "live"
            assert not _core.runtime_remove_if_unheld(str(rt.dir))
            assert (rt.dir / "mon-1.sock").exists()
    finally:
        rt.stop()
    assert not rt.dir.exists()
