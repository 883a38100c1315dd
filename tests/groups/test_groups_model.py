"""The machine model, its files, the discrete-event simulator and the machine-aware tree builder."""

from __future__ import annotations

import random
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multihop.groups import GroupError, ModelError, Tree, build_tree, flat, numa, radix
from multihop.groups.machine_tree import greedy_tree, improve, machine_tree, socket_tree
from multihop.groups.model import MachineModel, load_model, model_from_dict, shipped_models
from multihop.groups.simulate import Workload, simulate
from multihop.topology import Topology


def test_shipped_models_have_their_shapes_and_distance_levels() -> None:
    assert shipped_models() == ["2x8", "4x8", "8x8"]
    for name, sockets in (("2x8", 2), ("4x8", 4), ("8x8", 8)):
        m = load_model(name)
        assert len(m.topology.sockets) == sockets and len(m.cores) == sockets * 8 and m.name == name
        local = m.one_way(0, 1)
        remote = sorted({m.one_way(0, c) for c in m.cores if m.topology.socket_of(c) != 0})
        assert all(r > local for r in remote)
        assert len(remote) == (1 if sockets == 2 else 2)  # one hop, and two hops on the bigger machines
        for a in m.cores[::5]:
            for b in m.cores[::7]:
                if a != b:
                    assert m.rtt(a, b) == m.rtt(b, a)


def test_a_model_saved_and_loaded_is_the_same_model(tmp_path: Path) -> None:
    m = load_model("4x8")
    again = load_model(m.save(tmp_path / "m.toml"))
    assert again == m
    virt = MachineModel(
        "v",
        Topology([[0, 1], [2, 3]]),
        [[0, 1.5, 2, 3]] * 4,
        [[0, 1, 1, 1]] * 4,
        [[0, 7, 7, 9.25]] * 4,
        {0: 0, 1: 1, 2: 0, 3: 1},
        4000.0,
        'a "quoted" description',
    )
    assert load_model(virt.save(tmp_path / "v.toml")) == virt


def test_pair_overrides_and_the_level_tables(tmp_path: Path) -> None:
    f = tmp_path / "small.toml"
    f.write_text("""
name = "small"
[machine]
sockets = 2
cores_per_socket = 2
[cost.0]
send = 1
recv = 2
latency = 3
[cost.1]
send = 10
recv = 20
latency = 30
[[pair]]
src = 0
dst = 3
latency = 99
""")
    m = load_model(f)
    assert m.one_way(0, 1) == 6 and m.one_way(0, 2) == 60 and m.one_way(0, 3) == 129 and m.one_way(3, 0) == 60


@pytest.mark.parametrize(
    "text, problem",
    [
        ("name = 'x'", "missing \\[machine\\]"),
        ("[machine]\nsockets = 2\ncores_per_socket = 2", "give the costs"),
        ("[machine]\nsockets = 0\ncores_per_socket = 2\n[cost.0]\nsend=1\nrecv=1\nlatency=1", "machine.sockets"),
        ("[machine]\nsockets = 2\ncores_per_socket = 2\n[cost.0]\nsend=1\nrecv=1\nlatency=1", "no \\[cost.1\\] table"),
        ("[machine]\nsockets = 1\ncores_per_socket = 2\n[cost.0]\nsend=-1\nrecv=1\nlatency=1", "cost.0.send"),
        ("[machine]\nsockets = 1\ncores_per_socket = 2\n[cost.0]\nsend='fast'\nrecv=1\nlatency=1", "cost.0.send"),
        (
            "[machine]\nsockets = 1\ncores_per_socket = 2\n[matrix]\nsend=[[0,1]]\nrecv=[[0,1],[1,0]]\nlatency=[[0,1],[1,0]]",
            "matrix.send must be 2 rows",
        ),
        (
            "[machine]\nsockets = 2\ncores_per_socket = 1\nsocket_hops = [[0, 0], [1, 0]]\n[cost.1]\nsend=1\nrecv=1\nlatency=1",
            "socket_hops\\[0\\]\\[1\\]",
        ),
        ("[machine]\nsockets = 1\ncores_per_socket = 2\n[cost.0]\nsend=1\nrecv=1\nlatency=1\n[[pair]]\nsrc=0\ndst=5", "pair"),
        ("[machine]\nsockets = [[0, 1], [1]]\n[cost.0]\nsend=1\nrecv=1\nlatency=1", "listed twice"),
        ("this is = = not toml", "not valid TOML"),
    ],
)
def test_bad_model_files_name_what_is_wrong(tmp_path: Path, text: str, problem: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ModelError, match=problem):
        load_model(f)


def test_unknown_model_names_list_the_shipped_ones() -> None:
    with pytest.raises(ModelError, match="shipped: 2x8, 4x8, 8x8"):
        load_model("16x4")
    with pytest.raises(ModelError, match="core 99 is not in model"):
        load_model("2x8").rtt(0, 99)


# ---- the simulator, against schedules worked out by hand ---------------------------------


def two_socket_model(switch: float = 0.0, cpu_of: dict[int, int] | None = None) -> MachineModel:
    """Cores 0,1 | 2,3; costs that make every term of a schedule visible."""
    return model_from_dict(
        {
            "name": "hand",
            "machine": {"sockets": [[0, 1], [2, 3]], "switch": switch, **({"cpu_of": [cpu_of[c] for c in range(4)]} if cpu_of else {})},
            "cost": {"0": {"send": 10, "recv": 20, "latency": 100}, "1": {"send": 30, "recv": 40, "latency": 300}},
        }
    )


def test_simulated_schedules_match_hand_computed_ones() -> None:
    m = two_socket_model()
    one = Tree(0, {0: (1,)})
    assert simulate(m, one, Workload("none")).shootdown == 10 + 100 + 20
    assert simulate(m, one).shootdown == 130 + 10 + 100 + 20  # the ack comes back the same way
    assert simulate(m, one, Workload("tree", work=5)).shootdown == 130 + 5 + 130 + 0  # root works after sending
    # flat to 1, 2: sends at 10 (to 1) and 40 (to 2); 1 has it at 130, 2 at 40+300+40 = 380
    r = simulate(m, Tree(0, {0: (1, 2)}), Workload("none"))
    assert r.received == {0: 0.0, 1: 130.0, 2: 380.0} and r.shootdown == 380
    # acks: 1 acks at 140, seen at 240, taken by 260; 2 acks at 410, seen at 710, taken by 750
    r = simulate(m, Tree(0, {0: (1, 2)}))
    assert r.acked == {1: 140.0, 2: 410.0, 0: 750.0} and r.shootdown == 750
    # a chain 0 -> 2 -> 3: 2 has it at 370, forwards (send 10) at 380, 3 has it at 380+100+20 = 500,
    # 3 acks 510 -> at 2 by 610+20 = 630; 2 acks 660 -> at 0 by 960+40 = 1000
    r = simulate(m, Tree(0, {0: (2,), 2: (3,)}))
    assert r.received[3] == 500 and r.acked[2] == 660 and r.shootdown == 1000
    # direct acks: 3 acks the root itself (send 30 + latency 300 + recv 40)
    r = simulate(m, Tree(0, {0: (2,), 2: (3,)}), Workload("direct"))
    assert r.acked[3] == 530 and r.shootdown == max(370 + 30 + 300 + 40, 530 + 300 + 40)


def test_cores_that_share_a_cpu_take_turns_and_pay_the_switch() -> None:
    m = two_socket_model(switch=1000, cpu_of={0: 0, 1: 0, 2: 2, 3: 3})
    # 0 and 1 share CPU 0: 1 cannot run before 0 is done sending (10) and pays the switch
    r = simulate(m, Tree(0, {0: (1,)}), Workload("none"))
    assert r.received[1] == 110 + 1000 + 20
    own = two_socket_model(switch=1000)
    assert simulate(own, Tree(0, {0: (1,)}), Workload("none")).received[1] == 130  # own CPUs: no switch


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), acks=st.sampled_from(["tree", "direct", "none"]))
def test_simulation_is_pure_and_bounded_below_by_every_path(seed: int, acks: str) -> None:
    rng = random.Random(seed)
    m = load_model(rng.choice(["2x8", "4x8"]))
    cores = rng.sample(m.cores, rng.randint(2, len(m.cores)))
    root = cores[0]
    order = cores[1:]
    edges = []
    placed = [root]
    for c in order:  # a random tree with random child order
        edges.append((rng.choice(placed), c))
        placed.append(c)
    tree = Tree.from_parents(root, edges)
    w = Workload(acks, work=rng.choice([0.0, 50.0]))
    r1, r2 = simulate(m, tree, w), simulate(m, tree, w)
    assert r1 == r2
    for c in order:
        path = tree.path_to(c)
        down = sum(m.one_way(a, b) for a, b in pairwise(path))
        assert r1.received[c] >= down - 1e-9
        p = tree.parent_of(c)
        assert r1.received[c] >= r1.received[p] + m.one_way(p, c) - 1e-9
        if acks == "tree":
            up = sum(m.one_way(b, a) for a, b in pairwise(path))
            assert r1.shootdown >= down + up - 1e-9
    assert r1.shootdown >= max(r1.received.values())


# ---- machine-aware trees -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["2x8", "4x8"])
def test_machine_tree_is_no_worse_than_any_fixed_tree_and_spans_the_members(name: str) -> None:
    m = load_model(name)
    rng = random.Random(len(name))
    for root, cores in [(0, list(m.cores)), (5, sorted(rng.sample(m.cores, 11)))]:
        mt = machine_tree(m, root, cores, budget=400)
        assert set(mt.tree.cores) == {root, *cores} and mt.tree.mode == "machine"
        fixed = [flat(root, cores), *(radix(root, cores, k) for k in (2, 3, 4, 8)), numa(root, cores, m.topology, m.rtt)]
        assert all(mt.result.shootdown <= simulate(m, t).shootdown for t in fixed)
        assert mt.result == simulate(m, mt.tree)
        assert machine_tree(m, root, cores, budget=400) == mt  # deterministic


def test_candidates_and_local_search_keep_their_promises() -> None:
    m = load_model("4x8")
    cores = list(m.cores)
    for f in (1, 2, 8):
        t = greedy_tree(m, 0, cores, f)
        assert set(t.cores) == set(cores) and max(len(k) for k in t.children.values()) <= f
        s = socket_tree(m, 0, cores, f, far_first=True)
        firsts = s.children_of(0)[:3]
        assert sorted(firsts) == [8, 16, 24] and m.rtt(0, firsts[0]) >= m.rtt(0, firsts[-1])
    start = radix(0, cores, 2)
    better, result = improve(m, start, budget=200)
    assert result.shootdown <= simulate(m, start).shootdown and set(better.cores) == set(cores)
    assert build_tree("machine", 0, cores, model=m.restrict(cores)).mode == "machine"
    with pytest.raises(ModelError, match="core 40 is not in model"):
        machine_tree(m, 0, [1, 40])
    with pytest.raises(GroupError, match="twice"):
        machine_tree(m, 0, [1, 1])
    with pytest.raises(GroupError, match="unknown ack scheme"):
        Workload("maybe")
