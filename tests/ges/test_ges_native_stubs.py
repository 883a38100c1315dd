"""The hand-kept ``_ges.pyi`` must match the GES native module: names, members, parameters (as ``test_stubs.py``
checks ``_core.pyi``), and the module is found where the package says it is."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import multihop
from multihop import _core, _ges
from stub_check import check_classes, check_functions, stub_names

PYI = Path(multihop.__file__).with_name("_ges.pyi")


def _tree() -> ast.Module:
    return ast.parse(PYI.read_text())


def test_the_module_is_registered_by_the_core_extension() -> None:
    assert _ges.__name__ == "multihop._ges"
    assert sys.modules["multihop._ges"] is _ges
    assert _core._ges is _ges  # a submodule object of the one extension maturin builds


def test_module_level_names_match() -> None:
    stub = stub_names(_tree())
    runtime = {n for n in dir(_ges) if not n.startswith("_")}
    assert stub == runtime, f"only in stub: {stub - runtime}; only in the module: {runtime - stub}"


def test_classes_members_and_signatures_match() -> None:
    check_classes(_tree(), _ges, "the module")


def test_functions_signatures_match() -> None:
    check_functions(_tree(), _ges, "the module")
