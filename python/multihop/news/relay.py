"""Relays: news between domains (runtimes), over a relay domain that only relays share.

A relay process attaches to two runtimes: its *local* domain's and the
*relay domain*'s.  Locally it is a reliable sink for the relayed topics and a
relay client of every peer (it injects news of other domains); in the relay
domain it exports ``dispatch.<relay_system>.relay.<id>`` and keeps a channel
to every other relay (point to point, as the paper's worst case).

* A local news (origin: the local domain) that the sink receives goes to
  every other relay.
* A news from another relay is injected into the local domain unless it came
  from here or was injected already; the peers keep its id, priority, topics,
  entry time and origin, so the sinks' QoS (``max_delivery_time`` counts from
  when it first entered) and their duplicate suppression work across domains.
* News injected here come back to the relay's own sink only if they match its
  topics; their origin is not local, so they are never sent on again (no loops
  in a full mesh of relays).
* A news from another relay that makes no sense (the null source, a sequence
  number above :data:`~.validate.MAX_SEQ`, a malformed topic list) is dropped
  and counted (``bad``); the local peers check the rest (a relay's news never
  speaks for a local source, never carries the local domain as origin).

:class:`RelayMachine` is that rule, sans-IO; :mod:`.relay_driver` runs it over
the live channels (three threads: local to relays, relays to local, accept);
:func:`relay` starts a relay process and returns its :class:`Relay` handle.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Sequence

import multihop as mh
from multihop.defaults import DEFAULT_TIMEOUT
from multihop.news.errors import DispatchError, TopicError
from multihop.news.ids import ZERO, NewsKey, Nid, hex_id, new_identity
from multihop.news.naming import DEFAULT_SYSTEM, check_system, peer_dir
from multihop.news.news import News
from multihop.news.peer_process import SECRET_ENV
from multihop.news.topics import check_topics, decode_topics, encode_topics
from multihop.news.validate import seq_error
from multihop.news.wire import M

__all__ = ["RelayMachine", "Relay", "relay", "RELAY_SYSTEM"]

RELAY_SYSTEM = "relays"
"""The default system name of the relay domain."""

_SEEN = 1 << 18  # news ids a relay remembers to drop what it injected already


class RelayMachine:
    """What a relay forwards (see the module docstring)."""

    def __init__(self, me: Nid, local: Nid) -> None:
        self.me = me
        self.local = local
        self.seen: OrderedDict[NewsKey, None] = OrderedDict()
        self.counters = {"out": 0, "in": 0, "dropped_own": 0, "dropped_seen": 0, "not_local": 0, "bad": 0}

    def outgoing(self, n: News) -> M.messages.news | None:
        """The ``news`` to send to the other relays for a news the local sink got, or None (not local)."""
        if n.origin != self.local:
            self.counters["not_local"] += 1
            return None
        self.counters["out"] += 1
        return M.messages.news(n.source, n.seq, n.priority, n.entry_ns, n.origin, encode_topics(n.topics), n.payload)

    def incoming(self, rec: M.messages.news) -> M.messages.news | None:
        """The ``news`` to inject locally for one from another relay, or None (ours, injected already, or bad)."""
        if rec.source == ZERO or seq_error(rec.seq) is not None:
            self.counters["bad"] += 1
            return None
        try:
            decode_topics(rec.topics)
        except TopicError:
            self.counters["bad"] += 1
            return None
        if rec.origin == self.local:
            self.counters["dropped_own"] += 1
            return None
        key = (rec.source, rec.seq)
        if key in self.seen:
            self.counters["dropped_seen"] += 1
            return None
        self.seen[key] = None
        if len(self.seen) > _SEEN:
            self.seen.popitem(last=False)
        self.counters["in"] += 1
        return rec


@dataclass
class Relay:
    """A relay process (from :func:`relay`): ``stop()`` ends it; a context manager."""

    id: Nid
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def alive(self) -> bool:
        """Whether the process runs."""
        return self.proc.poll() is None

    def stop(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """SIGTERM, then SIGKILL after ``timeout``."""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> "Relay":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def relay(
    local_runtime: str,
    relay_runtime: str,
    topics: Sequence[str],
    *,
    system: str = DEFAULT_SYSTEM,
    relay_system: str = RELAY_SYSTEM,
    timeout: float = 15.0,
) -> Relay:
    """Start a relay process between domain ``system`` of ``local_runtime`` and the relay domain on ``relay_runtime``.

    It relays the news of ``topics``; returns once it is connected (its local
    sink has joined and it is listed in the relay domain).  The process stops
    with this program (or with ``Relay.stop()``).  Raises DispatchError with its
    log if it does not start.
    """
    names = check_topics(topics)
    rt = mh.Runtime.attach(local_runtime)
    mh.Runtime.attach(relay_runtime)
    me, secret = new_identity("relay")
    logdir = peer_dir(rt, check_system(system), "log")
    logdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    log_path = logdir / f"relay-{hex_id(me)}.log"
    cmd = [
        sys.executable,
        "-m",
        "multihop.news.relay_driver",
        "--local",
        local_runtime,
        "--relay",
        relay_runtime,
        "--system",
        system,
        "--relay-system",
        check_system(relay_system),
        "--id",
        hex_id(me),
        "--owner-pid",
        str(os.getpid()),
        "--topics",
        *names,
    ]
    env = dict(os.environ, **{SECRET_ENV: secret.hex()})  # the relay's proof of its id: not on its command line
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=logf, close_fds=True, env=env, process_group=0)
    r = Relay(me, proc, log_path)
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                r.stop()
                raise DispatchError(f"relay did not start (exit {proc.returncode}):\n{tail}")
            if sel.select(0.1) and proc.stdout.readline().startswith(b"ready"):
                return r
    finally:
        sel.close()
