"""A GES topology: brokers with addresses (and cores, for the live system) and the gateways between them.

Built in code (``Topology(levels=3)``, :meth:`Topology.add_broker`,
:meth:`Topology.add_gateway`) or loaded from a TOML file
(:meth:`Topology.load`)::

    levels = 3                  # N: units at levels 0..N (default 3)
    thresholds = [8, 4, 4, 4]   # optional: node organization connection thresholds per level
    system = "lab"              # optional: the system's name (required when brokers name runtimes)

    [[broker]]
    address = "1.1.3.6"
    core = 0                    # optional: the runtime core of its dispatcher (live brokers)
    runtime = "hosta"           # optional: the runtime (machine) of a fabric it runs on

    [[gateway]]
    a = "1.1.3.6"
    b = "1.1.3.4"
    cost = 2                    # optional: the gateway's extra cost on top of the link cost matrix

A topology whose brokers name runtimes spans machines (docs/ges.md, "across
machines"): every broker names one, the file names the system (``system``),
and ``multihop ges up TOPOLOGY --name RUNTIME`` on each machine starts the
brokers placed on that runtime; gateways between brokers of two runtimes are
bridged multi-hop channels of the runtimes' fabric.

Every error names what was wrong, and for a file the line of the entry.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from multihop.ges.address import MAX_LEVELS, Address, AddressLike, gateway_level
from multihop.ges.errors import AddressError, TopologyError

#: The topology files shipped with the package (:meth:`Topology.example`).
EXAMPLES = Path(__file__).parent / "examples"

__all__ = ["Topology", "Broker", "Gateway", "DEFAULT_THRESHOLDS"]

#: Node organization: how many gateways of each level a broker accepts (level 0 first; the last value
#: repeats for higher levels).
DEFAULT_THRESHOLDS = (8, 4)

#: What a system or runtime name of a topology may be: a fabric key chunk (no '/', '*', '@', '$', '?', '#').
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _check_name(what: str, value: object) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise TopologyError(f"{what} must be 1-64 letters, digits, '_', '.' or '-', got {value!r}")
    return value


@dataclass(frozen=True)
class Broker:
    """A broker of a topology."""

    address: Address
    core: int | None = None
    #: the runtime (machine) it runs on, for a topology spread over the runtimes of a fabric
    runtime: str | None = None


@dataclass(frozen=True)
class Gateway:
    """A gateway between brokers ``a`` and ``b`` (``a`` < ``b``) at ``level``, with an extra ``cost``."""

    a: Address
    b: Address
    level: int
    cost: int = 0

    @property
    def pair(self) -> tuple[Address, Address]:
        """(a, b)."""
        return (self.a, self.b)


@dataclass
class Topology:
    """Brokers and gateways of a GES system of ``levels`` levels (addresses have ``levels + 1`` parts)."""

    levels: int = 3
    thresholds: tuple[int, ...] = DEFAULT_THRESHOLDS
    brokers: dict[Address, Broker] = field(default_factory=dict)
    gateways: dict[tuple[Address, Address], Gateway] = field(default_factory=dict)
    #: the system's name (its brokers' services are ``ges/<system>/<address>``); None: the runtime's name
    system: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.levels, int) or isinstance(self.levels, bool) or not 1 <= self.levels <= MAX_LEVELS:
            raise TopologyError(f"levels must be an integer from 1 to {MAX_LEVELS}, got {self.levels!r}")
        th = tuple(self.thresholds)
        if not th or any(not isinstance(t, int) or isinstance(t, bool) or t < 1 for t in th):
            raise TopologyError(f"thresholds must be positive integers (gateways per level, level 0 first), got {self.thresholds!r}")
        self.thresholds = th
        if self.system is not None:
            _check_name("system", self.system)

    # ---- building ---------------------------------------------------------

    def _address(self, a: AddressLike, where: str) -> Address:
        try:
            return Address(a, self.levels)
        except AddressError as e:
            raise TopologyError(f"{where}: {e}") from None

    def add_broker(self, address: AddressLike, core: int | None = None, runtime: str | None = None) -> Address:
        """Add a broker (on ``runtime``, for a topology spread over a fabric's runtimes); returns its
        :class:`Address`. Raises TopologyError for a bad or duplicate address, core or runtime name."""
        addr = self._address(address, "broker")
        if addr in self.brokers:
            raise TopologyError(f"broker {addr}: duplicate address (already in the topology)")
        if core is not None and (not isinstance(core, int) or isinstance(core, bool) or core < 0):
            raise TopologyError(f"broker {addr}: core must be a non-negative integer, got {core!r}")
        if runtime is not None:
            try:
                _check_name("runtime", runtime)
            except TopologyError as e:
                raise TopologyError(f"broker {addr}: {e}") from None
        self.brokers[addr] = Broker(addr, core, runtime)
        return addr

    def add_gateway(self, a: AddressLike, b: AddressLike, cost: int | None = None) -> Gateway:
        """Add a gateway between two brokers of the topology; returns it.

        ``cost`` is the gateway's extra cost (a non-negative integer, default 0).
        Raises TopologyError for an unknown broker, a gateway to itself or a duplicate.
        """
        x, y = self._address(a, "gateway"), self._address(b, "gateway")
        for addr in (x, y):
            if addr not in self.brokers:
                raise TopologyError(f"gateway {x} - {y}: unknown broker {addr} (add it with add_broker first)")
        if x == y:
            raise TopologyError(f"gateway {x} - {y}: a gateway joins two different brokers")
        if cost is None:
            cost = 0
        if not isinstance(cost, int) or isinstance(cost, bool) or cost < 0:
            raise TopologyError(f"gateway {x} - {y}: cost must be a non-negative integer, got {cost!r}")
        lo, hi = (x, y) if x < y else (y, x)
        if (lo, hi) in self.gateways:
            raise TopologyError(f"gateway {lo} - {hi}: duplicate (the two brokers are already joined)")
        gw = Gateway(lo, hi, gateway_level(lo, hi), cost)
        self.gateways[(lo, hi)] = gw
        return gw

    def remove_gateway(self, a: AddressLike, b: AddressLike) -> Gateway:
        """Remove the gateway between ``a`` and ``b``; returns it (TopologyError if there is none)."""
        x, y = self._address(a, "gateway"), self._address(b, "gateway")
        key = (x, y) if x < y else (y, x)
        gw = self.gateways.pop(key, None)
        if gw is None:
            raise TopologyError(f"there is no gateway between {x} and {y}")
        return gw

    def remove_broker(self, address: AddressLike) -> list[Gateway]:
        """Remove a broker and its gateways; returns the gateways removed."""
        addr = self._address(address, "broker")
        if addr not in self.brokers:
            raise TopologyError(f"unknown broker {addr}")
        del self.brokers[addr]
        gone = [g for k, g in self.gateways.items() if addr in k]
        for g in gone:
            del self.gateways[g.pair]
        return gone

    # ---- queries ------------------------------------------------------------

    def neighbours(self, address: AddressLike) -> list[Address]:
        """The brokers joined to ``address`` by a gateway."""
        addr = Address(address, self.levels)
        return [g.b if g.a == addr else g.a for g in self.gateways.values() if addr in (g.a, g.b)]

    def gatekeepers(self) -> dict[int, set[str]]:
        """Level (>= 1) -> the brokers that hold a gateway of that level."""
        out: dict[int, set[str]] = {lvl: set() for lvl in range(1, self.levels + 1)}
        for g in self.gateways.values():
            if g.level >= 1:
                out[g.level] |= {str(g.a), str(g.b)}
        return out

    @property
    def placed(self) -> bool:
        """Whether the brokers name runtimes (the system spans the runtimes of a fabric)."""
        return any(b.runtime is not None for b in self.brokers.values())

    def runtimes(self) -> list[str]:
        """The runtimes the brokers are placed on, sorted (empty: one runtime, named at start)."""
        return sorted({b.runtime for b in self.brokers.values() if b.runtime is not None})

    def runtime_of(self, address: AddressLike) -> str | None:
        """The runtime broker ``address`` is placed on (None: not placed)."""
        return self.brokers[self._address(address, "broker")].runtime

    def check_placement(self) -> None:
        """A topology spread over runtimes must place every broker and name its system (the name brokers on
        different runtimes find each other by). Raises TopologyError naming what is missing."""
        if not self.placed:
            return
        missing = sorted(str(b.address) for b in self.brokers.values() if b.runtime is None)
        if missing:
            raise TopologyError(
                f"brokers {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''} name no runtime, other brokers do: "
                'place every broker (runtime = "...") or none'
            )
        if self.system is None:
            raise TopologyError(
                'a topology whose brokers name runtimes must name its system (system = "..." at the top): brokers on '
                "different runtimes find each other's services by it"
            )

    def threshold(self, level: int) -> int:
        """The node organization connection threshold for gateways of ``level``."""
        return self.thresholds[min(level, len(self.thresholds) - 1)]

    def copy(self) -> "Topology":
        """An independent copy."""
        return Topology(self.levels, self.thresholds, dict(self.brokers), dict(self.gateways), self.system)

    def to_toml(self) -> str:
        """The topology as TOML text that :meth:`load` / :meth:`loads` read back."""
        out = [f"levels = {self.levels}", f"thresholds = {list(self.thresholds)}"]
        if self.system is not None:
            out.append(f'system = "{self.system}"')
        out.append("")
        for b in self.brokers.values():
            out.append("[[broker]]")
            out.append(f'address = "{b.address}"')
            if b.core is not None:
                out.append(f"core = {b.core}")
            if b.runtime is not None:
                out.append(f'runtime = "{b.runtime}"')
            out.append("")
        for g in self.gateways.values():
            out.append("[[gateway]]")
            out.append(f'a = "{g.a}"')
            out.append(f'b = "{g.b}"')
            if g.cost:
                out.append(f"cost = {g.cost}")
            out.append("")
        return "\n".join(out)

    # ---- files ---------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path) -> "Topology":
        """Read a TOML topology file (see the module docstring). Errors name the file and line."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise TopologyError(f"{p}: no such topology file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise TopologyError(f"{p}: cannot read the topology file: {e}") from None
        return cls.loads(text, str(p))

    @classmethod
    def example(cls, name: str) -> "Topology":
        """A topology shipped with the package, by name: ``quickstart`` (4 brokers in 2 clusters, for the quick
        start of docs/ges.md), ``paper_fig3``, ``paper_fig5``, ``paper_fig14``, ``paper_fig20`` (the routing
        paper's figures as read from its text; each file says how).

        The files are in ``multihop/ges/examples/`` wherever the package is installed, so a program run from any
        directory finds them (``Topology.load`` takes a path, relative to the current directory)."""
        known = sorted(p.stem for p in EXAMPLES.glob("*.toml"))
        if name not in known:
            raise TopologyError(f"no shipped topology named {name!r} (shipped: {', '.join(known)})")
        return cls.load(EXAMPLES / f"{name}.toml")

    @classmethod
    def loads(cls, text: str, name: str = "<topology>") -> "Topology":
        """Parse TOML topology text; ``name`` is used in error messages."""
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise TopologyError(f"{name}: not valid TOML: {e}") from None
        lines = _entry_lines(text)
        known = {"levels", "thresholds", "system", "broker", "gateway"}
        for key in doc:
            if key not in known:
                raise TopologyError(f"{name}:{_key_line(text, key)}: unknown key {key!r} (expected one of {sorted(known)})")
        levels = doc.get("levels", 3)
        kwargs: dict[str, Any] = {"levels": levels}
        if "thresholds" in doc:
            kwargs["thresholds"] = tuple(doc["thresholds"]) if isinstance(doc["thresholds"], list) else doc["thresholds"]
        if "system" in doc:
            try:
                kwargs["system"] = _check_name("system", doc["system"])
            except TopologyError as e:
                raise TopologyError(f"{name}:{_key_line(text, 'system')}: {e}") from None
        try:
            topo = cls(**kwargs)
        except TopologyError as e:
            raise TopologyError(f"{name}:{_key_line(text, 'levels')}: {e}") from None
        except TypeError:
            raise TopologyError(f"{name}:{_key_line(text, 'thresholds')}: thresholds must be a list of positive integers") from None
        brokers = _table_list(doc, "broker", name)
        for i, entry in enumerate(brokers):
            where = f"{name}:{_line(lines, text, 'broker', i)}"
            _only(entry, {"address", "core", "runtime"}, where, "broker")
            if "address" not in entry:
                raise TopologyError(f"{where}: broker without an address")
            try:
                topo.add_broker(entry["address"], entry.get("core"), entry.get("runtime"))
            except TopologyError as e:
                raise TopologyError(f"{where}: {e}") from None
        for i, entry in enumerate(_table_list(doc, "gateway", name)):
            where = f"{name}:{_line(lines, text, 'gateway', i)}"
            _only(entry, {"a", "b", "cost"}, where, "gateway")
            if "a" not in entry or "b" not in entry:
                raise TopologyError(f"{where}: a gateway needs both ends, a and b")
            try:
                topo.add_gateway(entry["a"], entry["b"], entry.get("cost"))
            except TopologyError as e:
                raise TopologyError(f"{where}: {e}") from None
        try:
            topo.check_placement()
        except TopologyError as e:
            raise TopologyError(f"{name}: {e}") from None
        return topo

    @classmethod
    def from_edges(cls, brokers: Iterable[AddressLike], gateways: Iterable[tuple[AddressLike, AddressLike]], levels: int = 3) -> "Topology":
        """A topology from a list of addresses and a list of address pairs."""
        topo = cls(levels)
        for b in brokers:
            topo.add_broker(b)
        for a, b in gateways:
            topo.add_gateway(a, b)
        return topo


def _table_list(doc: dict[str, Any], key: str, name: str) -> list[dict[str, Any]]:
    v = doc.get(key, [])
    if not isinstance(v, list) or not all(isinstance(e, dict) for e in v):
        raise TopologyError(f"{name}: {key!r} must be an array of tables ([[{key}]] entries)")
    return v


def _only(entry: dict[str, Any], keys: set[str], where: str, what: str) -> None:
    for k in entry:
        if k not in keys:
            raise TopologyError(f"{where}: unknown key {k!r} in a {what} (expected {', '.join(sorted(keys))})")


def _entry_lines(text: str) -> dict[str, list[int]]:
    """Line numbers (1-based) of each ``[[broker]]`` / ``[[gateway]]`` header, in order."""
    out: dict[str, list[int]] = {"broker": [], "gateway": []}
    for n, line in enumerate(text.splitlines(), 1):
        s = line.split("#", 1)[0].strip().replace(" ", "")
        if s in ("[[broker]]", "[[gateway]]"):
            out[s[2:-2]].append(n)
    return out


def _line(lines: dict[str, list[int]], text: str, kind: str, i: int) -> int:
    found = lines[kind]
    return found[i] if i < len(found) else _key_line(text, kind)


def _key_line(text: str, key: str) -> int:
    for n, line in enumerate(text.splitlines(), 1):
        if line.split("=", 1)[0].strip() == key or line.strip().startswith(f"[{key}") or line.strip().startswith(f"[[{key}"):
            return n
    return 1
