"""The ``multihop stubgen`` command line: its arguments and what it runs.

This is the one implementation; ``multihop.cli`` adds these arguments to its
``stubgen`` subcommand and calls :func:`run`::

    multihop stubgen FILE.if [--lang python|c] [-o OUT] [--import A.if [B.if ...]] [-I C.if]

``--lang`` defaults to ``python``; ``-o`` (also ``--output``, ``--out``) is a
``.py`` file or a directory for Python, a directory for C, and defaults to the
current directory.  ``--import`` (or ``-I``) takes one or more import files and
may be repeated; since it takes every name after it, put ``FILE.if`` first or
end the list with ``--``.  The written files are printed, one per line.
"""

from __future__ import annotations

import argparse

from multihop.idl import stubgen

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``stubgen`` arguments to ``parser``."""
    parser.add_argument("file", nargs="?", default=None, help="the interface file (.if)")
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
    """
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
