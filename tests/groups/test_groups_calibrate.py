"""Calibration on a live runtime (real shared memory, real monitors, spawned agents), the measured
shoot-down, and the ``multihop groups`` command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import psutil
import pytest

import multihop as mh
from multihop.bench.groups.calibrate import calibrate
from multihop.bench.groups.live import measure_shootdown
from multihop.groups import GroupError, ModelError, flat, load_model, simulate
from multihop.groups.simulate import Workload
from multihop.groups.stored import STORED_NAME, model_dir, stored_model, stored_path
from session import unique_name


def children() -> set[int]:
    """Live (non-zombie) child processes of this test process; monitors and multiprocessing's
    resource tracker (started once, lives as long as this process) left out."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if p.status() != psutil.STATUS_ZOMBIE and "multihop.monitor" not in cmd and "resource_tracker" not in cmd:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(autouse=True)
def models(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stored models go to a directory of the test's own (MULTIHOP_MODEL_DIR), not the user's."""
    where = tmp_path_factory.mktemp("models")
    monkeypatch.setenv("MULTIHOP_MODEL_DIR", str(where))
    return where


@pytest.fixture
def rt4() -> Iterator[mh.Runtime]:
    """Four virtual cores on this machine's CPUs (two sockets declared)."""
    runtime = mh.Runtime.start(unique_name("cal"), cores=[0, 1, 2, 3], topology=mh.Topology([[0, 1], [2, 3]]))
    try:
        yield runtime
    finally:
        runtime.stop()


def test_calibrating_two_cores_stores_a_model_that_predicts_the_measured_shootdown(rt: mh.Runtime, tmp_path: Path) -> None:
    before = children()
    lines: list[str] = []
    model = calibrate(rt, rounds=100, bursts=5, burst=32, progress=lines.append)
    assert children() == before  # every agent gone
    assert len(lines) == 2 and "0 -> 1" in lines[0]
    assert model.cores == (0, 1) and model.cpu_of == {0: rt.cpu_of(0), 1: rt.cpu_of(1)}
    for a, b in ((0, 1), (1, 0)):
        assert model.cost("send", a, b) > 0 and model.cost("recv", a, b) > 0 and model.cost("latency", a, b) >= 0
    assert stored_path(rt.name).is_file() and stored_model(rt) == model
    again = calibrate(rt, rounds=50, bursts=3, burst=16, out=tmp_path / "here.toml")
    assert load_model(tmp_path / "here.toml") == again
    # the measured shoot-down and the prediction exist and are positive (how close they are is the
    # benchmark's business, on a machine shared with other work)
    live = measure_shootdown(rt, 0, [1], rounds=100)
    assert children() == before
    assert 0 < live.p10 <= live.median <= live.p90
    assert simulate(model, flat(0, [1]), Workload("direct")).shootdown > 0


def test_virtual_cores_get_a_switch_cost_and_unmeasured_pairs_are_filled(rt4: mh.Runtime) -> None:
    model = calibrate(rt4, pairs="from", rounds=60, bursts=3, burst=16)
    assert model.topology == rt4.topology
    assert model.cpu_of == {c: rt4.cpu_of(c) for c in rt4.cores}
    shared = [(a, b) for a in rt4.cores for b in rt4.cores if a < b and rt4.cpu_of(a) == rt4.cpu_of(b)]
    if shared:  # more cores than CPUs: handing a CPU over is measured as the switch
        assert model.switch > 0
        assert all(model.cost("latency", a, b) == 0 for a, b in shared)
    assert model.cost("send", 2, 3) > 0 and model.cost("recv", 3, 2) > 0  # filled from the measured pairs
    live = measure_shootdown(rt4, 0, [1, 2, 3], rounds=40, warmup=5)
    assert live.median > 0 and live.members == (1, 2, 3)


def test_calibrating_over_multihop_channels_goes_through_the_monitors(rt4: mh.Runtime) -> None:
    before = sum(m["data"]["forwarded"] for m in rt4.status()["monitors"])
    model = calibrate(rt4, [0, 2], rounds=40, bursts=3, burst=16, transport="multihop")
    assert sum(m["data"]["forwarded"] for m in rt4.status()["monitors"]) - before >= 2 * (40 + 3 * 16)
    assert "over multihop channels" in model.description
    assert model.cost("send", 0, 2) > 0 and model.rtt(0, 2) > 0


def test_bad_calibration_requests_are_refused_and_the_runtime_keeps_running(rt: mh.Runtime) -> None:
    before = children()
    with pytest.raises(ModelError, match="two or more distinct cores"):
        calibrate(rt, [0])
    with pytest.raises(ModelError, match=r"cores \[7\] are not in runtime"):
        calibrate(rt, [0, 7])
    with pytest.raises(ModelError, match="pairs is 'all' or 'from'"):
        calibrate(rt, pairs="some")
    with pytest.raises(ModelError, match="transport is 'ump' or 'multihop'"):
        calibrate(rt, transport="pigeon")
    with pytest.raises(ModelError, match="source core 5"):
        calibrate(rt, pairs="from", source=5)
    with pytest.raises(GroupError, match="distinct member cores"):
        measure_shootdown(rt, 0, [])
    with pytest.raises(GroupError, match="core 9 is not in runtime"):
        measure_shootdown(rt, 0, [9])
    assert rt.alive and children() == before and stored_model(rt) is None


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "multihop.cli", *args], capture_output=True, text=True, timeout=120, env=os.environ.copy())


def test_a_calibrated_model_outlives_the_runtime_and_the_command_says_where(models: Path) -> None:
    """``multihop down`` removes the runtime's directory: the model is kept per machine, where the command
    printed it is, and the runtime of that name reads it again when it is started again."""
    name = unique_name("calk")
    up = cli("up", name, "--cores", "0-1")
    assert up.returncode == 0, up.stderr
    try:
        out = cli("groups", "calibrate", name, "--rounds", "20")
        assert out.returncode == 0, out.stderr
    finally:
        down = cli("down", name)
    assert down.returncode == 0, down.stderr
    where = re.search(r"written to (\S+)", out.stdout)
    assert where is not None, out.stdout
    path = Path(where.group(1))
    assert path.is_file() and path.is_relative_to(models), (path, models)
    assert path == stored_path(name) and model_dir() == models
    assert "kept after" in out.stdout and "MULTIHOP_MODEL_DIR" in out.stdout
    rt = mh.Runtime.start(name, cores=[0, 1])
    try:
        assert stored_model(rt) == load_model(path)
    finally:
        rt.stop()


def test_a_model_in_the_runtime_directory_is_still_read(rt: mh.Runtime, tmp_path: Path) -> None:
    """Where calibrations went before (the runtime's directory): read when no kept model exists."""
    model = load_model("2x8").restrict([0, 1])
    model.save(rt.dir / STORED_NAME)
    assert not stored_path(rt.name).exists() and stored_model(rt) == model


def test_the_model_directory_follows_xdg_data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MULTIHOP_MODEL_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert model_dir() == tmp_path / "data" / "multihop" / "models"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert model_dir() == tmp_path / "home" / ".local" / "share" / "multihop" / "models"


def test_the_groups_command() -> None:
    out = cli("groups", "models")
    assert out.returncode == 0 and "4x8: 4 sockets x 8 cores" in out.stdout
    out = cli("groups", "simulate", "--model", "2x8")
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: float(line.split()[1].replace(",", "")) for line in out.stdout.splitlines()[2:]}
    assert set(rows) == {"flat", "radix:2", "radix:4", "radix:8", "numa", "machine"}
    assert rows["machine"] <= min(rows.values())
    out = cli("groups", "tree", "numa", "--model", "4x8", "--cores", "0-3,8,16,24", "--root", "0")
    assert out.returncode == 0 and out.stdout.splitlines()[:4] == ["0", "  16", "  8", "  24"]
    for args, problem in (
        (("tree", "star", "--model", "2x8"), "unknown tree mode 'star'"),
        (("simulate", "--model", "9x9"), "no model file '9x9'"),
        (("simulate", "--model", "2x8", "--cores", "0-40"), "core 16 is not in model"),
        (("calibrate", "no-such-runtime"), "no runtime named 'no-such-runtime'"),
    ):
        out = cli("groups", *args)
        assert out.returncode == 1 and problem in out.stderr, out.stderr
    assert "groups" in cli("--help").stdout
