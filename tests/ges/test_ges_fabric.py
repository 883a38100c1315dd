"""GES across machines (issue 27, docs/ges.md "across machines"): broker systems spread over the runtimes of a fabric.

Machines are network namespaces (tests/netns.py), each running a runtime started with ``multihop up NAME --fabric``
inside it (its monitors and its bridge; the bridge's Zenoh session is the only thing that uses the namespace's
network). The topology places its brokers on those runtimes (``runtime`` per broker, ``system`` for the whole);
``LiveSystem.up(topology, RUNTIME)`` for each runtime starts that runtime's share and returns once its brokers'
graphs are the simulator's for the whole system. Gateways between runtimes are bridged multi-hop channels; clients
attach to brokers through their own runtime. Every namespace, runtime and broker goes after each test; every wait is
bounded.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

import multihop as mh
import netns
from fabric_marks import needs_fabric
from multihop import ges
from multihop.ges.live import LiveSystem
from netns import network  # noqa: F401  (a fixture)
from test_ges_live_pubsub import drain_until, publish_randomly_and_check, subscribe_randomly

pytestmark = needs_fabric(timeout=300)

PORT = 7447
LEASE_S = 3.0
FIG14 = ges.Topology.example("paper_fig14")


def first_difference(got: list, want: list) -> int | None:
    """The first index where ``got`` and ``want`` differ (one shorter than the other counts), None if equal."""
    return next((i for i, (x, y) in enumerate(zip(got, want, strict=False)) if x != y), None if len(got) == len(want) else min(len(got), len(want)))


def endpoint(addr: str) -> str:
    return f"tcp/{addr}:{PORT}"


class Machines:
    """Runtimes in namespaces joined into one fabric, and the GES system's share on each (stopped by :meth:`close`)."""

    def __init__(self, net: netns.Network, label: str) -> None:
        self.net = net
        self.fabric = f"gf{os.getpid()}{label}"
        self.runtimes: dict[str, netns.Namespace] = {}  # runtime name -> its machine
        self.systems: dict[str, LiveSystem] = {}

    def runtime(self, ns: netns.Namespace, listen: list[str] = [], connect: list[str] = []) -> str:  # noqa: B006
        """Start runtime ``<fabric><label>`` inside ``ns`` with ``multihop up --fabric`` (detached); its name."""
        name = f"{self.fabric}{ns.label}"
        argv = [sys.executable, "-m", "multihop.cli", "up", name, "--cores", "0-1", "--fabric", self.fabric, "--lease", str(LEASE_S)]
        for e in listen:
            argv += ["--listen", e]
        for e in connect:
            argv += ["--connect", e]
        self.runtimes[name] = ns
        r = ns.run(argv, check=False, timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        return name

    def up(self, topology: ges.Topology, *, durable: bool = False, timeout: float = 150.0) -> None:
        """``LiveSystem.up`` on every runtime at once (each returns once its share converged with the others')."""
        errors: list[BaseException] = []

        def one(name: str) -> None:
            try:
                self.systems[name] = LiveSystem.up(topology, name, timeout=timeout, durable=durable)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=one, args=(n,)) for n in topology.runtimes()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout + 60)
        assert not errors, errors
        assert set(self.systems) == set(topology.runtimes())

    def system_of(self, address: str) -> LiveSystem:
        """The LiveSystem of the runtime broker ``address`` is placed on."""
        return next(s for s in self.systems.values() if address in s.config["brokers"])

    def client(self, address: str, cid: str, **kw: object) -> ges.LiveClient:
        """A client attached to broker ``address`` through that broker's runtime."""
        return ges.connect(self.system_of(address).name, address, cid, **kw)  # type: ignore[arg-type]

    def close(self) -> None:
        for s in self.systems.values():
            try:
                s.down()
            except Exception as e:  # the next one still goes down
                print(f"ges down on {s.name}: {e!r}")
        for name in self.runtimes:
            try:
                mh.Runtime.attach(name, timeout=2.0).stop()
            except mh.MultihopError:
                pass


@pytest.fixture
def machines(network: netns.Network) -> Iterator[Machines]:  # noqa: F811
    m = Machines(network, "x")
    try:
        yield m
    finally:
        m.close()


def placed(topology: ges.Topology, system: str, where: dict[str, str]) -> ges.Topology:
    """``topology`` with every broker placed on the runtime ``where`` gives for the first matching address prefix."""
    t = ges.Topology(topology.levels, topology.thresholds, system=system)
    for b in topology.brokers.values():
        rt = next(r for prefix, r in where.items() if str(b.address).startswith(prefix))
        t.add_broker(b.address, b.core, rt)
    for g in topology.gateways.values():
        t.add_gateway(g.a, g.b, g.cost)
    return t


def triangle(m: Machines) -> tuple[list[str], dict[str, netns.Link]]:
    """Three machines a, b, c, each linked to each other (a listens on both its links, b on its link to c; b connects
    to a, c to a and b): the runtimes' names and the links by pair ("ab", "ac", "bc")."""
    a, b, c = (m.net.machine(x) for x in "abc")
    links = {"ab": m.net.link(a, b), "ac": m.net.link(a, c), "bc": m.net.link(b, c)}
    ra = m.runtime(a, listen=[endpoint(links["ab"].addr_a), endpoint(links["ac"].addr_a)])
    rb = m.runtime(b, listen=[endpoint(links["bc"].addr_a)], connect=[endpoint(links["ab"].addr_a)])
    rc = m.runtime(c, connect=[endpoint(links["ac"].addr_a), endpoint(links["bc"].addr_a)])
    return [ra, rb, rc], links


def test_figure_14_testbed_over_three_machines(machines: Machines) -> None:
    """The paper's 22-broker testbed, one super-cluster per machine (1.5, 1.4, 1.6 in a line, as its gateways run):
    2 subscribers on every broker but the publishers', 3 publishers (one per machine), single events and batches;
    the delivery checker: every subscriber gets exactly the matching events, once, in each publisher's order. The
    control channel reaches a broker on another machine (its status through the fabric)."""
    m5, m4, m6 = (machines.net.machine(x) for x in ("m5", "m4", "m6"))
    l54, l46 = machines.net.link(m5, m4), machines.net.link(m4, m6)
    r4 = machines.runtime(m4, listen=[endpoint(l54.addr_b), endpoint(l46.addr_a)])
    r5 = machines.runtime(m5, connect=[endpoint(l54.addr_b)])
    r6 = machines.runtime(m6, connect=[endpoint(l46.addr_a)])
    topo = placed(FIG14, machines.fabric, {"1.5.": r5, "1.4.": r4, "1.6.": r6})
    machines.up(topo)
    sys5 = machines.systems[r5]
    assert sorted(sys5.addresses) == sorted(str(a) for a in topo.brokers if str(a).startswith("1.5."))
    remote = sys5.status("1.4.1.4")  # runs on m4: reached from m5's runtime through the fabric
    assert remote["address"] == "1.4.1.4" and {link["peer"] for link in remote["links"]} >= {"1.5.1.2"}
    rng = random.Random(14)
    pub_at = ["1.5.1.22", "1.4.2.17", "1.6.1.10"]
    addrs = sorted((str(a) for a in topo.brokers if str(a) not in pub_at), key=ges.Address)
    hist = ges.History()
    subs: list[ges.LiveClient] = []
    pubs: list[ges.LiveClient] = []
    try:
        for i in range(2 * len(addrs)):
            subs.append(machines.client(addrs[i % len(addrs)], f"s{i}"))
        subscribe_randomly(subs, rng, hist, limit=60)  # every profile active across the three machines
        pubs = [machines.client(a, f"p{i}") for i, a in enumerate(pub_at)]
        report = publish_randomly_and_check(subs, pubs, rng, hist, singles=120, batches=8, limit=60)
        assert report.delivered > 500, report.summary()
        # every gateway between machines carried events: the brokers at both ends of 1.5.1.2-1.4.1.4 and
        # 1.4.1.6-1.6.1.7 (each on its own machine) report them
        for a in ("1.5.1.2", "1.4.1.4", "1.4.1.6", "1.6.1.7"):
            assert machines.system_of(a).status(a)["events"]["decisions"] > 0, a
        print(f"Figure 14 over 3 machines: {report.delivered} deliveries checked, {len(subs)} subscribers, 3 publishers")
    finally:
        for c in subs + pubs:
            c.close()


def test_gateway_between_machines_cut_mid_stream_alternate_route(machines: Machines) -> None:
    """Machines a, b, c in a triangle; the publisher's broker 1.1.1.2 (a) reaches the subscriber's cluster through
    1.1.2.1 (b) or 1.1.2.2 (c). The veth between a and the machine of the hop in use is cut mid-stream: the
    fabric declares that peer gone (lease), the bridged gateway closes, the broker sends its unacknowledged copies
    over the gateway through the third machine: the subscriber gets every event exactly once, in order."""
    (ra, rb, rc), links = triangle(machines)
    t = ges.Topology(levels=3, system=machines.fabric)
    for addr, rt in (("1.1.1.1", ra), ("1.1.1.2", ra), ("1.1.2.1", rb), ("1.1.2.2", rc), ("1.1.2.3", rc)):
        t.add_broker(addr, None, rt)
    for x, y in (("1.1.1.1", "1.1.1.2"), ("1.1.1.2", "1.1.2.1"), ("1.1.1.2", "1.1.2.2"), ("1.1.2.1", "1.1.2.3"), ("1.1.2.2", "1.1.2.3")):
        t.add_gateway(x, y)
    machines.up(t)
    sub = machines.client("1.1.2.3", "s")
    pub = machines.client("1.1.1.1", "p")
    try:
        sub.subscribe([("n", "*")])
        deadline = time.monotonic() + 30
        while sub.active_level(1) < 4:
            assert time.monotonic() < deadline, "the subscription did not become active"
            time.sleep(0.01)  # the test waits for the brokers; they never poll
        shadow = machines.systems[ra].shadow
        assert shadow is not None
        used = str(ges.Address.from_code(shadow.broker("1.1.1.2").gpp.hop_to(ges.Address("1.1.2.3").unit_id(1)), 3))
        cut = links["ab"] if used == "1.1.2.1" else links["ac"]
        sent: list[ges.EventId] = []
        got: list[ges.EventId] = []
        for i in range(900):
            sent.append(pub.publish({"n": i}))
            if i % 20 == 0:
                got += [e.id for e in sub.next_many(timeout=0)]
            if i == 300:
                cut.cut()
                t_cut = time.monotonic()
            if i >= 300:
                time.sleep(0.01)  # publish for 6 s past the cut (twice the lease), so the loss happens mid-stream
        missing = len(sent) - len(got)
        got += [e.id for e in drain_until([sub], lambda g: len(g["s"]) >= missing, limit=60, settle=1.0)["s"]]
        assert got == sent, f"{len(got)} delivered of {len(sent)} sent, first difference at {first_difference(got, sent)}"
        peers = {link["peer"] for link in machines.systems[ra].status("1.1.1.2")["links"]}
        assert used not in peers and peers == {"1.1.1.1", "1.1.2.1", "1.1.2.2"} - {used}, peers  # the cut gateway is lost
        print(f"cut the link to {used}'s machine {time.monotonic() - t_cut:.1f} s before the end; 1.1.1.2's gateways now: {sorted(peers)}")
    finally:
        sub.close()
        pub.close()


def test_durable_kill_the_broker_with_the_storage_broker_on_another_machine(machines: Machines) -> None:
    """Durability's kill-the-broker across machines: cluster 1.1 spans a (its storage broker 1.1.1, and cluster 1.2)
    and b (1.1.2, the subscriber's home broker, and 1.1.3). The subscriber's broker is SIGKILLed mid-stream and
    restarted, then the storage broker on the other machine: the subscriber gets exactly 1..n both times."""
    a, b = machines.net.machine("a"), machines.net.machine("b")
    link = machines.net.link(a, b)
    ra = machines.runtime(a, listen=[endpoint(link.addr_a)])
    rb = machines.runtime(b, connect=[endpoint(link.addr_a)])
    t = ges.Topology(levels=2, system=machines.fabric)
    for addr, rt in (("1.1.1", ra), ("1.1.2", rb), ("1.1.3", rb), ("1.2.1", ra), ("1.2.2", ra)):
        t.add_broker(addr, None, rt)
    for x, y in (("1.1.1", "1.1.2"), ("1.1.2", "1.1.3"), ("1.1.1", "1.1.3"), ("1.2.1", "1.2.2"), ("1.1.3", "1.2.1"), ("1.1.2", "1.2.2")):
        t.add_gateway(x, y)
    machines.up(t, durable=True)
    sa, sb = machines.systems[ra], machines.systems[rb]
    assert sa.storage_brokers() == ["1.1.1", "1.2.1"] and "1.1.1" in sa.addresses and "1.1.2" in sb.addresses
    for victim, owner in (("1.1.2", sb), ("1.1.1", sa)):
        cid = f"kill-{victim}"
        sub = machines.client("1.1.2", cid)
        sid = sub.subscribe([("n", "*")])
        pub = machines.client("1.2.2", f"pub-{victim}")
        try:
            deadline = time.monotonic() + 30
            while sub.active_level(sid) != 3:
                assert time.monotonic() < deadline, "subscription not active in time"
                time.sleep(0.02)  # the test waits for the brokers; they never poll
            # the client's home is the storage broker on machine a, its broker on machine b
            assert sa.status("1.1.1")["durability"]["store"]["clients"][cid]["broker"] == "1.1.2"
            pid, t0 = owner.pid(victim), time.monotonic()
            n, got = 1500, []
            for i in range(1, n + 1):
                pub.publish({"n": i})
                if i % 100 == 0:
                    got += [e.content["n"] for e in sub.next_many(4096, timeout=0)]
                if i == 700:
                    owner.crash(victim)  # SIGKILL mid-stream, on its machine
                    if victim == "1.1.2":
                        sub.disconnect()  # its broker is gone
                    owner.restart(victim, timeout=60)
                    if victim == "1.1.2":
                        sub = machines.client("1.1.2", cid, resume=True)
            deadline = time.monotonic() + 60
            while len(got) < n and time.monotonic() < deadline:
                got += [e.content["n"] for e in sub.next_many(4096, timeout=0.2)]
            assert got == list(range(1, n + 1)), f"{victim}: {len(got)} of {n}, first difference at {first_difference(got, list(range(1, n + 1)))}"
            pub.wait_stored()
            assert owner.pid(victim) != pid
            print(f"{victim} killed and restarted on its machine mid-stream: {n} events exact in {time.monotonic() - t0:.1f} s")
        finally:
            try:
                if not sub.closed:
                    sub.unsubscribe(sid)
                    sub.wait_stored()
            except ges.GesError:
                pass
            sub.close()
            pub.close()


def test_a_placed_topology_needs_its_runtime_in_a_fabric(tmp_path: Path) -> None:
    """A topology spread over runtimes refuses a runtime without a fabric (running or not), and a runtime it does not
    place anything on, each naming what to do; nothing starts."""
    from session import unique_name

    t = ges.Topology(levels=2, system="lab")
    t.add_broker("1.1.1", None, "hosta")
    t.add_broker("1.1.2", None, "hostb")
    t.add_gateway("1.1.1", "1.1.2")
    with pytest.raises(ges.TopologyError, match="no broker of the topology is placed on runtime 'elsewhere'"):
        LiveSystem.up(t, "elsewhere")
    name = unique_name("gesnofab")
    t2 = ges.Topology(levels=2, system="lab")
    t2.add_broker("1.1.1", None, name)
    with pytest.raises(ges.GesStateError, match="is not running, and the topology spreads its brokers"):
        LiveSystem.up(t2, name)
    with pytest.raises(mh.RuntimeNotFound):
        mh.Runtime.attach(name, timeout=0.5)
    with mh.Runtime.start(name, cores=[0]):
        with pytest.raises(ges.GesStateError, match="runs without a fabric"):
            LiveSystem.up(t2, name)
        (tmp_path / "placed.toml").write_text(t2.to_toml())
        r = subprocess.run(
            [sys.executable, "-m", "multihop.cli", "ges", "up", str(tmp_path / "placed.toml"), "--name", name],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode != 0 and "runs without a fabric" in r.stderr, r.stdout + r.stderr


def test_the_command_line_spreads_a_system_over_two_machines(network: netns.Network, tmp_path: Path) -> None:  # noqa: F811
    """``multihop ges up FILE --name R --fabric F --listen/--connect E`` on two machines at once: each starts its
    runtime in the fabric and its share, and returns once the whole system converged; ``ges status`` shows each
    runtime's brokers; ``ges down`` stops the brokers and the runtime it started (nothing left)."""
    a, b = network.machine("a"), network.machine("b")
    link = network.link(a, b)
    fabric = f"gc{os.getpid()}"
    ra, rb = f"{fabric}a", f"{fabric}b"
    t = ges.Topology(levels=2, system=fabric)
    for addr, rt in (("1.1.1", ra), ("1.1.2", ra), ("1.2.1", rb), ("1.2.2", rb)):
        t.add_broker(addr, None, rt)
    for x, y in (("1.1.1", "1.1.2"), ("1.2.1", "1.2.2"), ("1.1.2", "1.2.1")):
        t.add_gateway(x, y)
    path = tmp_path / "spread.toml"
    path.write_text(t.to_toml())
    cli = [sys.executable, "-m", "multihop.cli", "ges"]
    fab = ["--fabric", fabric, "--lease", str(LEASE_S)]
    procs = {
        ra: a.popen(
            [*cli, "up", str(path), "--name", ra, "--cores", "0-1", *fab, "--listen", endpoint(link.addr_a)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
        rb: b.popen(
            [*cli, "up", str(path), "--name", rb, "--cores", "0-1", *fab, "--connect", endpoint(link.addr_a)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
    }
    try:
        outs = {n: p.communicate(timeout=180) for n, p in procs.items()}
        for n, p in procs.items():
            assert p.returncode == 0, outs[n]
            assert f"GES system {fabric!r} up on runtime {n!r}: 2 of 4 brokers here" in outs[n][0], outs[n]
        st = subprocess.run([*cli, "status", rb, "--json"], capture_output=True, text=True, timeout=60)
        assert st.returncode == 0, st.stdout + st.stderr
        assert "1.2.1" in st.stdout and "1.2.2" in st.stdout and '"1.1.1"' not in st.stdout.split('"links"')[0]
        with mh.Runtime.attach(ra) as rt:
            assert rt.fabric is not None and rt.fabric.name == fabric
            bridge = rt._meta["bridge"]["pid"]
    finally:
        downs = {n: subprocess.run([*cli, "down", n], capture_output=True, text=True, timeout=60) for n in procs}
    for n, d in downs.items():
        assert d.returncode == 0, d.stdout + d.stderr
        with pytest.raises(mh.RuntimeNotFound):
            mh.Runtime.attach(n, timeout=0.5)
    assert not Path(f"/proc/{bridge}").exists() or "zombie" in Path(f"/proc/{bridge}/status").read_text().lower()
