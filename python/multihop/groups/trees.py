"""Tree modes by name: :func:`build_tree` builds the tree a mode names (``flat``, ``radix[:K]``, ``numa``, ``machine``).

The fixed modes are :mod:`multihop.groups.fixed_trees` (re-exported here: :func:`flat`, :func:`radix`,
:func:`numa`, :func:`parse_tree`, :class:`TreeSpec`, :data:`TREE_MODES`); the machine-aware tree is
:mod:`multihop.groups.machine_tree`, which starts from the fixed ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from multihop.groups.errors import GroupError
from multihop.groups.fixed_trees import TREE_MODES, RoundTrip, TreeSpec, flat, numa, parse_tree, radix
from multihop.groups.machine_tree import machine_tree
from multihop.groups.model import MachineModel
from multihop.groups.tree import Tree
from multihop.topology import Topology

__all__ = ["TREE_MODES", "RoundTrip", "TreeSpec", "parse_tree", "flat", "radix", "numa", "build_tree"]


def build_tree(
    spec: str | TreeSpec,
    root: int,
    cores: Sequence[int],
    *,
    topology: Topology | None = None,
    model: MachineModel | None = None,
    rtt: RoundTrip | None = None,
) -> Tree:
    """Build the tree a mode names over ``root`` and the member ``cores``.

    ``numa`` takes its sockets from ``topology`` (else the model's) and its
    round trips from ``rtt`` (else the model's); ``machine`` needs ``model``.

    Raises:
        GroupError: an unknown mode, a mode that lacks what it needs (numa
            without a topology or model, machine without a model), or bad cores.
    """
    parsed = parse_tree(spec)
    if parsed.mode == "flat":
        return flat(root, cores)
    if parsed.mode == "radix":
        return radix(root, cores, parsed.k)
    if parsed.mode == "numa":
        if topology is not None:
            topo = topology
        elif model is not None:
            topo = model.topology
        else:
            raise GroupError("the numa tree needs a topology or a machine model (which cores share a socket)")
        if rtt is None and model is not None:
            rtt = model.rtt
        return numa(root, cores, topo, rtt)
    if model is None:
        raise GroupError("the machine tree needs a machine model: load one with multihop.groups.load_model")
    return machine_tree(model, root, cores).tree
