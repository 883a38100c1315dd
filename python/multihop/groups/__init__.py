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
  calibrated models kept per machine (:mod:`.stored`); ``multihop groups``
  (:mod:`.command`) on the command line.

Phase 2, live through the monitors (``docs/groups.md``): :func:`group` creates
an application group on a runtime (``groups.group(rt, name, order=, tree=)``),
:func:`join` / :func:`leave` (also ``d.join`` / ``d.leave``) make a dispatcher a
member (:mod:`.endpoint`), the group service :mod:`.gsd` runs the membership
machine and installs the trees in the monitors.

The calibration runs and live shoot-downs are the benchmarks':
:mod:`multihop.bench.groups` (``multihop groups calibrate`` included).
"""

from __future__ import annotations

from multihop.deprecation import alias_modules
from multihop.groups.endpoint import Delivery, Group, GroupInfo, group, join, leave
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
    "Delivery",
    "Endpoint",
    "Group",
    "GroupInfo",
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
    "group",
    "join",
    "leave",
    "load_model",
    "machine_tree",
    "numa",
    "parse_tree",
    "radix",
    "shipped_models",
    "simulate",
]

# Moved to the benchmarks (issue 25); the old names work one release, with a DeprecationWarning.
alias_modules({f"multihop.groups.{m}": f"multihop.bench.groups.{m}" for m in ("calibrate", "calibrate_group", "agent", "probe", "live", "shootdown")})
