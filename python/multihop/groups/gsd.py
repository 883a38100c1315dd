"""The group service (GSD): one process per runtime that runs the membership machine live.

Started on demand (:func:`ensure_service`, the first ``groups.group``/``d.join`` of
a runtime) as ``python -m multihop.groups.gsd NAME``, attached to the
runtime's first core, it exports ``mh-groups``.  Each dispatcher's group
endpoint binds one channel to it, says ``hello`` (its core and pid: the
:class:`~multihop.groups.view.Endpoint`), then sends the requests and
reports of :mod:`multihop.groups.messages` as JSON (:mod:`.codec`); the
service answers with replies, Prepare and Install.

It runs :class:`~multihop.groups.service.MembershipService` unchanged.  Before
the first Install of a view goes out, the view's fan-out entries are in
every monitor (:func:`view_entries`, sent with :meth:`multihop.Runtime.monitor_group`): one
tree per destination (the broadcast id, each multicast id, each node id) and
per member core as root, computed with :func:`~multihop.groups.trees.build_tree`
and stretched along the routing table where two tree cores have no link.
The entries of view ``v`` are removed once ``v + 2`` is installed (every
member has installed ``v + 1`` by then).

A member whose channel closes is dead: the service asks its monitor for
the marks of what it wrote (``marks``) and feeds :class:`Died` to the machine.
The process exits when its monitor goes away (the runtime stopped), or at
SIGTERM: :func:`stop_service` (``multihop down``) stops it that way before the
monitors, and waits until it has exited.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

import multihop as mh
from multihop.defaults import DEFAULT_WINDOW
from multihop.errors import MultihopError, ProtocolError
from multihop.groups import codec
from multihop.groups.errors import GroupError
from multihop.groups.ids import BROADCAST, is_node
from multihop.groups.messages import (
    CreateGroup,
    Died,
    Flushed,
    Install,
    Reply,
    Request,
    StreamMark,
)
from multihop.groups.service import MembershipService, Outgoing
from multihop.groups.stored import stored_model
from multihop.groups.trees import build_tree
from multihop.groups.view import Endpoint, View
from multihop.rts import path as route_path

__all__ = ["SERVICE", "DEFAULT_WINDOW", "ensure_service", "stop_service", "view_entries", "main"]

SERVICE = "mh-groups"
PIDFILE = "gsd.pid"


def view_entries(view: View, topology: Any, table: dict[int, dict[int, int]], model: Any = None) -> dict[int, list[dict[str, Any]]]:
    """The fan-out entries of ``view``, by monitor core (docs/groups.md §5).

    For every destination and every member core as root: the tree of the
    group's mode over the destination's cores, each edge stretched along the
    routing table's path (a relay core keeps the first parent that reaches it).
    Each entry also lists, per child, the destination members below it
    (``below``) and its ``depth`` from the root: a monitor aggregating a
    convergecast names them missing if that child dies, and gives up deeper
    first when a request's time runs out.
    """
    roots = sorted({e.core for _, e in view.members})
    dests = [BROADCAST] + [m for m, _ in view.multicast] + list(view.nodes)
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for dest in dests:
        nodes = view.destinations(dest)
        if not nodes:
            continue
        local: dict[int, list[int]] = defaultdict(list)
        for n in nodes:
            local[view.endpoint(n).core].append(n)
        cores = sorted(local)
        for root in roots:
            if is_node(dest) and len(cores) == 1:
                logical: list[tuple[int | None, int]] = [(root, cores[0])] if cores[0] != root else []
            else:
                tree = build_tree(view.tree, root, cores, topology=topology, model=model)
                logical = [(tree.parent_of(c), c) for c in tree.breadth_first() if c != root]
            parent: dict[int, int | None] = {root: None}
            children: dict[int, list[int]] = defaultdict(list)
            for p, c in logical:
                assert p is not None
                hops = route_path(table, p, c) if p in table else [p, c]
                cur = p
                for h in hops[1:]:
                    if h not in parent:
                        parent[h] = cur
                        children[cur].append(h)
                    cur = h
            below = _below(root, children, local)
            depth: dict[int, int] = {root: 0}
            for core in parent:  # parents come before their children in this order
                par = parent[core]
                if par is not None:
                    depth[core] = depth[par] + 1
            for core, par in parent.items():
                out[core].append(
                    {
                        "dest": dest,
                        "root_core": root,
                        "parent": par,
                        "children": children[core],
                        "local": local.get(core, []),
                        "below": [below[c] for c in children[core]],
                        "depth": depth[core],
                    }
                )
    return dict(out)


def _below(root: int, children: dict[int, list[int]], local: dict[int, list[int]]) -> dict[int, list[int]]:
    """The destination members in each core's subtree (itself included), sorted."""
    order = [root]
    for core in order:  # breadth first; bounded by the tree's size
        order.extend(children.get(core, []))
    below: dict[int, list[int]] = {}
    for core in reversed(order):
        nodes = list(local.get(core, []))
        for c in children.get(core, []):
            nodes.extend(below[c])
        below[core] = sorted(nodes)
    return below


class _Daemon:
    """The service's state: the machine, the members' channels, the installed views."""

    def __init__(self, rt: mh.Runtime) -> None:
        self.rt = rt
        self.svc = MembershipService()
        self.chan_of: dict[Endpoint, Any] = {}
        self.ep_of: dict[int, Endpoint] = {}  # id(channel) -> endpoint
        self.windows: dict[str, int] = {}
        self.installed: dict[str, set[int]] = defaultdict(set)
        self.anon = 0
        self.dead_cores: set[int] = set()
        self.closed: dict[str, str] = {}  # group -> why it is closed (a monitor on it died)
        self.topology = rt.topology
        self.table = rt.routing_table
        try:
            self.model = stored_model(rt)
        except Exception:
            self.model = None

    def log(self, text: str) -> None:
        print(f"[gsd {time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d}] {text}", flush=True)

    # ---- monitors ------------------------------------------------------------

    def monitor(self, core: int, body: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        reply = self.rt.monitor_group(core, json.dumps(body), timeout)
        return dict(json.loads(reply))

    def install_view(self, view: View) -> None:
        gid = self.svc.group_id(view.group)
        if view.view_id in self.installed[view.group]:
            return
        members = [[n, e.core, e.dispatcher] for n, e in view.members]
        entries = view_entries(view, self.topology, self.table, self.model) if view.members else {}
        for core, trees in sorted(entries.items()):
            self.monitor(
                core,
                {
                    "op": "install",
                    "group_id": gid,
                    "view": view.view_id,
                    "window": self.windows.get(view.group, DEFAULT_WINDOW),
                    "members": members,
                    "trees": trees,
                },
            )
        self.installed[view.group].add(view.view_id)
        for old in sorted(v for v in self.installed[view.group] if v < view.view_id - 1):
            for core in self.rt.cores:
                with contextlib.suppress(MultihopError):
                    self.monitor(core, {"op": "remove", "group_id": gid, "view": old})
            self.installed[view.group].discard(old)

    # ---- members -------------------------------------------------------------

    def send(self, ep: Endpoint, msg: object) -> None:
        ch = self.chan_of.get(ep)
        if ch is None:
            return
        extra: dict[str, Any] = {}
        if isinstance(msg, Install):
            extra = {"group_id": self.svc.group_id(msg.view.group), "window": self.windows.get(msg.view.group, DEFAULT_WINDOW)}
        try:
            ch.send(codec.encode(msg, **extra), timeout=10)
        except MultihopError as e:
            self.log(f"could not send to {ep}: {e}")

    def emit(self, out: list[Outgoing]) -> None:
        for ep, msg in out:
            group = msg.view.group if isinstance(msg, Install) else getattr(msg, "group", None)
            if group in self.closed and not isinstance(msg, Reply):
                continue  # a closed group changes no more (its members' calls raise)
            if isinstance(msg, Install):
                self.install_view(msg.view)
            self.send(ep, msg)

    def handle(self, ch: Any, raw: bytes) -> None:
        msg, d = codec.decode(raw)
        if d["op"] == "hello":
            hello = Endpoint(int(d["core"]), int(d["pid"]))
            self.chan_of[hello] = ch
            self.ep_of[id(ch)] = hello
            return
        if d["op"] == "info":
            self.info(ch, d)
            return
        ep = self.ep_of.get(id(ch))
        if ep is None and isinstance(msg, CreateGroup):
            # groups.group: a channel with no endpoint of its own (no member), answered as one
            self.anon += 1
            ep = Endpoint(-1, self.anon)
            self.chan_of[ep] = ch
            self.ep_of[id(ch)] = ep
            msg = dataclasses.replace(msg, endpoint=ep)
        if ep is None:
            raise ProtocolError("a group request before hello")
        if isinstance(msg, Request) and msg.endpoint != ep:
            raise ProtocolError(f"request names endpoint {msg.endpoint}, its channel is {ep}'s")
        if isinstance(msg, Request) and msg.group in self.closed:
            self.send(ep, Reply(msg.req, msg.group, error=self.closed[msg.group]))
            return
        if isinstance(msg, Flushed) and msg.group in self.closed:
            return
        if isinstance(msg, CreateGroup):
            window = int(d.get("window", DEFAULT_WINDOW))
            if not 1 <= window <= 4096:
                self.send(ep, Reply(msg.req, msg.group, error=f"window must be in 1..4096, got {window}"))
                return
            out = self.svc.handle(msg)
            if msg.group not in self.windows and any(isinstance(m, Reply) and m.error is None for _, m in out):
                self.windows[msg.group] = window
            self.emit(out)
            return
        self.emit(self.svc.handle(msg))

    def info(self, ch: Any, d: dict[str, Any]) -> None:
        name = d.get("group")
        try:
            if not isinstance(name, str):
                raise GroupError(f"an info request names its group as a string, got {name!r}")
            view = self.svc.view(name)
            body = {
                "op": "info_reply",
                "req": d.get("req"),
                "group": name,
                "group_id": self.svc.group_id(name),
                "window": self.windows.get(name, DEFAULT_WINDOW),
                "view": codec.view_to_dict(view),
                "error": None,
            }
        except GroupError as e:
            body = {"op": "info_reply", "req": d.get("req"), "group": name, "error": str(e)}
        ch.send(json.dumps(body).encode(), timeout=10)

    def died(self, ch: Any) -> None:
        ep = self.ep_of.pop(id(ch), None)
        if ep is None:
            return
        self.chan_of.pop(ep, None)
        if ep.core < 0:
            return  # a groups.group channel: no member
        self.log(f"endpoint {ep}: its channel closed")
        if ep.core not in self.dead_cores and ep.core in self.dead_monitors():
            self.monitor_died(ep.core)  # its monitor took it down: close its groups first
        flushed: list[Flushed] = []
        try:
            if ep.core in self.dead_cores or ep.core in self.dead_monitors():
                raise mh.MonitorError(f"the monitor of core {ep.core} is gone")
            marks = self.monitor(ep.core, {"op": "marks", "pid": ep.dispatcher}).get("marks", [])
        except (MultihopError, ValueError) as e:
            self.log(f"no marks for {ep}: {e}")
            marks = []
        for name, view in self.svc.groups().items():
            node = view.node_of(ep)
            if node is None:
                continue
            gid = self.svc.group_id(name)
            mine = [m for m in marks if m["group_id"] == gid and m["view"] == view.view_id]
            flushed.append(Flushed(name, view.view_id, node, self.marks_of(view, node, mine)))
        self.log(f"endpoint {ep} is gone ({len(flushed)} group(s))")
        self.emit(self.svc.handle(Died(ep, tuple(flushed))))

    def dead_monitors(self) -> set[int]:
        """The cores whose monitor process is no longer running (gone, or a zombie its starter has not reaped)."""
        pids = self.rt.monitor_pids
        return {core for core in self.rt.cores if not self.rt.monitor_running(core) or _live_pid_of(pids[core]) is None}

    def monitor_died(self, core: int) -> None:
        """Close every group with a member on ``core`` or a tree through it (docs/groups.md §9): the frames
        its monitor held are lost, which the view rule cannot survive."""
        self.dead_cores.add(core)
        for name, view in self.svc.groups().items():
            if name in self.closed:
                continue
            cores = set(view_entries(view, self.topology, self.table, self.model)) if view.members else set()
            if core not in cores:
                continue
            reason = f"group {name!r} is closed: the monitor of core {core} died"
            self.closed[name] = reason
            self.log(reason)
            for _, ep in view.members:
                ch = self.chan_of.get(ep)
                if ch is not None:
                    with contextlib.suppress(MultihopError):
                        ch.send(json.dumps({"op": "closed", "group": name, "core": core, "reason": reason}).encode(), timeout=5)
            gid = self.svc.group_id(name)
            for c in self.rt.cores:
                if c not in self.dead_cores:
                    with contextlib.suppress(MultihopError, ValueError):
                        self.monitor(c, {"op": "remove", "group_id": gid})

    @staticmethod
    def marks_of(view: View, node: int, marks: list[dict[str, Any]]) -> tuple[StreamMark, ...]:
        """The closing marks of dead ``node`` from its monitor's records (as ViewStreams.close makes them)."""
        out = []
        for m in sorted(marks, key=lambda m: m["dest"]):
            dest = int(m["dest"])
            if view.order == "total" and not is_node(dest):
                if m["stamp"] and view.sequencer(dest) == node:
                    sub = tuple(sorted((int(s), int(q)) for s, q in m["submitted"].items()))
                    out.append(StreamMark(dest, node, int(m["stamp"]), sub))
            elif m["seq"]:
                out.append(StreamMark(dest, node, int(m["seq"])))
        return tuple(out)


def serve(rt: mh.Runtime, ready: Any = None, stop: threading.Event | None = None) -> None:
    """Run the service on ``rt`` until its first monitor goes away (or ``stop`` is set)."""
    daemon = _Daemon(rt)
    core = rt.cores[0]
    stop = stop if stop is not None else threading.Event()
    with rt.dispatcher(core) as d:
        svc = d.export(SERVICE, backlog=256)
        fresh: queue.Queue[Any] = queue.Queue()

        def acceptor() -> None:
            while not stop.is_set():
                try:
                    fresh.put(svc.accept(timeout=0.5))
                except mh.Timeout:
                    continue
                except MultihopError:
                    return

        threading.Thread(target=acceptor, name="gsd-accept", daemon=True).start()
        if ready is not None:
            ready()
        chans: list[Any] = []
        next_look = 0.0
        try:
            while d.attached and not stop.is_set():
                while not fresh.empty():
                    chans.append(fresh.get())
                for ch in d.poll(0.05) if chans else []:
                    for _ in range(1024):
                        try:
                            raw = ch.try_recv()
                        except MultihopError:  # closed: the member is gone
                            chans = [c for c in chans if c is not ch]
                            ch.close()
                            try:
                                daemon.died(ch)
                            except Exception:  # one death must not take the service down
                                daemon.log(f"handling a death failed:\n{traceback.format_exc()}")
                            break
                        if raw is None:
                            break
                        try:
                            daemon.handle(ch, raw)
                        except (ProtocolError, GroupError) as e:
                            daemon.log(f"bad message: {e}")
                        except Exception:  # nor one message
                            daemon.log(f"handling a message failed:\n{traceback.format_exc()}")
                if not chans:
                    time.sleep(0.01)
                if time.monotonic() >= next_look:
                    next_look = time.monotonic() + 0.1
                    dead = daemon.dead_monitors()
                    if len(dead) == len(rt.cores):
                        break  # the runtime is gone
                    for core in dead - daemon.dead_cores:
                        try:
                            daemon.monitor_died(core)
                        except Exception:
                            daemon.log(f"handling the death of monitor {core} failed:\n{traceback.format_exc()}")
        finally:
            stop.set()


def ensure_service(rt: mh.Runtime, timeout: float = 30.0) -> int:
    """Start ``rt``'s group service unless it runs; returns its pid.

    One starter at a time (a lock file in the runtime directory); the pid
    file is written by the service once ``mh-groups`` is exported. A service
    that ran and died is not started again (its groups died with it).

    Raises:
        MonitorError: the service died, or did not start.
    """
    pidfile = rt.dir / PIDFILE
    lockpath = rt.dir / "gsd.lock"
    fd = os.open(lockpath, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        pid = _live_pid(pidfile)
        if pid is not None:
            return pid
        if pidfile.exists():  # it ran and died: its groups' state died with it (docs/groups.md §9)
            raise mh.MonitorError(
                f"the group service of runtime {rt.name!r} is gone (pid {pidfile.read_text()}): "
                f"installed views keep working, membership cannot change; restart the runtime"
            )
        log = open(rt.dir / "gsd.log", "ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "multihop.groups.gsd", rt.name],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            close_fds=True,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = _live_pid(pidfile)
            if pid == proc.pid:
                return pid
            if proc.poll() is not None:
                tail = (rt.dir / "gsd.log").read_text(errors="replace")[-2000:]
                raise mh.MonitorError(f"the group service of runtime {rt.name!r} exited with {proc.returncode}:\n{tail}")
            time.sleep(0.01)
        proc.kill()
        raise mh.MonitorError(f"the group service of runtime {rt.name!r} did not start within {timeout} s")
    finally:
        os.close(fd)


def stop_service(directory: Path, name: str, timeout: float = 3.0) -> int | None:
    """Stop the group service of the runtime ``name`` in ``directory``, if one runs, and return once it has
    exited (its pid), or None if none ran.

    SIGTERM (and SIGCONT, for a stopped one) ends its loop within ~50 ms; after ``timeout`` seconds it is
    killed, and waited for as long again. The process is held by a pidfd and checked to be this runtime's
    service before any signal, so a pid reused by another process is never signalled.

    Raises:
        MonitorError: it is still running after that (it cannot be killed: not ours).
    """
    pid = _live_pid(directory / PIDFILE)
    if pid is None:
        return None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    try:
        if not _is_service(pid, name) or _exited(fd, 0.0):
            return None
        signal.pidfd_send_signal(fd, signal.SIGTERM)
        signal.pidfd_send_signal(fd, signal.SIGCONT)
        if _exited(fd, timeout):
            return pid
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        if _exited(fd, timeout):
            return pid
        raise mh.MonitorError(f"the group service of runtime {name!r} (pid {pid}) is still running after SIGKILL and {2 * timeout:g} s")
    except ProcessLookupError:
        return pid  # it exited between the look and the signal
    finally:
        os.close(fd)


def _exited(pidfd: int, timeout: float) -> bool:
    """Whether the process of ``pidfd`` exits within ``timeout`` s (a pidfd is readable once it has: a zombie
    left to whoever adopted it to reap has exited)."""
    p = select.poll()
    p.register(pidfd, select.POLLIN)
    return bool(p.poll(max(0, int(timeout * 1000))))


def _is_service(pid: int, name: str) -> bool:
    """Whether process ``pid`` is the group service of runtime ``name`` (by its command line)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"multihop.groups.gsd" in argv and name.encode() in argv


def _live_pid(pidfile: Any) -> int | None:
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return None
    return _live_pid_of(pid)


def _live_pid_of(pid: int) -> int | None:
    """``pid`` if that process runs (a zombie does not), else None."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    try:  # a killed service that its starter has not reaped yet is a zombie: gone
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
    except (OSError, IndexError):
        return None
    return pid


def main(argv: list[str] | None = None) -> int:
    """``python -m multihop.groups.gsd NAME``: run runtime NAME's group service."""
    p = argparse.ArgumentParser(prog="multihop.groups.gsd", description="the group service of a runtime")
    p.add_argument("runtime")
    a = p.parse_args(argv)
    rt = mh.Runtime.attach(a.runtime)

    def ready() -> None:
        tmp = rt.dir / (PIDFILE + ".tmp")
        tmp.write_text(str(os.getpid()))
        tmp.rename(rt.dir / PIDFILE)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # multihop down: leave the loop, detach, exit
    try:
        serve(rt, ready, stop)
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
