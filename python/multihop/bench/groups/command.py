"""``multihop groups calibrate``: measure a running runtime's message costs into a machine model.

The groups application's command (:mod:`multihop.groups.command`) has the models, trees and simulation;
calibrating is a measurement run (agents on every core, :mod:`.calibrate`; the live group path,
:mod:`.calibrate_group`), so it lives with the benchmarks, and ``multihop.cli`` adds it to the ``groups``
subcommand::

    multihop groups calibrate NAME [--cores 0-3] [--pairs all|from] [--out FILE] [--rounds N] [--transport ump|multihop]
    multihop groups calibrate NAME --group-path [--root R] [--out FILE] [--rounds N]

``calibrate`` measures a running runtime (``multihop up NAME``) and stores its model per machine, where it
outlives the runtime (``multihop down`` removes the runtime's directory):
``<model dir>/<host>/NAME/groups-model.toml``, the model directory being ``$MULTIHOP_MODEL_DIR``, else
``$XDG_DATA_HOME/multihop/models``, else ``~/.local/share/multihop/models``; or in ``--out``. It prints
where.  With ``--group-path`` it calibrates the live group path from ``--root`` (the runtime's processes:
monitors, wake-ups, the endpoints' costs and crowding; docs/groups.md §10) and prints the flat unicast
shoot-down that model predicts.
"""

from __future__ import annotations

import argparse
import sys

import multihop as mh
from multihop.groups.simulate import simulate
from multihop.groups.stored import PATH_STORED_NAME, STORED_NAME, stored_path
from multihop.groups.trees import build_tree
from multihop.topology import parse_cores

__all__ = ["add_arguments", "run"]


def add_arguments(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``calibrate`` to ``groups``, the sub-subcommands of ``multihop groups``."""
    cal = groups.add_parser("calibrate", help="measure a running runtime's message costs into a model file")
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


def run(a: argparse.Namespace) -> int:
    """Carry out ``multihop groups calibrate``; 0 on success."""
    rt = mh.Runtime.attach(a.name)
    if a.group_path:
        return _calibrate_group_path(rt, a)
    from multihop.bench.groups.calibrate import calibrate

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
    from multihop.bench.groups.calibrate_group import calibrate_group_path

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
