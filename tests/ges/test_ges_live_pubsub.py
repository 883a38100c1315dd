"""Live publish/subscribe: broker processes, clients as dispatchers over multi-hop channels, checked end to end."""

from __future__ import annotations

import copy
import random
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

import multihop as mh
from multihop import ges
from multihop.ges.live import LiveSystem, wire
from multihop.ges.pubsub_scenarios import ATTRIBUTES
from session import unique_name

EXAMPLES = Path(ges.__file__).parent / "examples"


def drain_until(clients: list[ges.LiveClient], done: Callable[[dict[str, list]], bool], limit: float = 30.0, settle: float = 0.3) -> dict[str, list]:
    """Receive on every client until ``done(got)`` holds (bounded by ``limit``), then for ``settle`` seconds more, so
    that a late duplicate is caught too, not left behind a quiet period."""
    got: dict[str, list] = {c.client_id: [] for c in clients}
    deadline = time.monotonic() + limit
    settled: float | None = None
    while time.monotonic() < deadline and (settled is None or time.monotonic() < settled):
        for c in clients:
            got[c.client_id] += c.next_many(4096, timeout=0.01)  # blocks briefly: no sleep, no busy loop
        if settled is None and done(got):
            settled = time.monotonic() + settle
    assert settled is not None, "the expected deliveries did not all arrive"
    return got


def nothing_lost(hist: ges.History) -> Callable[[dict[str, list]], bool]:
    """``done`` for :func:`drain_until`: every (event, subscriber) pair the history expects has been delivered."""

    def done(got: dict[str, list]) -> bool:
        h = copy.deepcopy(hist)
        for cid, evs in got.items():
            for e in evs:
                h.deliver(cid, e.id)
        return not ges.check_delivery(h).lost

    return done


def subscribe_randomly(subs: list[ges.LiveClient], rng: random.Random, hist: ges.History, limit: float) -> None:
    """Each client subscribes a random profile of the pub/sub scenarios' attributes (recorded in ``hist``); returns
    once every profile is system active (level 4 of the testbed's), each activation recorded too."""
    for c in subs:
        names = list(ATTRIBUTES)[: rng.randint(1, len(ATTRIBUTES))]
        prof = [(n, "*" if rng.random() < 0.4 else rng.choice(ATTRIBUTES[n])) for n in names]
        hist.subscribe(c.client_id, c.subscribe(prof), prof, time.monotonic())
    deadline = time.monotonic() + limit
    for c in subs:  # wait until every profile is system active
        while c.active_level(1) < 4:
            assert time.monotonic() < deadline, "profiles did not become active"
            time.sleep(0.01)  # the test waits for the brokers; they never poll
        hist.active(c.client_id, 1, time.monotonic())


def publish_randomly_and_check(
    subs: list[ges.LiveClient], pubs: list[ges.LiveClient], rng: random.Random, hist: ges.History, singles: int, batches: int, limit: float = 30.0
) -> ges.DeliveryReport:
    """``singles`` random events round-robin over ``pubs`` (some without an optional attribute), then ``batches``
    growing batches, each followed by a single event of the next publisher; every subscriber drained until nothing
    the history expects is missing; the delivery checker's report, asserted ok."""
    n = len(pubs)
    for k in range(singles):
        content = {a: rng.choice(v) for a, v in ATTRIBUTES.items()}
        if rng.random() < 0.3:
            content.pop("score")
        hist.publish(pubs[k % n].publish(content, payload=bytes([k % 256]) * rng.randint(0, 500)), content, time.monotonic())
    for k in range(batches):  # batches too, interleaved with single events of the other publishers
        batch = [({a: rng.choice(v) for a, v in ATTRIBUTES.items()}, bytes([k]) * rng.randint(0, 500)) for _ in range(1 + 7 * k)]
        for content, eid in zip([c for c, _ in batch], pubs[k % n].publish_many(batch), strict=True):
            hist.publish(eid, content, time.monotonic())
        content = {a: rng.choice(v) for a, v in ATTRIBUTES.items()}
        hist.publish(pubs[(k + 1) % n].publish(content), content, time.monotonic())
    got = drain_until(subs, nothing_lost(hist), limit=limit)
    for cid, evs in got.items():
        for e in evs:
            hist.deliver(cid, e.id)
    report = ges.check_delivery(hist)
    assert report.ok, report.summary()
    return report


@pytest.fixture(scope="module")
def testbed() -> Iterator[LiveSystem]:
    system = LiveSystem.up(ges.Topology.load(EXAMPLES / "paper_fig14.toml"), unique_name("gesps"), timeout=90)
    try:
        yield system
    finally:
        system.down()


def test_22_brokers_100_subscribers_several_publishers(testbed: LiveSystem) -> None:
    rng = random.Random(11)
    name = testbed.name
    addrs = [a for a in testbed.addresses if a not in ("1.5.1.22", "1.6.1.10")]
    hist = ges.History()
    subs: list[ges.LiveClient] = []
    pubs: list[ges.LiveClient] = []
    try:
        for i in range(100):  # 5 on every other broker, as in the paper's testbed
            subs.append(ges.connect(name, addrs[i % len(addrs)], f"s{i}"))
        subscribe_randomly(subs, rng, hist, limit=30)
        pubs = [ges.connect(name, a, f"p{i}") for i, a in enumerate(["1.5.1.22", "1.4.2.17", "1.6.1.10"])]
        report = publish_randomly_and_check(subs, pubs, rng, hist, singles=150, batches=10)
        assert report.delivered > 1000  # the profiles were not all empty
        st = testbed.status("1.6.1.9")
        assert st["events"]["decisions"] > 0 and st["clients"] == 5
    finally:
        for c in subs + pubs:
            c.close()


def test_bad_client_input_is_refused_and_the_broker_goes_on(testbed: LiveSystem) -> None:
    name = testbed.name
    c = ges.connect(name, "1.4.1.5", "bad")
    try:
        with pytest.raises(ValueError):
            c.subscribe([("", 1)])  # refused before anything is sent
        c.ch.send(wire.client_stub.encode("publish", timestamp=1, sequence=0, signature="a:int", values="sx", payload=b""))
        c.ch.send(wire.client_stub.encode("publish", timestamp=1, sequence=1, signature="a:nope", values="i1", payload=b""))
        c.ch.send(b"\xff\xff")
        deadline = time.monotonic() + 10
        while len(c.refusals) < 3 and time.monotonic() < deadline:
            c.next_many(timeout=0.1)
        whats = [w for w, _ in c.refusals]
        assert whats == ["publish", "publish", "message"], c.refusals
        assert "declared int" in c.refusals[0][1] and "signature" in c.refusals[1][1]
        sid = c.subscribe([("topic", "news")])
        assert c.active_level(sid) >= 0  # the channel still works
        with pytest.raises(ges.GesStateError, match="wait_stored: client 'bad' is not durable"):
            c.wait_stored(1.0)  # a system without stable storage stores nothing to wait for
    finally:
        c.close()
    # a channel that does not say who it is gets closed
    d = testbed.runtime.dispatcher(0)
    try:
        ch = d.bind(wire.service_name(testbed.config["system"], "1.4.1.5"), transport="multihop", timeout=10)
        ch.send(wire.stub.encode("hello", kind=2, address=0, incarnation=0, cost=0, system=testbed.config["system"]))
        ch.send(wire.client_stub.encode("unsubscribe", sub=1))
        with pytest.raises(mh.ChannelClosed):
            for _ in range(100):
                ch.recv(timeout=5)
    finally:
        d.detach()
    assert testbed.differences() == []


def test_publish_many_sends_the_events_before_a_refused_one(testbed: LiveSystem) -> None:
    name = testbed.name
    sub = ges.connect(name, "1.6.2.20", "many-sub")
    pub = ges.connect(name, "1.4.1.4", "many-pub")
    try:
        sid = sub.subscribe([("topic", "*")])
        deadline = time.monotonic() + 30
        while sub.active_level(sid) < 4:
            assert time.monotonic() < deadline, "the profile did not become active"
            time.sleep(0.01)
        good = [({"topic": "news", "n": k}, bytes([k])) for k in range(3)]
        with pytest.raises(ValueError):
            pub.publish_many([*good, ({"": 1}, b""), ({"topic": "news", "n": 99}, b"")])
        ids = pub.publish_many([({"topic": "news", "n": k}, b"later") for k in range(3, 6)])
        assert [e.sequence for e in ids] == [3, 4, 5]  # the refused event used no sequence number
        got: list[ges.Event] = []
        deadline = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < deadline:
            got += sub.next_many(timeout=0.1)
        assert [e.content["n"] for e in got] == [0, 1, 2, 3, 4, 5]
        assert [e.payload for e in got[:3]] == [b"\x00", b"\x01", b"\x02"]
        assert sub.next_many(timeout=0.3) == []  # and not the one after the refused event
    finally:
        sub.close()
        pub.close()


@pytest.mark.parametrize(
    "engine,codec,transport",
    [("native", "native", "ump"), ("python", "native", "ump"), ("python", "stub", "ump"), ("native", "native", "multihop")],
    ids=["native-engine", "native-codec", "stub-codec", "native-engine-multihop"],
)
def test_gateway_loss_mid_stream_live(engine: str, codec: str, transport: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway in use is closed mid-stream; the broker sends its unacknowledged copies over the other
    gateway first: the subscriber gets every event once and in order. With the native engine (the default),
    and with the Python event path (``MULTIHOP_GES_ENGINE=python``), its event batches through the native
    codec (the default) and through the generated stub (``MULTIHOP_GES_NATIVE=0``); over direct UMP channels (the
    default transport), and the native engine also over multi-hop channels (``transport="multihop"``)."""
    monkeypatch.setenv("MULTIHOP_GES_ENGINE", engine)  # read by the broker processes at start
    if codec == "stub":
        monkeypatch.setenv("MULTIHOP_GES_NATIVE", "0")
    t = ges.Topology(levels=3)
    for a in ("1.1.1.1", "1.1.1.2", "1.1.2.1", "1.1.2.2", "1.1.2.3"):
        t.add_broker(a)
    for a, b in (("1.1.1.1", "1.1.1.2"), ("1.1.1.2", "1.1.2.1"), ("1.1.1.2", "1.1.2.2"), ("1.1.2.1", "1.1.2.3"), ("1.1.2.2", "1.1.2.3")):
        t.add_gateway(a, b)
    with LiveSystem.up(t, unique_name("gesloss"), timeout=60, transport=transport) as system:
        sub = ges.connect(system.name, "1.1.2.3", "s")
        pub = ges.connect(system.name, "1.1.1.1", "p")
        try:
            sub.subscribe([("n", "*")])
            deadline = time.monotonic() + 20
            while sub.active_level(1) < 4:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert system.shadow is not None
            x = system.shadow.broker("1.1.1.2")
            used = ges.Address.from_code(x.gpp.hop_to(ges.Address("1.1.2.3").unit_id(1)), 3)
            sent, got = [], []
            for i in range(400):
                sent.append(pub.publish({"n": i}))
                if i % 20 == 0:
                    got += [e.id for e in sub.next_many(timeout=0)]
                if i == 200:
                    system.remove_gateway("1.1.1.2", str(used))
            missing = len(sent) - len(got)
            got += [e.id for e in drain_until([sub], lambda g: len(g["s"]) >= missing)["s"]]
            assert got == sent
            system.wait_converged(20)
            assert {(system.status(a)["engine"], system.status(a)["codec"], system.status(a)["transport"]) for a in system.addresses} == {
                (engine, codec, transport)
            }
            assert (sub.ch.stats()["transport"], pub.ch.stats()["transport"]) == (transport, transport)
        finally:
            sub.close()
            pub.close()


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_each_transport_delivers_and_a_killed_broker_is_seen(transport: str) -> None:
    """``transport="ump"`` (the default: gateways and clients' channels are direct UMP channels, no monitor
    on the way) and ``"multihop"`` (through the monitors): the random checker's publications all arrive, in
    order, exactly once; a killed broker is seen by its neighbours as lost gateways and every graph
    converges to the simulator's; the events then go around it. A bad transport is refused before
    anything starts, naming the choices."""
    t = ges.Topology(levels=3)
    for a in ("1.1.1.1", "1.1.1.2", "1.1.2.1", "1.1.2.2", "1.1.2.3"):
        t.add_broker(a)
    for a, b in (("1.1.1.1", "1.1.1.2"), ("1.1.1.2", "1.1.2.1"), ("1.1.1.2", "1.1.2.2"), ("1.1.2.1", "1.1.2.3"), ("1.1.2.2", "1.1.2.3")):
        t.add_gateway(a, b)
    with pytest.raises(ValueError, match="transport must be one of ump, multihop, got 'tcp'"):
        LiveSystem.up(t, unique_name("gestr"), transport="tcp")
    rng = random.Random(5)
    with LiveSystem.up(t, unique_name("gestr"), timeout=60, transport=transport) as system:
        subs = [ges.connect(system.name, a, f"s{i}") for i, a in enumerate(["1.1.1.1", "1.1.2.3", "1.1.2.1", "1.1.2.3"])]
        pubs = [ges.connect(system.name, a, f"p{i}") for i, a in enumerate(["1.1.1.2", "1.1.2.2"])]
        try:
            assert {c.ch.stats()["transport"] for c in subs + pubs} == {transport}
            assert {system.status(a)["transport"] for a in system.addresses} == {transport}
            hist = ges.History()
            subscribe_randomly(subs, rng, hist, limit=10)
            report = publish_randomly_and_check(subs, pubs, rng, hist, singles=60, batches=4)
            assert report.delivered > 50
            system.kill("1.1.2.1")
            system.wait_converged(30)
            st = system.status("1.1.2.3")
            assert "1.1.2.1" not in [link["peer"] for link in st["links"]] and st["counters"]["closed"] >= 1
            # around the killed broker (1.1.2.3 is now reached over 1.1.2.2 only)
            after = ges.connect(system.name, "1.1.2.3", "after")
            subs.append(after)
            after.subscribe([("n", "*")])
            deadline = time.monotonic() + 20
            while after.active_level(1) < 4:
                assert time.monotonic() < deadline, "the profile did not become active"
                time.sleep(0.01)
            sent = [pubs[0].publish({"n": i}) for i in range(50)]
            got = [e.id for e in drain_until([after], lambda g: len(g["after"]) >= len(sent))["after"]]
            assert got == sent
        finally:
            for c in subs + pubs:
                c.close()
