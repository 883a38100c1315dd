"""Calibration of the live group path on a real runtime (spawned members, real monitors): what it measures,
what it stores, and bad requests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import multihop as mh
from multihop.bench.groups.calibrate_group import calibrate_group_path, cpu_ns, measure_group_path, reference_members
from multihop.groups import GroupError, flat, load_model, simulate
from multihop.groups.gsd import ensure_service
from multihop.groups.stored import PATH_STORED_NAME, stored_path
from test_groups_calibrate import children


@pytest.fixture(autouse=True)
def models(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stored models go to a directory of the test's own (MULTIHOP_MODEL_DIR), not the user's."""
    where = tmp_path_factory.mktemp("models")
    monkeypatch.setenv("MULTIHOP_MODEL_DIR", str(where))
    return where


def test_the_group_path_calibration_measures_every_part_and_stores_a_model(rt: mh.Runtime, tmp_path: Path) -> None:
    before = children() | {ensure_service(rt)}  # the group service lives as long as the runtime
    forwarded = sum(m["data"]["group_forwarded"] for m in rt.status()["monitors"])
    lines: list[str] = []
    model, costs, workload = calibrate_group_path(rt, 0, rounds=120, progress=lines.append)
    assert children() == before  # agents and reference members gone
    assert len(lines) == 4 and "wake-up" in lines[1] and "hand-over" in lines[2] and "group path 0 -> 1" in lines[3]
    # the reference rounds went through the monitors, which sampled their own steps
    assert sum(m["data"]["group_forwarded"] for m in rt.status()["monitors"]) >= forwarded + 4 * 120  # request and reply, each through two monitors
    assert model.route == "monitors" and model.spin == 0 and model.forward == costs.forward and model.wake == costs.wake >= 0
    assert costs.send > 0 and costs.handle > 0 and costs.ack >= 0 and costs.root_work >= 0 and costs.round_trip > 0
    assert model.cost("send", 0, 1) == costs.send and model.cost("recv", 0, 1) == costs.handle and model.cost("recv", 1, 0) == costs.ack
    assert workload.acks == "direct" and workload.root_work == costs.root_work
    assert load_model(stored_path(rt.name, PATH_STORED_NAME)) == model
    assert costs.handover > 0 and model.poll > 0
    # one member core: the reference rounds had 1, 2 and 3 member processes on it; the table has what 2 and 3 cost more
    assert reference_members(rt, 0, 1) == [[1], [1, 1], [1, 1, 1]]
    assert len(costs.crowd) == 2 and model.crowd == costs.crowd and all(v >= 0 for v in costs.crowd)
    assert model.crowd_root == costs.crowd_root and all(v >= 0 for v in costs.crowd_root)
    # the one-member prediction is the sum of the parts on its path: the monitors poll (no wake-up), and two
    # turns of a monitor follow a dispatcher's (root -> monitor 0, member -> monitor 1): the hand-over each
    r = simulate(model, flat(0, [1]), workload)
    path = costs.root_work + costs.send + 4 * costs.forward + costs.handle + costs.ack + 2 * costs.handover
    path += model.cost("latency", 0, 1) + model.cost("latency", 1, 0)
    if rt.cpu_of(0) != rt.cpu_of(1):
        assert model.switch == costs.handover and model.switch_to == "monitors" and r.wakes == 0
        assert costs.crowd_root == (0.0,)  # no member core shares the root's CPU: no reference rounds there
        assert r.shootdown == pytest.approx(path)


def test_cpu_time_is_read_from_the_kernel_and_bad_requests_are_refused(rt: mh.Runtime) -> None:
    a = cpu_ns(os.getpid())
    sum(range(3_000_000))  # tens of ms: the kernel updates a running thread's account at its ticks
    assert cpu_ns(os.getpid()) > a > 0 and cpu_ns(2**22 + 12345) == 0
    with pytest.raises(GroupError, match="core 7 is not in runtime"):
        calibrate_group_path(rt, 7)
    with pytest.raises(GroupError, match="a core other than the root 0"):
        measure_group_path(rt, 0, 0)
    with pytest.raises(GroupError, match="core 9 is not in runtime"):
        measure_group_path(rt, 0, 9)
    assert rt.status()["monitors"]  # the runtime runs on


def test_reference_rounds_put_members_on_the_cores_sharing_the_members_cpu_each_with_its_monitor() -> None:
    with mh.Runtime.start(f"calref-{os.getpid()}", cores=list(range(8))) as rt:
        for member in (1, 2):
            shared = [c for c in rt.cores if c != 0 and rt.cpu_of(c) == rt.cpu_of(member)]
            sets = reference_members(rt, 0, member)
            assert len(sets) == max(3, len(shared)) and [len(s) for s in sets] == list(range(1, len(sets) + 1))
            for s in sets:
                assert s[0] == member and set(s) <= set(shared)
                assert len(set(s)) == min(len(s), len(shared))  # a core of its own while there are enough
        if len({rt.cpu_of(c) for c in rt.cores}) == 2:  # this 2-CPU machine: cores alternate over the CPUs
            assert reference_members(rt, 0, 1) == [[1], [1, 3], [1, 3, 5], [1, 3, 5, 7]]
            assert reference_members(rt, 0, 2) == [[2], [2, 4], [2, 4, 6]]


def test_the_group_path_calibration_from_the_command_line(rt: mh.Runtime, tmp_path: Path) -> None:
    from test_groups_calibrate import cli

    out_file = tmp_path / "path.toml"
    out = cli("groups", "calibrate", rt.name, "--group-path", "--rounds", "60", "--out", str(out_file))
    assert out.returncode == 0, out.stderr
    assert f"written to {out_file}" in out.stdout and "predicted flat unicast shoot-down to 1 members" in out.stdout
    model = load_model(out_file)
    assert model.route == "monitors" and list(model.cores) == list(rt.cores)
    bad = cli("groups", "calibrate", rt.name, "--group-path", "--root", "7")
    assert bad.returncode == 1 and "core 7 is not in runtime" in bad.stderr
    assert rt.alive
