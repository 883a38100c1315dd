"""Live dispatch domains: real peer processes, real monitors and shared-memory channels, real SIGKILL.

Each test starts its runtime(s) and peers in fixtures that stop everything
even when the test fails; every wait is bounded.  The recorded deliveries are
judged with the checkers of ``multihop.news.checkers``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

import psutil
import pytest

import dispatch_procs
import multihop as mh
from multihop import news
from multihop.news import checkers
from multihop.news import system as dispatch_system
from multihop.news.ids import Nid, domain_id, hex_id, new_id, new_identity, parse_hex
from multihop.news.naming import listed_peers, peer_service, register_peer, relay_service
from multihop.news.partition import owner_map
from multihop.news.relay import RELAY_SYSTEM
from multihop.news.sim import Sent
from multihop.news.wire import M, decode, encode
from session import unique_name

CTX = mp.get_context("spawn")
FAST = news.PeerConfig(heartbeat=0.05, dead_after=0.4)


@contextmanager
def domain(
    peers: int, config: news.PeerConfig = FAST, cores: tuple[int, ...] = (0, 1), name: str | None = None
) -> Iterator[tuple[mh.Runtime, news.System]]:
    """A runtime and its dispatch peers, all stopped at the end whatever happens."""
    rt = mh.Runtime.start(name or unique_name("dsp"), cores=list(cores))
    system = None
    try:
        system = news.start(rt.name, peers, config=config)
        yield rt, system
    finally:
        if system is not None:
            system.stop()
        rt.stop()


@contextmanager
def child_sink(rt: mh.Runtime, topics: list[str], want: int, qos: dict[str, Any] | None = None, seconds: float = 60.0) -> Iterator[tuple[Nid, Any]]:
    """A sink in its own process; yields (its id, the queue its recording arrives on); killed at the end."""
    ready, result = CTX.Queue(), CTX.Queue()
    p = CTX.Process(target=dispatch_procs.record_sink, args=(rt.name, topics, want, qos or {}, ready, result, seconds), daemon=True)
    p.start()
    try:
        hi, lo = ready.get(timeout=30)
        yield Nid(hi, lo), result
    finally:
        if p.is_alive():
            p.join(timeout=5)
        if p.is_alive():
            p.kill()
        p.join(10)


def serving_peer(system: news.System, sink: Nid) -> news.PeerProcess:
    """The peer process that serves ``sink`` now."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for pid, st in system.status().items():
            if st.get("sinks", {}).get(hex_id(sink), {}).get("served_here"):
                return next(p for p in system.peers if hex_id(p.id) == pid)
        time.sleep(0.02)
    raise AssertionError(f"no peer serves sink {hex_id(sink)}")


def received(result: Any) -> tuple[list[news.News], dict[str, Any]]:
    """The recording a child sink sent back, as News (payload left out)."""
    got, stats = result.get(timeout=90)
    recorded = [news.News(Nid(a, b), seq, 0, ("n",), 0, Nid(0, 0), b"", age, Nid(c, d)) for a, b, seq, c, d, age in got]
    return recorded, stats


def test_reliable_sink_gets_every_news_once_across_a_sigkill_of_its_peer() -> None:
    """Three peers; the peer serving a reliable sink (in its own process) is SIGKILLed mid-stream."""
    n = 3000
    with domain(3) as (rt, system), child_sink(rt, ["n"], n) as (sink, result):
        other = news.sink(rt.name, ["n"])  # a second reliable sink, in this process
        victim = serving_peer(system, sink)
        got_other: list[news.News] = []
        with news.source(rt.name, qos=news.SourceQoS(priority=2)) as src:
            for i in range(n):
                src.send(["n"], i.to_bytes(4, "little"))
                if i == n // 3:
                    system.kill(victim)
                while (x := other.try_next()) is not None:
                    got_other.append(x)
            deadline = time.monotonic() + 30
            while len(got_other) < n and time.monotonic() < deadline:
                try:
                    got_other.append(other.next(timeout=0.5))
                except mh.Timeout:
                    pass
            got, stats = received(result)
        sent = [Sent(src.id, i, 2, ("n",), 0) for i in range(n)]
        checkers.no_loss_in_order(sent, {sink: got, other.id: got_other}, topics={sink: ["n"], other.id: ["n"]}).assert_ok()
        peers = {x.peer for x in got}
        assert victim.id in peers and len(peers) == 2, "served by the victim, then by a survivor"
        assert stats["delivered"] == n
        live = system.status()
        assert len(live) == 2 and all(len(s["members"]) == 2 for s in live.values())
        other.close()


def sink_partitions(system: news.System, ids: list[Nid]) -> dict[Nid, int]:
    """Each sink's partition, as the peers registered it."""
    out: dict[Nid, int] = {}
    for st in system.status().values():
        for k, v in st.get("sinks", {}).items():
            out[parse_hex(k)] = v["partition"]
    assert set(ids) <= set(out), "every sink is registered"
    return {k: out[k] for k in ids}


def identity_taking_sinks(active: list[Nid], leaving: Nid, parts: list[int], partitions: int) -> tuple[Nid, bytes]:
    """A peer identity that, joining ``active``, serves at least one of the partitions ``parts`` and leaves ``leaving`` one.

    Which partitions a peer serves follows from its id (rendezvous hashing), and the protocol promises a new
    peer about 1/n of the partitions, not of the sinks: with a drawn id the new peer of the test below serves
    none of its four sinks after the join about one run in five, and one run in twenty neither after the
    join nor after the leave (it then delivers nothing, rightly).  Ids are any node's own random data, so
    the test draws until the join and the leave both move a sink (a few draws).
    """
    for _ in range(10_000):
        me, secret = new_identity("peer")
        owners = owner_map(partitions, [*active, me])
        if any(owners[p] == me for p in parts) and any(owners[p] == leaving for p in parts):
            return me, secret
    raise AssertionError("no peer identity serves one of the sinks' partitions")


def test_a_peer_joining_and_one_leaving_mid_stream_lose_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer joins, then one leaves, while a reliable source sends: every sink gets every news once, in order,
    and each peer that served a sink's partition on the way (the new one and the leaving one among them)
    delivered to it.  The new peer's id is chosen so that the join and the leave both move a sink."""
    n = 2400
    with domain(2) as (rt, system), child_sink(rt, ["n"], n) as (sink, result):
        sinks = [news.sink(rt.name, ["n"]) for _ in range(3)]
        got: dict[Nid, list[news.News]] = {s.id: [] for s in sinks}
        first = system.peers[0]
        starting = [p.id for p in system.peers]
        parts = sink_partitions(system, [sink, *got])
        partitions = system.config.partitions
        identity = identity_taking_sinks(starting, first.id, sorted(set(parts.values())), partitions)
        maps = [owner_map(partitions, starting), owner_map(partitions, [*starting, identity[0]])]
        maps.append(owner_map(partitions, [p for p in (*starting, identity[0]) if p != first.id]))
        joined = None
        with news.source(rt.name) as src:
            for i in range(n):
                src.send(["n"], b"x")
                if i == n // 3:
                    with monkeypatch.context() as mp_:
                        mp_.setattr(dispatch_system, "new_identity", lambda kind="node": identity)
                        joined = system.add_peer(timeout=20)
                    assert joined.id == identity[0]
                if i == 2 * n // 3:
                    system.retire(first)
                for s in sinks:
                    while (x := s.try_next()) is not None:
                        got[s.id].append(x)
            deadline = time.monotonic() + 30
            while any(len(g) < n for g in got.values()) and time.monotonic() < deadline:
                for s in sinks:
                    while (x := s.try_next()) is not None:
                        got[s.id].append(x)
                time.sleep(0.005)
            child_got, _ = received(result)
        got[sink] = child_got
        sent = [Sent(src.id, i, 0, ("n",), 0) for i in range(n)]
        checkers.no_loss_in_order(sent, got, topics={k: ["n"] for k in got}).assert_ok()
        assert not first.alive and first.proc.returncode == 0  # it left gracefully
        assert joined is not None
        st = system.status()[hex_id(joined.id)]
        assert st["active"] and st["counters"].get("delivered", 0) > 0, "the new peer took partitions and served them"
        for sid, part in parts.items():
            owners = {m[part] for m in maps}  # before the join, after it, after the leave
            assert owners <= {x.peer for x in got[sid]}, f"sink {hex_id(sid)}: every peer that served its partition delivered to it"
        for s in sinks:
            s.close()


def test_relays_carry_news_between_two_domains() -> None:
    """Domains on runtimes A and B, relays over a third runtime (the relay domain) that only relays share."""
    with ExitStack() as stack:
        a = stack.enter_context(domain(1, cores=(0,)))[0]
        b = stack.enter_context(domain(2, cores=(1,)))[0]
        relays = stack.enter_context(mh.Runtime.start(unique_name("relays"), cores=[0]))
        stack.enter_context(news.relay(a.name, relays.name, ["world"]))
        stack.enter_context(news.relay(b.name, relays.name, ["world"]))
        src_a = stack.enter_context(news.source(a.name, qos=news.SourceQoS(priority=7)))
        src_b = stack.enter_context(news.source(b.name))
        snk_a = stack.enter_context(news.sink(a.name, ["world"]))
        snk_b = stack.enter_context(news.sink(b.name, ["world", "local"], qos=news.SinkQoS(max_delivery_time=5)))
        sent_a = [src_a.send(["world"], b"a%d" % i) for i in range(50)]
        sent_b = [src_b.send(["world"], b"b%d" % i) for i in range(50)]
        src_b.send(["local"], b"stays in B")
        got: dict[Any, list[news.News]] = {snk_a: [], snk_b: []}
        deadline = time.monotonic() + 20
        while (len(got[snk_a]) < 100 or len(got[snk_b]) < 101) and time.monotonic() < deadline:
            for s, g in got.items():
                while (x := s.try_next()) is not None:
                    g.append(x)
            time.sleep(0.005)
        world = [Sent(src_a.id, i, 7, ("world",), 0) for i in range(len(sent_a))] + [Sent(src_b.id, i, 0, ("world",), 0) for i in range(len(sent_b))]
        local = [Sent(src_b.id, 50, 0, ("local",), 0)]
        checkers.no_loss_in_order(
            world + local, {snk_a.id: got[snk_a], snk_b.id: got[snk_b]}, topics={snk_a.id: ["world"], snk_b.id: ["world", "local"]}
        ).assert_ok()
        from_a = [x for x in got[snk_b] if x.source == src_a.id]
        assert {x.origin for x in from_a} == {news.ids.domain_id(a.name, "main")}
        assert all(x.priority == 7 for x in from_a)  # the QoS travelled with the news
        checkers.none_later_than_the_bound({snk_b.id: got[snk_b]}, {snk_b.id: 5 * 10**9}).assert_ok()


def test_a_relay_takes_the_news_that_came_before_another_relays_hello_and_nothing_else() -> None:
    """Another relay answers a new relay's hello with a message that is not news, then a news, then its hello:
    the new relay keeps the news (its local sink gets it) and ignores the rest (it used to take every early
    message for a news, and the thread that injects news died on the first that was not one)."""
    with ExitStack() as stack:
        a = stack.enter_context(domain(1, cores=(0,)))[0]
        snk = stack.enter_context(news.sink(a.name, ["world"]))
        relays = stack.enter_context(mh.Runtime.start(unique_name("relays"), cores=[0]))
        other = new_id("relay")
        d = relays.dispatcher(0)
        stack.callback(d.detach)
        svc = d.export(relay_service(RELAY_SYSTEM, other))
        register_peer(relays, RELAY_SYSTEM, other, {"pid": os.getpid(), "local": "elsewhere", "system": "main"}, "relay")
        elsewhere, source = domain_id("elsewhere", "main"), new_id("source")
        channels: list[mh.Channel] = []
        stack.callback(lambda: [ch.close() for ch in channels])
        failed: list[BaseException] = []

        def answer() -> None:  # the other relay, in a thread: news.relay() below waits for its hello
            try:
                ch = svc.accept(timeout=30)
                channels.append(ch)
                assert decode(ch.recv(timeout=30)).name == "relay_hello"
                ch.send(encode(M.messages.status_request(0)))
                ch.send(encode(M.messages.news(source, 0, 0, time.monotonic_ns(), elsewhere, "world", b"early")))
                ch.send(encode(M.messages.relay_hello(other, elsewhere)))
            except BaseException as e:  # reported by the test thread
                failed.append(e)

        t = threading.Thread(target=answer, daemon=True)
        t.start()
        stack.enter_context(news.relay(a.name, relays.name, ["world"]))
        t.join(30)
        assert not t.is_alive() and not failed, failed
        got = snk.next(timeout=20)
        assert (got.source, got.seq, got.payload, got.origin) == (source, 0, b"early", elsewhere)


def test_bad_input_gets_clear_errors_and_other_sinks_are_unaffected() -> None:
    cfg = news.PeerConfig(heartbeat=0.05, dead_after=0.4, topics=("sport", "tech"), window=8)
    with domain(2, config=cfg) as (rt, system):
        with pytest.raises(news.QosError, match="min_per_unit=9 is above max_per_unit=3"):
            news.source(rt.name, qos=news.SourceQoS(min_per_unit=9, max_per_unit=3))
        with pytest.raises(news.QosError, match="min_delivery_time=2 s is above max_delivery_time=1 s"):
            news.sink(rt.name, ["sport"], qos=news.SinkQoS(min_delivery_time=2, max_delivery_time=1))
        with pytest.raises(
            news.UnknownTopic,
            match=r"unknown topic\(s\) \['golf'\]; this domain declares only: "
            "sport, tech",
        ):
            news.sink(rt.name, ["sport", "golf"])
        with pytest.raises(news.TopicError, match="topic 'sport' is listed twice"):
            news.sink(rt.name, ["sport", "sport"])
        with pytest.raises(news.UnknownTopic, match="exclusive names \\['tech'\\]"):
            news.sink(rt.name, ["sport"], qos=news.SinkQoS(exclusive=["tech"]))
        with pytest.raises(news.NoPeers, match="no dispatch peer of system 'other'"):
            news.source(rt.name, system="other")
        src = news.source(rt.name)
        with pytest.raises(news.UnknownTopic, match="golf"):
            src.send(["golf"], b"")
        with pytest.raises(news.PayloadTooLarge):
            src.send(["sport"], bytes(news.MAX_PAYLOAD + 1))
        # a sink that never reads: bounded at the peers, counted; the other sink gets everything
        stuck = news.sink(rt.name, ["sport"], qos=news.SinkQoS(queue_limit=50))
        fine = news.sink(rt.name, ["sport"])
        # garbage on a peer's channel: that channel is dropped, the peer serves on
        d = rt.dispatcher(0)
        junk = d.bind(peer_service("main", system.peers[0].id), timeout=5)
        junk.send(b"\xff\xfe not a dispatch message")
        for i in range(500):
            src.send(["sport"], b"%d" % i)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 500 and time.monotonic() < deadline:
            try:
                got.append(fine.next(timeout=0.5))
            except mh.Timeout:
                pass
        assert [int(x.payload) for x in got] == list(range(500))
        st = system.status()
        q = [s["sinks"][hex_id(stuck.id)] for s in st.values()]
        assert all(x["queued"] <= 50 for x in q)
        assert sum(x["overflowed"] for x in q if x["served_here"]) == 500 - 8 - 50  # window 8, then queue 50
        assert st[hex_id(system.peers[0].id)]["driver"]["malformed"] == 1
        assert all(p.alive for p in system.peers)
        with pytest.raises(mh.ChannelClosed):
            for _ in range(100):
                junk.recv(timeout=1.0)
        d.detach()
        for c in (src, stuck, fine):
            c.close()


def test_cli_up_status_down(tmp_path: Any) -> None:
    """`multihop news up|status|down` on a runtime started with `multihop up`."""
    name = unique_name("dspcli")
    cli = [sys.executable, "-m", "multihop.cli"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=60, env=os.environ.copy())

    r = run("up", name, "--cores", "0-1")
    assert r.returncode == 0, r.stderr
    try:
        r = run("news", "up", name, "--peers", "2", "--topics", "sport,tech", "--heartbeat", "0.05", "--dead-after", "0.4")
        assert r.returncode == 0, r.stderr
        assert "dispatch system 'main' up" in r.stdout
        rt = mh.Runtime.attach(name)
        pids = [int(e["pid"]) for e in listed_peers(rt, "main").values()]
        assert len(pids) == 2
        src = news.source(name)
        snk = news.sink(name, ["tech"])
        src.send(["tech"], b"hello")
        assert snk.next(timeout=5).payload == b"hello"
        r = run("news", "status", name, "--json")
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert len(st) == 2 and all(s["active"] for s in st.values())
        assert sum(s["sinks"][hex_id(snk.id)]["delivered"] for s in st.values()) == 1
        r = run("news", "status", name)
        assert "(active)" in r.stdout and "serves 1 of 1 sink(s)" in r.stdout
        r = run("news", "up", name)
        assert r.returncode == 1 and "already runs on runtime" in r.stderr
        src.close()
        snk.close()
        r = run("news", "down", name)
        assert r.returncode == 0, r.stderr
        assert "2 peer(s) stopped" in r.stdout
        assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
        assert run("news", "status", name).stdout.strip() == "no peer"
        r = run("news", "status", "no-such-runtime")
        assert r.returncode == 1 and "RuntimeNotFound" in r.stderr
        r = run("dispatch", "status", name)  # the old name, one release: the same command, with a warning
        assert r.returncode == 0 and r.stdout.strip() == "no peer", r.stderr
        assert r.stderr.startswith("multihop dispatch: deprecated, use `multihop news`")
    finally:
        run("down", name)


def test_clients_survive_the_whole_domain_restarting() -> None:
    """Every peer killed: a source's send raises NoPeers; a new peer appears: source and sink find it and go on."""
    with domain(1) as (rt, system):
        src = news.source(rt.name)
        snk = news.sink(rt.name, ["n"])
        src.send(["n"], b"before")
        assert snk.next(timeout=5).payload == b"before"
        system.kill(system.peers[0])
        deadline = time.monotonic() + 10
        while src.machine.linked and time.monotonic() < deadline:
            src.stats()  # reads: sees the channel close
        with pytest.raises(news.NoPeers, match="no dispatch peer of system 'main' is left"):
            src.send(["n"], b"lost")
        with pytest.raises(mh.Timeout):
            snk.next(timeout=0.2)
        system.add_peer()  # the clients look for peers again on their next call
        src.send(["n"], b"after")
        got = None
        deadline = time.monotonic() + 10
        while got is None and time.monotonic() < deadline:
            try:
                got = snk.next(timeout=0.5)
            except mh.Timeout:
                pass
        assert got is not None and got.payload == b"after"
        assert snk.stats()["peers"] == 1
        src.close()
        snk.close()


def test_a_source_every_peer_refuses_is_refused_at_construction() -> None:
    """Issue 26 §4: a QoS forged past the client's own check was taken, and each send returned a sequence number
    while every peer dropped the news; the source is refused when made, as a sink's JoinRefused is."""
    with domain(2) as (rt, system):
        qos = news.SourceQoS(min_per_unit=2, max_per_unit=3)
        object.__setattr__(qos, "min_per_unit", 9)  # forged past SourceQoS's own check
        with pytest.raises(news.SourceRefused, match="min_per_unit 9 is above max_per_unit 3") as e:
            news.source(rt.name, qos=qos)
        assert isinstance(e.value, news.JoinRefused)
        assert all(s["sources"] == {} for s in system.status().values())
        with news.source(rt.name, qos=news.SourceQoS(min_per_unit=2, max_per_unit=3)) as ok:
            assert ok.send(["n"], b"x") == 0


def test_a_failure_inside_the_peer_loop_is_counted_and_logged_and_the_peer_serves_on(rt: mh.Runtime, caplog: Any) -> None:
    """A peer's loop survives a failure while it handles what came in (here its ``on_event`` hook raising, as a
    bug would): counted in the status' driver part, logged with its traceback; the news still flow.  It used to
    end the loop, and the peer with everything it held."""
    from multihop.news.admin import peer_status
    from multihop.news.driver import PeerDriver

    raised: list[str] = []

    def hook(name: str, fields: dict[str, Any]) -> None:
        if name == "sink_added":
            raised.append(name)
            raise RuntimeError("a bug in the event hook")

    driver = PeerDriver(rt.name, "main", 0, FAST, on_event=hook)
    t = threading.Thread(target=driver.run, daemon=True)
    t.start()
    try:
        with news.sink(rt.name, ["n"]) as snk, news.source(rt.name) as src:
            src.send(["n"], b"after the failure")
            assert snk.next(timeout=10).payload == b"after the failure"
        assert raised == ["sink_added"] and t.is_alive()
        st = peer_status(rt, "main", driver.me)
        assert st["driver"]["event_errors"] == 1
        assert "a bug in the event hook" in caplog.text
    finally:
        driver.stop()
        t.join(10)
    assert not t.is_alive()
