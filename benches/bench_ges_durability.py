"""GES durability: persistent publish throughput and latency, replay rate, and the random fault scenarios at scale.

Usage::

    .venv/bin/python benches/bench_ges_durability.py [--events 100000] [--batches 1,100,1000]
        [--replay 100000] [--synchronous FULL] [--scenarios 1000] [--quick]

**Persistent publish.**  One storage broker's protocol core (:class:`BrokerCore` with
:class:`SqliteStorage`, WAL, ``synchronous`` FULL by default) takes a client's 100-byte
events through the whole durable path: the client's ``Publish`` is relayed to its home
store, which checks the publisher's order, stores the event with the bit vector of the
clients homed there whose profile matches (one durable subscriber, away, so every event
stays stored), routes it, and answers "stored"; the broker commits once per round
(``take_outbox``), as the live broker does once per loop.  A round takes ``B`` events
(``--batches``): events stored *and acknowledged* per second, and the latency of a round
(publish to "stored", the commit included).  Same run, same path: the same core on the
in-memory store (:class:`MemoryStorage`), and the floor: SQLite's own rate for inserting
the same rows (``executemany`` + commit per batch, same file settings).  Ratios are printed.

**Replay.**  A client that missed ``--replay`` events resumes: the store sends them in
windows, the client acknowledges each delivery, the store garbage collects (deletes) them;
events replayed per second until the store is empty, on SQLite and in memory.

**Live** (``--live``): the same on broker processes: a durable system of one cluster (storage broker
1.1.1 and broker 1.1.2), a publisher on 1.1.2 publishing 100-byte events and waiting until all are
stored (its home is 1.1.1: a hop, a commit, the "stored" back); baseline in the same run: the same
publisher on a system without storage, until a subscriber on 1.1.1 received them all. Then a
subscriber away for ``--replay`` events resumes and receives them (events/s at the client).

**Scenarios.**  ``--scenarios N`` runs the Jepsen-style random fault scenarios of the test
(``tests/ges/test_ges_durability.py`` runs 200) for seeds 0..N-1 and prints how many failed.

Goals (issue 13): persistent publish >= 50,000 events/s with batched commits, replay >=
200,000 events/s.  Single process, in-process cores: no channels, no broker processes
(the live tests cover those).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from multihop.ges.address import Address, unit_id
from multihop.ges.broker import BrokerCore
from multihop.ges.event import EventId, make_event
from multihop.ges.messages import DurableAck, DurableAttach, DurableDeliver, Publish, Stored, Subscribe
from multihop.ges.profile import make_chain
from multihop.ges.storage import MemoryStorage
from multihop.ges.storage_sqlite import SqliteStorage

ME = Address("1.1.1", 2)
PUB, SUB = -101, -102
PAYLOAD = b"p" * 100
#: the durable clients' secrets (a first connect registers one, a resume presents it: docs/ges.md, trust model)
SUB_CREDENTIAL = "bench-subscriber-credential"
PUB_CREDENTIAL = "bench-publisher-credential"


def _core(storage: Any) -> BrokerCore:
    core = BrokerCore(ME, storage_brokers={unit_id(ME.code, 1, 2): ME.code}, storage=storage)
    core.client_attach(SUB, DurableAttach("sub", 1, -1, -1, (), False, SUB_CREDENTIAL))
    core.client_receive(SUB, Subscribe(1, make_chain([("n", "*")])))
    core.take_outbox()
    core.client_detach(SUB)  # away: everything published stays stored for it
    core.client_attach(PUB, DurableAttach("pub", 1, -1, -1, (), False, PUB_CREDENTIAL))
    core.take_outbox()
    return core


def publish_run(storage: Any, n: int, batch: int) -> tuple[float, list[float], float]:
    """Events stored and acknowledged per second (wall clock), each round's latency (s), and events per CPU second."""
    core = _core(storage)
    evs = [make_event(EventId("pub", 1, i, 1), {"n": i}, PAYLOAD) for i in range(n)]
    lat = []
    acked = 0
    prev = None
    t0 = time.perf_counter()
    c0 = time.process_time()
    for start in range(0, n, batch):
        r0 = time.perf_counter()
        for ev in evs[start : start + batch]:
            core.client_receive(PUB, Publish(ev, prev))
            prev = ev.id
        out = core.take_outbox()
        lat.append(time.perf_counter() - r0)
        for m in out.get(PUB, ()):
            if type(m) is Stored:
                acked = m.ids[-1].sequence + 1
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    if acked != n:
        raise SystemExit(f"only {acked} of {n} events acknowledged")
    st = core.durability.store
    assert st is not None and len(st.entries) == n, "every event must stay stored for the away subscriber"
    return n / dt, lat, n / cpu


def replay_run(storage: Any, n: int) -> tuple[float, float]:
    """A subscriber that missed ``n`` events resumes: events replayed (and collected) per second, per CPU second."""
    core = _core(storage)
    prev = None
    for start in range(0, n, 5000):
        for i in range(start, min(n, start + 5000)):
            ev = make_event(EventId("pub", 1, i, 1), {"n": i}, PAYLOAD)
            core.client_receive(PUB, Publish(ev, prev))
            prev = ev.id
        core.take_outbox()
    st = core.durability.store
    assert st is not None and len(st.entries) == n
    got = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    core.client_attach(SUB, DurableAttach("sub", 2, ME.code, ME.code, (), True, SUB_CREDENTIAL))
    for _ in range(10 * n):  # bounded: each round delivers a window
        out = core.take_outbox().get(SUB, ())
        last = None
        for m in out:
            if type(m) is DurableDeliver:
                got += len(m.entries)
                last = m.entries[-1][0]
        if last is not None:
            core.client_receive(SUB, DurableAck(last))
        elif not st.entries:
            break
    core.take_outbox()  # the last commit
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    if got != n or st.entries:
        raise SystemExit(f"replay: got {got} of {n}, {len(st.entries)} left stored")
    return n / dt, n / cpu


def sqlite_floor(path: Path, n: int, batch: int, synchronous: str) -> float:
    """SQLite inserting the same rows (100 B payloads) in transactions of ``batch``: rows per second."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute(
        "CREATE TABLE events (entry INTEGER PRIMARY KEY, publisher TEXT, ts INTEGER, seq INTEGER, inc INTEGER, "
        "signature TEXT, vals TEXT, payload BLOB, bits BLOB)"
    )
    rows = [(i + 1, "pub", 1, i, 1, "n:int", f"i{i}", PAYLOAD, b"\x03") for i in range(n)]
    t0 = time.perf_counter()
    for s in range(0, n, batch):
        db.execute("BEGIN")
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows[s : s + batch])
        db.execute("COMMIT")
    dt = time.perf_counter() - t0
    db.close()
    return n / dt


def live(n: int, replay: int) -> None:
    """The live figures (see the module docstring)."""
    from multihop import ges
    from multihop.ges.live import LiveSystem

    t = ges.Topology(levels=2)
    t.add_broker("1.1.1")
    t.add_broker("1.1.2")
    t.add_gateway("1.1.1", "1.1.2")

    def wait_active(c: Any, sid: int) -> None:
        deadline = time.monotonic() + 30
        while c.active_level(sid) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)

    name = f"bench-gesdur-{os.getpid()}"
    with LiveSystem.up(t, name, timeout=60):
        sub = ges.connect(name, "1.1.1", "s")
        wait_active(sub, sub.subscribe([("n", "*")]))
        pub = ges.connect(name, "1.1.2", "p")
        t0 = time.perf_counter()
        got = 0
        for i in range(n):
            pub.publish({"n": i}, PAYLOAD)
            if i % 1000 == 999:
                got += len(sub.next_many(1 << 20, timeout=0))
        while got < n:
            more = sub.next_many(1 << 20, timeout=10)
            if not more:
                raise SystemExit(f"plain live: {got} of {n} delivered")
            got += len(more)
        base = n / (time.perf_counter() - t0)
        sub.close()
        pub.close()
    with LiveSystem.up(t, name + "d", timeout=60, durable=True) as dur:
        away = ges.connect(dur.name, "1.1.1", "away")
        wait_active(away, away.subscribe([("n", "*")]))
        away.disconnect()
        pub = ges.connect(dur.name, "1.1.2", "p")
        t0 = time.perf_counter()
        for i in range(n):
            pub.publish({"n": i}, PAYLOAD)
        pub.wait_stored(120)
        ours = n / (time.perf_counter() - t0)
        print(
            f"live persistent publish: {ours:,.0f} events/s stored and acknowledged at the publisher; "
            f"without storage, delivered to a subscriber: {base:,.0f}/s ({ours / base:.2f}x)"
        )
        for i in range(n, replay):
            pub.publish({"n": i}, PAYLOAD)
        pub.wait_stored(300)
        deadline = time.monotonic() + 120
        while dur.status("1.1.1")["durability"]["store"]["clients"]["away"]["pending"] < max(n, replay):
            if time.monotonic() > deadline:
                raise SystemExit("the events did not all reach the store")
            time.sleep(0.05)
        t0 = time.perf_counter()
        back = ges.connect(dur.name, "1.1.2", "away", resume=True)
        got = 0
        while got < max(n, replay):
            more = back.next_many(1 << 20, timeout=10)
            if not more:
                raise SystemExit(f"live replay: {got} of {max(n, replay)}")
            got += len(more)
        rate = got / (time.perf_counter() - t0)
        print(f"live replay of {got} missed events: {rate:,.0f} events/s at the client")
        back.close()
        pub.close()


def scenarios(n: int) -> int:
    from multihop.ges.durable_scenarios import run_durable_scenario

    bad = 0
    t0 = time.perf_counter()
    totals: dict[str, int] = {}
    replayed = events = 0
    for seed in range(n):
        r = run_durable_scenario(seed)
        events += r.events
        replayed += r.report.replayed
        for k, v in r.faults.items():
            totals[k] = totals.get(k, 0) + v
        if not r.ok:
            bad += 1
            print(f"  seed {seed}: {r.report.summary()}; left in storage {r.left_in_storage}, in queues {r.left_in_queues}")
    print(f"scenarios: {n} seeds in {time.perf_counter() - t0:.1f} s, {events} events, {replayed} replayed deliveries, faults {totals}: {bad} failed")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--batches", default="1,100,1000")
    ap.add_argument("--replay", type=int, default=100_000)
    ap.add_argument("--synchronous", default="FULL", choices=["FULL", "NORMAL"])
    ap.add_argument("--scenarios", type=int, default=0)
    ap.add_argument("--live", action="store_true", help="also measure on broker processes")
    ap.add_argument("--quick", action="store_true", help="10,000 events, replay 10,000, batches 100,1000")
    a = ap.parse_args()
    if a.quick:
        a.events, a.replay, a.batches = 10_000, 10_000, "100,1000"
    batches = [int(x) for x in a.batches.split(",")]
    load = os.getloadavg()[0]
    print(f"GES durability bench: {a.events} events of 100 B, SQLite {sqlite3.sqlite_version} WAL synchronous={a.synchronous}, load {load:.2f}")
    with tempfile.TemporaryDirectory(prefix="ges-dur-") as tmp:
        d = Path(tmp)
        print("events/s on the wall clock (the machine is shared: see the load) and per CPU second of this process")
        print(
            f"{'batch':>6} {'sqlite ev/s':>12} {'(per CPU-s)':>12} {'memory ev/s':>12} {'raw insert/s':>13} {'vs memory':>10} {'vs raw':>7} "
            f"{'round p50':>10} {'round p99':>10}"
        )
        for b in batches:
            n = a.events if b > 1 else min(a.events, 5000)
            f = d / f"pub-{b}.db"
            ours, lat, ours_cpu = publish_run(SqliteStorage(f, str(ME), a.synchronous), n, b)
            mem, _, _ = publish_run(MemoryStorage(), n, b)
            raw = sqlite_floor(d / f"raw-{b}.db", n, b, a.synchronous)
            lat.sort()
            p50 = statistics.median(lat)
            p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            print(
                f"{b:>6} {ours:>12,.0f} {ours_cpu:>12,.0f} {mem:>12,.0f} {raw:>13,.0f} {ours / mem:>9.2f}x {ours / raw:>6.2f}x "
                f"{p50 * 1e3:>8.2f}ms {p99 * 1e3:>8.2f}ms"
            )
        big = max(batches)
        ours, _, ours_cpu = publish_run(SqliteStorage(d / "goal.db", str(ME), a.synchronous), a.events, big)
        print(
            f"persistent publish, batches of {big}: {ours:,.0f} events/s, {ours_cpu:,.0f} per CPU second "
            f"(goal 50,000: {'met' if ours >= 50_000 else 'MISSED'} on the wall clock)"
        )
        rep, rep_cpu = replay_run(SqliteStorage(d / "replay.db", str(ME), a.synchronous), a.replay)
        rep_mem, _ = replay_run(MemoryStorage(), a.replay)
        print(
            f"replay of {a.replay} missed events: {rep:,.0f} events/s on SQLite ({rep_cpu:,.0f} per CPU second), "
            f"{rep_mem:,.0f} in memory ({rep / rep_mem:.2f}x); goal 200,000: {'met' if rep >= 200_000 else 'MISSED'} on the wall clock"
        )
    if a.live:
        live(a.events, a.replay)
    if a.scenarios:
        return 1 if scenarios(a.scenarios) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
