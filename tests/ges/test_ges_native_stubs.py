"""The hand-kept ``_ges.pyi`` must match the GES native module: names, members, parameters (as ``test_stubs.py``
checks ``_core.pyi``), and the module is found where the package says it is."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import multihop
from multihop import _core, _ges
from stub_check import _params, _public, _runtime_params

PYI = Path(multihop.__file__).with_name("_ges.pyi")


def _tree() -> ast.Module:
    return ast.parse(PYI.read_text())


def test_the_module_is_registered_by_the_core_extension() -> None:
    assert _ges.__name__ == "multihop._ges"
    assert sys.modules["multihop._ges"] is _ges
    assert _core._ges is _ges  # a submodule object of the one extension maturin builds


def test_module_level_names_match() -> None:
    stub = set()
    for node in _tree().body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            stub.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stub.add(node.target.id)
    runtime = {n for n in dir(_ges) if not n.startswith("_")}
    assert stub == runtime, f"only in stub: {stub - runtime}; only in the module: {runtime - stub}"


def test_classes_members_and_signatures_match() -> None:
    for node in _tree().body:
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(_ges, node.name)
        stub_members = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
        if "__init__" in stub_members:
            got = _runtime_params(cls)
            assert got == _params(stub_members.pop("__init__")), f"{node.name}(): module {got}"
        runtime_members = _public(n for n in vars(cls))
        assert set(stub_members) == runtime_members, (
            f"{node.name}: only in stub {set(stub_members) - runtime_members}, only in the module {runtime_members - set(stub_members)}"
        )
        for name, fn in stub_members.items():
            is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)
            member = inspect.getattr_static(cls, name)
            if is_property:
                assert not callable(member) or hasattr(member, "__get__"), f"{node.name}.{name} is not a property"
                continue
            got = _runtime_params(getattr(cls, name))
            if got is not None:
                assert got == _params(fn), f"{node.name}.{name}: module {got} vs stub {_params(fn)}"


def test_functions_signatures_match() -> None:
    for node in _tree().body:
        if isinstance(node, ast.FunctionDef):
            got = _runtime_params(getattr(_ges, node.name))
            assert got == _params(node), f"{node.name}: module {got} vs stub {_params(node)}"
