"""The hand-kept _core.pyi must match the extension: names, members, parameters."""

from __future__ import annotations

import ast
from pathlib import Path

import multihop
from multihop import _core
from stub_check import check_classes, check_functions, stub_names

PYI = Path(multihop.__file__).with_name("_core.pyi")


def _stub_tree() -> ast.Module:
    return ast.parse(PYI.read_text())


def test_module_level_names_match() -> None:
    stub = stub_names(_stub_tree())
    runtime = {n for n in dir(_core) if not n.startswith("_")} | {"__version__"}
    assert stub == runtime, f"only in stub: {stub - runtime}; only in extension: {runtime - stub}"


def test_classes_members_and_signatures_match() -> None:
    check_classes(_stub_tree(), _core, "extension")


def test_functions_signatures_match() -> None:
    check_functions(_stub_tree(), _core, "extension")
