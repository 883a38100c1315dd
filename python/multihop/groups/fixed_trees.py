"""The fixed tree modes, ``flat``, ``radix k`` and ``numa``, and the names of every mode.

All three span the root (the sender's core) and the member cores given, and
nothing else: a tree never relays through a core with no member (each relay
is a monitor that already holds a copy for its own members).

``flat``
    the root sends to every other core itself, ascending from the root
    (wrapping around), so the order is the same for every root up to rotation.
``radix k``
    a k-ary heap over the cores listed root first, then ascending from the
    root (wrapping): the core at position i sends to positions k*i+1 .. k*i+k.
``numa``
    Barrelfish's ``multicast.pl``: the root first sends to the lowest member
    core of every *other* socket, farthest first by round trip (ties by socket
    order), then to the other member cores of its own socket; each of those
    socket leaders then sends to the other member cores of its socket.  The
    round trips come from a calibration (:mod:`multihop.bench.groups.calibrate`) or a
    machine model; without either, every socket is equally far and the order
    is the topology's socket order after the root's.
``machine``
    the lowest simulated shoot-down on a machine model
    (:mod:`multihop.groups.machine_tree`, which starts from the fixed
    modes); needs a model.

:func:`multihop.groups.trees.build_tree` builds the tree a mode names (the
fixed ones here, ``machine`` there); :mod:`multihop.groups.trees` re-exports
this module's names.

A spec string names a mode: ``"flat"``, ``"radix"`` (k = 2), ``"radix:4"``,
``"numa"``, ``"machine"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from multihop.errors import RoutingError
from multihop.groups.errors import GroupError
from multihop.groups.tree import Tree
from multihop.topology import Topology

__all__ = ["TREE_MODES", "RoundTrip", "TreeSpec", "parse_tree", "flat", "radix", "numa"]

TREE_MODES: tuple[str, ...] = ("flat", "radix", "numa", "machine")
"""The tree modes a group can be created with."""

RoundTrip = Callable[[int, int], float]
"""``rtt(a, b)``: the round trip between cores a and b, in any unit (only the order matters)."""


@dataclass(frozen=True)
class TreeSpec:
    """A parsed tree mode: the mode and, for ``radix``, the fan-out k."""

    mode: str
    k: int = 2

    def __str__(self) -> str:
        return f"radix:{self.k}" if self.mode == "radix" else self.mode


def parse_tree(spec: str | TreeSpec) -> TreeSpec:
    """Parse ``"flat"``, ``"radix"``, ``"radix:K"``, ``"numa"`` or ``"machine"``.

    Raises:
        GroupError: an unknown mode, or a radix k that is not an int >= 1.
    """
    if isinstance(spec, TreeSpec):
        return spec
    if not isinstance(spec, str):
        raise GroupError(f"a tree mode is a string like 'numa' or 'radix:4', got {spec!r}")
    mode, sep, arg = spec.strip().partition(":")
    if mode not in TREE_MODES:
        raise GroupError(f"unknown tree mode {spec!r}; valid modes: flat, radix[:K], numa, machine")
    if mode != "radix":
        if sep:
            raise GroupError(f"tree mode {mode!r} takes no argument, got {spec!r}")
        return TreeSpec(mode)
    if not sep:
        return TreeSpec("radix", 2)
    if not arg.isdigit() or int(arg) < 1:
        raise GroupError(f"radix needs a fan-out k >= 1, as in 'radix:4', got {spec!r}")
    return TreeSpec("radix", int(arg))


def _members(root: int, cores: Iterable[int]) -> list[int]:
    """The member cores other than the root, ascending from the root and wrapping; checked."""
    listed = list(cores)
    for core in [root, *listed]:
        if isinstance(core, bool) or not isinstance(core, int) or core < 0:
            raise GroupError(f"cores are non-negative ints, got {core!r}")
    if len(set(listed)) != len(listed):
        raise GroupError(f"a core is listed twice in {listed}")
    others = sorted(set(listed) - {root})
    return [c for c in others if c > root] + [c for c in others if c < root]


def flat(root: int, cores: Iterable[int]) -> Tree:
    """The root sends to every other core itself (unicast), ascending from the root."""
    return Tree(root, {root: tuple(_members(root, cores))}, "flat")


def radix(root: int, cores: Iterable[int], k: int = 2) -> Tree:
    """A k-ary heap: position i (root = 0) sends to positions k*i+1 .. k*i+k."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise GroupError(f"radix needs a fan-out k >= 1, got {k!r}")
    order = [root, *_members(root, cores)]
    kids = {order[i]: tuple(order[k * i + 1 : k * i + k + 1]) for i in range(len(order))}
    return Tree(root, kids, f"radix:{k}")


def numa(root: int, cores: Iterable[int], topology: Topology, rtt: RoundTrip | None = None) -> Tree:
    """Barrelfish's NUMA-aware tree: other sockets' leaders first (farthest first), then local cores.

    Args:
        root: the sender's core.
        cores: the member cores (the root may be among them).
        topology: which socket each core is on; every core must be in it.
        rtt: round trip between two cores; None treats all sockets as equally far.

    Raises:
        GroupError: a core is not in the topology, or listed twice.
    """
    members = _members(root, cores)
    try:
        socket_of = {c: topology.socket_of(c) for c in [root, *members]}
    except RoutingError as e:
        raise GroupError(f"numa tree: {e}") from None
    home = socket_of[root]
    by_socket: dict[int, list[int]] = {}
    for core in sorted(members):
        by_socket.setdefault(socket_of[core], []).append(core)
    local = by_socket.pop(home, [])
    leaders = {s: cs[0] for s, cs in by_socket.items()}

    def distance(socket: int) -> tuple[float, int]:
        far = rtt(root, leaders[socket]) if rtt is not None else 0.0
        # farthest first; ties in socket order after the root's socket (wrapping)
        return (-far, (socket - home) % len(topology.sockets))

    remote = sorted(leaders, key=distance)
    kids: dict[int, tuple[int, ...]] = {root: tuple(leaders[s] for s in remote) + tuple(local)}
    for s in remote:
        kids[leaders[s]] = tuple(by_socket[s][1:])
    return Tree(root, kids, "numa")
