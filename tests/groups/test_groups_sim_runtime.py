"""The simulator's rules for the runtime's processes (monitors on the route, parked dispatchers), on tiny
cases worked out by hand, and the model file's [runtime] table."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from multihop.groups import ModelError, Tree
from multihop.groups.model import MachineModel, load_model, model_from_dict
from multihop.groups.simulate import Workload, simulate


def small(cores: int = 2, cpu_of: list[int] | None = None, latency: float = 100, **runtime: object) -> MachineModel:
    """One socket; send 10, recv 20, the given latency; each core its own CPU unless ``cpu_of`` says."""
    machine: dict[str, object] = {"sockets": [list(range(cores))]}
    if cpu_of is not None:
        machine["cpu_of"] = cpu_of
    return model_from_dict(
        {"name": "hand", "machine": machine, "cost": {"0": {"send": 10, "recv": 20, "latency": latency}}, "runtime": dict(runtime)}
    )


def test_the_defaults_leave_the_plain_model_and_the_shipped_files_unchanged() -> None:
    for name in ("2x8", "4x8", "8x8"):
        m = load_model(name)
        assert (m.route, m.forward, m.wake, m.spin, m.poll, m.crowd, m.switch_to) == ("direct", 0.0, 0.0, math.inf, math.inf, 0.0, "any")
        assert m.crowd_root == 0.0
    # route direct: 10 send + 100 latency + 20 recv, as before
    assert simulate(small(), Tree(0, {0: (1,)}), Workload("none")).shootdown == 130


def test_through_the_monitors_each_hop_costs_both_monitors_a_turn() -> None:
    m = small(route="monitors", forward=5)
    one = Tree(0, {0: (1,)})
    # root sends 0..10; monitor 0 forwards 10..15; monitor 1 has it at 115, forwards 115..120; 1 receives 120..140
    r = simulate(m, one, Workload("none"))
    assert r.received[1] == 140 and r.shootdown == 140 and r.forwarded == {0: 5.0, 1: 5.0}
    # the ack back: 1 sends 140..150, monitor 1 150..155, monitor 0 255..260, root takes it 260..280
    r = simulate(m, one, Workload("direct"))
    assert r.acked[1] == 150 and r.shootdown == 280 and r.forwarded == {0: 10.0, 1: 10.0} and r.wakes == 0


def test_a_monitor_waits_for_the_rest_of_its_dispatchers_turn() -> None:
    # root sends to 1 (0..10) and 2 (10..20); its monitor runs only after that: 20..25, 25..30;
    # 1's monitor has the first frame at 125 (forwards 125..130), 1 receives 130..150;
    # 2's at 130 (130..135), 2 receives 135..155
    r = simulate(small(3, route="monitors", forward=5), Tree(0, {0: (1, 2)}), Workload("none"))
    assert r.received == {0: 0.0, 1: 150.0, 2: 155.0}


def test_on_a_shared_cpu_a_dispatcher_goes_before_a_monitor_that_waited_longer() -> None:
    # everything on CPU 0, latency 0: root 0..20 (two sends); monitor 0: 20..25 (frame to 1), 25..30 (frame to 2,
    # the monitor keeps the CPU: no dispatcher is ready); monitor 1 30..35 hands 1 its frame at 35; now 1 (ready 35)
    # goes before monitor 2 (ready 30): 35..55; then monitor 2 55..60 and 2 receives 60..80
    m = small(3, cpu_of=[0, 0, 0], latency=0, route="monitors", forward=5)
    r = simulate(m, Tree(0, {0: (1, 2)}), Workload("none"))
    assert r.received == {0: 0.0, 1: 55.0, 2: 80.0} and r.shootdown == 80


def test_a_parked_process_on_a_sleeping_cpu_pays_the_wake_up() -> None:
    one = Tree(0, {0: (1,)})
    # direct route, spin 0: 1 is parked and its CPU sleeps: ready at 110 + 1,000, received 1,130; the ack is sent
    # by 1,140, reaches the root at 1,240 (parked since 10, its CPU asleep): ready 2,240, taken by 2,260
    r = simulate(small(wake=1000, spin=0), one, Workload("direct"))
    assert r.received[1] == 1130 and r.shootdown == 2260 and r.wakes == 2
    # spin 5,000: the root still spins when the ack comes: one wake-up only
    r = simulate(small(wake=1000, spin=5000), one, Workload("direct"))
    assert r.shootdown == 1260 and r.wakes == 1
    # through monitors that poll for ever (the default): a dispatcher's frame comes from its own monitor, which
    # keeps the CPU awake: no wake-up, the times of the test above
    r = simulate(small(route="monitors", forward=5, wake=1000, spin=0), one, Workload("direct"))
    assert r.shootdown == 280 and r.wakes == 0
    # monitors that park at once (poll 0): monitor 0 takes the frame on the root's CPU, awake (the root runs);
    # monitor 1 gets it at 115 on a sleeping CPU: ready 1,115, forwards by 1,120; 1 (parked, but on an awake CPU)
    # receives 1,120..1,140, acks by 1,150; monitor 1 1,150..1,155 (awake: 1 has just run); monitor 0 gets it at
    # 1,255, its CPU asleep (the root parked since 10): ready 2,255, forwards by 2,260; the root takes it by 2,280
    r = simulate(small(route="monitors", forward=5, wake=1000, spin=0, poll=0), one, Workload("direct"))
    assert r.received[1] == 1140 and r.shootdown == 2280 and r.wakes == 2


def test_a_process_that_still_spins_keeps_its_cpu_awake() -> None:
    # 0 and 1 share CPU 0, direct route, dispatchers spin 5,000: 1 is parked (it never ran), but the root, which
    # ran until 10, still spins when the frame comes at 110: no wake-up, received 130
    shared = small(cpu_of=[0, 0], wake=1000, spin=5000)
    r = simulate(shared, Tree(0, {0: (1,)}), Workload("none"))
    assert r.received[1] == 130 and r.wakes == 0
    # on CPUs of their own, 1's CPU sleeps: 110 + 1,000 + 20
    assert simulate(small(wake=1000, spin=5000), Tree(0, {0: (1,)}), Workload("none")).received[1] == 1130


def test_a_dispatcher_with_work_queued_is_not_parked() -> None:
    # flat 0 -> 1, 2 on own CPUs, acks direct, spin 0, wake 1,000, direct route:
    # 1 and 2 wake (received 1,130 and 1,140); their acks reach the root at 1,240 and 1,250: the first wakes it
    # (ready 2,240, taken 2,260); the second comes during that wake-up: no second one, but not taken before
    # the root is awake: 2,260..2,280
    r = simulate(small(3, wake=1000, spin=0), Tree(0, {0: (1, 2)}), Workload("direct"))
    assert r.received == {0: 0.0, 1: 1130.0, 2: 1140.0} and r.shootdown == 2280 and r.wakes == 3


def test_the_runtime_table_round_trips_and_bad_values_are_named(tmp_path: Path) -> None:
    m = small(route="monitors", forward=1500, wake=7000, spin=0, poll=200_000, crowd=900, switch_to="monitors")
    assert load_model(m.save(tmp_path / "m.toml")) == m
    plain = small()
    assert load_model(plain.save(tmp_path / "p.toml")) == plain  # spin = inf in TOML
    assert m.restrict([0]).forward == 1500 and plain.with_runtime(wake=3).wake == 3
    for runtime, problem in (
        ({"route": "ump"}, "route must be one of direct, monitors"),
        ({"forward": -1}, "forward must be"),
        ({"wake": math.inf}, "wake must be"),
        ({"spin": "x"}, "spin must be"),
        ({"poll": -1}, "poll must be"),
        ({"crowd": -2}, "crowd must be"),
        ({"switch_to": "dispatchers"}, "switch_to must be one of any, monitors"),
        ({"speed": 1}, "unknown fields \\['speed'\\]"),
    ):
        with pytest.raises(ModelError, match=problem):
            small(**runtime)


def test_the_roots_own_work_comes_before_its_first_send() -> None:
    # root works 0..50, sends 50..60; 1 receives at 60 + 100 + 20
    r = simulate(small(), Tree(0, {0: (1,)}), Workload("none", root_work=50))
    assert r.received[1] == 180 and r.busy[0] == 60


def test_a_receive_costs_more_for_every_other_dispatcher_on_its_cpu() -> None:
    # 1, 2 and 3 share CPU 1 (two others each), the root has CPU 0: crowd 7 adds 14 to each receive of the
    # multicast (not to the root's receives of acks). Flat 0 -> 1, 2, 3, no acks: sends end at 10, 20, 30;
    # 1 receives 110..144; 2 (ready 120) 144..178; 3 (ready 130) 178..212
    m = small(4, cpu_of=[0, 1, 1, 1], crowd=7)
    r = simulate(m, Tree(0, {0: (1, 2, 3)}), Workload("none"))
    assert r.received == {0: 0.0, 1: 144.0, 2: 178.0, 3: 212.0}
    # on CPUs of their own nobody is crowded: 130, 140, 150
    assert simulate(small(4, crowd=7), Tree(0, {0: (1, 2, 3)}), Workload("none")).received == {0: 0.0, 1: 130.0, 2: 140.0, 3: 150.0}


def test_a_monitor_forwards_every_frame_it_has_in_one_turn() -> None:
    # root sends to 1 (0..10) and 2 (10..20); its monitor's one step at 20 forwards both (20..25, 25..30)
    r = simulate(small(3, route="monitors", forward=5), Tree(0, {0: (1, 2)}), Workload("none"))
    assert r.forwarded == {0: 10.0, 1: 5.0, 2: 5.0} and r.received == {0: 0.0, 1: 150.0, 2: 155.0}


def test_with_switch_to_monitors_only_a_monitors_turn_pays_the_switch() -> None:
    one = Tree(0, {0: (1,)})
    # everything on CPU 0, latency 0, switch 100. "any": root 0..10; monitor 0 (switch) 110..115; monitor 1
    # (another process: switch) 215..220; 1 (switch) 320..340
    shared = dataclasses.replace(small(cpu_of=[0, 0], latency=0, route="monitors", forward=5), switch=100.0)
    assert simulate(shared, one, Workload("none")).received[1] == 340
    # "monitors": 1's turn pays nothing: 220..240
    assert simulate(shared.with_runtime(switch_to="monitors"), one, Workload("none")).received[1] == 240


def test_a_measured_crowding_table_is_looked_up_by_the_others_on_the_cpu_and_goes_on_past_its_end() -> None:
    # crowd = [7, 30]: 7 more with one other dispatcher on the CPU, 30 with two; past the end the last step (23) goes on
    m = small(4, cpu_of=[0, 1, 1, 1], crowd=[7, 30])
    assert [m.crowding(k) for k in range(5)] == [0.0, 7.0, 30.0, 53.0, 76.0]
    assert small(crowd=[7]).crowding(3) == 21.0  # one entry: its step is itself
    # 1, 2, 3 share CPU 1 (two others each): each receive costs 20 + 30; sends end at 10, 20, 30, latency 100:
    # 1 receives 110..160, 2 (ready 120) 160..210, 3 (ready 130) 210..260
    r = simulate(m, Tree(0, {0: (1, 2, 3)}), Workload("none"))
    assert r.received == {0: 0.0, 1: 160.0, 2: 210.0, 3: 260.0}
    # four members on CPU 1 (three others each, past the table): 20 + 53 each: 110..183, 183..256, 256..329, 329..402
    five = small(5, cpu_of=[0, 1, 1, 1, 1], crowd=[7, 30])
    r = simulate(five, Tree(0, {0: (1, 2, 3, 4)}), Workload("none"))
    assert r.received == {0: 0.0, 1: 183.0, 2: 256.0, 3: 329.0, 4: 402.0}


def test_a_crowding_table_round_trips_and_a_bad_one_is_named(tmp_path: Path) -> None:
    m = small(crowd=[5000, 11000, 26000], crowd_root=[1000, 0])
    assert m.crowd == (5000.0, 11000.0, 26000.0) and m.crowd_root == (1000.0, 0.0)
    assert load_model(m.save(tmp_path / "t.toml")) == m
    assert small().with_runtime(crowd=[1, 2]).crowding(2) == 2.0
    for bad in ([], [-1], ["x"], [math.inf], [True]):
        with pytest.raises(ModelError, match="crowd as a table must list finite numbers of ns >= 0"):
            small(crowd=bad)
        with pytest.raises(ModelError, match="crowd_root as a table must list"):
            small(crowd_root=bad)
    with pytest.raises(ModelError, match="crowd_root must be a finite number"):
        small(crowd_root=-1)


def test_the_roots_own_work_costs_more_with_members_on_its_cpu() -> None:
    # root 0 and member 1 share CPU 0 (one other on the root's CPU), member 2 has CPU 1; crowd_root = [30]:
    # the root works 0..80 (50 + 30), sends to 1 (80..90) and 2 (90..100); 1 receives 190..210, 2 200..220
    m = small(3, cpu_of=[0, 0, 1], crowd_root=[30])
    r = simulate(m, Tree(0, {0: (1, 2)}), Workload("none", root_work=50))
    assert r.received == {0: 0.0, 1: 210.0, 2: 220.0} and r.busy[0] == 100
    # the root alone on its CPU: no more than its work (1 receives 50 + 10 + 100 + 20)
    alone = simulate(small(3, crowd_root=[30]), Tree(0, {0: (1, 2)}), Workload("none", root_work=50))
    assert alone.received[1] == 180
    # a number is per other: two members on the root's CPU, 12 each: the root works 0..74
    two = small(3, cpu_of=[0, 0, 0], crowd_root=12)
    assert two.crowding(2, root=True) == 24 and simulate(two, Tree(0, {0: (1, 2)}), Workload("none", root_work=50)).busy[0] == 94
