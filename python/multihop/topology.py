"""Cores and sockets: the machine's topology as the runtime sees it.

A :class:`Topology` is an ordered list of sockets, each a set of core ids.
It comes from sysfs (:meth:`Topology.from_sysfs`) or is declared by hand
for tests and experiments (``Topology(sockets=[[0, 1], [2, 3]])``), so the
fat-tree routing of :mod:`multihop.rts` can be exercised on any machine.

Sockets are numbered by their position in :attr:`Topology.sockets` (0, 1,
...), not by the hardware package id; cores inside a socket are kept sorted,
so a socket's first core is its leader.  :func:`parse_cores` and
:func:`format_cores` convert core lists to and from the ``"0-3,6,8-9"``
spelling used by the command line and by sysfs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from multihop.errors import RoutingError

__all__ = ["Topology", "parse_cores", "format_cores", "machine_cpus"]

SYSFS_CPU_ROOT = "/sys/devices/system/cpu"

_CORE_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_CPU_DIR = re.compile(r"cpu(\d+)")


def parse_cores(spec: str) -> list[int]:
    """Parse a core list such as ``"0-3,6,8-9"`` into ``[0, 1, 2, 3, 6, 8, 9]``.

    Items are separated by commas; each is a core id or an inclusive range
    ``a-b`` with ``a <= b``.  Spaces around items are ignored.  The cores come
    back in the order written (the order matters to ring routing).

    Raises:
        RoutingError: the spec is empty, an item is not a core id or range,
            a range runs backwards, or a core appears twice.
    """
    if not isinstance(spec, str):
        raise RoutingError(f"a core spec must be a string like '0-3,6', got {spec!r}")
    if not spec.strip():
        raise RoutingError("empty core spec; expected something like '0-3,6,8-9'")
    cores: list[int] = []
    seen: set[int] = set()
    for item in spec.split(","):
        match = _CORE_RANGE.fullmatch(item.strip())
        if match is None:
            raise RoutingError(f"bad core spec {spec!r}: {item.strip()!r} is not a core id or a range a-b")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise RoutingError(f"bad core spec {spec!r}: range {item.strip()!r} runs backwards")
        for core in range(first, last + 1):
            if core in seen:
                raise RoutingError(f"bad core spec {spec!r}: core {core} appears twice")
            seen.add(core)
            cores.append(core)
    return cores


def format_cores(cores: Iterable[int]) -> str:
    """Spell a core list compactly, the inverse of :func:`parse_cores`.

    Runs of consecutive ascending ids become ranges, and the order is kept:
    ``[0, 1, 2, 3, 6, 8, 9]`` gives ``"0-3,6,8-9"``.  An empty list gives ``""``.
    """
    runs: list[list[int]] = []
    for core in cores:
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _check_core_id(value: object) -> int:
    """Return ``value`` if it is a valid core id (a non-negative int), else raise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RoutingError(f"core ids must be non-negative ints, got {value!r}")
    return value


class Topology:
    """An immutable list of sockets, each a set of distinct core ids.

    ``Topology(sockets=[[0, 1, 2], [3, 4, 5]])`` declares two sockets of three
    cores.  Sockets keep their declaration order; the cores of each socket
    are stored sorted.  Topologies compare equal when their sockets do, and
    are hashable.

    Raises:
        RoutingError: no sockets, an empty socket, a core id that is not a
            non-negative int, or a core listed twice.
    """

    __slots__ = ("_sockets", "_socket_of")

    _sockets: tuple[tuple[int, ...], ...]
    _socket_of: dict[int, int]

    def __init__(self, sockets: Sequence[Iterable[int]]) -> None:
        if isinstance(sockets, (str, bytes)) or not isinstance(sockets, Sequence):
            raise RoutingError(f"sockets must be a list of lists of core ids, got {sockets!r}")
        if not sockets:
            raise RoutingError("a topology needs at least one socket")
        checked: list[tuple[int, ...]] = []
        socket_of: dict[int, int] = {}
        for index, socket in enumerate(sockets):
            if isinstance(socket, (str, bytes)) or not isinstance(socket, Iterable):
                raise RoutingError(f"socket {index} must be a list of core ids, got {socket!r}")
            cores = [_check_core_id(core) for core in socket]
            if not cores:
                raise RoutingError(f"socket {index} is empty; every socket needs a core")
            for core in cores:
                if core in socket_of:
                    raise RoutingError(f"core {core} is listed twice (in socket {socket_of[core]} and in socket {index})")
                socket_of[core] = index
            checked.append(tuple(sorted(cores)))
        object.__setattr__(self, "_sockets", tuple(checked))
        object.__setattr__(self, "_socket_of", socket_of)

    @classmethod
    def flat(cls, cores: Iterable[int]) -> Topology:
        """A topology with all of ``cores`` on one socket."""
        return cls([list(cores)])

    @classmethod
    def chunked(cls, cores: Iterable[int], cores_per_socket: int) -> Topology:
        """Split ``cores``, in the order given, into sockets of ``cores_per_socket``.

        The last socket holds what is left, so it may be smaller:
        ``Topology.chunked(range(6), 4)`` gives sockets ``[[0, 1, 2, 3], [4, 5]]``.
        This is TN-006's model of continuously numbered sockets.
        """
        size = cores_per_socket
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise RoutingError(f"cores_per_socket must be a positive int, got {cores_per_socket!r}")
        listed = list(cores)
        return cls([listed[i : i + size] for i in range(0, len(listed), size)])

    @classmethod
    def from_sysfs(cls, root: str | os.PathLike[str] = SYSFS_CPU_ROOT) -> Topology:
        """Read the online cores and their sockets from a sysfs cpu directory.

        The online cores come from ``root/online``; without that file, from the
        directories named ``cpu<N>`` (skipping any whose ``online`` file says 0).
        Each core's socket is ``cpu<N>/topology/physical_package_id``; sockets
        are ordered by package id.  When any core lacks a readable package id,
        all cores are put on one socket.

        Raises:
            RoutingError: no online core can be found under ``root``.
        """
        root = Path(root)
        cores = _online_cores(root)
        if not cores:
            raise RoutingError(f"no online cores found under {str(root)!r}")
        by_package: dict[int, list[int]] = {}
        for core in cores:
            package = _package_id(root, core)
            if package is None:
                return cls.flat(cores)
            by_package.setdefault(package, []).append(core)
        return cls([by_package[package] for package in sorted(by_package)])

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Topology:
        """Rebuild a topology from :meth:`to_dict`'s output (e.g. parsed JSON)."""
        if not isinstance(data, Mapping) or set(data) != {"sockets"}:
            raise RoutingError(f"a topology dict has exactly one key, 'sockets', got {data!r}")
        return cls(data["sockets"])

    def to_dict(self) -> dict[str, list[list[int]]]:
        """A JSON-ready form: ``{"sockets": [[0, 1], [2, 3]]}``."""
        return {"sockets": [list(socket) for socket in self._sockets]}

    @property
    def cores(self) -> tuple[int, ...]:
        """All cores, sorted."""
        return tuple(sorted(self._socket_of))

    @property
    def sockets(self) -> tuple[tuple[int, ...], ...]:
        """The sockets in declaration order, each a sorted tuple of cores."""
        return self._sockets

    @property
    def leaders(self) -> tuple[int, ...]:
        """Each socket's leader (its lowest core id), in socket order."""
        return tuple(socket[0] for socket in self._sockets)

    def socket_of(self, core: int) -> int:
        """The index in :attr:`sockets` of the socket that holds ``core``."""
        self._check_member(core)
        return self._socket_of[core]

    def leader_of(self, core: int) -> int:
        """The leader (lowest core id) of the socket that holds ``core``."""
        return self._sockets[self.socket_of(core)][0]

    def restrict(self, cores: Iterable[int]) -> Topology:
        """A topology with only ``cores``: sockets keep their order, empty ones go.

        Raises:
            RoutingError: a core is not in this topology or is given twice,
                or ``cores`` is empty.
        """
        wanted: set[int] = set()
        for core in cores:
            self._check_member(core)
            if core in wanted:
                raise RoutingError(f"core {core} is given twice")
            wanted.add(core)
        if not wanted:
            raise RoutingError("cannot restrict a topology to no cores")
        kept = [[core for core in socket if core in wanted] for socket in self._sockets]
        return Topology([socket for socket in kept if socket])

    def _check_member(self, core: object) -> None:
        """Raise RoutingError unless ``core`` is one of this topology's cores."""
        _check_core_id(core)
        if core not in self._socket_of:
            raise RoutingError(f"core {core} is not in the topology; its cores are {format_cores(self.cores)}")

    def __contains__(self, core: object) -> bool:
        return isinstance(core, int) and not isinstance(core, bool) and core in self._socket_of

    def __len__(self) -> int:
        return len(self._socket_of)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Topology):
            return NotImplemented
        return self._sockets == other._sockets

    def __hash__(self) -> int:
        return hash(self._sockets)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Topology is immutable; cannot set {name!r}")

    def __repr__(self) -> str:
        return f"Topology(sockets={[list(socket) for socket in self._sockets]!r})"


def _online_cores(root: Path) -> list[int]:
    """The online cpu ids under a sysfs cpu directory, ascending."""
    online = root / "online"
    if online.is_file():
        return sorted(parse_cores(online.read_text().strip()))
    cores = []
    if root.is_dir():
        for entry in root.iterdir():
            match = _CPU_DIR.fullmatch(entry.name)
            if match and entry.is_dir() and _read_text(entry / "online") != "0":
                cores.append(int(match.group(1)))
    return sorted(cores)


def _package_id(root: Path, core: int) -> int | None:
    """A cpu's physical package id, or None when sysfs does not give a valid one."""
    text = _read_text(root / f"cpu{core}" / "topology" / "physical_package_id")
    if text is None or not text.isdigit():
        return None
    return int(text)


def _read_text(path: Path) -> str | None:
    """The stripped content of a small sysfs file, or None if it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _mount_of(mountinfo: str, match: Callable[[str, list[str]], bool]) -> tuple[str, str] | None:
    """(root within the hierarchy, mount point) of the first mount in `mountinfo` that `match(fstype, options)` accepts."""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and len(tail) >= 3 and match(tail[0], tail[2].split(",")):
            return fields[3], fields[4]
    return None


def _cgroup_cpus(proc: Path) -> list[int] | None:
    """The effective cpuset of this process's cgroup (v2, else v1), or None when there is none to read."""
    try:
        cgroups = (proc / "self" / "cgroup").read_text()
        mountinfo = (proc / "self" / "mountinfo").read_text()
    except OSError:
        return None
    for line in cgroups.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "":  # cgroup v2: the unified hierarchy
            mount = _mount_of(mountinfo, lambda fs, opts: fs == "cgroup2")
            names: tuple[str, ...] = ("cpuset.cpus.effective",)
        elif "cpuset" in controllers.split(","):  # cgroup v1: the cpuset hierarchy
            mount = _mount_of(mountinfo, lambda fs, opts: fs == "cgroup" and "cpuset" in opts)
            names = ("cpuset.effective_cpus", "cpuset.cpus")
        else:
            continue
        if mount is None:
            continue
        root, point = mount
        rel = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
        # The file of the process's own cgroup; where its controller is not enabled, the nearest ancestor's.
        here = (Path(point) / rel).resolve()
        while True:
            for name in names:
                text = _read_text(here / name)
                if text:
                    return sorted(parse_cores(text))
            if here == Path(point) or here == here.parent:
                break
            here = here.parent
    return None


def machine_cpus(proc: str | os.PathLike[str] = "/proc", sysfs: str | os.PathLike[str] = SYSFS_CPU_ROOT) -> list[int]:
    """The CPUs this process may be scheduled on, sorted: the machine as a runtime sees it.

    That is its cgroup's cpuset (``cpuset.cpus.effective`` of cgroup v2, else
    ``cpuset.effective_cpus`` of cgroup v1) within the online CPUs, never the
    calling thread's affinity mask: a program pinned to one CPU (``taskset``,
    a benchmark harness, ``os.sched_setaffinity``) still starts a runtime whose
    monitors each get a CPU of their own. Without a cgroup cpuset to read, the
    online CPUs.
    """
    online = _online_cores(Path(sysfs)) or sorted(os.sched_getaffinity(0))
    allowed = _cgroup_cpus(Path(proc))
    if allowed:
        inside = [c for c in online if c in set(allowed)]
        if inside:
            return inside
    return online
