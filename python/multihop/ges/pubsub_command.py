"""``multihop ges pub`` and ``multihop ges sub``: publish and subscribe from the shell.

* ``multihop ges pub NAME [EVENT ...] [--at ADDRESS] [--id CLIENT] [--payload TEXT] [--state FILE]``:
  publish events to the GES system on runtime NAME.  Each event is a JSON object of its attributes in
  signature order (``'{"sport": "football", "score": 3}'``); without EVENT arguments, one object per
  line of stdin.  Every event is checked before anything is sent.  With stable storage the command
  returns once every event is stored.
* ``multihop ges sub NAME --profile 'sport=football,score=*' [--at ADDRESS] [--id CLIENT] [--count N]
  [--timeout S] [--state FILE] [--full]``: subscribe and print each matching event, one JSON line
  (its content; ``--full``: id, content and payload), as it comes, until Ctrl-C, ``--count`` events or
  ``--timeout`` seconds.  It prints nothing before the subscription is active in the whole system
  (a line on stderr says when it is), so what is published after that line is printed.

**Durable clients across runs (``--state FILE``, systems with stable storage).**  The file is the
client's "disk": its id, broker, credential (a secret: the file is made readable by its owner only),
its last event per publisher, and events received but not printed yet.  The first run makes it; a
later run resumes the client with it, so a subscriber that is away keeps its subscription, its home
stores what matches, and the next run prints what it missed (``--count 0`` subscribes and leaves at
once).  The file is written when the client connects and when the command ends (Ctrl-C included);
a run killed by SIGKILL leaves positions behind what was acknowledged, and the next run then resumes
from what the store still holds (events not yet acknowledged may be printed again).  Without
``--state``, a subscriber of a durable system unsubscribes when it ends (its home stops storing for
it), and each run is a new client id.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Iterable, TextIO

__all__ = ["add_pub_arguments", "add_sub_arguments", "run_pub", "run_sub", "parse_event", "parse_profile", "STATE_VERSION"]

#: the ``--state`` file's format version
STATE_VERSION = 1
#: how long ``ges sub`` waits for its subscription to become active (seconds), and its wait slices
ACTIVE_WAIT = 30.0
SLICE = 0.5


def add_pub_arguments(p: argparse.ArgumentParser) -> None:
    """The ``ges pub`` arguments."""
    p.add_argument("name", help="the runtime the GES system runs on (multihop ges up ... --name NAME)")
    p.add_argument(
        "events",
        nargs="*",
        metavar="EVENT",
        help='an event: a JSON object of its attributes in signature order, e.g. \'{"sport": "football", "score": 3}\' '
        "(default: read one such object per line of stdin)",
    )
    p.add_argument("--at", default=None, metavar="ADDRESS", help="the broker to publish through (default: the system's lowest address)")
    p.add_argument("--id", default=None, metavar="CLIENT", help="the publisher's client id (default: pub-<pid>-<random>, a new one each run)")
    p.add_argument("--payload", default="", metavar="TEXT", help="the payload of every event, as UTF-8 text (default: empty)")
    p.add_argument(
        "--state",
        default=None,
        metavar="FILE",
        help="stable storage only: keep the publisher's id and credential in FILE and reuse them on later runs (default: none)",
    )
    p.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the broker, and for stable storage to store the events (default 30)"
    )


def add_sub_arguments(p: argparse.ArgumentParser) -> None:
    """The ``ges sub`` arguments."""
    p.add_argument("name", help="the runtime the GES system runs on (multihop ges up ... --name NAME)")
    p.add_argument(
        "--profile",
        default=None,
        metavar="ATTR=VALUE,...",
        help="what to receive: attributes in signature order, each ATTR=VALUE, joined by commas; VALUE is * (anything), "
        'a JSON value (3, true, 0.5, "3") or else text (football). Required, except when --state resumes a subscriber',
    )
    p.add_argument(
        "--at", default=None, metavar="ADDRESS", help="the broker to attach to (default: the one in --state, else the system's lowest address)"
    )
    p.add_argument("--id", default=None, metavar="CLIENT", help="the subscriber's client id (default: the one in --state, else sub-<pid>-<random>)")
    p.add_argument("--count", type=int, default=None, metavar="N", help="stop after N events (0: subscribe and stop; default: no limit)")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="stop after S seconds (default: no limit; Ctrl-C stops too)")
    p.add_argument(
        "--state",
        default=None,
        metavar="FILE",
        help="stable storage only: the subscriber's durable state across runs (made by the first run, resumed by later ones; see multihop.ges.pubsub_command)",
    )
    p.add_argument("--full", action="store_true", help="print each event's id and payload too, not only its content")


# ---- input ------------------------------------------------------------------------------------


def parse_event(text: str, where: str) -> dict[str, Any]:
    """One event's content from its JSON text; ValueError naming ``where`` (e.g. "event 2") if it is not a JSON object."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{where} ({text!r}) is not JSON: {e}") from None
    if not isinstance(value, dict) or not value:
        raise ValueError(f'{where} ({text!r}) must be a JSON object of attributes, e.g. {{"sport": "football", "score": 3}}')
    return value


def parse_profile(text: str) -> list[tuple[str, Any]]:
    """A profile from ``ATTR=VALUE,ATTR=VALUE``: ``*`` is the wildcard, a JSON value is that value, anything else is text."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("--profile must name at least one attribute, e.g. --profile 'sport=football'")
    out: list[tuple[str, Any]] = []
    for part in text.split(","):
        name, eq, raw = part.partition("=")
        name, raw = name.strip(), raw.strip()
        if not eq or not name or not raw:
            raise ValueError(f"--profile: {part.strip()!r} is not ATTR=VALUE (VALUE may be * for anything)")
        value: Any
        if raw == "*":
            value = "*"
        else:
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw
        out.append((name, value))
    return out


def _events(args: list[str], stdin: TextIO) -> list[dict[str, Any]]:
    if args:
        return [parse_event(t, f"event {i}") for i, t in enumerate(args, 1)]
    out = []
    for n, line in enumerate(stdin, 1):
        if line.strip():
            out.append(parse_event(line.strip(), f"line {n} of stdin"))
    if not out:
        raise ValueError("no events: give them as arguments or one JSON object per line on stdin")
    return out


# ---- the state file ----------------------------------------------------------------------------


class _State:
    """A ``--state`` file: the client's durable state across runs (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.data: dict[str, Any] | None = None
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text())
                ok = isinstance(data, dict) and data.get("version") == STATE_VERSION
                ok = ok and all(isinstance(data.get(k), str) for k in ("runtime", "client", "broker", "credential"))
            except (OSError, ValueError) as e:
                raise ValueError(f"--state {self.path}: cannot read it as a GES client state file: {e}") from None
            if not ok:
                raise ValueError(f"--state {self.path} is not a GES client state file of this version ({STATE_VERSION})")
            self.data = data

    def check(self, runtime: str, client: str | None, kind: str) -> None:
        """The file must be of this runtime (and of ``client``, if one is asked for) and of this command's kind."""
        d = self.data
        if d is None:
            return
        if d["runtime"] != runtime:
            raise ValueError(f"--state {self.path} is a client of the GES system on runtime {d['runtime']!r}, not {runtime!r}")
        if client is not None and client != d["client"]:
            raise ValueError(f"--state {self.path} is client {d['client']!r}, not {client!r}")
        if d.get("kind", kind) != kind:
            raise ValueError(f"--state {self.path} is a {d.get('kind')}'s state, not a {kind}'s")

    def last(self) -> dict[str, Any]:
        """The last event received per publisher, as EventIds."""
        from multihop.ges.event import EventId

        assert self.data is not None
        return {p: EventId(*i) for p, i in self.data.get("last", {}).items()}

    def save(self, runtime: str, kind: str, client: Any, pending: Iterable[dict[str, Any]] = (), profile: str | None = None) -> None:
        """Write the client's state (only its owner may read the file: it holds the credential)."""
        if profile is None and self.data is not None:
            profile = self.data.get("profile")
        data = {
            "version": STATE_VERSION,
            "kind": kind,
            "profile": profile,
            "runtime": runtime,
            "client": client.client_id,
            "broker": client.broker,
            "credential": client.credential,
            "last": {p: list(i) for p, i in client.last_received.items()},
            "pending": list(pending),
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.data = data


def _connect(a: argparse.Namespace, kind: str, state: _State | None) -> tuple[Any, str]:
    """Attach the client (resuming the one in ``state``); returns it and its broker's address."""
    from multihop.ges.address import Address
    from multihop.ges.errors import ClientIdInUse, GesStateError, ResumeRefused
    from multihop.ges.live.client import connect
    from multihop.ges.live.system import LiveSystem

    system = LiveSystem.attach(a.name)
    if state is not None and not system.durable:
        raise GesStateError(f"--state is for a GES system with stable storage (the one on {a.name!r} has none: multihop ges up ... --durable)")
    saved = state.data if state is not None else None
    at = str(Address(a.at)) if a.at else (saved["broker"] if saved else system.addresses[0])
    cid = a.id or (saved["client"] if saved else f"{kind[:3]}-{os.getpid()}-{secrets.token_hex(3)}")
    if saved is None or state is None:
        try:
            return connect(a.name, at, cid, timeout=a.timeout or 10.0), at
        except ClientIdInUse as e:
            raise ClientIdInUse(f"{e} (from the shell: --state FILE, the file its first run kept)") from None
    try:
        return connect(a.name, at, cid, resume=True, credential=saved["credential"], last_received=state.last(), timeout=a.timeout or 10.0), at
    except ResumeRefused as e:
        if "never gave it" not in str(e):
            raise
    # the file's positions are behind what was acknowledged (a run killed before it saved): resume from what the store holds
    print(
        f"multihop ges {kind}: the positions in {state.path} are older than what was acknowledged; resuming from what the store holds",
        file=sys.stderr,
    )
    return connect(a.name, at, cid, resume=True, credential=saved["credential"], last_received={}, timeout=a.timeout or 10.0), at


# ---- commands ----------------------------------------------------------------------------------


def run_pub(a: argparse.Namespace, stdin: TextIO | None = None) -> int:
    """``multihop ges pub``: publish the events, wait until they are stored (stable storage), report."""
    from multihop.ges.event import EventId, make_event

    if a.timeout is not None and a.timeout <= 0:
        raise ValueError(f"--timeout must be positive, got {a.timeout}")
    events = _events(a.events, stdin if stdin is not None else sys.stdin)
    payload = a.payload.encode()
    for i, content in enumerate(events, 1):  # every event checked before anything is sent
        try:
            make_event(EventId("check", 0, 0, 0), content, payload)
        except (TypeError, ValueError) as e:
            raise ValueError(f"event {i} ({json.dumps(content)}): {e}") from None
    state = _State(a.state) if a.state else None
    if state is not None:
        state.check(a.name, a.id, "publisher")
    client, at = _connect(a, "publisher", state)
    try:
        if state is not None:
            state.save(a.name, "publisher", client)  # the credential is kept before anything else happens
        client.publish_many([(content, payload) for content in events])
        stored = ""
        if client.durable:
            client.wait_stored(a.timeout)
            stored = ", stored"
        print(f"published {len(events)} event{'s' if len(events) != 1 else ''} as {client.client_id} at broker {at}{stored}")
    finally:
        if state is not None and client.durable:
            client.disconnect()
            state.save(a.name, "publisher", client)
        else:
            client.close()
    return 0


def _line(ev: dict[str, Any], full: bool) -> str:
    if not full:
        return json.dumps(ev["content"])
    payload = base64.b64decode(ev["payload"]).decode(errors="replace")
    return json.dumps({"id": ev["id"], "content": ev["content"], "payload": payload})


def run_sub(a: argparse.Namespace) -> int:
    """``multihop ges sub``: subscribe, print matching events until Ctrl-C, ``--count`` or ``--timeout``."""
    from multihop.ges.address import Address

    if a.count is not None and a.count < 0:
        raise ValueError(f"--count must be 0 or more, got {a.count}")
    if a.timeout is not None and a.timeout <= 0:
        raise ValueError(f"--timeout must be positive, got {a.timeout}")
    profile = parse_profile(a.profile) if a.profile is not None else None
    state = _State(a.state) if a.state else None
    if state is not None:
        state.check(a.name, a.id, "subscriber")
    resumed = state is not None and state.data is not None
    if profile is None and not resumed:
        raise ValueError("give --profile (what to receive), e.g. --profile 'sport=football'")
    if resumed and profile is not None and state is not None and state.data is not None and state.data.get("profile") != a.profile:
        raise ValueError(
            f"--state {state.path} is a subscriber of --profile {state.data.get('profile')!r}, which its home keeps; "
            "leave --profile out to resume it, or use another --state file for another profile"
        )
    start = time.monotonic()
    deadline = None if a.timeout is None else start + a.timeout
    todo: deque[dict[str, Any]] = deque(state.data.get("pending", []) if state is not None and state.data else [])
    client, at = _connect(a, "subscriber", state)
    printed = 0
    try:
        if state is not None:
            state.save(a.name, "subscriber", client, todo, a.profile)  # the credential is kept before anything else happens
        if profile is not None and not resumed:
            sid = client.subscribe(profile)
            whole = Address(at).levels + 1  # active in the whole system
            wait_until = start + ACTIVE_WAIT if deadline is None else deadline
            while client.active_level(sid) != whole:  # bounded by wait_until
                if time.monotonic() > wait_until:
                    raise TimeoutError(f"the subscription did not become active in the whole system within {wait_until - start:.0f} s")
                time.sleep(0.05)  # the profile propagates to the deciders; the command waits for it
        print(
            f"subscribed as {client.client_id} at broker {at}"
            + (" (resumed)" if resumed else f" ({a.profile})")
            + ("; waiting for events (Ctrl-C stops)" if a.count != 0 else ""),
            file=sys.stderr,
            flush=True,
        )
        while a.count is None or printed < a.count:  # bounded by --count, --timeout or Ctrl-C
            if not todo:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                for ev in client.next_many(4096, timeout=SLICE if left is None else min(SLICE, left)):
                    i = ev.id
                    todo.append(
                        {
                            "id": [i.publisher, i.timestamp, i.sequence, i.incarnation],
                            "content": ev.content,
                            "payload": base64.b64encode(ev.payload).decode(),
                        }
                    )
                continue
            print(_line(todo.popleft(), a.full), flush=True)
            printed += 1
    finally:
        if state is not None:
            if client.durable:
                client.disconnect()  # away: its home keeps storing for it
            else:
                client.close()
            state.save(a.name, "subscriber", client, todo, a.profile)  # what came but was not printed is printed next time
        else:
            try:
                if client.durable and not client.closed:
                    for sid in list(client.core.subs):  # a one-off subscriber: its home stops storing for it
                        client.unsubscribe(sid)
                    client.wait_stored(5.0)
            finally:
                client.close()
    return 0
