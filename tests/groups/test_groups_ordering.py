"""Ordering machines against the independent checkers, and the checkers against bad histories.

The runs here are sans-IO: six members, three concurrent senders of 10,000
messages each to the broadcast stream, a network that reorders every frame
at random (seeded), and each receiver's ordering machine deciding what to
deliver.  A control run without the machines (deliver on arrival) must make
the checkers fail, so a checker that accepts everything cannot pass.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multihop.errors import ProtocolError
from multihop.groups import BROADCAST
from multihop.groups.checkers import History, check_causal, check_delivery, check_fifo, check_total
from multihop.groups.messages import Data, Submit
from multihop.groups.ordering import CausalClock, CausalReceiver, FifoReceiver, Sequencer, TotalReceiver

G = "g"
CHECKS = {"fifo": [check_fifo], "causal": [check_fifo, check_causal], "total": [check_fifo, check_total]}


def run(order: str, *, members: int = 6, senders: int = 3, n: int = 200, seed: int = 0, machines: bool = True, send_bias: float = 0.3) -> History:
    """One seeded run; returns the recorded history (msg id = (sender, seq))."""
    rng = random.Random(seed)
    nodes = list(range(1, members + 1))
    h = History()
    fifo = {p: FifoReceiver() for p in nodes}
    causal = {p: CausalReceiver(nodes) for p in nodes}
    clocks = {p: CausalClock(causal[p], p) for p in nodes}
    total = {p: TotalReceiver() for p in nodes}
    sequencer = Sequencer(G, 1, BROADCAST)
    sent = {s: 0 for s in nodes[:senders]}
    inflight: list[tuple[int, object]] = []

    def arrive(p: int, frame: Data) -> None:
        if not machines:
            ready = [frame]
        elif order == "fifo":
            ready = fifo[p].offer(frame)
        elif order == "causal":
            ready = causal[p].offer(frame)
        else:
            ready = total[p].offer(frame)
        for f in ready:
            h.deliver(p, (f.sender, f.seq))

    steps = 0
    while inflight or any(v < n for v in sent.values()):
        steps += 1
        assert steps < 50 * n * members * senders, "the run does not end"
        ready_senders = [s for s, v in sent.items() if v < n]
        if ready_senders and (not inflight or rng.random() < send_bias):
            s = rng.choice(ready_senders)
            if order == "causal":
                seq, vc = clocks[s].stamp()
            else:
                seq, vc = sent[s] + 1, ()
            sent[s] = seq
            h.send(s, (s, seq), BROADCAST, nodes)
            if order == "total":
                inflight.append((0, Submit(G, 1, BROADCAST, s, seq)))
                continue
            h.deliver(s, (s, seq))  # self-delivery at once (fifo, causal)
            if order == "causal":
                causal[s].note_own(s)
            frame = Data(G, 1, BROADCAST, s, seq, vc=vc)
            inflight += [(p, frame) for p in nodes if p != s]
            continue
        i = rng.randrange(len(inflight))
        inflight[i], inflight[-1] = inflight[-1], inflight[i]
        p, frame = inflight.pop()
        if p == 0:  # at the sequencer
            for stamped in sequencer.submit(frame):  # type: ignore[arg-type]
                inflight += [(q, stamped) for q in nodes]
        else:
            arrive(p, frame)  # type: ignore[arg-type]
    return h


@pytest.mark.parametrize("order", ["fifo", "causal", "total"])
def test_three_senders_ten_thousand_each_six_members_hold_every_checker(order: str) -> None:
    h = run(order, n=10_000, seed=14)
    assert len(h.messages) == 30_000
    assert sum(len(h.deliveries(p)) for p in range(1, 7)) == 180_000
    assert check_delivery(h) == []
    for check in CHECKS[order]:
        assert check(h) == [], check.__name__


@pytest.mark.parametrize("order", ["fifo", "causal", "total"])
def test_without_the_machines_the_checkers_fail(order: str) -> None:
    h = run(order, n=300, seed=3, machines=False)
    assert check_delivery(h) == []  # every frame arrives exactly once...
    assert any(check(h) for check in CHECKS[order])  # ...but not in order


@settings(max_examples=25, deadline=None)
@given(order=st.sampled_from(["fifo", "causal", "total"]), seed=st.integers(0, 2**32 - 1), members=st.integers(2, 7), bias=st.floats(0.05, 0.95))
def test_random_runs_hold_every_checker(order: str, seed: int, members: int, bias: float) -> None:
    h = run(order, members=members, senders=min(3, members), n=60, seed=seed, send_bias=bias)
    assert check_delivery(h) == []
    for check in CHECKS[order]:
        assert check(h) == [], check.__name__


# ---- the checkers catch bad histories -------------------------------------------------


def history(sends: list[tuple[str, str, list[str]]], events: dict[str, list[str]]) -> History:
    """sends: (process, msg, recipients) in order; events: per process 's:m' / 'd:m' in order."""
    h = History()
    info = {m: (p, r) for p, m, r in sends}
    for p, evs in events.items():
        for e in evs:
            kind, m = e.split(":")
            if kind == "s":
                h.send(p, m, "all", info[m][1])
            else:
                h.deliver(p, m)
    return h


ABC = ["A", "B", "C"]


def test_fifo_checker_catches_swaps_and_skips() -> None:
    good = history([("A", "a1", ABC), ("A", "a2", ABC)], {"A": ["s:a1", "s:a2", "d:a1", "d:a2"], "B": ["d:a1", "d:a2"], "C": ["d:a1", "d:a2"]})
    assert check_fifo(good) == []
    swapped = history([("A", "a1", ABC), ("A", "a2", ABC)], {"A": ["s:a1", "s:a2", "d:a1", "d:a2"], "B": ["d:a2", "d:a1"], "C": ["d:a1", "d:a2"]})
    assert "'B' delivered 'a2'" in check_fifo(swapped)[0]
    skipped = history([("A", "a1", ABC), ("A", "a2", ABC)], {"A": ["s:a1", "s:a2", "d:a1", "d:a2"], "B": ["d:a2"], "C": ["d:a1", "d:a2"]})
    assert check_fifo(skipped) and check_delivery(skipped) == ["'B' never delivered 'a1' (sent by 'A' to 'all')"]


def test_causal_checker_catches_a_reply_before_its_cause_and_allows_concurrency() -> None:
    sends = [("A", "m1", ABC), ("B", "m2", ABC)]
    ok = {"A": ["s:m1", "d:m1", "d:m2"], "B": ["d:m1", "s:m2", "d:m2"], "C": ["d:m1", "d:m2"]}
    assert check_causal(history(sends, ok)) == []
    bad = dict(ok, C=["d:m2", "d:m1"])  # B sent m2 after delivering m1: m1 -> m2
    found = check_causal(history(sends, bad))
    assert found and "'C' delivered 'm2' before 'm1'" in found[0]
    assert check_fifo(history(sends, bad)) == []  # FIFO alone does not see it
    # transitively: A:m1 -> B delivers, sends m2 -> C delivers m2, sends m3; D gets m3 before m1
    sends = [("A", "m1", list("ABCD")), ("B", "m2", list("ABCD")), ("C", "m3", list("ABCD"))]
    chain = {
        "A": ["s:m1", "d:m1", "d:m2", "d:m3"],
        "B": ["d:m1", "s:m2", "d:m2", "d:m3"],
        "C": ["d:m1", "d:m2", "s:m3", "d:m3"],
        "D": ["d:m2", "d:m3", "d:m1"],
    }
    found = check_causal(history(sends, chain))
    assert found and "'D' delivered 'm2' before 'm1'" in found[0]
    concurrent = {"A": ["s:m1", "d:m1", "d:m2"], "B": ["s:m2", "d:m2", "d:m1"], "C": ["d:m2", "d:m1"]}
    assert check_causal(history([("A", "m1", ABC), ("B", "m2", ABC)], concurrent)) == []


def test_total_checker_catches_disagreements_and_three_way_cycles() -> None:
    sends = [("A", "a", ABC), ("B", "b", ABC)]
    assert check_total(history(sends, {"A": ["s:a", "d:a", "d:b"], "B": ["s:b", "d:a", "d:b"], "C": ["d:a", "d:b"]})) == []
    found = check_total(history(sends, {"A": ["s:a", "d:a", "d:b"], "B": ["s:b", "d:b", "d:a"], "C": ["d:a", "d:b"]}))
    assert found and "the other way round" in found[0]
    three = [("A", "a", ABC), ("B", "b", ABC), ("C", "c", ABC)]
    cyc = {"A": ["s:a", "d:a", "d:b"], "B": ["s:b", "d:b", "d:c"], "C": ["s:c", "d:c", "d:a"]}
    assert "no single order" in check_total(history(three, cyc))[0]


def test_delivery_checker_catches_duplicates_strangers_and_phantoms() -> None:
    h = history([("A", "a", ["A", "B"])], {"A": ["s:a", "d:a"], "B": ["d:a", "d:a"], "C": ["d:a", "d:zz"]})
    found = check_delivery(h)
    assert "'B' delivered 'a' twice" in found
    assert any("'C' delivered 'a', but it is not among its recipients" in f for f in found)
    assert "'C' delivered 'zz', which nobody sent" in found
    missing = history([("A", "a", ["A", "B"])], {"A": ["s:a", "d:a"]})
    assert check_delivery(missing) == ["'B' never delivered 'a' (sent by 'A' to 'all')"]
    assert check_delivery(missing, dead=["B"]) == []
    assert check_delivery(missing, lost=["A"]) != []  # lost means at every survivor alike: A has it
    nobody = history([("A", "a", ["B", "C"])], {"A": ["s:a"], "C": []})
    assert check_delivery(nobody, dead=["A"], lost=["A"]) == []
    some = history([("A", "a", ["B", "C"])], {"A": ["s:a"], "C": ["d:a"]})
    assert check_delivery(some, dead=["A"], lost=["A"]) == ["'B' never delivered 'a' (sent by 'A' to 'all')"]


# ---- the machines reject what they must not deliver -------------------------------------


def test_machines_refuse_duplicates_and_stay_unchanged() -> None:
    f = FifoReceiver()
    assert f.offer(Data(G, 1, BROADCAST, 1, 2)) == []
    with pytest.raises(ProtocolError, match="duplicate"):
        f.offer(Data(G, 1, BROADCAST, 1, 2))
    assert [d.seq for d in f.offer(Data(G, 1, BROADCAST, 1, 1))] == [1, 2] and f.waiting == 0
    with pytest.raises(ProtocolError, match="start at 1"):
        f.offer(Data(G, 1, BROADCAST, 1, 0))

    c = CausalReceiver([1, 2, 3])
    with pytest.raises(ProtocolError, match="not in the view"):
        c.offer(Data(G, 1, BROADCAST, 9, 1, vc=(0, 0, 1)))
    with pytest.raises(ProtocolError, match="3 members"):
        c.offer(Data(G, 1, BROADCAST, 1, 1, vc=(1, 0)))
    assert c.offer(Data(G, 1, BROADCAST, 2, 1, vc=(1, 1, 0))) == []  # waits for 1's first
    with pytest.raises(ProtocolError, match="duplicate"):
        c.offer(Data(G, 1, BROADCAST, 2, 1, vc=(1, 1, 0)))
    got = c.offer(Data(G, 1, BROADCAST, 1, 1, vc=(1, 0, 0)))
    assert [(d.sender, d.seq) for d in got] == [(1, 1), (2, 1)] and c.clock() == (1, 1, 0)

    t = TotalReceiver()
    with pytest.raises(ProtocolError, match="no stamp"):
        t.offer(Data(G, 1, BROADCAST, 1, 1))
    assert t.offer(Data(G, 1, BROADCAST, 1, 2, stamp=2)) == []
    with pytest.raises(ProtocolError, match="duplicate stamp"):
        t.offer(Data(G, 1, BROADCAST, 1, 2, stamp=2))
    assert [d.stamp for d in t.offer(Data(G, 1, BROADCAST, 1, 1, stamp=1))] == [1, 2]

    s = Sequencer(G, 1, BROADCAST)
    assert [d.stamp for d in s.submit(Submit(G, 1, BROADCAST, 3, 1))] == [1]
    with pytest.raises(ProtocolError, match="duplicate submission"):
        s.submit(Submit(G, 1, BROADCAST, 3, 1))
    with pytest.raises(ProtocolError, match="reached the sequencer"):
        s.submit(Submit(G, 2, BROADCAST, 3, 2))
    s.close()
    assert s.submit(Submit(G, 1, BROADCAST, 3, 2)) == [] and s.stamped() == {3: 1} and s.last_stamp == 1
