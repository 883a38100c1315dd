"""Fair sharing of a monitor link (issue 16 §2): a channel flooding the link between two monitors
cannot hold another channel's messages back without bound.

The scene is made deterministic by stopping the downstream monitor (SIGSTOP) while the flood is
sent: its ring fills to the forwarder's limit and the rest waits in the upstream monitor's queue for
the link, where the late message of the second channel joins it. Then the downstream monitor goes
on, and the upstream monitor's counters say how many messages of other channels went out ahead of
that message (``max_overtaken``); the fair queue's bound is one turn of the flood (a quantum of
bytes), a first-come-first-served queue's would be the whole flood queued before it.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable

import multihop as mh
from chanpair import channel_pair
from multihop import _core
from multihop.paths import monitor_socket
from session import unique_name

FLOOD = 3000
SIZE = 64  # bytes of payload; 16 more of header on the link
HEADER = 16


def _link(rt: mh.Runtime, core: int, peer: int) -> dict[str, Any]:
    """Monitor `core`'s status of its link to monitor `peer` (asks that monitor only)."""
    st = _core.monitor_status(str(monitor_socket(rt.dir, core)), timeout=5.0, limit=0)
    return next(link for link in st["data"]["links"] if link["kind"] == "monitor" and link["peer"] == peer)


def _wait_for(what: str, probe: Callable[[], dict[str, Any]], ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    for _ in range(30_000):
        got = probe()
        if ok(got):
            return got
        assert time.monotonic() < deadline, f"{what}: never happened; last status {got}"
        time.sleep(0.001)
    raise AssertionError(f"{what}: never happened")


def test_a_flood_on_a_monitor_link_cannot_hold_another_channels_message_back() -> None:
    with mh.Runtime.start(unique_name("fair"), cores=[0, 1]) as rt:
        with channel_pair(rt, "multihop", window=4096) as (flood, flood_rx), channel_pair(rt, "multihop") as (ping, ping_rx):
            downstream = rt.monitor_pids[1]
            os.kill(downstream, signal.SIGSTOP)
            try:
                for i in range(FLOOD):
                    flood.send(i.to_bytes(4, "little") * (SIZE // 4), timeout=10)
                # Most of the flood waits in monitor 0's queue for the link (the ring holds a few hundred).
                before = _wait_for("the flood queues on the link", lambda: _link(rt, 0, 1), lambda link: link["queued"] >= FLOOD // 2)
                ping.send(b"p" * SIZE, timeout=10)
                _wait_for("the ping joins the queue", lambda: _link(rt, 0, 1), lambda link: link["queued_channels"] == 2)
            finally:
                os.kill(downstream, signal.SIGCONT)
            assert ping_rx.recv(timeout=30) == b"p" * SIZE
            for i in range(FLOOD):
                assert flood_rx.recv(timeout=30) == i.to_bytes(4, "little") * (SIZE // 4), f"flood message {i}"
            link = _wait_for("the link's queue empties", lambda: _link(rt, 0, 1), lambda link: link["queued"] == 0)
    turn = link["quantum"] // (SIZE + HEADER) + 1
    assert turn <= 64, f"a turn of {turn} messages is no bound worth the name (quantum {link['quantum']})"
    assert link["max_queued"] >= before["queued"] >= FLOOD // 2
    # What went ahead of the ping was one turn of the flood, not the flood queued before it.
    assert link["max_overtaken"] <= turn, link
    print(f"flood queued {before['queued']}, ping overtaken by {link['max_overtaken']} (bound {turn})")
