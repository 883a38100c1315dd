"""Runtimes on several machines joined into a fabric, through the Python API (issue 27, docs/fabric.md).

Each test builds machines as network namespaces (tests/netns.py); each machine runs ``fabric_agent.py``: a real
runtime (monitors, its bridge ``multihop-bridge`` over Zenoh) started with ``Runtime.start(..., fabric=...)``,
whose services are exported with ``export(name, fabric=True)`` and bound from the other machine as
``"svc@runtime"``. Agents report JSON lines with CLOCK_MONOTONIC times (shared by every namespace). Every
namespace and process goes after each test (the ``network`` fixture), every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import multihop as mh
import netns
from fabric_marks import needs_fabric
from jsonevents import JsonEvents
from netns import network  # noqa: F401  (a fixture)

HERE = Path(__file__).resolve().parent
PORT = 7447
LEASE_S = 3.0


pytestmark = needs_fabric(timeout=240)


class Agent(JsonEvents):
    """One fabric_agent.py process in a namespace, its JSON events read by a thread (an ``error`` event fails a wait)."""

    def __init__(self, ns: netns.Namespace, role: str, runtime: str, *args: str) -> None:
        self.runtime = runtime
        argv = [sys.executable, str(HERE / "fabric_agent.py"), role, "--runtime", runtime, *args]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = ns.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        super().__init__(proc, runtime, fail_on_error=True)
        self.ready = self.wait("ready", 60)

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self, timeout: float = 30) -> int:
        """Close stdin (the agent stops its runtime, bridge included) and wait for it."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        return self.proc.wait(timeout=timeout)


def unique(label: str) -> str:
    return f"fx{os.getpid()}{label}"


def endpoint(addr: str) -> str:
    return f"tcp/{addr}:{PORT}"


def pair(net: netns.Network, *client_args: str, server_args: tuple[str, ...] = ()) -> tuple[Agent, Agent, netns.Link]:
    """Machine b serves (echo, sink, private); machine a runs the client given by `client_args` against b."""
    a, b = net.machine("a"), net.machine("b")
    link = net.link(a, b)
    rb = unique("b")
    server = Agent(b, "serve", rb, "--listen", endpoint(link.addr_b), *server_args)
    client = Agent(a, "client", unique("a"), "--connect", endpoint(link.addr_b), *[x.replace("@B", "@" + rb) for x in client_args])
    return client, server, link


def test_rpc_across_machines_exact_and_shown_in_status(network: netns.Network) -> None:
    """echo@b bound from machine a with the plain API: 5,000 numbered messages, each echoed once, in order; the
    fabric's status on b shows a as a peer and the bridged channel with its counters; nothing refused or dropped."""
    client, server, _ = pair(network, "--target", "echo@B", "--mode", "rpc", "--count", "5000", "--window", "8", "--stay")
    done = client.wait("done", 120)
    assert done["errors"] == [] and done["count"] == 5000, done
    print(f"5,000 round trips across two machines: {done['rtt_us']:.0f} us each (window 8)")
    server.say("status")
    st = server.wait("status", 10)["status"]
    peers = {p["runtime"]: p for p in st["peers"]}
    assert peers[client.runtime]["alive"], st
    assert sorted(st["exports"]) == ["echo", "fecho", "sink"], st  # "private" was exported without fabric=True
    chans = [c for c in st["channels"] if c["peer"] == client.runtime]
    assert len(chans) == 1 and chans[0]["state"] == "open" and chans[0]["frames_in"] >= 1 and chans[0]["seq_in"] == chans[0]["frames_in"], chans
    assert st["bad_inputs"] == 0 and st["dropped_puts"] == 0, st
    client.say("status")
    cst = client.wait("status", 10)["status"]
    assert sorted({p["runtime"]: p for p in cst["peers"]}[server.runtime]["services"]) == ["echo", "fecho", "sink"], cst
    assert client.stop() == 0 and server.stop() == 0


def test_refusals_across_machines_are_named(network: netns.Network) -> None:
    """A service exported without fabric=True is not reachable from the fabric (BindError); a UMP bind across
    machines is a BindError naming why; handles on a bridged channel raise CapSendError(reason="bridged"), and the
    channel goes on."""
    client, server, _ = pair(network, "--target", "echo@B", "--mode", "probe")
    probes = {}
    for _ in range(4):
        e = client.wait("probe", 60, lambda e: e["transport"] not in probes)
        probes[e["transport"]] = e
    assert probes["multihop"]["outcome"] == "BindError", probes  # private@b
    assert probes["ump"]["outcome"] == "BindError" and "multihop" in probes["ump"]["message"], probes
    assert probes["handles"]["outcome"] == "CapSendError" and probes["handles"]["reason"] == "bridged", probes
    assert "cannot leave a machine" in probes["handles"]["message"], probes
    assert probes["after"]["outcome"] == "still works", probes
    assert client.stop() == 0 and server.stop() == 0


def test_flounder_rpc_across_machines(network: netns.Network) -> None:
    """Generated Flounder stubs across machines: the echo interface exported with fabric=True on b, bound as
    fecho@b from a; 200 say() and 200 echo() calls (0-4 KB) answered, each the right answer in order."""
    client, server, _ = pair(network, "--target", "fecho@B", "--mode", "flounder", "--count", "200")
    done = client.wait("done", 120)
    assert done["ok"] and done["first"] == ["you said call 0", "you said call 1"], done
    assert client.stop() == 0 and server.stop() == 0


def test_many_channels_at_once(network: netns.Network) -> None:
    """64 bridged channels between two machines at once, 200 round trips each, every echo in order."""
    client, server, _ = pair(network, "--target", "echo@B", "--mode", "rpc", "--count", "200", "--window", "4", "--channels", "64")
    done = client.wait("done", 180)
    assert done["errors"] == [] and done["count"] == 64 * 200, done
    assert client.stop() == 0 and server.stop() == 0


def test_one_way_exact_sequence(network: netns.Network) -> None:
    """200,000 numbered messages one way in batches: the sink on the other machine gets each once, in order.
    (The 1,000,000-message run is the bench's: benches/bench_fabric.py --case runtime.)"""
    n = 200_000
    client, server, _ = pair(network, "--target", "sink@B", "--mode", "oneway", "--count", str(n), "--window", "64")
    done = client.wait("done", 200)
    sink = server.wait("sink_done", 30)
    assert sink["received"] == n and sink["errors"] == "", sink
    print(f"{n} messages of 64 B one way across two machines: {done['msgs_per_s']:.0f}/s")
    assert client.stop() == 0 and server.stop() == 0


def test_slow_link_back_pressure_loses_nothing(network: netns.Network) -> None:
    """A 1 Mbit/s link (tbf): 4,000 messages of 256 B (1 MB) take 8 s or more to cross; the sender is held back by
    the relay's credit (at most 512 KiB in flight per channel), nothing is dropped: every message arrives once, in
    order."""
    a, b = network.machine("a"), network.machine("b")
    link = network.link(a, b)
    link.slow()
    rb = unique("b")
    server = Agent(b, "serve", rb, "--listen", endpoint(link.addr_b))
    client = Agent(
        a,
        "client",
        unique("a"),
        "--connect",
        endpoint(link.addr_b),
        "--target",
        f"sink@{rb}",
        "--mode",
        "oneway",
        "--count",
        "4000",
        "--size",
        "256",
        "--stay",
    )
    done = client.wait("done", 200)
    sink = server.wait("sink_done", 30)
    assert sink["received"] == 4000 and sink["errors"] == "", sink
    # 4,000 x 256 B = 1 MB of payload over 1 Mbit/s: at least ~8 s; the sender's flush returned only once all but
    # the last 512 KiB had crossed (~0.5 MB: 4 s at the link's ~118 kB/s), so it was held back (without credit it
    # would be done in well under a second).
    assert done["seconds"] > 2.5, done
    assert client.stop() == 0 and server.stop() == 0


FAILURES = ["kill-runtime", "kill-bridge", "sigstop-bridge", "link-down"]


@pytest.mark.parametrize("failure", FAILURES)
def test_failure_is_told_within_lease_plus_one_second(network: netns.Network, failure: str) -> None:
    """Round trips every 10 ms; then machine b's runtime is SIGKILLed (monitors, bridge, program), or only its bridge
    is, or its bridge is frozen (SIGSTOP), or the link is cut. The client's channel raises ChannelClosed within
    lease + 1 s, every echo before it checked in order; machine a's runtime goes on. Then a new bind: refused
    (BindError within its 2 s timeout) while b is gone; once a frozen bridge resumes or the link is back, b can be
    bound again (a new channel: the old one is never resumed)."""
    client, server, link = pair(network, "--target", "echo@B", "--mode", "hold", "--stay", "--rebind-seconds", "25")
    client.wait("bound", 60)
    time.sleep(1.0)
    t0 = time.monotonic_ns()
    bridge_pid = server.ready["bridge"]
    if failure == "kill-runtime":
        for pid in [server.proc.pid, bridge_pid, *server.ready["monitors"].values()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    elif failure == "kill-bridge":
        os.kill(bridge_pid, signal.SIGKILL)
    elif failure == "sigstop-bridge":
        os.kill(bridge_pid, signal.SIGSTOP)
    else:
        link.cut()
    try:
        closed = client.wait("closed", LEASE_S + 10)
        took = (closed["t"] - t0) / 1e9
        print(f"{failure}: ChannelClosed after {took:.3f} s, {closed['echoed']} echoes in order before it: {closed['message']}")
        assert took <= LEASE_S + 1.0, closed
        # The end's ChannelClosed names what happened across the fabric (the bridge's TEARDOWN carries the reason).
        assert "across the fabric" in closed["message"] and server.runtime in closed["message"], closed
        assert closed["echoed"] >= 20 and closed["sent"] - closed["echoed"] <= 1, closed
    finally:
        if failure == "sigstop-bridge":
            os.kill(bridge_pid, signal.SIGCONT)
        elif failure == "link-down":
            link.restore()
    again = client.wait("rebind", 40)
    if failure in ("kill-runtime", "kill-bridge"):
        assert again["outcome"] == "refused", again
        refusal = again["first_refusal"]
        assert refusal["error"] == "BindError" and refusal["seconds"] <= 2.5, again
    else:
        assert again["outcome"] == "bound" and again["echo"] == "again!!!", again
    # The old channel is gone (never resumed); the rebind's channel, closed by its end, closes at the bridge too
    # (within a moment: its TEARDOWN goes out at the bridge's next turn).
    for _ in range(30):
        client.say("status")
        st = client.wait("status", 10)["status"]
        if not [c for c in st["channels"] if c["peer"] == server.runtime and c["state"] == "open"]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"a channel to {server.runtime} is still open: {st}")
    assert client.stop() == 0


def test_three_machines_the_middle_one_dies(network: netns.Network) -> None:
    """a, b, c in a line (b forwards IP between a and c). a holds channels to b and to c; b's runtime is killed: the
    channel to b closes within lease + 1 s, the one to c goes on, exact."""
    (a, b, c), (ab, bc) = network.line("a", "b", "c")
    b.enable_forwarding()
    a.add_route(bc.addr_b, ab.addr_b)
    c.add_route(ab.addr_a, bc.addr_a)
    rb, rc = unique("b"), unique("c")
    sb = Agent(b, "serve", rb, "--listen", endpoint(ab.addr_b))
    sc = Agent(c, "serve", rc, "--listen", endpoint(bc.addr_b))
    common = ("--connect", endpoint(ab.addr_b), "--connect", endpoint(bc.addr_b), "--mode", "hold", "--stay")
    to_b = Agent(a, "client", unique("a1"), "--target", f"echo@{rb}", *common)
    to_c = Agent(a, "client", unique("a2"), "--target", f"echo@{rc}", *common)
    to_b.wait("bound", 60)
    to_c.wait("bound", 60)
    time.sleep(1.0)
    t0 = time.monotonic_ns()
    for pid in [sb.proc.pid, sb.ready["bridge"], *sb.ready["monitors"].values()]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    closed = to_b.wait("closed", LEASE_S + 10)
    assert (closed["t"] - t0) / 1e9 <= LEASE_S + 1.0, closed
    time.sleep(1.0)
    assert not [e for e in to_c.seen if e["event"] in ("closed", "error")], to_c.seen
    to_c.say("status")
    st = to_c.wait("status", 10)["status"]
    live = [ch for ch in st["channels"] if ch["peer"] == rc and ch["state"] == "open"]
    assert len(live) == 1 and live[0]["frames_in"] > 50, st
    assert to_c.stop() == 0 and sc.stop() == 0 and to_b.stop() == 0


def test_a_fabric_without_the_bridge_starts_nothing(tmp_path: Path) -> None:
    """Runtime.start with a fabric and no bridge binary stops before starting anything, naming the extra."""
    code = (
        "import multihop as mh\n"
        "from multihop.extras import ExtraMissing\n"
        "try:\n"
        "    mh.Runtime.start('fxnobridge', cores=[0], fabric=mh.Fabric('lab', listen=['tcp/127.0.0.1:7999']))\n"
        "except ExtraMissing as e:\n"
        "    print('ExtraMissing:', e)\n"
    )
    env = dict(os.environ, MULTIHOP_BRIDGE=str(tmp_path / "no-such-bridge"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "ExtraMissing:" in r.stdout and "multihop[fabric]" in r.stdout, r.stdout + r.stderr
    with pytest.raises(mh.RuntimeNotFound):
        mh.Runtime.attach("fxnobridge", timeout=0.5)


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"lease": 61}, ValueError, "lease"),  # beyond the bridge's 60 s: refused here, not at the bridge's start
        ({"lease": 0.1}, ValueError, "lease"),
        ({"lease": "3"}, TypeError, "lease"),
        ({"listen": ["tcp10.0.0.1:7447"]}, ValueError, "listen"),
        ({"connect": ["tls/10.0.0.1:7447"]}, ValueError, "tls"),
    ],
)
def test_bad_fabric_arguments_are_refused_naming_them(kwargs: dict[str, object], error: type[Exception], named: str) -> None:
    """mh.Fabric checks every argument against the bridge's own bounds: the error names the argument."""
    with pytest.raises(error, match=named):
        mh.Fabric("lab", **kwargs)  # type: ignore[arg-type]
    mh.Fabric("lab", lease=60, listen=["tcp/10.0.0.1:7447"])  # the bounds themselves are accepted


def test_the_command_line_starts_a_fabric_runtime_and_shows_it() -> None:
    """``multihop up NAME --fabric F --listen E`` starts a detached runtime with its bridge; ``multihop status`` shows
    the fabric (its name, this runtime, its exports); ``multihop down`` stops both (no bridge process left)."""
    import socket

    with socket.socket() as s:  # a free loopback port (nothing else of the test listens on it)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    name = unique("cli")
    cli = [sys.executable, "-m", "multihop.cli"]
    up = subprocess.run(
        [*cli, "up", name, "--cores", "0", "--fabric", "lab", "--listen", f"tcp/127.0.0.1:{port}"], capture_output=True, text=True, timeout=60
    )
    try:
        assert up.returncode == 0 and "fabric 'lab'" in up.stdout, up.stdout + up.stderr
        rt = mh.Runtime.attach(name)
        assert rt.fabric is not None and rt.fabric.listen == (f"tcp/127.0.0.1:{port}",)
        bridge = rt._meta["bridge"]["pid"]
        with rt.dispatcher(0) as d:
            svc = d.export("shown", fabric=True)
            st = subprocess.run([*cli, "status", name], capture_output=True, text=True, timeout=60)
            assert st.returncode == 0 and f"fabric 'lab': this runtime {name!r}" in st.stdout and "'shown'" in st.stdout, st.stdout + st.stderr
            del svc
    finally:
        down = subprocess.run([*cli, "down", name], capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not Path(f"/proc/{bridge}").exists() or "zombie" in Path(f"/proc/{bridge}/status").read_text().lower()
