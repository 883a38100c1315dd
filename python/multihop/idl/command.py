"""The ``multihop stubgen`` command line: its arguments and what it runs.

This is the one implementation; ``multihop.cli`` adds these arguments to its
``stubgen`` subcommand and calls :func:`run`::

    multihop stubgen FILE.if [--lang python|c] [-o OUT] [--import A.if [B.if ...]] [-I C.if]
    multihop stubgen --check [--root DIR]     # is every generated file the repository keeps fresh?
    multihop stubgen --all [--root DIR]       # rewrite every one of them

``--lang`` defaults to ``python``; ``-o`` (also ``--output``, ``--out``) is a
``.py`` file or a directory for Python, a directory for C, and defaults to the
current directory.  ``--import`` (or ``-I``) takes one or more import files and
may be repeated; since it takes every name after it, put ``FILE.if`` first or
end the list with ``--``.  The written files are printed, one per line.

``--check`` and ``--all`` work on the files listed in :data:`multihop.idl.generated_files.GENERATED`
(paths relative to ``--root``, by default the checkout this package is in): ``--check`` exits 1
naming each stale one, with the command that regenerates it; ``--all`` rewrites them and prints
the ones it changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from multihop.idl import generated_files, stubgen

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``stubgen`` arguments to ``parser``."""
    parser.add_argument("file", nargs="?", default=None, help="the interface file (.if)")
    every = parser.add_mutually_exclusive_group()
    every.add_argument(
        "--check",
        action="store_true",
        help="regenerate every generated file the repository keeps (multihop.idl.generated_files) in memory and exit 1 naming those that differ",
    )
    every.add_argument("--all", action="store_true", help="rewrite every generated file the repository keeps; print those that changed")
    parser.add_argument(
        "--root",
        default=None,
        metavar="DIR",
        help="the repository --check and --all work in (default: the checkout this package is in)",
    )
    parser.add_argument("--lang", choices=("python", "c"), default="python", help="back end (default: python)")
    parser.add_argument(
        "-o",
        "--output",
        "--out",
        dest="output",
        default=".",
        help="Python: a .py file or a directory; C: a directory for NAME.h and NAME.c (default: .)",
    )
    parser.add_argument(
        "--import",
        "-I",
        dest="imports",
        action="extend",
        nargs="+",
        default=[],
        metavar="IMPORT.if",
        help="import files (alias/typedef lines) the interface uses; one or more, repeatable; "
        "it takes every name after it, so put FILE first or end the list with --",
    )


def run(args: argparse.Namespace) -> int:
    """Generate the stubs ``args`` ask for, print the files written; 0 on success.

    Raises ValueError when no interface file is given, and whatever
    :func:`multihop.idl.stubgen` raises (IdlError, FileNotFoundError, ValueError).
    With ``--check``: 1 if a generated file is stale (each named on stderr), else 0.
    """
    if args.check or args.all:
        if args.file is not None or args.imports:
            raise ValueError("--check and --all work on every generated file the repository keeps: give no interface file or --import")
        return _every(args.check, Path(args.root) if args.root is not None else generated_files.default_root())
    if args.file is None:
        hint = (
            (f" (--import took every name after it: {' '.join(args.imports)}; put the interface file first, or end the import list with --)")
            if args.imports
            else ""
        )
        raise ValueError(f"no interface file given{hint}")
    for path in stubgen(args.file, args.lang, args.output, args.imports):
        print(path)
    return 0


def _every(check: bool, root: Path) -> int:
    """``--check`` (``check``) or ``--all`` over every file of :data:`~multihop.idl.generated_files.GENERATED` under ``root``."""
    if not (root / "flounder-idl").is_dir():
        raise ValueError(f"{root} is not a checkout of multihop (no flounder-idl/ in it): give --root")
    if not check:
        for path in generated_files.write_all(root):
            print(path.relative_to(root))
        return 0
    bad = generated_files.stale(root)
    for e in bad:
        print(f"{e.path} is stale: regenerate it with `multihop stubgen --all` (or {e.command})", file=sys.stderr)
    if not bad:
        print(f"all {len(generated_files.GENERATED)} generated files are fresh")
    return 1 if bad else 0
