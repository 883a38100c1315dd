"""Group communication (TN-006 chapter 4), phase 1: everything that runs without the monitors.

* the group model and membership as sans-IO machines: :mod:`.ids`,
  :mod:`.view`, :mod:`.messages`, :mod:`.service`, :mod:`.member`, and
  :mod:`.simnet`, an in-memory network that drives them;
* trees over cores: :mod:`.tree`, :mod:`.trees` (flat, radix k, numa),
  :mod:`.machine_tree` (the lowest simulated shoot-down), and
  :mod:`.convergecast` (replies aggregated back up a tree);
* ordering as receiver-side machines (:mod:`.ordering`) and independent
  checkers over recorded deliveries (:mod:`.checkers`);
* the Smelt-style machine model (:mod:`.model`, shipped files in
  ``models/``), the discrete-event simulator (:mod:`.simulate`), the
  calibration run on a live runtime (:mod:`.calibrate`, :mod:`.agent`,
  :mod:`.probe`) and the measured shoot-down over today's channels
  (:mod:`.live`); ``multihop groups`` (:mod:`.command`) on the command line.

Phase 2 (the monitors' fan-out) is designed in ``docs/groups.md``.
"""

from __future__ import annotations

from multihop.groups.errors import GroupError, ModelError
from multihop.groups.ids import BROADCAST
from multihop.groups.machine_tree import MachineTree, machine_tree
from multihop.groups.member import GroupMember
from multihop.groups.model import MachineModel, load_model, shipped_models
from multihop.groups.service import MembershipService
from multihop.groups.simnet import SimNet
from multihop.groups.simulate import SimResult, Workload, simulate
from multihop.groups.tree import Tree
from multihop.groups.trees import TREE_MODES, TreeSpec, build_tree, flat, numa, parse_tree, radix
from multihop.groups.view import ORDERS, Endpoint, View

__all__ = [
    "BROADCAST",
    "Endpoint",
    "GroupError",
    "GroupMember",
    "MachineModel",
    "MachineTree",
    "MembershipService",
    "ModelError",
    "ORDERS",
    "SimNet",
    "SimResult",
    "TREE_MODES",
    "Tree",
    "TreeSpec",
    "View",
    "Workload",
    "build_tree",
    "flat",
    "load_model",
    "machine_tree",
    "numa",
    "parse_tree",
    "radix",
    "shipped_models",
    "simulate",
]
