"""The hand-kept _core.pyi must match the extension: names, members, parameters."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import multihop
from multihop import _core
from stub_check import _params, _public, _runtime_params

PYI = Path(multihop.__file__).with_name("_core.pyi")


def _stub_tree() -> ast.Module:
    return ast.parse(PYI.read_text())


def test_module_level_names_match() -> None:
    tree = _stub_tree()
    stub = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            stub.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stub.add(node.target.id)
    runtime = {n for n in dir(_core) if not n.startswith("_")} | {"__version__"}
    assert stub == runtime, f"only in stub: {stub - runtime}; only in extension: {runtime - stub}"


def test_classes_members_and_signatures_match() -> None:
    for node in _stub_tree().body:
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(_core, node.name)
        stub_members = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
        if "__init__" in stub_members:
            # A pyclass constructor is its __new__; the stub spells it __init__.
            got = _runtime_params(cls)
            assert got == _params(stub_members.pop("__init__")), f"{node.name}(): extension {got}"
        runtime_members = _public(n for n in vars(cls))
        assert set(stub_members) == runtime_members, (
            f"{node.name}: only in stub {set(stub_members) - runtime_members}, only in extension {runtime_members - set(stub_members)}"
        )
        for name, fn in stub_members.items():
            is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)
            member = inspect.getattr_static(cls, name)
            if is_property:
                assert not callable(member) or hasattr(member, "__get__"), f"{node.name}.{name} is not a property"
                continue
            got = _runtime_params(getattr(cls, name))
            if got is not None:
                assert got == _params(fn), f"{node.name}.{name}: extension {got} vs stub {_params(fn)}"


def test_functions_signatures_match() -> None:
    for node in _stub_tree().body:
        if isinstance(node, ast.FunctionDef):
            got = _runtime_params(getattr(_core, node.name))
            assert got == _params(node), f"{node.name}: extension {got} vs stub {_params(node)}"
