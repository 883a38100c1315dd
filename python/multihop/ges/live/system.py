"""A live GES system: broker processes on a runtime (``multihop ges up|status|down``).

:meth:`LiveSystem.up` starts one broker process per broker of a topology on
runtime ``name`` (started, detached or owned, when it is not running yet),
writes the system's description to ``ges.json`` in the runtime's directory,
and waits until every broker's connectivity graph is the one the simulator
gives for the same topology.

A topology whose brokers name runtimes (:meth:`Topology.check_placement`)
spans the runtimes of a fabric: ``up`` on each machine starts only the
brokers placed on its runtime (which must have joined the fabric), waits
until *those* brokers' graphs are the simulator's for the whole topology
(so it returns once every machine's share is up and joined), and this
object's :meth:`control` reaches the other runtimes' brokers across the
fabric.  Changes (:meth:`kill`, :meth:`crash`, ...) act on this runtime's
brokers; each machine's shadow simulator knows only the changes made through
its own object.  The same object changes the running system
(:meth:`add_gateway`, :meth:`remove_gateway`, :meth:`kill`) and replays each
change on its shadow :class:`~multihop.ges.simulator.Simulator`, so
:meth:`wait_converged` knows what every graph must become.
:meth:`LiveSystem.attach` finds a system started by another process (for
``status`` and ``down``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

import multihop as mh
from multihop import _ges
from multihop.defaults import DEFAULT_TIMEOUT
from multihop.ges.address import Address, AddressLike
from multihop.ges.connection import Connection
from multihop.ges.costs import CostMatrix
from multihop.ges.errors import GesStateError, TopologyError
from multihop.ges.graph import ConnectivityGraph
from multihop.ges.live.control import COST, DOWN, EXPECT, UP, Control
from multihop.ges.live.joiner import ask_to_join
from multihop.ges.live.wire import TRANSPORTS
from multihop.ges.simulator import Simulator
from multihop.ges.topology import Topology

__all__ = ["LiveSystem", "CONFIG", "signature"]

CONFIG = "ges.json"


def signature(g: ConnectivityGraph) -> tuple[Any, ...]:
    """What two graphs must share to be "the same": edges, rows, own units, partition sets."""
    return (g.edges(), g.rows(), sorted(g.name(u) for u in g.own), sorted(g.unit_partitioned()), sorted(g.system_partitioned()))


def _storage_dir(storage_dir: str | os.PathLike[str] | None, durable: bool) -> Path | None:
    """``LiveSystem.up``'s ``storage_dir``, checked: an existing directory, and only with ``durable``."""
    if storage_dir is None:
        return None
    if not isinstance(storage_dir, (str, os.PathLike)):
        raise TypeError(f"storage_dir must be a path, got {type(storage_dir).__name__}")
    if not durable:
        raise ValueError("storage_dir is for a system with stable storage (durable=True)")
    path = Path(storage_dir).resolve()
    if not path.is_dir():
        raise ValueError(f"storage_dir {path} is not an existing directory")
    return path


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class LiveSystem:
    """A running GES system (see the module docstring)."""

    def __init__(self, runtime: mh.Runtime, config: dict[str, Any], owned: mh.Runtime | None, procs: dict[str, subprocess.Popen[bytes]]) -> None:
        self.runtime = runtime
        self.config = config
        self.name = runtime.name
        self.topology = Topology.loads(config["topology"], CONFIG)
        self._owned_runtime = owned
        self._procs = procs
        self._dispatcher: Any = None
        self._controls: dict[str, Control] = {}
        #: gateway (its two ends) -> its incarnation last brought up (saved in the config as "a|b")
        self._incarnations: dict[tuple[str, str], int] = {}
        for k, v in config.get("incarnations", {}).items():
            a, b = k.split("|")
            self._incarnations[(a, b)] = v
        self.shadow: Simulator | None = None

    # ---- start ------------------------------------------------------------------------

    @classmethod
    def up(
        cls,
        topology: Topology,
        name: str,
        *,
        cores: list[int] | None = None,
        detached: bool = False,
        timeout: float = 60.0,
        seed: int = 0,
        durable: bool = False,
        storage_dir: str | os.PathLike[str] | None = None,
        accept_empty_store: bool = False,
        fabric: mh.Fabric | None = None,
        transport: str = "ump",
        client_queue_limit: int | None = None,
    ) -> "LiveSystem":
        """Start the brokers of ``topology`` on runtime ``name`` and wait until every graph converged.

        A topology spread over runtimes (brokers with ``runtime``, see the module docstring) starts
        the brokers placed on ``name`` only; the runtime must be in the fabric: attached if it runs
        with one, else started with ``fabric`` (GesStateError naming what to do otherwise).

        The runtime is attached if it runs, else started on ``cores`` (default:
        the cores the topology names, else 0 and 1), detached if ``detached``
        (as ``multihop ges up`` does; it is then stopped by :meth:`down`).
        Brokers without a core are spread round-robin over the runtime's
        cores.  Raises GesStateError if a system already runs on the runtime,
        or if the brokers do not converge within ``timeout`` seconds (the
        message names the brokers that differ).  With ``durable`` the system has stable
        storage (:mod:`multihop.ges.durability`): the lowest address of each cluster is its
        storage broker, with an SQLite file ``ges-<address>.db`` in the runtime's directory
        (a file that is corrupt or not this broker's stops the broker: GesStateError naming it);
        clients are durable, and :meth:`crash` / :meth:`restart` kill and restart brokers.
        ``storage_dir`` (durable only) puts the storage files in that directory instead (it must
        exist; the runtime's directory goes away with the runtime, a directory of your own does not).
        A storage file that lost what its marker says it held stops its broker (GesStateError naming
        it) unless ``accept_empty_store`` (see :meth:`restart`).
        ``transport`` is what carries the events on this runtime (``TRANSPORTS``): ``"ump"`` (the
        default: the brokers' gateways and the clients' channels are direct UMP channels between the
        two processes, no monitor on the way, the senders wake their receivers themselves) or
        ``"multihop"`` (multi-hop channels, forwarded by the runtime's monitors: less CPU in the
        brokers, more in the monitors, a longer path; docs/ges.md "Transport" has the figures).
        Gateways to brokers on other runtimes cross the fabric either way; control channels are
        multi-hop.
        ``client_queue_limit``: bytes of events that may wait in a broker for one client beyond what
        its channel holds (default 64 MiB, at least 1 MiB): a client that reads slower than its events
        come for longer than that, or not at all, is given up as a slow consumer (its channel closed,
        its subscriptions withdrawn, the broker's log and ``status`` saying why), so that it cannot
        grow its broker's memory without end. The other clients are not affected.
        """
        if not isinstance(topology, Topology):
            raise TypeError(f"topology must be a multihop.ges.Topology, got {type(topology).__name__}")
        store_dir = _storage_dir(storage_dir, durable)
        if not isinstance(accept_empty_store, bool):
            raise TypeError(f"accept_empty_store must be a bool, got {type(accept_empty_store).__name__}")
        if accept_empty_store and not durable:
            raise ValueError("accept_empty_store is for a system with stable storage (durable=True)")
        if not topology.brokers:
            raise TopologyError("the topology has no brokers")
        if fabric is not None and not isinstance(fabric, mh.Fabric):
            raise TypeError(f"fabric must be a multihop.Fabric or None, got {type(fabric).__name__}")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
        if client_queue_limit is None:
            client_queue_limit = _ges.CLIENT_QUEUE_LIMIT
        if not isinstance(client_queue_limit, int) or isinstance(client_queue_limit, bool):
            raise TypeError(f"client_queue_limit must be an int (bytes), got {type(client_queue_limit).__name__}")
        if client_queue_limit < _ges.MIN_CLIENT_QUEUE_LIMIT:
            raise ValueError(f"client_queue_limit must be at least {_ges.MIN_CLIENT_QUEUE_LIMIT} bytes (1 MiB), got {client_queue_limit}")
        topology.check_placement()
        if topology.placed and name not in topology.runtimes():
            raise TopologyError(f"no broker of the topology is placed on runtime {name!r} (its runtimes: {', '.join(topology.runtimes())})")
        here = [b for b in topology.brokers.values() if b.runtime in (None, name)]
        owned = None
        try:
            rt = mh.Runtime.attach(name)
            if (rt.dir / CONFIG).exists():
                raise GesStateError(f"a GES system already runs on runtime {name!r} (stop it with multihop ges down {name})")
            if topology.placed and rt.fabric is None:
                raise GesStateError(
                    f"runtime {name!r} runs without a fabric, and the topology spreads its brokers over the runtimes "
                    f"{', '.join(topology.runtimes())}: stop it and start it in the fabric (multihop up {name} --fabric F "
                    "--listen ENDPOINT --connect ENDPOINT), or let ges up start it with --fabric"
                )
        except mh.RuntimeNotFound:
            if topology.placed and fabric is None:
                raise GesStateError(
                    f"runtime {name!r} is not running, and the topology spreads its brokers over the runtimes "
                    f"{', '.join(topology.runtimes())}: start it in their fabric first (multihop up {name} --fabric F "
                    "--listen ENDPOINT --connect ENDPOINT), or pass the fabric (ges up --fabric F --listen ... / fabric=)"
                ) from None
            want = sorted({b.core for b in here if b.core is not None})
            rt = owned = mh.Runtime.start(name, cores=cores or want or [0, 1], detached=detached, fabric=fabric)
        try:
            return cls._start(rt, owned, topology, detached, timeout, seed, durable, store_dir, accept_empty_store, transport, client_queue_limit)
        except BaseException:
            if owned is not None:
                owned.stop()
            raise

    @classmethod
    def _start(
        cls,
        rt: mh.Runtime,
        owned: mh.Runtime | None,
        topology: Topology,
        detached: bool,
        timeout: float,
        seed: int,
        durable: bool = False,
        storage_dir: Path | None = None,
        accept_empty_store: bool = False,
        transport: str = "ump",
        client_queue_limit: int | None = None,
    ) -> "LiveSystem":
        rcores = rt.cores
        brokers: dict[str, Any] = {}
        here = [b for b in topology.brokers.values() if b.runtime in (None, rt.name)]  # (placed: this runtime's share)
        for i, b in enumerate(sorted(here, key=lambda b: b.address)):
            core = b.core if b.core is not None else rcores[i % len(rcores)]
            if core not in rcores:
                raise TopologyError(f"broker {b.address}: core {core} is not a core of runtime {rt.name!r} (its cores are {rcores})")
            brokers[str(b.address)] = {"core": core, "log": str(rt.dir / f"ges-{b.address}.log")}
        config = {
            "system": topology.system or rt.name,
            "topology": topology.to_toml(),
            "brokers": brokers,
            "runtime_started": owned is not None,
            "detached": detached,
            "storage_dir": str(storage_dir or rt.dir) if durable else None,
            "transport": transport,
            "client_queue_limit": client_queue_limit or _ges.CLIENT_QUEUE_LIMIT,
        }
        path = rt.dir / CONFIG
        path.write_text(json.dumps(config, indent=2))
        procs: dict[str, subprocess.Popen[bytes]] = {}
        system = cls(rt, config, owned if not detached else None, procs)
        try:
            for addr in brokers:
                system._spawn(addr, accept_empty_store=accept_empty_store)
            system._save()
            system.shadow = Simulator(topology, seed=seed, durable=durable)
            system.shadow.run_until_quiet()
            system.wait_converged(timeout)
        except BaseException:
            system.down(timeout=DEFAULT_TIMEOUT)
            raise
        return system

    def _spawn(self, addr: str, restart: bool = False, accept_empty_store: bool = False) -> None:
        info = self.config["brokers"][addr]
        cmd = [
            sys.executable,
            "-m",
            "multihop.ges.live.broker",
            "--runtime",
            self.name,
            "--config",
            str(self.runtime.dir / CONFIG),
            "--address",
            addr,
        ]
        if restart:
            cmd.append("--restart")
        if accept_empty_store:
            cmd.append("--accept-empty-store")
        detached = bool(self.config["detached"])  # a session of its own, else the starter's session in a group of its own
        with open(info["log"], "ab") as log:
            p = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                close_fds=True,
                start_new_session=detached,
                process_group=None if detached else 0,
            )
        self._procs[addr] = p
        info["pid"] = p.pid

    def _save(self) -> None:
        self.config["topology"] = self.topology.to_toml()
        self.config["incarnations"] = {f"{a}|{b}": v for (a, b), v in self._incarnations.items()}
        tmp = self.runtime.dir / (CONFIG + ".tmp")
        tmp.write_text(json.dumps(self.config, indent=2))
        os.replace(tmp, self.runtime.dir / CONFIG)

    @classmethod
    def attach(cls, name: str) -> "LiveSystem":
        """The GES system running on runtime ``name`` (RuntimeNotFound / GesStateError if there is none)."""
        rt = mh.Runtime.attach(name)
        path = rt.dir / CONFIG
        if not path.exists():
            raise GesStateError(f"no GES system runs on runtime {name!r} (start one with multihop ges up TOPOLOGY --name {name})")
        return cls(rt, json.loads(path.read_text()), None, {})

    # ---- talking to brokers -------------------------------------------------------------

    @property
    def addresses(self) -> list[str]:
        """The running brokers' addresses, sorted."""
        return sorted(self.config["brokers"], key=lambda a: Address(a))

    def pid(self, address: AddressLike) -> int:
        """The process id of a broker of this runtime."""
        a = str(Address(address, self.topology.levels))
        if a not in self.config["brokers"]:
            raise GesStateError(f"broker {a} does not run on runtime {self.name!r}{self._elsewhere(a)}")
        return int(self.config["brokers"][a]["pid"])

    def _elsewhere(self, a: str) -> str:
        addr = Address(a, self.topology.levels)
        there = self.topology.brokers[addr].runtime if addr in self.topology.brokers else None
        return f" (it is placed on runtime {there!r})" if there is not None and there != self.name else ""

    def control(self, address: AddressLike, timeout: float = 10.0) -> Control:
        """The (cached) control channel to a broker (of another runtime of the fabric too, for a placed topology)."""
        a = str(Address(address, self.topology.levels))
        there = None
        if a not in self.config["brokers"]:
            addr = Address(a, self.topology.levels)
            there = self.topology.brokers[addr].runtime if addr in self.topology.brokers else None
            if there is None or there == self.name:
                raise GesStateError(f"no broker {a} in GES system {self.config['system']!r}")
        c = self._controls.get(a)
        if c is None:
            if self._dispatcher is None:
                self._dispatcher = self.runtime.dispatcher(self.runtime.cores[0])
            c = self._controls[a] = Control(self._dispatcher, self.config["system"], a, timeout, runtime=there)
        return c

    def status(self, address: AddressLike, timeout: float = 10.0) -> dict[str, Any]:
        """One broker's state (links, records, edges, routing cache, partitions, counters)."""
        return self.control(address, timeout).status(timeout)

    def graph(self, address: AddressLike, timeout: float = 10.0) -> ConnectivityGraph:
        """The connectivity graph of a live broker, rebuilt here from the records it reports."""
        st = self.status(address, timeout)
        addr = Address(address, self.topology.levels)
        recs = [(Connection.create(o, p, lvl, inc, cost, ver, dead), x) for o, p, lvl, inc, ver, cost, dead, x in st["records"]]
        return ConnectivityGraph(addr.code, self.topology.levels, CostMatrix(self.topology.levels), recs)

    def differences(self) -> list[str]:
        """Brokers whose live graph differs from the shadow simulator's (empty when converged)."""
        assert self.shadow is not None
        out = []
        for a in self.addresses:
            try:
                live = signature(self.graph(a))
            except mh.MultihopError as e:
                out.append(f"{a} (unreachable: {e})")
                continue
            if live != signature(self.shadow.graph(a)):
                out.append(a)
        return out

    def wait_converged(self, timeout: float = 30.0) -> float:
        """Wait until every live graph equals the shadow simulator's; returns the seconds it took."""
        if self.shadow is None:
            raise GesStateError("this LiveSystem was attached, not started here: it has no shadow simulation to compare with")
        t0 = time.monotonic()
        deadline = t0 + timeout
        while True:
            self._check_alive()
            try:
                diff = self.differences()
            except mh.BindError:
                diff = ["(some broker is not up yet)"]
            if not diff:
                return time.monotonic() - t0
            if time.monotonic() > deadline:
                raise GesStateError(f"live brokers did not converge within {timeout} s; differing: {', '.join(diff[:10])}")
            time.sleep(0.05)  # the tool waits; the brokers never poll

    def _check_alive(self) -> None:
        for a, p in self._procs.items():
            if p.poll() is not None and a in self.config["brokers"]:
                log = Path(self.config["brokers"][a]["log"]).read_text(errors="replace")[-2000:]
                raise GesStateError(f"broker {a} exited with {p.returncode}:\n{log}")

    # ---- changes ---------------------------------------------------------------------------

    def add_gateway(self, a: AddressLike, b: AddressLike, cost: int = 0) -> None:
        """Bring up a new gateway between two running brokers (replayed on the shadow simulator)."""
        gw = self._bring_up(a, b, cost)
        if self.shadow is not None:
            self.shadow.add_gateway(gw.a, gw.b, gw.cost)
            self.shadow.run_until_quiet()
        self._save()

    def _bring_up(self, a: AddressLike, b: AddressLike, cost: int | None) -> Any:
        gw = self.topology.add_gateway(a, b, cost)
        key = (str(gw.a), str(gw.b))
        inc = self._incarnations.get(key, 0) + 1  # incarnation 0 was the topology's own
        self._incarnations[key] = inc
        try:
            self.control(gw.b).gateway(str(gw.a), EXPECT, inc)
            self.control(gw.a).gateway(str(gw.b), UP, inc, gw.cost)
        except BaseException:
            self.topology.remove_gateway(gw.a, gw.b)
            raise
        return gw

    def join_node(self, via: AddressLike, core: int | None = None, timeout: float = 30.0) -> str:
        """A new broker joins the system by the node organization protocol through broker ``via``; its address.

        The newcomer asks ``via`` for a level-0 gateway (:mod:`multihop.ges.live.joiner`);
        the member that takes it (``via`` itself, another member of its cluster,
        or one of a neighbouring cluster reached through level-1 gatekeepers)
        reserves the address it assigns.  Then the new broker process starts on
        ``core`` (default: the runtime's cores round-robin) with that address and
        the level-0 gateway to its member comes up.  A system started here first
        waits until the live graphs converged, then its shadow simulator runs the
        same join and must reach the same decision (address and member).  Raises GesStateError when
        every member is full (the reason from the reply) or the join times out.
        """
        entry = Address(via, self.topology.levels)
        if str(entry) not in self.config["brokers"]:
            raise GesStateError(f"no broker {entry} in GES system {self.name!r}")
        if self.shadow is not None:
            # the shadow must decide from the same view: the live brokers first take in every earlier change
            self.wait_converged(timeout)
        if self._dispatcher is None:
            self._dispatcher = self.runtime.dispatcher(self.runtime.cores[0])
        reply = ask_to_join(self._dispatcher, self.config["system"], entry, 0, timeout)
        if reply.accepted_by < 0:
            raise GesStateError(f"no member took the new node: {reply.reason}")
        addr = str(Address.from_code(reply.assigned, self.topology.levels))
        member = str(Address.from_code(reply.accepted_by, self.topology.levels))
        rcores = self.runtime.cores
        if core is None:
            core = rcores[len(self.config["brokers"]) % len(rcores)]
        if core not in rcores:
            raise TopologyError(f"core {core} is not a core of runtime {self.name!r} (its cores are {rcores})")
        self.topology.add_broker(addr, core, self.name if self.topology.placed else None)
        self.config["brokers"][addr] = {"core": core, "log": str(self.runtime.dir / f"ges-{addr}.log")}
        self._save()  # the newcomer reads its address and the system's brokers from the file
        self._spawn(addr)
        deadline = time.monotonic() + timeout
        while True:  # bounded by the deadline: the new broker exports its service once it runs
            self._check_alive()
            try:
                self.control(addr, timeout=1.0)
                break
            except mh.BindError:
                if time.monotonic() > deadline:
                    raise GesStateError(f"the new broker {addr} did not come up within {timeout} s") from None
                time.sleep(0.02)  # the tool waits for a process to start; brokers never poll
        self._bring_up(addr, member, None)
        if self.shadow is not None:
            shadow_addr = self.shadow.join_node(entry)
            shadow_member = next(
                str(gw.a if str(gw.b) == shadow_addr else gw.b)
                for gw in self.shadow.topology.gateways.values()
                if shadow_addr in (str(gw.a), str(gw.b))
            )
            if (shadow_addr, shadow_member) != (addr, member):
                raise GesStateError(
                    f"the live join gave {addr} a gateway to {member}, the shadow simulation {shadow_addr} "
                    f"to {shadow_member}: the brokers' views differ"
                )
            self.shadow.run_until_quiet()
        self._save()
        return addr

    def remove_gateway(self, a: AddressLike, b: AddressLike) -> None:
        """Close a gateway (its two ends see it lost)."""
        gw = self.topology.remove_gateway(a, b)
        self.control(gw.a).gateway(str(gw.b), DOWN)
        if self.shadow is not None:
            self.shadow.remove_gateway(gw.a, gw.b)
            self.shadow.run_until_quiet()
        self._save()

    def set_cost(self, a: AddressLike, b: AddressLike, cost: int) -> None:
        """Change a gateway's extra cost at both ends."""
        self.control(a).gateway(str(Address(b)), COST, cost=cost)
        self.control(b).gateway(str(Address(a)), COST, cost=cost)
        if self.shadow is not None:
            self.shadow.set_cost(a, b, cost)
            self.shadow.run_until_quiet()

    def kill(self, address: AddressLike) -> None:
        """SIGKILL a broker: its neighbours see their gateways to it lost."""
        a = str(Address(address, self.topology.levels))
        pid = self.pid(a)
        c = self._controls.pop(a, None)
        os.kill(pid, signal.SIGKILL)
        p = self._procs.pop(a, None)
        if p is not None:
            p.wait(10)
        if c is not None:
            try:
                c.close()
            except mh.MultihopError:
                pass
        del self.config["brokers"][a]
        self.topology.remove_broker(a)
        if self.shadow is not None:
            self.shadow.kill_broker(a)
            self.shadow.run_until_quiet()
        self._save()

    @property
    def durable(self) -> bool:
        """Whether the system has stable storage."""
        return bool(self.config.get("storage_dir"))

    def storage_brokers(self) -> list[str]:
        """Durable systems: the storage broker of each cluster (its lowest address)."""
        from multihop.ges.durability import storage_brokers_of

        return sorted(str(Address.from_code(c, self.topology.levels)) for c in storage_brokers_of(self.topology).values())

    def storage_file(self, address: AddressLike) -> Path:
        """Durable systems: a storage broker's SQLite file."""
        return Path(self.config["storage_dir"]) / f"ges-{Address(address, self.topology.levels)}.db"

    def fallback_broker(self, address: AddressLike) -> str:
        """Where the clients of a failed broker roam (the simulator's rule): the next running broker of its
        cluster in address order, wrapping around."""
        addr = Address(address, self.topology.levels)
        levels = self.topology.levels
        running = [Address(a, levels) for a, info in self.config["brokers"].items() if info.get("pid") and _alive(info["pid"])]
        members = sorted(a for a in running if a.unit_id(1) == addr.unit_id(1) and a != addr)
        if not members:
            raise GesStateError(f"no running broker left in the cluster of {addr}")
        after = [a for a in members if a > addr]
        return str((after or members)[0])

    def crash(self, address: AddressLike) -> None:
        """Durable systems: SIGKILL a broker and keep it in the system, to :meth:`restart` it on its storage file.

        Its neighbours see their gateways lost; they take it back when it restarts.  The
        shadow simulation stops here (the live incarnations of restarted gateways are
        times, not the simulator's counters).
        """
        self._need_durable()
        a = str(Address(address, self.topology.levels))
        pid = self.pid(a)
        c = self._controls.pop(a, None)
        os.kill(pid, signal.SIGKILL)
        p = self._procs.pop(a, None)
        if p is not None:
            p.wait(10)
        if c is not None:
            try:
                c.close()
            except mh.MultihopError:
                pass
        self.config["brokers"][a]["pid"] = None
        self.shadow = None
        self._save()

    def _need_durable(self) -> None:
        if not self.durable:
            raise GesStateError(
                f"crash and restart need a GES system with stable storage, and the one on {self.name!r} has none: start it with "
                "multihop ges up TOPOLOGY --name NAME --durable (from Python: LiveSystem.up(..., durable=True)); "
                "without storage, LiveSystem.kill() removes a broker for good"
            )

    def restart(self, address: AddressLike, timeout: float = 30.0, *, accept_empty_store: bool = False) -> None:
        """Durable systems: start a crashed broker again (on its storage file); returns once it answers.

        A storage broker whose file is missing, empty, another store's or an older copy while its
        marker says it held data refuses to start (GesStateError naming the file, with its log);
        ``accept_empty_store=True`` is the explicit "the loss is accepted" (its clients' state is gone)."""
        if not isinstance(accept_empty_store, bool):
            raise TypeError(f"accept_empty_store must be a bool, got {type(accept_empty_store).__name__}")
        self._need_durable()
        a = str(Address(address, self.topology.levels))
        if a not in self.config["brokers"]:
            raise GesStateError(f"no broker {a} in GES system {self.name!r}")
        if self.config["brokers"][a].get("pid") and _alive(self.config["brokers"][a]["pid"]):
            raise GesStateError(f"broker {a} is running")
        self._spawn(a, restart=True, accept_empty_store=accept_empty_store)
        self._save()
        deadline = time.monotonic() + timeout
        while True:  # bounded by the deadline: the broker exports its service once it runs
            self._check_alive()
            try:
                self.control(a, timeout=1.0)
                return
            except mh.BindError:
                if time.monotonic() > deadline:
                    raise GesStateError(f"broker {a} did not come back within {timeout} s") from None
                time.sleep(0.02)  # the tool waits for a process to start; brokers never poll

    # ---- stop -----------------------------------------------------------------------------------

    def down(self, timeout: float = 10.0) -> None:
        """Stop every broker (then the runtime, if :meth:`up` started it). Idempotent; never hangs."""
        pids = {a: info.get("pid") for a, info in self.config.get("brokers", {}).items()}
        for a in list(pids):
            try:
                self.control(a, timeout=2.0).shutdown()
            except Exception:
                pass
        for c in self._controls.values():
            try:
                c.close()
            except Exception:
                pass
        self._controls.clear()
        deadline = time.monotonic() + timeout
        for a, pid in pids.items():
            if pid is None:
                continue
            p = self._procs.get(a)
            while (p.poll() is None) if p is not None else _alive(pid):
                if time.monotonic() > deadline:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    if p is not None:
                        p.wait(5)
                    break
                time.sleep(0.01)
        if self._dispatcher is not None:
            try:
                self._dispatcher.detach()
            except Exception:
                pass
            self._dispatcher = None
        try:
            (self.runtime.dir / CONFIG).unlink()
        except FileNotFoundError:
            pass
        if self.config.get("runtime_started"):
            if self._owned_runtime is not None:
                self._owned_runtime.stop()
            else:
                try:
                    mh.Runtime.attach(self.name).stop()
                except mh.RuntimeNotFound:
                    pass

    def __enter__(self) -> "LiveSystem":
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()
