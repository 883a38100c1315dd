"""Tests for multihop.topology: declared, sysfs and restricted topologies, core specs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from multihop.errors import MultihopError, RoutingError
from multihop.topology import Topology, format_cores, parse_cores


def test_declared_topology_properties() -> None:
    topo = Topology(sockets=[[5, 3, 4], [0, 1, 2]])
    assert topo.cores == (0, 1, 2, 3, 4, 5)
    assert topo.sockets == ((3, 4, 5), (0, 1, 2))
    assert topo.leaders == (3, 0)
    assert topo.socket_of(4) == 0
    assert topo.socket_of(1) == 1
    assert topo.leader_of(5) == 3
    assert topo.leader_of(2) == 0
    assert len(topo) == 6
    assert 4 in topo
    assert 6 not in topo
    assert "4" not in topo
    assert True not in Topology([[1]])


def test_topology_is_immutable_and_hashable() -> None:
    topo = Topology([[0, 1], [2, 3]])
    with pytest.raises(AttributeError):
        topo.extra = 1  # type: ignore[attr-defined]
    assert topo == Topology([[1, 0], [3, 2]])
    assert topo != Topology([[2, 3], [0, 1]])
    assert len({topo, Topology([[0, 1], [2, 3]])}) == 1


def test_repr_evaluates_back() -> None:
    topo = Topology([[0, 1, 2], [3, 4, 5]])
    assert repr(topo) == "Topology(sockets=[[0, 1, 2], [3, 4, 5]])"
    assert eval(repr(topo)) == topo


def test_flat_and_chunked() -> None:
    assert Topology.flat([3, 1, 2]).sockets == ((1, 2, 3),)
    assert Topology.chunked(range(6), 4).sockets == ((0, 1, 2, 3), (4, 5))
    assert Topology.chunked(range(8), 2).leaders == (0, 2, 4, 6)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "2"])
def test_chunked_rejects_bad_socket_size(bad: object) -> None:
    with pytest.raises(RoutingError, match="cores_per_socket"):
        Topology.chunked(range(4), bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sockets", "named"),
    [
        ([[0, 1], [1, 2]], "core 1 is listed twice"),
        ([[0, 1], []], "socket 1 is empty"),
        ([[0, -3]], "-3"),
        ([[0, 1.5]], "1.5"),
        ([[0, "2"]], "'2'"),
        ([[0, True]], "True"),
        ([], "at least one socket"),
        ("0,1", "'0,1'"),
        ([5], "socket 0 must be a list"),
    ],
)
def test_bad_socket_specs_are_rejected(sockets: object, named: str) -> None:
    with pytest.raises(RoutingError) as info:
        Topology(sockets)  # type: ignore[arg-type]
    assert named in str(info.value)
    assert isinstance(info.value, MultihopError)
    assert isinstance(info.value, ValueError)


def test_socket_of_unknown_core_names_it() -> None:
    topo = Topology([[0, 1], [2, 3]])
    with pytest.raises(RoutingError, match="core 9 is not in the topology; its cores are 0-3"):
        topo.socket_of(9)
    with pytest.raises(RoutingError, match="core 9"):
        topo.leader_of(9)


def test_restrict_keeps_socket_order_and_drops_empty_sockets() -> None:
    topo = Topology([[6, 7], [0, 1, 2], [3, 4, 5]])
    small = topo.restrict([5, 1, 2])
    assert small.sockets == ((1, 2), (5,))
    assert small.leader_of(2) == 1
    assert small.leaders == (1, 5)
    assert topo.restrict(set(topo.cores)) == topo


@pytest.mark.parametrize(
    ("cores", "named"),
    [([0, 8], "core 8 is not in the topology"), ([0, 0], "core 0 is given twice"), ([], "no cores"), ([0, -1], "-1")],
)
def test_restrict_rejects_bad_cores(cores: list[int], named: str) -> None:
    with pytest.raises(RoutingError, match=named):
        Topology([[0, 1], [2, 3]]).restrict(cores)


def test_dict_round_trip_through_json() -> None:
    topo = Topology([[10, 3], [7], [0, 1, 2]])
    data = json.loads(json.dumps(topo.to_dict()))
    assert data == {"sockets": [[3, 10], [7], [0, 1, 2]]}
    assert Topology.from_dict(data) == topo


@pytest.mark.parametrize("data", [{}, {"sockets": [[0]], "cores": [0]}, [[0]]])
def test_from_dict_rejects_other_shapes(data: object) -> None:
    with pytest.raises(RoutingError, match="'sockets'"):
        Topology.from_dict(data)  # type: ignore[arg-type]


def test_from_sysfs_on_this_machine() -> None:
    topo = Topology.from_sysfs()
    assert len(topo) >= 1
    assert all(core >= 0 for core in topo.cores)


def _fake_cpu(root: Path, core: int, package: str | None, online: str | None = None) -> None:
    cpu = root / f"cpu{core}"
    (cpu / "topology").mkdir(parents=True)
    if package is not None:
        (cpu / "topology" / "physical_package_id").write_text(f"{package}\n")
    if online is not None:
        (cpu / "online").write_text(f"{online}\n")


def test_from_sysfs_reads_two_packages(tmp_path: Path) -> None:
    for core, package in [(0, "1"), (1, "0"), (2, "1"), (3, "0"), (4, "0")]:
        _fake_cpu(tmp_path, core, package)
    (tmp_path / "online").write_text("0-3\n")  # cpu4 is offline
    (tmp_path / "cpufreq").mkdir()
    topo = Topology.from_sysfs(tmp_path)
    assert topo.sockets == ((1, 3), (0, 2))
    assert topo.leaders == (1, 0)


def test_from_sysfs_without_online_file_uses_cpu_dirs(tmp_path: Path) -> None:
    _fake_cpu(tmp_path, 0, "0")
    _fake_cpu(tmp_path, 1, "0", online="1")
    _fake_cpu(tmp_path, 2, "1", online="0")
    _fake_cpu(tmp_path, 10, "1", online="1")
    (tmp_path / "cpuidle").mkdir()
    assert Topology.from_sysfs(tmp_path).sockets == ((0, 1), (10,))


def test_from_sysfs_without_package_ids_is_one_socket(tmp_path: Path) -> None:
    _fake_cpu(tmp_path, 0, "0")
    _fake_cpu(tmp_path, 1, None)
    _fake_cpu(tmp_path, 2, "-1")
    (tmp_path / "online").write_text("0-2\n")
    assert Topology.from_sysfs(tmp_path).sockets == ((0, 1, 2),)


def test_from_sysfs_with_no_cpus_names_the_root(tmp_path: Path) -> None:
    with pytest.raises(RoutingError, match="no online cores"):
        Topology.from_sysfs(tmp_path / "missing")


@pytest.mark.parametrize(
    ("spec", "cores"),
    [("0", [0]), ("0-3,6,8-9", [0, 1, 2, 3, 6, 8, 9]), (" 4 , 1-2 ", [4, 1, 2]), ("7-7", [7])],
)
def test_parse_cores(spec: str, cores: list[int]) -> None:
    assert parse_cores(spec) == cores


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("", "empty core spec"),
        ("  ", "empty core spec"),
        ("0-x", "'0-x'"),
        ("1,,2", "''"),
        ("3-1", "'3-1' runs backwards"),
        ("0-3,2", "core 2 appears twice"),
        ("-1", "'-1'"),
        ("1.5", "'1.5'"),
        ("0-", "'0-'"),
    ],
)
def test_parse_cores_rejects_bad_specs(spec: str, named: str) -> None:
    with pytest.raises(RoutingError) as info:
        parse_cores(spec)
    assert named in str(info.value)


def test_parse_cores_rejects_non_strings() -> None:
    with pytest.raises(RoutingError, match=r"\[0, 1\]"):
        parse_cores([0, 1])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cores", "spec"),
    [([], ""), ([0, 1, 2, 3, 6, 8, 9], "0-3,6,8-9"), ([5, 4, 3], "5,4,3"), ([2, 3, 0, 1], "2-3,0-1")],
)
def test_format_cores_is_the_inverse_of_parse_cores(cores: list[int], spec: str) -> None:
    assert format_cores(cores) == spec
    if cores:
        assert parse_cores(spec) == cores
