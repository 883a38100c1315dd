"""The Smelt-style machine model: what a message costs between every pair of cores.

For each ordered pair of cores (a, b), three costs in nanoseconds (Smelt,
OSDI'16, Kaestle et al.):

``send``
    how long core a is busy putting one message on its channel to b (it can
    send the next one after that);
``recv``
    how long core b is busy taking that message off the channel;
``latency``
    how long after the send the message becomes visible to b.

Two more machine facts make the model usable on virtual cores: ``cpu_of``
(which real CPU runs each core's process: cores that share a CPU take turns)
and ``switch`` (what it costs that CPU to change from one core's process to
another's).  On a real machine every core is its own CPU and ``switch`` is 0.

Eight more describe the *runtime's processes* rather than the cores (all
optional; their defaults keep the plain Smelt model, which is what the
shipped files describe):

``route``
    ``"direct"`` (a message goes from core to core, as over UMP channels) or
    ``"monitors"`` (it goes through the sender's monitor and then the
    receiver's, as group frames and multi-hop channels do: each monitor is a
    process of its own on its core's CPU);
``forward``
    the CPU time, in ns, a monitor spends forwarding one frame (a turn on its
    CPU, taken only when no dispatcher there has work ready: monitors poll at
    idle priority);
``wake``
    how long, in ns, a parked process takes from a message reaching it to
    running when its CPU sleeps (a futex wake-up of an idle CPU); on a CPU
    where something runs or polls, the switch is the cost;
``spin``
    how long, in ns, a dispatcher waits for its next message spinning before
    it parks (the group endpoints park at once: 0; default: never parks);
``poll``
    how long, in ns, a monitor polls for the next frame before it parks (the
    runtime's ``MULTIHOP_MONITOR_POLL_US``; default: never parks);
``switch_to``
    which turns pay the switch: ``"any"`` change of process on a CPU (the
    default), or only a change to a ``"monitors"``' turn (when the
    dispatchers' costs were measured as their whole CPU time, the kernel's
    switching into them included, as the group path calibration does);
``crowd``
    how much more, in ns, a dispatcher's receive of a multicast costs when
    other dispatchers of the multicast share its CPU (they, and their cores'
    monitors, run between its turns and leave its caches cold): a number is
    the cost per other dispatcher (default 0); a list is a measured table,
    its i-th entry (from 0) the extra cost with i + 1 others, and beyond its
    end the last step between entries goes on (the calibration measures it:
    the growth is not a straight line, a CPU's caches fill);
``crowd_root``
    the same for the root's own work per round (the workload's
    ``root_work``: its turns' cold start) with other dispatchers of the
    multicast on its CPU: a number per other, or a table (default 0).

**Model files** are TOML.  A declared model gives costs per *distance level*
(0: same socket, 1: one interconnect hop, 2: two hops) and the hop count
between sockets; a calibrated model (:mod:`multihop.bench.groups.calibrate`) gives
full per-pair matrices.  Both may override single pairs.  The shipped files
(``2x8``, ``4x8``, ``8x8`` in ``multihop/groups/models/``) are declared, with
representative magnitudes for multi-socket x86 servers, not measurements: edit
them (or pass your own file) to describe your machine::

    name = "4x8"
    description = "..."
    [machine]
    sockets = 4                   # or explicit: sockets = [[0, 1], [2, 3]]
    cores_per_socket = 8
    socket_hops = [[0, 1, 2, 1], [1, 0, 1, 2], [2, 1, 0, 1], [1, 2, 1, 0]]
    switch = 0                    # optional; cpu_of = [...] optional (one per core)
    [runtime]                     # optional: the runtime's processes (defaults below)
    route = "direct"              # or "monitors"
    forward = 0
    wake = 0
    spin = inf                    # TOML's inf: never parks
    poll = inf
    crowd = 0                     # or a table: crowd = [5000, 11000, 26000] (1, 2, 3 others)
    crowd_root = 0                # a number or a table, as crowd
    switch_to = "any"             # or "monitors"
    [cost.0]                      # same socket
    send = 70
    recv = 60
    latency = 90
    [cost.1] ...                  # one hop; [cost.2] two hops
    [matrix]                      # optional: full matrices, rows = sender, in core order
    send = [[...], ...]
    [[pair]]                      # optional, any number: one ordered pair
    src = 0
    dst = 9
    latency = 400

:func:`load_model` reads a file or a shipped name; :meth:`MachineModel.save`
writes the matrix form, which :func:`load_model` reads back unchanged.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multihop.errors import RoutingError
from multihop.groups.errors import ModelError
from multihop.topology import Topology

__all__ = ["MachineModel", "load_model", "shipped_models", "MODELS_DIR", "COSTS", "ROUTES", "RUNTIME_FIELDS"]

MODELS_DIR = Path(__file__).with_name("models")
"""Where the shipped model files live."""

COSTS: tuple[str, ...] = ("send", "recv", "latency")
"""The three per-pair costs, in nanoseconds."""

ROUTES: tuple[str, ...] = ("direct", "monitors")
"""How a message travels between two cores: straight, or through both cores' monitors."""

RUNTIME_FIELDS: tuple[str, ...] = ("route", "forward", "wake", "spin", "poll", "crowd", "crowd_root", "switch_to")

SWITCH_TO: tuple[str, ...] = ("any", "monitors")
"""Which turns pay the switch: any change of process, or only a change to a monitor."""
"""The fields of a model file's ``[runtime]`` table (see the module docstring)."""

Matrix = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class MachineModel:
    """Message costs between every ordered pair of a machine's cores (immutable, validated).

    ``send``, ``recv`` and ``latency`` are square matrices in the order of
    ``topology.cores``; the diagonal is unused.  ``cpu_of`` maps each core to
    the CPU that runs it (default: itself) and ``switch`` is the cost of a
    CPU changing from one core's process to another's.  ``route``,
    ``forward``, ``wake`` and ``spin`` describe the runtime's processes (the
    module docstring says what each means; the defaults leave them out).
    """

    name: str
    topology: Topology
    send: Matrix
    recv: Matrix
    latency: Matrix
    cpu_of: Mapping[int, int] = field(default_factory=dict)
    switch: float = 0.0
    description: str = ""
    route: str = "direct"
    forward: float = 0.0
    wake: float = 0.0
    spin: float = math.inf
    poll: float = math.inf
    crowd: float | tuple[float, ...] = 0.0
    switch_to: str = "any"
    crowd_root: float | tuple[float, ...] = 0.0
    _index: dict[int, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        cores = self.topology.cores
        n = len(cores)
        for cost in COSTS:
            m = getattr(self, cost)
            if len(m) != n or any(len(row) != n for row in m):
                raise ModelError(f"model {self.name!r}: the {cost} matrix must be {n}x{n} (one row and column per core)")
            for i, row in enumerate(m):
                for j, v in enumerate(row):
                    if i != j and (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0):
                        raise ModelError(
                            f"model {self.name!r}: {cost} from core {cores[i]} to core {cores[j]} must be a finite number >= 0, got {v!r}"
                        )
            object.__setattr__(self, cost, tuple(tuple(float(v) for v in row) for row in m))
        cpu_of = {c: c for c in cores}
        for core, cpu in dict(self.cpu_of).items():
            if core not in cpu_of:
                raise ModelError(f"model {self.name!r}: cpu_of names core {core}, which is not in the machine")
            if isinstance(cpu, bool) or not isinstance(cpu, int) or cpu < 0:
                raise ModelError(f"model {self.name!r}: the CPU of core {core} must be an int >= 0, got {cpu!r}")
            cpu_of[core] = cpu
        object.__setattr__(self, "cpu_of", cpu_of)
        if isinstance(self.switch, bool) or not isinstance(self.switch, (int, float)) or not self.switch >= 0:
            raise ModelError(f"model {self.name!r}: switch must be a number >= 0, got {self.switch!r}")
        object.__setattr__(self, "switch", float(self.switch))
        if self.switch_to not in SWITCH_TO:
            raise ModelError(f"model {self.name!r}: switch_to must be one of {', '.join(SWITCH_TO)}, got {self.switch_to!r}")
        if self.route not in ROUTES:
            raise ModelError(f"model {self.name!r}: route must be one of {', '.join(ROUTES)}, got {self.route!r}")
        for key in ("crowd", "crowd_root"):
            v = getattr(self, key)
            if isinstance(v, (list, tuple)):
                if not v or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0 for x in v):
                    raise ModelError(f"model {self.name!r}: {key} as a table must list finite numbers of ns >= 0, got {v!r}")
                object.__setattr__(self, key, tuple(float(x) for x in v))
        for key in ("forward", "wake", "crowd", "crowd_root"):
            if isinstance(getattr(self, key), tuple):
                continue
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ModelError(f"model {self.name!r}: {key} must be a finite number of ns >= 0, got {v!r}")
            object.__setattr__(self, key, float(v))
        for key in ("spin", "poll"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ModelError(f"model {self.name!r}: {key} must be a number of ns >= 0 (inf: never parks), got {v!r}")
            object.__setattr__(self, key, float(v))
        object.__setattr__(self, "_index", {c: i for i, c in enumerate(cores)})

    # ---- costs -------------------------------------------------------------

    @property
    def cores(self) -> tuple[int, ...]:
        """The machine's cores, ascending."""
        return self.topology.cores

    def _ij(self, a: int, b: int) -> tuple[int, int]:
        try:
            return self._index[a], self._index[b]
        except KeyError:
            missing = a if a not in self._index else b
            raise ModelError(f"core {missing} is not in model {self.name!r} (cores {self.cores[0]}-{self.cores[-1]})") from None

    def cost(self, kind: str, a: int, b: int) -> float:
        """One cost (``send``, ``recv`` or ``latency``) of a message from core ``a`` to core ``b``, in ns."""
        i, j = self._ij(a, b)
        m: Matrix = getattr(self, kind)  # send, recv or latency
        return m[i][j]

    def one_way(self, a: int, b: int) -> float:
        """send + latency + recv from ``a`` to ``b``: one message, nothing else in the way."""
        i, j = self._ij(a, b)
        return self.send[i][j] + self.latency[i][j] + self.recv[i][j]

    def crowding(self, others: int, root: bool = False) -> float:
        """What a dispatcher's receive of a multicast (``root``: the root's own work per round) costs more with
        ``others`` other dispatchers of the multicast on its CPU, ns (``crowd``, ``crowd_root``)."""
        crowd = self.crowd_root if root else self.crowd
        if others <= 0:
            return 0.0
        if not isinstance(crowd, tuple):
            return crowd * others
        if others <= len(crowd):
            return crowd[others - 1]
        step = crowd[-1] - crowd[-2] if len(crowd) > 1 else crowd[-1]
        return crowd[-1] + step * (others - len(crowd))

    def rtt(self, a: int, b: int) -> float:
        """The round trip between ``a`` and ``b``: one message each way."""
        return self.one_way(a, b) + self.one_way(b, a)

    def restrict(self, cores: Sequence[int]) -> MachineModel:
        """The same model on a subset of its cores."""
        try:
            topo = self.topology.restrict(cores)
        except RoutingError as e:
            raise ModelError(f"model {self.name!r}: {e}") from None
        idx = [self._index[c] for c in topo.cores]
        pick = {k: tuple(tuple(getattr(self, k)[i][j] for j in idx) for i in idx) for k in COSTS}
        return dataclasses.replace(
            self, topology=topo, send=pick["send"], recv=pick["recv"], latency=pick["latency"], cpu_of={c: self.cpu_of[c] for c in topo.cores}
        )

    def with_runtime(
        self,
        route: str | None = None,
        forward: float | None = None,
        wake: float | None = None,
        spin: float | None = None,
        poll: float | None = None,
        crowd: float | Sequence[float] | None = None,
        switch_to: str | None = None,
        crowd_root: float | Sequence[float] | None = None,
    ) -> MachineModel:
        """The same model with some of its runtime fields replaced (validated like a new one)."""
        given = {"route": route, "forward": forward, "wake": wake, "spin": spin, "poll": poll, "crowd": crowd}
        given |= {"switch_to": switch_to, "crowd_root": crowd_root}
        return dataclasses.replace(self, **{k: v for k, v in given.items() if v is not None})  # type: ignore[arg-type]

    # ---- files -------------------------------------------------------------

    def to_toml(self) -> str:
        """The model as TOML in matrix form (what :func:`load_model` reads back to an equal model)."""
        lines = [
            f"name = {_toml_str(self.name)}",
            f"description = {_toml_str(self.description)}",
            "",
            "[machine]",
            f"sockets = {_toml_list([list(s) for s in self.topology.sockets])}",
            f"cpu_of = {_toml_list([self.cpu_of[c] for c in self.cores])}",
            f"switch = {self.switch!r}",
            "",
            "[runtime]",
            f"route = {_toml_str(self.route)}",
            f"forward = {self.forward!r}",
            f"wake = {self.wake!r}",
            f"spin = {'inf' if math.isinf(self.spin) else repr(self.spin)}",
            f"poll = {'inf' if math.isinf(self.poll) else repr(self.poll)}",
            f"crowd = {_toml_list(list(self.crowd)) if isinstance(self.crowd, tuple) else repr(self.crowd)}",
            f"crowd_root = {_toml_list(list(self.crowd_root)) if isinstance(self.crowd_root, tuple) else repr(self.crowd_root)}",
            f"switch_to = {_toml_str(self.switch_to)}",
            "",
            "[matrix]  # rows: sender, columns: receiver, both in ascending core order; nanoseconds",
        ]
        for cost in COSTS:
            rows = ",\n  ".join(_toml_list(list(row)) for row in getattr(self, cost))
            lines.append(f"{cost} = [\n  {rows},\n]")
        return "\n".join(lines) + "\n"

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_toml` to ``path`` (atomically); returns the path."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.to_toml())
        os.replace(tmp, path)
        return path


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _toml_list(values: list[Any]) -> str:
    return "[" + ", ".join(_toml_list(v) if isinstance(v, list) else repr(v) for v in values) + "]"


def shipped_models() -> list[str]:
    """The names of the model files shipped with multihop (``2x8``, ``4x8``, ``8x8``)."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.toml"))


def load_model(source: str | os.PathLike[str]) -> MachineModel:
    """Load a model from a TOML file, or a shipped one by name (``"4x8"``).

    Raises:
        ModelError: no such file or shipped model, bad TOML, or a field
            missing or wrong (the message names the file and the field).
    """
    text_source = os.fspath(source)
    path = Path(text_source)
    if not path.is_file():
        shipped = MODELS_DIR / f"{text_source}.toml"
        if shipped.is_file():
            path = shipped
        else:
            raise ModelError(f"no model file {text_source!r} and no shipped model of that name (shipped: {', '.join(shipped_models())})")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: not valid TOML: {e}") from None
    try:
        return model_from_dict(data, default_name=path.stem)
    except ModelError as e:
        raise ModelError(f"{path}: {e}") from None


def model_from_dict(data: Mapping[str, Any], default_name: str = "model") -> MachineModel:
    """Build a model from parsed TOML (see the module docstring for the fields)."""
    name = str(data.get("name", default_name))
    machine = data.get("machine")
    if not isinstance(machine, Mapping):
        raise ModelError("missing [machine] table (sockets, cores_per_socket)")
    topology = _topology(machine)
    cores = topology.cores
    n = len(cores)
    mats: dict[str, list[list[float]]] = {k: [[0.0] * n for _ in range(n)] for k in COSTS}
    matrix = data.get("matrix")
    levels = data.get("cost")
    if matrix is None and levels is None:
        raise ModelError("give the costs: a [cost.<level>] table per distance level, or a [matrix] table")
    if levels is not None:
        hops = _socket_hops(machine, len(topology.sockets))
        for i, a in enumerate(cores):
            for j, b in enumerate(cores):
                if i == j:
                    continue
                level = str(hops[topology.socket_of(a)][topology.socket_of(b)])
                table = levels.get(level) if isinstance(levels, Mapping) else None
                if not isinstance(table, Mapping):
                    raise ModelError(f"no [cost.{level}] table, needed for cores {a} -> {b} ({level} socket hops)")
                for k in COSTS:
                    mats[k][i][j] = _number(table, k, f"cost.{level}")
    if matrix is not None:
        if not isinstance(matrix, Mapping):
            raise ModelError("[matrix] must be a table of send, recv and latency matrices")
        for k in COSTS:
            if k in matrix:
                rows = matrix[k]
                if not isinstance(rows, list) or len(rows) != n or any(not isinstance(r, list) or len(r) != n for r in rows):
                    raise ModelError(f"matrix.{k} must be {n} rows of {n} numbers (one per core)")
                mats[k] = [list(r) for r in rows]
            elif levels is None:
                raise ModelError(f"matrix.{k} is missing")
    for p in data.get("pair", []):
        if not isinstance(p, Mapping) or "src" not in p or "dst" not in p:
            raise ModelError(f"every [[pair]] needs src and dst, got {p!r}")
        if p["src"] not in topology or p["dst"] not in topology or p["src"] == p["dst"]:
            raise ModelError(f"[[pair]] {p['src']!r} -> {p['dst']!r}: both must be distinct cores of the machine")
        i, j = cores.index(p["src"]), cores.index(p["dst"])
        for k in COSTS:
            if k in p:
                mats[k][i][j] = _number(p, k, "pair")
    cpu_list = machine.get("cpu_of")
    cpu_of: dict[int, int] = {}
    if cpu_list is not None:
        if not isinstance(cpu_list, list) or len(cpu_list) != n:
            raise ModelError(f"machine.cpu_of must list one CPU per core ({n}), got {cpu_list!r}")
        cpu_of = dict(zip(cores, cpu_list, strict=True))
    runtime = data.get("runtime", {})
    if not isinstance(runtime, Mapping):
        raise ModelError("[runtime] must be a table (route, forward, wake, spin)")
    unknown = sorted(set(runtime) - set(RUNTIME_FIELDS))
    if unknown:
        raise ModelError(f"[runtime] has unknown fields {unknown}; valid: {', '.join(RUNTIME_FIELDS)}")
    return MachineModel(
        name,
        topology,
        tuple(map(tuple, mats["send"])),
        tuple(map(tuple, mats["recv"])),
        tuple(map(tuple, mats["latency"])),
        cpu_of,
        machine.get("switch", 0.0),
        str(data.get("description", "")),
        runtime.get("route", "direct"),
        runtime.get("forward", 0.0),
        runtime.get("wake", 0.0),
        runtime.get("spin", math.inf),
        runtime.get("poll", math.inf),
        runtime.get("crowd", 0.0),
        runtime.get("switch_to", "any"),
        runtime.get("crowd_root", 0.0),
    )


def _number(table: Mapping[str, Any], key: str, where: str) -> float:
    v = table.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ModelError(f"{where}.{key} must be a number of nanoseconds >= 0, got {v!r}")
    return float(v)


def _topology(machine: Mapping[str, Any]) -> Topology:
    sockets = machine.get("sockets")
    try:
        if isinstance(sockets, list):
            return Topology(sockets)
        per = machine.get("cores_per_socket")
        if isinstance(sockets, bool) or not isinstance(sockets, int) or sockets < 1:
            raise ModelError(f"machine.sockets must be a count >= 1 or a list of core lists, got {sockets!r}")
        if isinstance(per, bool) or not isinstance(per, int) or per < 1:
            raise ModelError(f"machine.cores_per_socket must be an int >= 1, got {per!r}")
        return Topology.chunked(range(sockets * per), per)
    except RoutingError as e:
        raise ModelError(f"machine.sockets: {e}") from None


def _socket_hops(machine: Mapping[str, Any], sockets: int) -> list[list[int]]:
    hops = machine.get("socket_hops")
    if hops is None:
        return [[0 if i == j else 1 for j in range(sockets)] for i in range(sockets)]
    if not isinstance(hops, list) or len(hops) != sockets or any(not isinstance(r, list) or len(r) != sockets for r in hops):
        raise ModelError(f"machine.socket_hops must be {sockets} rows of {sockets} hop counts")
    for i in range(sockets):
        for j in range(sockets):
            h = hops[i][j]
            if isinstance(h, bool) or not isinstance(h, int) or h < 0 or (i == j) != (h == 0):
                raise ModelError(f"machine.socket_hops[{i}][{j}] must be 0 on the diagonal and >= 1 elsewhere, got {h!r}")
    return hops
