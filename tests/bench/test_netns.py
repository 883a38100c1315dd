"""tests/netns.py: machines as network namespaces (issue 27's test bed), and that it cleans up.

Each test builds its own namespaces and removes them; every wait is bounded (connect and receive
timeouts of a few seconds at most). Timings are asserted only as lower bounds the mechanism cannot
beat (a proxy's added latency); the token bucket is checked by its qdisc and counters, not by time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import netns
from netns import network  # noqa: F401  (a fixture)

pytestmark = [
    pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable())),
    pytest.mark.timeout(60),
]

# An echo server for the namespaces: listens on argv[1]:argv[2], says "ready", echoes every connection
# (one at a time) until killed.
ECHO = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while data := c.recv(65536):
            c.sendall(data)
    except OSError:
        pass
    c.close()
"""
PORT = 5000


def start_echo(ns: netns.Namespace, addr: str, port: int = PORT) -> subprocess.Popen[str]:
    """An echo server process inside `ns`, ready when this returns."""
    proc = ns.popen([sys.executable, "-c", ECHO, addr, str(port)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def recv_exact(s: socket.socket, n: int) -> bytes:
    """Read exactly n bytes (EOF before that is an error)."""
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def ping_pong(s: socket.socket, rounds: int = 20, size: int = 64) -> None:
    """`rounds` echoes of `size` bytes, each checked."""
    for i in range(rounds):
        msg = i.to_bytes(8, "little") + bytes(size - 8)
        s.sendall(msg)
        assert recv_exact(s, size) == msg


def host_ip_forward() -> str:
    return Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()


def host_links() -> str:
    return subprocess.run([netns.tool("ip"), "-o", "link"], capture_output=True, text=True, check=True).stdout


def netns_list() -> str:
    return subprocess.run([netns.tool("ip"), "netns", "list"], capture_output=True, text=True, check=True).stdout


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_two_machines_ping_pong_over_tcp(network: netns.Network) -> None:
    a, b = network.machine("a"), network.machine("b")
    link = network.link(a, b)
    assert (link.addr_a, link.addr_b, link.subnet) == ("10.213.0.1", "10.213.0.2", "10.213.0.0/30")
    assert a.address == link.addr_a and b.address_towards(a) == link.addr_b
    # lo is up in each, and each sees only its own lo and its veth end
    for ns, dev in ((a, link.dev_a), (b, link.dev_b)):
        names = sorted(line.split(":")[1].strip().split("@")[0] for line in ns.run([netns.tool("ip"), "-o", "link"]).stdout.splitlines())
        assert names == sorted(["lo", dev])
        assert "UP" in ns.run([netns.tool("ip"), "link", "show", "lo"]).stdout
    # nothing of it is in the host's namespace
    assert link.dev_a not in host_links() and link.dev_b not in host_links()
    server = start_echo(b, link.addr_b)
    with a.connect((link.addr_b, PORT)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ping_pong(s, rounds=100)
    # a client process inside a, too (ip netns exec), talking to the server in b
    client = a.run(
        [
            sys.executable,
            "-c",
            f"import socket; s = socket.create_connection(('{link.addr_b}', {PORT}), 5); s.sendall(b'hi'); print(s.recv(2).decode())",
        ]
    )
    assert client.stdout.strip() == "hi"
    assert server.poll() is None


def test_cut_link_gives_connection_error_and_restore_heals(network: netns.Network) -> None:
    a, b = network.machine("a"), network.machine("b")
    link = network.link(a, b)
    start_echo(b, link.addr_b)
    with a.connect((link.addr_b, PORT)) as s:
        ping_pong(s, rounds=3)
        link.cut()
        assert not link.is_up("a") and not link.is_up("b")
        with pytest.raises(OSError) as err:
            a.connect((link.addr_b, PORT), timeout=2)
        assert err.value.errno in (101, 113)  # ENETUNREACH, EHOSTUNREACH: told at once
        # the open connection hears nothing while the link is down
        s.settimeout(0.5)
        s.sendall(b"x" * 64)
        with pytest.raises(OSError):  # socket.timeout is an OSError too
            s.recv(64)
    link.restore()
    assert link.is_up("a") and link.is_up("b")
    with a.connect((link.addr_b, PORT)) as s2:
        ping_pong(s2, rounds=3)


def test_cut_one_end(network: netns.Network) -> None:
    a, b = network.machine("a"), network.machine("b")
    link = network.link(a, b)
    start_echo(a, link.addr_a)
    link.cut("a")  # a's end down: b's packets vanish, b only learns by timing out
    assert not link.is_up("a") and link.is_up("b")
    with pytest.raises(OSError):
        b.connect((link.addr_a, PORT), timeout=1)
    link.restore()
    with b.connect((link.addr_a, PORT)) as s:
        ping_pong(s, rounds=3)


def test_tbf_slows_the_link(network: netns.Network) -> None:
    a, b = network.machine("a"), network.machine("b")
    link = network.link(a, b)
    assert link.qdisc("a")["kind"] != "tbf"
    link.slow()  # tbf rate 1mbit burst 32kbit latency 400ms, both directions
    for side in ("a", "b"):
        q = link.qdisc(side)
        assert q["kind"] == "tbf"
        assert q["options"]["rate"] == 125_000  # 1 mbit/s in bytes/s
        assert q["options"]["burst"] == 4096  # 32 kbit
    assert "tbf" in a.run([netns.tool("tc"), "qdisc", "show", "dev", link.dev_a]).stdout
    start_echo(b, link.addr_b)
    payload = os.urandom(64 * 1024)  # 16 times the bucket: it must hold packets back
    with a.connect((link.addr_b, PORT), timeout=10) as s:
        s.sendall(payload)
        assert recv_exact(s, len(payload)) == payload  # nothing lost, only slowed
    q = link.qdisc("a")
    assert q["bytes"] >= len(payload)  # the traffic went through the bucket
    assert q["overlimits"] > 0  # and the bucket throttled it
    link.unslow()
    assert link.qdisc("a")["kind"] != "tbf" and link.qdisc("b")["kind"] != "tbf"


def test_three_machines_in_a_line_route_through_the_middle(network: netns.Network) -> None:
    forward_before = host_ip_forward()
    (a, b, c), (ab, bc) = network.line("a", "b", "c")
    assert (ab.subnet, bc.subnet) == ("10.213.0.0/30", "10.213.0.4/30")
    assert [ns.sysctl("net.ipv4.ip_forward") for ns in (a, b, c)] == ["0", "1", "0"]
    assert host_ip_forward() == forward_before  # the host's own setting untouched
    assert f"{bc.subnet} via {ab.addr_b}" in a.run([netns.tool("ip"), "route"]).stdout
    assert f"{ab.subnet} via {bc.addr_a}" in c.run([netns.tool("ip"), "route"]).stdout
    start_echo(c, bc.addr_b)
    with a.connect((bc.addr_b, PORT)) as s:
        ping_pong(s, rounds=10)
        # c sees a's own address: routed, not translated
        assert c.run([netns.tool("ss"), "-Htn", "state", "established"]).stdout.count(ab.addr_a) >= 1
    b.sysctl("net.ipv4.ip_forward", 0)  # without forwarding in the middle, a cannot reach c
    with pytest.raises(OSError):
        a.connect((bc.addr_b, PORT), timeout=1)
    b.enable_forwarding()
    with a.connect((bc.addr_b, PORT)) as s:
        ping_pong(s, rounds=3)
    # cutting the middle's first link and restoring it puts the routes back
    ab.cut()
    ab.restore()
    with a.connect((bc.addr_b, PORT), timeout=5) as s:
        ping_pong(s, rounds=3)


def test_proxy_adds_latency_stalls_and_cuts(network: netns.Network) -> None:
    a, b = network.machine("a"), network.machine("b")
    link = network.link(a, b)
    start_echo(b, link.addr_b)
    proxy = network.proxy(a, ("127.0.0.1", 0), b, (link.addr_b, PORT))
    with a.connect(proxy.address) as s:
        ping_pong(s, rounds=5)
        proxy.latency = 0.1  # each way: a round trip takes at least 0.2 s from now on
        t0 = time.monotonic()
        ping_pong(s, rounds=2)
        assert time.monotonic() - t0 >= 2 * 0.2
        proxy.latency = 0.0
        proxy.stall()
        s.settimeout(0.5)
        s.sendall(b"y" * 64)
        with pytest.raises(TimeoutError):
            s.recv(64)  # held in the proxy
        proxy.resume()
        s.settimeout(5)
        assert recv_exact(s, 64) == b"y" * 64  # delivered once resumed, nothing lost
        proxy.cut()
        with pytest.raises((ConnectionError, OSError)):
            s.sendall(b"z" * 64)
            if not s.recv(64):
                raise ConnectionError("EOF")
    # While cut, a new connection is reset at once: the reset may already be there when connect() looks (under load
    # the proxy's RST can beat the connecting side's check: BrokenPipeError / ConnectionResetError from connect), or
    # come at the first send or receive.
    with pytest.raises((ConnectionError, OSError)):
        with a.connect(proxy.address) as s2:
            s2.settimeout(5)
            s2.sendall(b"z" * 64)
            if not s2.recv(64):
                raise ConnectionError("EOF")
    proxy.restore()
    with a.connect(proxy.address) as s3:
        ping_pong(s3, rounds=3)
    assert proxy.connections == 3 and proxy.forwarded["to_client"] > 0


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_cleanup_leaves_nothing_even_when_the_body_raises(exc: type[BaseException]) -> None:
    with pytest.raises(exc):
        with netns.Network() as net:
            (a, b, c), links = net.line("a", "b", "c")
            links[0].slow()
            sleeper = a.popen(["sleep", "300"])
            orphan = b.popen(["sh", "-c", "sleep 300 & echo $!"], stdout=subprocess.PIPE, text=True)  # a grandchild outside our Popen
            assert orphan.stdout is not None
            grandchild = int(orphan.stdout.readline())
            server = start_echo(c, links[1].addr_b)
            proxy = net.proxy(a, ("127.0.0.1", 0), c, (links[1].addr_b, PORT))
            conn = a.connect(proxy.address)
            ping_pong(conn, rounds=2)
            names, devices = net.names(), net.devices()
            pids = [sleeper.pid, grandchild, server.pid]
            raise exc("the test body failed")
    conn.close()
    listed, links_now = netns_list(), host_links()
    for name in names:
        assert name not in listed
        assert not (netns.NETNS_DIR / name).exists()
    for dev in devices:
        assert dev not in links_now
    for pid in pids:
        assert not pid_alive(pid), pid
    assert not [n for n, pid, _s, _alive in netns.owned_namespaces() if pid == os.getpid() and n in names]
    assert proxy._closed


CRASHING_RUN = """
import os, signal, subprocess, sys
sys.path.insert(0, sys.argv[1])
import netns
net = netns.Network(sweep_stale=False)
(a, b), _ = net.line("a", "b")
p = a.popen(["sleep", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(" ".join(net.names()), p.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # a run killed outright: no cleanup at all
"""


def test_sweep_removes_what_a_killed_run_left_and_nothing_else(network: netns.Network) -> None:
    mine = network.machine("live")  # a run still going: never swept
    foreign = [f"mhns-foreign-{os.getpid()}", f"mhnsx-{os.getpid()}-1-0-a"]  # look alike, not ours
    try:
        for name in foreign:
            subprocess.run([netns.tool("ip"), "netns", "add", name], check=True)
        child = subprocess.run([sys.executable, "-c", CRASHING_RUN, str(Path(__file__).parents[1])], capture_output=True, text=True, timeout=30)
        assert child.returncode == -signal.SIGKILL
        *left, sleeper = child.stdout.split()
        assert len(left) == 2 and all(name in netns_list() for name in left)
        assert pid_alive(int(sleeper))
        stale = {n for n, _pid, _s, alive in netns.owned_namespaces() if not alive}
        assert set(left) <= stale and mine.name not in stale
        removed = netns.sweep()
        assert set(left) <= set(removed)
        listed = netns_list()
        assert not any(name in listed for name in left)
        assert mine.name in listed and all(name in listed for name in foreign)
        deadline = time.monotonic() + 5
        while pid_alive(int(sleeper)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(int(sleeper))  # what ran inside went with it
    finally:
        for name in foreign:
            subprocess.run([netns.tool("ip"), "netns", "del", name], check=False)
        netns.sweep()  # the killed run's namespaces, had the test failed before its own sweep


def test_fabric_bench_peers_carry_messages_between_machines(network: netns.Network) -> None:
    """The fabric bench's peers (multihop.bench.fabric_peers, those installed here) through their common interface, briefly."""
    from multihop.bench import fabric_peers

    a, b = network.machine("a"), network.machine("b")
    network.link(a, b)
    ran = []
    for name, make in fabric_peers.PEERS.items():
        peer = make()
        if peer.available():
            continue
        peer.setup(a, b)
        try:
            rtts = peer.roundtrip(20, 64)
            assert len(rtts) == 20 and all(0 < t < 5 for t in rtts)
            for size in (64, 4096):
                r = peer.oneway(500, size)
                assert (r.received, r.errors) == (500, ""), name
                assert r.rate > 0 and r.mbps == r.rate * size / 1e6
        finally:
            peer.teardown()
        ran.append(name)
    assert "tcp" in ran  # the standard library's peer runs everywhere


TERMINATED_RUN = """
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import netns
with netns.Network() as net:
    (a, b), _ = net.line("a", "b")
    p = a.popen(["sleep", "300"], stdout=subprocess.DEVNULL)
    print(" ".join(net.names()), p.pid, flush=True)
    time.sleep(60)
"""


def test_sigterm_still_cleans_up_and_the_handler_is_put_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with netns.Network():
        if before is signal.SIG_DFL:  # while a network is open, SIGTERM raises SystemExit
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) is before
    child = subprocess.Popen([sys.executable, "-c", TERMINATED_RUN, str(Path(__file__).parents[1])], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        *names, sleeper = child.stdout.readline().split()
        assert len(names) == 2 and all(name in netns_list() for name in names)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=20) == 128 + signal.SIGTERM
        listed = netns_list()  # the run cleaned up itself (checked before any sweep)
        assert not any(name in listed for name in names)
        assert not pid_alive(int(sleeper))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        netns.sweep()  # only when the test failed is there anything to sweep
