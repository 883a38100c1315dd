"""Machines as network namespaces, for tests and benches (issue 27).

Used by ``multihop bench fabric``, ``benches/bench_fabric.py`` and the tests (``tests/netns.py`` re-exports this
module with a pytest fixture).

A :class:`Network` builds "machines" on this one Linux box: each is a network namespace
(``ip netns add``) with its own ``lo``, interfaces, routes and sysctls, and each :meth:`Network.link`
joins two of them with a veth pair whose ends get the two host addresses of a private ``/30``
out of ``10.213.0.0/16``::

    from multihop.bench import netns

    with netns.Network() as net:
        a, b = net.machine("a"), net.machine("b")
        link = net.link(a, b)                   # a: 10.213.0.1/30, b: 10.213.0.2/30
        server = b.popen([sys.executable, "server.py", link.addr_b])   # runs inside b
        with a.connect((link.addr_b, 5000)) as s:  # a socket made inside a
            ...
        link.cut()                              # ip link set ... down (both ends)
        link.restore()
        link.slow()                             # tc qdisc ... tbf rate 1mbit (no netem here)
    # every namespace, veth and process made above is gone here, even if the block raised

Requires root and iproute2 (``ip``, ``tc``): :func:`unavailable` says why not when it cannot run.

**Isolation.** Every namespace starts empty, and the veth ends are created inside the namespaces
(``ip -n A link add ... peer ... netns B``), so nothing of a network ever appears in the host's
namespace: its interfaces, addresses, routes and sysctls are never touched, and traffic only flows
between the namespaces of one network. Two networks (two concurrent runs, or two tests) share no
namespace, so they may use the same addresses without seeing each other.

**Names.** A namespace is named ``mhns-<pid>-<start>-<n>-<label>``: the owning process's pid and
its start time (clock ticks since boot, ``/proc/<pid>/stat`` field 22; together they name one
process for the life of the machine), a per-process network number and the machine's label. A veth
end is named ``mh<pid in base 36>-<link number><a|b>`` (at most 15 characters, unique per run).

**Cleanup.** :meth:`Network.close` (run by ``with``, by the :func:`network` pytest fixture, and at
interpreter exit for a network left open) stops the proxies, ends every process started in the
network's namespaces (those started with :meth:`Namespace.popen` first, by process group, then
anything else still inside, found with ``ip netns pids``) and deletes the namespaces, which takes
their veth ends with them. SIGINT is held during cleanup, and SIGTERM is turned into ``SystemExit``
while a network is open (when the process has no handler of its own), so that an interrupted run
still cleans up. A run that was killed outright (SIGKILL) leaves its namespaces behind: :func:`sweep`,
run whenever a network is made, removes the namespaces with this module's prefix whose owning
process (pid and start time) is gone, and nothing else. ``python -m multihop.bench.netns sweep`` runs it by
hand; ``python -m multihop.bench.netns list`` lists this module's namespaces and their owners.

**Faults.** :meth:`Link.cut` / :meth:`Link.restore` take a link down and up (the routes through it
are put back on restore); :meth:`Link.slow` installs a token bucket (``tbf``) on the link's
egress; this kernel has no ``netem``, so added latency, stalls and cut connections come from
:class:`TcpProxy`, a small proxy of this module's own that listens in one namespace and connects
into another.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator, Literal, Sequence, TypeVar

PREFIX = "mhns-"
"""Every namespace this module makes starts with this; :func:`sweep` considers nothing else."""

SUBNET_BASE = (10, 213)
"""Links get /30s out of 10.213.0.0/16 (link i: 10.213.(i // 64).(4 * (i % 64)) / 30)."""

NETNS_DIR = Path("/run/netns")
_NAME_RE = re.compile(r"^mhns-(\d+)-(\d+)-(\d+)-([a-z0-9]{1,12})$")
_LABEL_RE = re.compile(r"^[a-z0-9]{1,12}$")
_CLONE_NEWNET = 0x40000000
_IP_TIMEOUT = 15.0
CONNECT_TIMEOUT = 5.0
"""Seconds a TCP connect made inside a namespace (:meth:`Namespace.connect`, the proxy's upstream) may take."""

Side = Literal["a", "b", "both"]
Socket = socket.socket  # (Namespace.socket shadows the module inside the class)
T = TypeVar("T")


class NetnsError(RuntimeError):
    """An ``ip``/``tc`` command failed, or cleanup could not remove something it made."""


# ---------------------------------------------------------------------------------------------
# process identity, commands


def _start_ticks(pid: int) -> int | None:
    """Start time of process `pid` in clock ticks since boot (``/proc/PID/stat`` field 22), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: count fields after the last ')'
    rest = stat[stat.rindex(")") + 2 :].split()
    return int(rest[19])  # fields 3.. start at rest[0]; field 22 is rest[19]


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def tool(name: str) -> str:
    """The path of the program `name` (iproute2's ``ip``, ``tc``, ``ss``): on PATH, else in the sbin directories a
    non-login PATH may lack; the bare name if nowhere (the command then fails saying so)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin") or name


def unavailable() -> str | None:
    """Why network namespaces cannot be made here (not root, no ``ip``/``tc``), or None if they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for name in ("ip", "tc"):
        if not os.path.isabs(tool(name)):
            return f"'{name}' (iproute2) is not installed"
    return None


def _run(argv: Sequence[str], *, input: str | None = None, check: bool = True, timeout: float = _IP_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run a short command (``ip``, ``tc``) and return it; a failure raises :class:`NetnsError` with its stderr."""
    argv = [tool(argv[0]) if argv[0] in ("ip", "tc") else argv[0], *argv[1:]]
    proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _ns_pids(name: str) -> list[int]:
    """Processes inside namespace `name` (``ip netns pids``); empty if it is gone."""
    proc = _run(["ip", "netns", "pids", name], check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def _in_netns(name: str, fn: Callable[[], T]) -> T:
    """Call `fn` in a short-lived thread that has entered namespace `name` (setns(2) applies to the
    calling thread only, so no other thread of this process moves). Sockets it creates stay in that
    namespace for their whole life, whichever thread uses them afterwards."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            fd = os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if hasattr(os, "setns"):  # Python 3.12+
                    os.setns(fd, _CLONE_NEWNET)
                else:
                    libc = ctypes.CDLL(None, use_errno=True)
                    if libc.setns(fd, _CLONE_NEWNET) != 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"setns into {name}: {os.strerror(err)}")
            finally:
                os.close(fd)
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=body, name=f"netns-{name}", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------
# signals: SIGINT held during cleanup, SIGTERM turned into SystemExit while a network is open


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT (and SIGTERM) for the block when in the main thread; re-raise one that came after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        got.append(signum)

    old = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if signal.SIGINT in got:
            raise KeyboardInterrupt
        if signal.SIGTERM in got:
            raise SystemExit(128 + signal.SIGTERM)


_sigterm_lock = threading.Lock()
_sigterm_users = 0
_sigterm_saved: Any = None


def _sigterm_to_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _sigterm_acquire() -> bool:
    """While a network is open, SIGTERM raises SystemExit (so `finally` blocks and cleanup run), if the
    process had the default action; True if this call took part in that."""
    global _sigterm_users, _sigterm_saved
    if threading.current_thread() is not threading.main_thread():
        return False
    with _sigterm_lock:
        if _sigterm_users == 0:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return False
            _sigterm_saved = signal.signal(signal.SIGTERM, _sigterm_to_exit)
        _sigterm_users += 1
        return True


def _sigterm_release() -> None:
    global _sigterm_users
    with _sigterm_lock:
        _sigterm_users -= 1
        if _sigterm_users == 0 and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _sigterm_saved)


# ---------------------------------------------------------------------------------------------
# machines and links


class Namespace:
    """One "machine": a network namespace made by a :class:`Network` (use :meth:`Network.machine`)."""

    def __init__(self, network: Network, label: str, name: str) -> None:
        self.network = network
        self.label = label
        self.name = name
        self.links: list[Link] = []
        self.processes: list[subprocess.Popen[Any]] = []

    def __repr__(self) -> str:
        return f"Namespace({self.label!r}, {self.name!r})"

    @property
    def address(self) -> str:
        """This machine's address on its first link (the one benches and simple tests use)."""
        if not self.links:
            raise NetnsError(f"machine {self.label} has no link yet")
        return self.links[0].address_of(self)

    def address_towards(self, other: Namespace) -> str:
        """This machine's address on the link that joins it directly to `other`."""
        for link in self.links:
            if link.peer_of(self) is other:
                return link.address_of(self)
        raise NetnsError(f"no direct link between {self.label} and {other.label}")

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` wrapped to run inside this namespace (``ip netns exec NAME ...``)."""
        return [tool("ip"), "netns", "exec", self.name, *argv]

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start `argv` inside this namespace and return its Popen; keyword arguments go to Popen.

        The process gets a session (and process group) of its own unless ``start_new_session=False``
        is passed; the network ends it, and its group, at cleanup if it is still running.
        """
        kwargs.setdefault("start_new_session", True)
        proc: subprocess.Popen[Any] = subprocess.Popen(self.command(argv), **kwargs)
        self.processes.append(proc)
        return proc

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside this namespace to completion (text output captured); raise
        :class:`NetnsError` on a non-zero exit when `check`."""
        return _run(self.command(argv), check=check, timeout=timeout, input=input)

    def call(self, fn: Callable[[], T]) -> T:
        """Call `fn` in a thread inside this namespace (sockets made there belong to it).

        Threads that `fn` starts stay in this namespace for good, and a library that starts its
        threads once per process (zenoh's runtime does, at the first session) keeps them wherever
        that happened: run such a library in a process of its own (:meth:`popen`), not here."""
        return _in_netns(self.name, fn)

    def socket(self, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM) -> Socket:
        """A new socket that lives in this namespace (it binds, listens and connects from here).
        It holds the namespace alive while open, so the network closes it at cleanup if it still is."""
        s = self.call(lambda: socket.socket(family, type))
        self.network._sockets.add(s)
        return s

    def connect(self, address: tuple[str, int], timeout: float = CONNECT_TIMEOUT) -> Socket:
        """A TCP connection from this machine to `address` (raises OSError as ``socket.connect`` does)."""
        s = self.socket()
        s.settimeout(timeout)
        try:
            s.connect(address)
        except BaseException:
            s.close()
            raise
        return s

    def listen(self, address: tuple[str, int], backlog: int = 16) -> Socket:
        """A TCP socket listening on `address` in this machine (port 0: any free port)."""
        s = self.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
            s.listen(backlog)
        except BaseException:
            s.close()
            raise
        return s

    def sysctl(self, key: str, value: str | int | None = None) -> str:
        """Read (and with `value`, first write) a sysctl of this namespace only, e.g.
        ``net.ipv4.ip_forward``; only per-namespace keys (``net.*``) are accepted."""
        if not re.fullmatch(r"net(\.[A-Za-z0-9_-]+)+", key):
            raise ValueError(f"{key!r}: only per-namespace net.* sysctls are set here")
        path = "/proc/sys/" + key.replace(".", "/")
        if value is not None:
            self.run(["tee", path], input=f"{value}\n")
        return self.run(["cat", path]).stdout.strip()

    def enable_forwarding(self) -> None:
        """Let this machine route between its links (``net.ipv4.ip_forward=1`` in this namespace only)."""
        self.sysctl("net.ipv4.ip_forward", 1)

    def add_route(self, destination: str, via: str) -> None:
        """Route `destination` (CIDR) through gateway `via`; kept, and put back when a link comes back up."""
        route = (destination, via)
        if route not in self.network._routes.setdefault(self.name, []):
            self.network._routes[self.name].append(route)
        _run(["ip", "-n", self.name, "route", "replace", destination, "via", via])

    def pids(self) -> list[int]:
        """Every process inside this namespace (``ip netns pids``)."""
        return _ns_pids(self.name)


@dataclass
class Link:
    """A veth pair between machines `a` and `b`, each end holding one address of a /30."""

    a: Namespace
    b: Namespace
    dev_a: str
    dev_b: str
    addr_a: str
    addr_b: str
    subnet: str  # "10.213.x.y/30"
    slowed: set[str] = field(default_factory=set)

    def peer_of(self, ns: Namespace) -> Namespace:
        """The machine at the other end from `ns`."""
        return self.b if ns is self.a else self.a

    def address_of(self, ns: Namespace) -> str:
        """The address of `ns`'s end of this link."""
        if ns is self.a:
            return self.addr_a
        if ns is self.b:
            return self.addr_b
        raise NetnsError(f"{ns.label} is not on link {self.subnet}")

    def _ends(self, side: Side) -> list[tuple[Namespace, str]]:
        ends = {"a": [(self.a, self.dev_a)], "b": [(self.b, self.dev_b)]}
        return ends["a"] + ends["b"] if side == "both" else ends[side]

    def cut(self, side: Side = "both") -> None:
        """Take the link down (``ip link set DEV down``): on both ends by default, so both machines
        see it gone at once; with ``side="a"`` only a's end goes down (a gets "network unreachable"
        at once, b's packets just vanish, as with a cable pulled at a's end)."""
        for ns, dev in self._ends(side):
            _run(["ip", "-n", ns.name, "link", "set", "dev", dev, "down"])

    def restore(self) -> None:
        """Bring both ends up again and put back the routes the kernel dropped with the link."""
        for ns, dev in self._ends("both"):
            _run(["ip", "-n", ns.name, "link", "set", "dev", dev, "up"])
        for ns in (self.a, self.b):
            for destination, via in self.a.network._routes.get(ns.name, []):
                _run(["ip", "-n", ns.name, "route", "replace", destination, "via", via], check=False)

    def is_up(self, side: Literal["a", "b"] = "a") -> bool:
        """Whether that end is administratively up."""
        ((ns, dev),) = self._ends(side)
        out = _run(["ip", "-n", ns.name, "-j", "link", "show", "dev", dev]).stdout
        return "UP" in json.loads(out)[0].get("flags", [])

    def slow(self, rate: str = "1mbit", burst: str = "32kbit", latency: str = "400ms", side: Side = "both") -> None:
        """Install a token-bucket filter on the link's egress (``tc qdisc replace dev DEV root tbf rate
        RATE burst BURST latency LATENCY``): both directions by default. Packets beyond the rate wait
        in the qdisc (up to `latency`), so TCP slows down to the rate; nothing is reordered."""
        for ns, dev in self._ends(side):
            _run(["tc", "-n", ns.name, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", burst, "latency", latency])
            self.slowed.add(dev)

    def unslow(self) -> None:
        """Remove the token buckets :meth:`slow` installed."""
        for ns, dev in self._ends("both"):
            if dev in self.slowed:
                _run(["tc", "-n", ns.name, "qdisc", "del", "dev", dev, "root"], check=False)
                self.slowed.discard(dev)

    def qdisc(self, side: Literal["a", "b"] = "a") -> dict[str, Any]:
        """The root qdisc of that end with its counters (``tc -j -s qdisc show``): ``kind`` ("tbf" once
        slowed, "noqueue" on a plain veth), ``options`` (tbf: ``rate`` in bytes/s, ``burst``,
        ``lat``), ``bytes``, ``packets``, ``drops``, ``overlimits`` (packets the bucket held back)."""
        ((ns, dev),) = self._ends(side)
        out = _run(["tc", "-n", ns.name, "-j", "-s", "qdisc", "show", "dev", dev]).stdout
        for q in json.loads(out):
            if q.get("root"):
                return dict(q)
        return {"kind": "none"}


# ---------------------------------------------------------------------------------------------
# the network


_networks: weakref.WeakSet[Network] = weakref.WeakSet()
_network_counter = itertools.count()
_link_counter = itertools.count()


@atexit.register
def _close_all_at_exit() -> None:
    for net in list(_networks):
        with contextlib.suppress(Exception):
            net.close()


class Network:
    """A set of machines (network namespaces) and the links between them; a context manager.

    Everything it makes is removed by :meth:`close` (``with`` calls it, even when the block raises
    or is interrupted); a network left open is closed at interpreter exit.
    ``sweep_stale=True`` first removes what earlier runs of this module left behind (:func:`sweep`).
    """

    def __init__(self, *, sweep_stale: bool = True) -> None:
        reason = unavailable()
        if reason:
            raise NetnsError(reason)
        if sweep_stale:
            sweep()
        pid = os.getpid()
        self.pid = pid
        self.start_ticks = _start_ticks(pid) or 0
        self.number = next(_network_counter)
        self.machines: dict[str, Namespace] = {}
        self.links: list[Link] = []
        self.proxies: list[TcpProxy] = []
        self._routes: dict[str, list[tuple[str, str]]] = {}
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._closed = False
        self._sigterm = _sigterm_acquire()
        _networks.add(self)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(raise_errors=exc[0] is None)

    # -- building

    def machine(self, label: str) -> Namespace:
        """A new machine: namespace ``mhns-<pid>-<start>-<n>-<label>`` with ``lo`` up.
        `label`: 1-12 lowercase letters or digits, unique in this network."""
        if self._closed:
            raise NetnsError("network is closed")
        if not _LABEL_RE.match(label):
            raise ValueError(f"machine label {label!r}: 1-12 characters out of a-z and 0-9")
        if label in self.machines:
            raise ValueError(f"machine {label!r} exists already")
        name = f"{PREFIX}{self.pid}-{self.start_ticks}-{self.number}-{label}"
        ns = Namespace(self, label, name)
        _run(["ip", "netns", "add", name])
        self.machines[label] = ns  # registered before anything else can fail, so close() removes it
        _run(["ip", "-n", name, "link", "set", "dev", "lo", "up"])
        return ns

    def link(self, a: Namespace, b: Namespace) -> Link:
        """Join `a` and `b` with a veth pair made inside them (never in the host's namespace); a gets
        the first address of the next free /30 of 10.213.0.0/16, b the second; both ends up."""
        if a is b or a.network is not self or b.network is not self:
            raise ValueError("a link joins two different machines of this network")
        i = len(self.links)
        if i >= 64 * 256:
            raise NetnsError("out of /30s in 10.213.0.0/16")
        base = f"{SUBNET_BASE[0]}.{SUBNET_BASE[1]}.{i // 64}"
        low = 4 * (i % 64)
        addr_a, addr_b = f"{base}.{low + 1}", f"{base}.{low + 2}"
        tag = f"mh{_b36(self.pid)}-{next(_link_counter)}"
        link = Link(a, b, f"{tag}a", f"{tag}b", addr_a, addr_b, f"{base}.{low}/30")
        _run(["ip", "-n", a.name, "link", "add", link.dev_a, "type", "veth", "peer", "name", link.dev_b, "netns", b.name])
        self.links.append(link)
        a.links.append(link)
        b.links.append(link)
        for ns, dev, addr in ((a, link.dev_a, addr_a), (b, link.dev_b, addr_b)):
            _run(["ip", "-n", ns.name, "addr", "add", f"{addr}/30", "dev", dev])
            _run(["ip", "-n", ns.name, "link", "set", "dev", dev, "up"])
        return link

    def line(self, *labels: str) -> tuple[list[Namespace], list[Link]]:
        """Machines in a line, each linked to the next, with routes so that every machine reaches
        every address of the line through its neighbours, and forwarding enabled in the inner
        machines only. Returns the machines and the links (link i joins machine i and i+1)."""
        if len(labels) < 2:
            raise ValueError("a line has two machines or more")
        machines = [self.machine(label) for label in labels]
        links = [self.link(machines[i], machines[i + 1]) for i in range(len(machines) - 1)]
        for i, ns in enumerate(machines):
            for j, link in enumerate(links):
                if j < i - 1:  # a link to the left, not adjacent: via the left neighbour
                    ns.add_route(link.subnet, links[i - 1].addr_a)
                elif j > i:  # a link to the right, not adjacent: via the right neighbour
                    ns.add_route(link.subnet, links[i].addr_b)
        for ns in machines[1:-1]:
            ns.enable_forwarding()
        return machines, links

    def proxy(
        self,
        listen_ns: Namespace,
        listen: tuple[str, int],
        target_ns: Namespace,
        target: tuple[str, int],
        latency: float = 0.0,
    ) -> TcpProxy:
        """Start a :class:`TcpProxy` listening on `listen` inside `listen_ns` and connecting each
        client to `target` from inside `target_ns`; stopped at cleanup."""
        p = TcpProxy(listen_ns, listen, target_ns, target, latency=latency)
        self.proxies.append(p)
        return p

    # -- cleanup

    def names(self) -> list[str]:
        """The namespace names this network made."""
        return [ns.name for ns in self.machines.values()]

    def devices(self) -> list[str]:
        """The veth end names this network made."""
        return [d for link in self.links for d in (link.dev_a, link.dev_b)]

    def close(self, raise_errors: bool = True) -> None:
        """Remove everything this network made: proxies, processes (their groups, then anything else
        inside its namespaces), namespaces (and with them the veths). Idempotent; SIGINT and SIGTERM
        are held until it is done. Raises :class:`NetnsError` naming what could not be removed
        (when `raise_errors`; otherwise it is printed on stderr)."""
        if self._closed:
            return
        with _signals_held():
            problems: list[str] = []
            for p in self.proxies:
                try:
                    p.close()
                except Exception as exc:
                    problems.append(f"proxy {p}: {exc}")
            for sock in list(self._sockets):
                _reset(sock)
            for ns in self.machines.values():
                _end_processes(ns.processes)
            for ns in self.machines.values():
                problems += _remove_namespace(ns.name)
            self._closed = True
            _networks.discard(self)
        if self._sigterm:  # after the held block, which puts back the handlers it found
            self._sigterm = False
            _sigterm_release()
        if problems:
            message = "netns cleanup left: " + "; ".join(problems)
            if raise_errors:
                raise NetnsError(message)
            print(message, file=sys.stderr)


def _end_processes(procs: list[subprocess.Popen[Any]], grace: float = 2.0) -> None:
    """SIGTERM each running process's group (its own session), then SIGKILL the groups whose leader
    is still there after `grace`. A group is only signalled while its leader is not reaped, so its id
    cannot have been reused; members left behind by a dead leader are still inside the namespace,
    where :func:`_remove_namespace` finds them."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        _signal_group(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    for p in running:
        if p.poll() is None:
            _signal_group(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)


def _signal_group(pid: int, sig: int) -> None:
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    if pgid == os.getpgrp():  # started without a session of its own: signal it alone
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _remove_namespace(name: str) -> list[str]:
    """Kill whatever still runs inside namespace `name`, wait for it, delete the namespace; what failed."""
    if not (NETNS_DIR / name).exists():
        return []
    deadline = time.monotonic() + 10
    while True:
        pids = [p for p in _ns_pids(name) if p != os.getpid()]
        if not pids:
            break
        if time.monotonic() > deadline:
            return [f"{name}: processes {pids} would not die"]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    proc = _run(["ip", "netns", "del", name], check=False)
    if proc.returncode != 0 and (NETNS_DIR / name).exists():
        return [f"{name}: ip netns del: {proc.stderr.strip()}"]
    return []


def owned_namespaces() -> list[tuple[str, int, int, bool]]:
    """This module's namespaces on the machine: (name, owner pid, owner start ticks, owner alive)."""
    out = []
    try:
        entries = sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []
    for entry in entries:
        m = _NAME_RE.match(entry)
        if m:
            pid, start = int(m.group(1)), int(m.group(2))
            out.append((entry, pid, start, _start_ticks(pid) == start))
    return out


def sweep() -> list[str]:
    """Remove the namespaces (and so their veths) that earlier runs of this module left behind, with
    whatever still runs inside them: only names of this module's exact form
    (``mhns-<pid>-<start>-<n>-<label>``) whose owning process, pid and start time, is gone. A run
    still alive, and anything named otherwise, is never touched. Returns the names removed."""
    removed = []
    for name, _pid, _start, alive in owned_namespaces():
        if not alive and not _remove_namespace(name):
            removed.append(name)
    return removed


# ---------------------------------------------------------------------------------------------
# a TCP proxy between namespaces


class TcpProxy:
    """A TCP proxy that listens inside one namespace and connects into another (threads; no netem).

    Each accepted connection gets its own connection to the target and two pumps, one per direction.
    A pump reads what arrives and hands it to a writer that sends it ``latency`` seconds later, so
    the added delay does not cap throughput; bytes are never reordered or dropped inside a stream.
    Controls, callable from any thread:

    * ``latency`` (attribute, seconds): one-way delay added in each direction from now on;
    * :meth:`stall` / :meth:`resume`: stop / restart forwarding while connections stay open (a
      frozen peer or a partition that TCP has not noticed yet): data waits in the proxy and, once
      its buffers are full, in the kernel, so senders block;
    * :meth:`cut` / :meth:`restore`: reset every open connection (RST on both sides) and, until
      restore, reset each new one as soon as it is accepted;
    * :meth:`close`: stop everything (the network calls it at cleanup).

    ``connections`` counts accepted connections, ``forwarded`` the bytes delivered each way.
    """

    def __init__(self, listen_ns: Namespace, listen: tuple[str, int], target_ns: Namespace, target: tuple[str, int], latency: float = 0.0) -> None:
        self.listen_ns, self.target_ns, self.target = listen_ns, target_ns, target
        self.latency = latency
        self.connections = 0
        self.forwarded = {"to_target": 0, "to_client": 0}
        self._lock = threading.Lock()
        self._open: list[tuple[socket.socket, socket.socket]] = []
        self._running = threading.Event()
        self._running.set()  # cleared by stall()
        self._cut = False
        self._closed = False
        self._server = listen_ns.listen(listen, backlog=64)
        self._server.settimeout(0.2)
        self.address: tuple[str, int] = self._server.getsockname()[:2]
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop, "accept")

    def __repr__(self) -> str:
        return f"TcpProxy({self.listen_ns.label} {self.address[0]}:{self.address[1]} -> {self.target_ns.label} {self.target[0]}:{self.target[1]})"

    def _spawn(self, fn: Callable[..., None], what: str, *args: Any) -> None:
        t = threading.Thread(target=fn, args=args, name=f"tcpproxy-{what}", daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            if self._cut:
                _reset(client)
                continue
            try:
                upstream = self.target_ns.connect(self.target, timeout=CONNECT_TIMEOUT)
            except OSError:
                _reset(client)
                continue
            for s in (client, upstream):
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open.append((client, upstream))
            self._spawn(self._pump, "up", client, upstream, "to_target")
            self._spawn(self._pump, "down", upstream, client, "to_client")

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        q: queue.Queue[tuple[float, bytes] | None] = queue.Queue()
        self._spawn(self._writer, "write", q, dst, direction)
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                q.put((time.monotonic() + self.latency, data))
        except OSError:
            pass
        q.put(None)

    def _writer(self, q: queue.Queue[tuple[float, bytes] | None], dst: socket.socket, direction: str) -> None:
        try:
            while True:
                item = q.get()
                if item is None:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)  # pass the end of stream on
                    return
                due, data = item
                while not self._running.is_set() or time.monotonic() < due:
                    if self._closed:
                        return
                    if self._running.is_set():
                        time.sleep(min(0.05, max(0.0, due - time.monotonic())))
                    else:
                        self._running.wait(0.05)
                dst.sendall(data)
                self.forwarded[direction] += len(data)
        except OSError:
            return

    def stall(self) -> None:
        """Stop forwarding (connections stay open; bytes wait)."""
        self._running.clear()

    def resume(self) -> None:
        """Forward again what waited, and everything after it."""
        self._running.set()

    def cut(self) -> None:
        """Reset every open connection, and every new one until :meth:`restore`."""
        self._cut = True
        with self._lock:
            pairs, self._open = self._open, []
        for a, b in pairs:
            _reset(a)
            _reset(b)

    def restore(self) -> None:
        """Accept and forward new connections again."""
        self._cut = False

    def close(self) -> None:
        """Stop: close the listener and every connection, wait for the threads."""
        self._closed = True
        self._running.set()
        with contextlib.suppress(OSError):
            self._server.close()
        self.cut()
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(timeout=2)


def _reset(s: socket.socket) -> None:
    """Close `s` with an RST (SO_LINGER 0) rather than a FIN."""
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()


# ---------------------------------------------------------------------------------------------
# command line


def _main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "list"
    if cmd == "list":
        for name, pid, _start, alive in owned_namespaces():
            print(f"{name}\towner {pid} {'running' if alive else 'gone (sweep removes it)'}")
        return 0
    if cmd == "sweep":
        for name in sweep():
            print(f"removed {name}")
        return 0
    print("usage: python -m multihop.bench.netns [list|sweep]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
