"""The ``multihop groups`` command line: machine models, trees, simulation, calibration.

``multihop.cli`` adds :func:`add_arguments` to its ``groups`` subcommand and
calls :func:`run`::

    multihop groups models                                   # the shipped model files
    multihop groups simulate --model 4x8 [--root 0] [--cores 0-31] [--acks tree] [--work NS]
    multihop groups tree numa --model 8x8 [--root 0] [--cores ...]
    multihop groups calibrate NAME [--cores 0-3] [--pairs all|from] [--out FILE] [--rounds N] [--transport ump|multihop]
    multihop groups calibrate NAME --group-path [--root R] [--out FILE] [--rounds N]

``--model`` takes a shipped name or a TOML file (a calibration's output).
``simulate`` prints the simulated shoot-down of flat, radix 2/4/8, numa and
the machine-aware tree, with each one's ratio to flat.  ``calibrate``
measures a running runtime (``multihop up NAME``) and stores its model per
machine, where it outlives the runtime (``multihop down`` removes the
runtime's directory): ``<model dir>/<host>/NAME/groups-model.toml``, the model
directory being ``$MULTIHOP_MODEL_DIR``, else ``$XDG_DATA_HOME/multihop/models``,
else ``~/.local/share/multihop/models``; or in ``--out``. It prints where.  With ``--group-path`` it calibrates the
live group path from ``--root`` (the runtime's processes: monitors, wake-ups,
the endpoints' costs and crowding; docs/groups.md §10) and prints the flat
unicast shoot-down that model predicts.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from multihop.groups.errors import GroupError
from multihop.groups.machine_tree import machine_tree
from multihop.groups.model import MachineModel, load_model, shipped_models
from multihop.groups.simulate import ACKS, Workload, simulate
from multihop.groups.trees import build_tree, parse_tree
from multihop.topology import parse_cores

if TYPE_CHECKING:
    import multihop as mh

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``groups`` sub-subcommands to ``parser``."""
    sub = parser.add_subparsers(dest="groups_cmd", required=True)
    sub.add_parser("models", help="list the shipped machine models")
    sim = sub.add_parser("simulate", help="simulated shoot-down of every tree mode on a model")
    _model_args(sim)
    tree = sub.add_parser("tree", help="show one tree and its simulated shoot-down")
    tree.add_argument("mode", help="flat, radix[:K], numa or machine")
    _model_args(tree)
    cal = sub.add_parser("calibrate", help="measure a running runtime's message costs into a model file")
    cal.add_argument("name", help="the runtime (started with multihop up NAME)")
    cal.add_argument("--cores", default=None, help="cores to measure (default: all of the runtime's)")
    cal.add_argument(
        "--pairs", choices=("all", "from"), default="all", help="every ordered pair, or only those to and from the first core (default: all)"
    )
    cal.add_argument(
        "--out",
        default=None,
        help="model file to write (default: <model dir>/<host>/NAME/groups-model.toml, kept after `multihop down`; the model dir is "
        "$MULTIHOP_MODEL_DIR, else $XDG_DATA_HOME/multihop/models, else ~/.local/share/multihop/models)",
    )
    cal.add_argument("--rounds", type=int, default=300, help="round trips per pair (default 300)")
    cal.add_argument(
        "--transport",
        choices=("ump", "multihop"),
        default="ump",
        help="channels to measure over: direct UMP rings or multi-hop through the monitors (default: ump)",
    )
    cal.add_argument(
        "--group-path",
        action="store_true",
        help="calibrate the live group path instead (monitors, wake-ups, endpoint costs, crowding) and print its predicted shoot-down",
    )
    cal.add_argument("--root", type=int, default=None, help="with --group-path: the sending core (default: the runtime's first)")


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
    if a.groups_cmd == "calibrate":
        return _calibrate(a)
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


def _calibrate(a: argparse.Namespace) -> int:
    import multihop as mh
    from multihop.groups.calibrate import STORED_NAME, calibrate, stored_path

    rt = mh.Runtime.attach(a.name)
    if a.group_path:
        return _calibrate_group_path(rt, a)
    cores = parse_cores(a.cores) if a.cores else None
    model = calibrate(
        rt, cores, pairs=a.pairs, rounds=a.rounds, transport=a.transport, out=a.out, progress=lambda line: print(f"  {line}", file=sys.stderr)
    )
    where = a.out if a.out is not None else stored_path(rt.name, STORED_NAME)
    print(f"model of {len(model.cores)} cores written to {where} (switch {model.switch:,.0f} ns)")
    if a.out is None:
        print(_KEPT)
    return 0


_KEPT = (
    "  kept after `multihop down`: the group service of a runtime of this name reads it when it starts "
    "(the model directory is $MULTIHOP_MODEL_DIR, else $XDG_DATA_HOME/multihop/models, else ~/.local/share/multihop/models)"
)


def _calibrate_group_path(rt: mh.Runtime, a: argparse.Namespace) -> int:
    from multihop.groups.calibrate import stored_path
    from multihop.groups.calibrate_group import PATH_STORED_NAME, calibrate_group_path

    model, costs, workload = calibrate_group_path(rt, a.root, rounds=a.rounds, out=a.out, progress=lambda line: print(f"  {line}", file=sys.stderr))
    root = rt.cores[0] if a.root is None else a.root
    tree = build_tree("flat", root, list(rt.cores), model=model)
    predicted = simulate(model, tree, workload).shootdown
    where = a.out if a.out is not None else stored_path(rt.name, PATH_STORED_NAME)
    print(f"group path model of {len(model.cores)} cores from core {root} written to {where}")
    if a.out is None:
        print(_KEPT.replace("the group service of a runtime of this name reads it when it starts", "load it with --model FILE"))
    print(f"predicted flat unicast shoot-down to {len(rt.cores) - 1} members: {predicted / 1000:,.1f} us (simulation of the calibrated model)")
    return 0
