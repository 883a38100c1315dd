"""The ``multihop groups`` command line: machine models, trees, simulation.

``multihop.cli`` adds :func:`add_arguments` to its ``groups`` subcommand and
calls :func:`run`::

    multihop groups models                                   # the shipped model files
    multihop groups simulate --model 4x8 [--root 0] [--cores 0-31] [--acks tree] [--work NS]
    multihop groups tree numa --model 8x8 [--root 0] [--cores ...]

``--model`` takes a shipped name or a TOML file (a calibration's output).
``simulate`` prints the simulated shoot-down of flat, radix 2/4/8, numa and
the machine-aware tree, with each one's ratio to flat.  ``multihop groups
calibrate`` (a measurement of a running runtime) is the benchmarks' part:
:mod:`multihop.bench.groups.command`, which ``multihop.cli`` adds to the same
subcommand.
"""

from __future__ import annotations

import argparse

from multihop.groups.errors import GroupError
from multihop.groups.machine_tree import machine_tree
from multihop.groups.model import MachineModel, load_model, shipped_models
from multihop.groups.simulate import ACKS, Workload, simulate
from multihop.groups.trees import build_tree, parse_tree
from multihop.topology import parse_cores

__all__ = ["add_arguments", "run", "DESCRIPTION"]

DESCRIPTION = (
    "Group communication tools: the shipped machine models, trees (flat, radix, numa, machine-aware) and "
    "their simulated shoot-down on a model, and calibration of a running runtime into a model."
)


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help=f"a shipped model ({', '.join(shipped_models())}) or a TOML file")
    p.add_argument("--root", type=int, default=None, help="the sender's core (default: the first core)")
    p.add_argument("--cores", default=None, help='member cores, e.g. "0-31" (default: all of the model\'s)')
    p.add_argument("--acks", choices=ACKS, default="tree", help="how members acknowledge (default: tree, a convergecast)")
    p.add_argument("--work", type=float, default=0.0, help="local work per member, ns (default 0)")


def add_arguments(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """Add the ``groups`` sub-subcommands to ``parser``; return them (``multihop.cli`` adds ``calibrate``, which
    lives with the benchmarks: :mod:`multihop.bench.groups.command`)."""
    sub = parser.add_subparsers(dest="groups_cmd", required=True)
    sub.add_parser("models", help="list the shipped machine models")
    sim = sub.add_parser("simulate", help="simulated shoot-down of every tree mode on a model")
    _model_args(sim)
    tree = sub.add_parser("tree", help="show one tree and its simulated shoot-down")
    tree.add_argument("mode", help="flat, radix[:K], numa or machine")
    _model_args(tree)
    return sub


def _setup(a: argparse.Namespace) -> tuple[MachineModel, int, list[int], Workload]:
    model = load_model(a.model)
    cores = parse_cores(a.cores) if a.cores else list(model.cores)
    root = a.root if a.root is not None else cores[0]
    for c in [root, *cores]:
        if c not in model.topology:
            raise GroupError(f"core {c} is not in model {model.name!r} (cores {model.cores[0]}-{model.cores[-1]})")
    return model, root, cores, Workload(a.acks, a.work)


def run(a: argparse.Namespace) -> int:
    """Carry out the ``groups`` subcommand ``a`` asks for; 0 on success."""
    if a.groups_cmd == "models":
        for name in shipped_models():
            m = load_model(name)
            print(f"{name}: {m.description}")
        return 0
    model, root, cores, workload = _setup(a)
    if a.groups_cmd == "tree":
        parse_tree(a.mode)
        tree = build_tree(a.mode, root, cores, model=model)
        r = simulate(model, tree, workload)
        print(tree.render())
        print(f"simulated shoot-down on {model.name}: {r.shootdown:,.0f} ns (depth {tree.depth()}, acks {workload.acks})")
        return 0
    flat_ns = None
    print(
        f"simulated shoot-down on model {model.name!r}: root {root}, {len(set(cores) - {root})} members, "
        f"acks {workload.acks} (simulation, not a measurement)"
    )
    print(f"  {'tree':<10} {'shoot-down ns':>14} {'x flat':>8}")
    for mode in ("flat", "radix:2", "radix:4", "radix:8", "numa", "machine"):
        if mode == "machine":
            mt = machine_tree(model, root, cores, workload)
            ns, note = mt.result.shootdown, f"  (from {mt.candidate})"
        else:
            ns, note = simulate(model, build_tree(mode, root, cores, model=model), workload).shootdown, ""
        flat_ns = flat_ns or ns
        print(f"  {mode:<10} {ns:>14,.0f} {ns / flat_ns:>8.2f}{note}")
    return 0
