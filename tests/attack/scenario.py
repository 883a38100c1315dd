"""kill -9 or SIGSTOP/SIGCONT of one process mid-stream, and what the others must see.

One scenario: a starter process owns a runtime on cores 0, 1, 2 with ring routing (so a
multi-hop channel from core 0 to core 2 crosses monitors 0, 1 and 2: 1 is a pure forwarder);
a client process on core 0 streams sequence numbers to a server process on core 2. Once the
stream is under way, the target (client, server, a monitor of either end, the forwarding monitor,
or the starter) is killed with SIGKILL, or stopped with SIGSTOP for a while and continued.

What must hold, checked by :func:`check`:
- kill: every survivor ends with ChannelClosed within ``BOUND`` seconds, the server read an
  in-order prefix of what the client sent (checked message by message as it read), and nothing
  the client had reported sent before a dispatcher died is lost (a dead end's link is drained);
- stop: the stream finishes exactly (every message once, in order) and the client's flush says
  all were consumed;
- either way: afterwards no process of the scenario and no runtime directory is left.

Used by tests/attack/test_attack_kill_stop.py (quick) and benches/bench_attack.py (long).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import procs
from liveness_util import process_gone, stopped, until

TARGETS = ("client", "server", "client monitor", "forwarding monitor", "server monitor", "starter")
BOUND = 5.0  # seconds within which survivors of a kill must see ChannelClosed


@dataclass
class Outcome:
    target: str
    action: str
    transport: str
    n: int
    client: tuple[int, str, float] | None = None
    server: tuple[int, str, float] | None = None
    acted_at: float = 0.0
    sent_before: int = 0
    leftovers: list[str] = field(default_factory=list)


def run(root: Path, name: str, target: str, action: str, transport: str = "multihop", n: int = 200_000, stop_for: float = 0.3) -> Outcome:
    """Play one scenario; return what each side reported."""
    assert target in TARGETS and action in ("kill", "stop")
    assert transport == "multihop" or target in ("client", "server"), "no monitor is on a UMP channel's path"
    ctx = procs.CTX
    pids_q, result = ctx.Queue(), ctx.Queue()
    done, ready = ctx.Value("b", 0), ctx.Value("b", 0)  # flags, not Events: a killed waiter would wedge an Event
    got, sent = ctx.Value("q", 0), ctx.Value("q", 0)
    acted = ctx.Value("b", 0)  # the client holds its last batch until the kill or stop has landed
    out = Outcome(target, action, transport, n)
    children: list[Any] = []
    try:
        starter = procs.spawn(procs.attack_starter, str(root), name, [0, 1, 2], "ring", pids_q, done)
        children.append(starter)
        monitors: dict[int, int] = pids_q.get(timeout=60)
        server = procs.spawn(procs.attack_server, name, 2, "attack", ready, got, result, n)
        client = procs.spawn(procs.attack_client, name, 0, "attack", transport, ready, sent, result, n, acted)
        children += [server, client]
        pid = {
            "client": client.pid,
            "server": server.pid,
            "client monitor": monitors[0],
            "forwarding monitor": monitors[1],
            "server monitor": monitors[2],
            "starter": starter.pid,
        }[target]
        until("the stream is under way", lambda: got.value >= n // 10, seconds=120)
        out.sent_before = sent.value
        out.acted_at = time.monotonic()
        if action == "kill":
            os.kill(pid, signal.SIGKILL)
            if target == "starter":  # its monitors follow it: the kill has landed once they are gone
                gone_by = time.monotonic() + BOUND
                while not all(process_gone(m) for m in monitors.values()) and time.monotonic() < gone_by:
                    time.sleep(0.005)
            acted.value = 1
        else:
            with stopped(pid):
                acted.value = 1
                time.sleep(stop_for)
        expected = 2 if action == "stop" or target not in ("client", "server") else 1
        for _ in range(expected):
            role, count, how, at = result.get(timeout=180)
            setattr(out, role, (count, how, at))
    finally:
        done.value = 1
        for p in children[1:]:
            p.join(10)
        children[0].join(30)
        for p in children:
            if p.is_alive():
                out.leftovers.append(f"pid {p.pid} still running")
                p.kill()
                p.join(10)
        runtime_dir = root / name
        deadline = time.monotonic() + 10
        while runtime_dir.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        if runtime_dir.exists():
            out.leftovers.append(f"{runtime_dir} still there: {sorted(os.listdir(runtime_dir))}")
        # A monitor gives up its lock (and the last one removes the directory) before its process has
        # finished exiting: it has the same 10 s to be gone.
        for p in monitors.values() if "monitors" in locals() else []:
            while not process_gone(p) and time.monotonic() < deadline:
                time.sleep(0.02)
            if not process_gone(p):
                out.leftovers.append(f"monitor {p} still running")
                os.kill(p, signal.SIGKILL)
    return out


def check(o: Outcome) -> None:
    """Assert what the scenario must show (see the module notes)."""
    assert not o.leftovers, o.leftovers
    survivors = [r for r in ("client", "server") if r != o.target]
    if o.action == "stop":
        assert o.client is not None and o.client[:2] == (o.n, "finished"), o.client
        assert o.server is not None and o.server[:2] == (o.n, "finished"), o.server
        return
    for role in survivors:
        r = getattr(o, role)
        assert r is not None, f"{role} reported nothing"
        count, how, at = r
        assert how == "closed", f"{role} ended with {how!r} after killing the {o.target}"
        assert at - o.acted_at < BOUND, f"{role} saw the end {at - o.acted_at:.2f} s after the kill"
    if o.server is not None:
        # The server checked order as it read: what it has is messages 0..count-1.
        assert "out of order" not in o.server[1], o.server
        if o.client is not None:
            assert o.server[0] <= o.client[0], (o.server, o.client)
    if o.target == "client" and o.server is not None:
        assert o.server[0] >= o.sent_before, "messages the dead client had sent were lost"
