"""Suite ``fabric``: messaging between two machines, the bridged multi-hop channel next to its baselines (issue 27).

Two "machines" are two network namespaces joined by a veth pair (:mod:`multihop.bench.netns`; root and iproute2,
nothing touches the host's network, everything is removed at the end, even on Ctrl-C). Between them, every peer
of :mod:`multihop.bench.fabric_peers` that is installed here (:data:`~multihop.bench.fabric_peers.PEERS`;
``transport`` = the peer's name):

* ``zenoh``: zenoh-python's own publisher and subscriber, one ``put`` per message (the ``fabric-bench`` extra):
  **the baseline** (every other case names the zenoh case of the same kind and size as its ``baseline``, so the
  report's ratio table shows the issue's goals: round trip within 1.2x, one-way 64 B at least 2x, 4 KiB within 1.2x);
* ``nats``: a ``nats-server`` in b, ``nats-py`` clients (the ``ges-bench`` extra);
* ``tcp``: a plain TCP socket in Python;
* ``bridge``: two ``multihop-bridge`` processes with in-process ends (the fabric's own cost);
* ``runtime``: the bridged multi-hop channel, a runtime and its bridge on each machine, through the Python API
  (what a user gets).

Cases per peer: a round trip of 64 B (``kind = rtt``; each round trip a message row: its send time is
reconstructed as the end of the one before, the trips running back to back), one-way throughput of 64 B and
4 KiB (``kind = oneway``, totals: a's first send to b's last receipt). Every message carries its sequence number;
a run that lost, doubled or reordered one is reported on the progress line and not recorded. Each case is
measured ``--repeats`` times, the peers taking turns within each repeat. ``--quick``: 300 round trips, 3,000 and
1,000 messages one way; the full run 5,000, 200,000 and 50,000. It starts runtimes of its own in the namespaces:
not with ``--attach`` (``all`` then leaves it out, saying why), nor where namespaces cannot be made.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import multihop as mh
from multihop.bench import netns
from multihop.bench.fabric_peers import BRIDGE_WINDOW, PEERS, FabricPeer
from multihop.bench.load import sampling
from multihop.bench.suites.common import SuiteContext
from multihop.bench.suites.options import BenchOptions, OptionError
from multihop.bench.trace import case_name

NAME = "fabric"
BASELINE = "zenoh"
#: (kind, size) of each case, in the order a repeat runs them
CASES = (("rtt", 64), ("oneway", 64), ("oneway", 4096))
#: the credit window of each peer's channel per kind of case (-1: none of ours): the bridge's round trip runs
#: with window 1, the runtime's channel keeps its window (one message is in flight either way)
WINDOWS = {("runtime", "rtt"): 64, ("runtime", "oneway"): 64, ("bridge", "rtt"): 1, ("bridge", "oneway"): BRIDGE_WINDOW}


def unavailable(options: BenchOptions, attached: mh.Runtime | None) -> str | None:
    """Why the suite cannot run here (None: it can): it needs network namespaces and runtimes of its own."""
    if attached is not None:
        return "it starts a runtime of its own on each machine (network namespace), so it does not run with --attach"
    return netns.unavailable()


def check(options: BenchOptions, attached: mh.Runtime | None) -> None:
    """OptionError naming why the suite cannot run (not root, no iproute2, --attach)."""
    why = unavailable(options, attached)
    if why:
        raise OptionError(f"suite {NAME}: {why}")


def _peers() -> tuple[list[FabricPeer], list[str]]:
    """The peers installed here, and why each other one is not."""
    ready, missing = [], []
    for name, make in PEERS.items():
        peer = make()
        why = peer.available()
        if why:
            missing.append(f"{name}: {why}")
        else:
            ready.append(peer)
    return ready, missing


def steps(ctx: SuiteContext) -> int:
    """Steps this suite reports: setting up each peer, then each peer's cases in every repeat."""
    n = len(_peers()[0])
    return n + ctx.repeats * n


def _counts(quick: bool) -> dict[tuple[str, int], int]:
    if quick:
        return {("rtt", 64): 300, ("oneway", 64): 3000, ("oneway", 4096): 1000}
    return {("rtt", 64): 5000, ("oneway", 64): 200_000, ("oneway", 4096): 50_000}


def _params(peer: str, kind: str, size: int) -> dict[str, Any]:
    window = WINDOWS.get((peer, kind), -1)
    return {"suite": NAME, "transport": peer, "size": size, "window": window, "fanout": 1, "machines": 2, "kind": kind}


def _baseline(peer: str, kind: str, size: int, have_baseline: bool) -> str | None:
    return case_name(_params(BASELINE, kind, size)) if have_baseline and peer != BASELINE else None


def _rtt(ctx: SuiteContext, peer: FabricPeer, n: int, repeat: int, baseline: str | None) -> None:
    peer.roundtrip(max(1, n // 10), 64)  # warm-up, not counted
    with sampling() as load:
        t0 = time.monotonic_ns()
        rtts = np.asarray([round(t * 1e9) for t in peer.roundtrip(n, 64)], dtype=np.int64)
    ends = t0 + np.cumsum(rtts)
    starts = ends - rtts
    p = _params(peer.name, "rtt", 64)
    name = case_name(p)
    ctx.writer.add_messages(name, p, starts, ends, kind="rtt", every=1, suite=NAME, repeat=repeat)
    duration = max(int(ends[-1] - starts[0]), 1)
    ctx.writer.add_case(
        name, p, messages=n, duration_ns=duration, nbytes=n * 64, kind="rtt", suite=NAME, repeat=repeat, load=load.columns(), baseline=baseline
    )


def _oneway(ctx: SuiteContext, peer: FabricPeer, n: int, size: int, repeat: int, baseline: str | None) -> None:
    with sampling() as load:
        r = peer.oneway(n, size)
    if r.errors or r.received != n:  # lost, doubled or reordered: said, never counted as fast
        ctx.progress.message(
            f"fabric: {peer.name} one-way {size} B, repeat {repeat + 1}: {r.errors or f'{r.received} of {n} received'}; not recorded"
        )
        return
    p = _params(peer.name, "oneway", size)
    ctx.writer.add_case(
        case_name(p), p, messages=n, duration_ns=max(1, round(r.seconds * 1e9)), nbytes=n * size, kind="oneway", suite=NAME, repeat=repeat,
        load=load.columns(), baseline=baseline,
    )  # fmt: skip


def run(ctx: SuiteContext) -> None:
    """Two machines, every installed peer set up once, then every case of every peer in each repeat."""
    peers, missing = _peers()
    for why in missing:
        ctx.progress.message(f"fabric: leaving out {why}")
    if not peers:
        return
    counts = _counts(ctx.quick)
    have_baseline = any(p.name == BASELINE for p in peers)
    with netns.Network() as net:
        a, b = net.machine("a"), net.machine("b")
        net.link(a, b)
        ready: list[FabricPeer] = []
        try:
            for peer in peers:
                ctx.progress.step(f"setting up {peer.name}: {peer.description}")
                peer.setup(a, b)
                ready.append(peer)
            for rep in range(ctx.repeats):
                for peer in ready:
                    ctx.progress.step(f"{peer.name}, repeat {rep + 1}/{ctx.repeats}")
                    for kind, size in CASES:
                        base = _baseline(peer.name, kind, size, have_baseline)
                        if kind == "rtt":
                            _rtt(ctx, peer, counts[kind, size], rep, base)
                        else:
                            _oneway(ctx, peer, counts[kind, size], size, rep, base)
        finally:
            for peer in ready:
                peer.teardown()
