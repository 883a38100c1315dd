"""The hand-kept _core.pyi must match the extension: names, members, parameters."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import multihop
from multihop import _core

PYI = Path(multihop.__file__).with_name("_core.pyi")


def _stub_tree() -> ast.Module:
    return ast.parse(PYI.read_text())


_NO_DEFAULT = "<required>"


def _params(fn: ast.FunctionDef) -> list[tuple[str, object]]:
    """(name, default) of every parameter of a stub, self/cls left out."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults: list[object] = [_NO_DEFAULT] * (len(positional) - len(a.defaults)) + [ast.literal_eval(d) for d in a.defaults]
    out = list(zip((x.arg for x in positional), defaults))
    if a.vararg:
        out.append(("*" + a.vararg.arg, _NO_DEFAULT))
    out += [(x.arg, _NO_DEFAULT if d is None else ast.literal_eval(d)) for x, d in zip(a.kwonlyargs, a.kw_defaults)]
    return [(n, d) for n, d in out if n not in ("self", "cls")]


def _runtime_params(obj: object) -> list[tuple[str, object]] | None:
    """(name, default) of every parameter of an extension callable, when it has a signature."""
    try:
        sig = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    out: list[tuple[str, object]] = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls", "$self", "$cls"):
            continue
        name = "*" + p.name if p.kind is p.VAR_POSITIONAL else p.name
        out.append((name, _NO_DEFAULT if p.default is p.empty else p.default))
    return out


def _public(names: object) -> set[str]:
    """Every member but dunders (context-manager, async-iterator and awaitable methods included): test hooks like `_inject_raw` must be stubbed too."""
    return {n for n in names if not n.startswith("__") or n in ("__enter__", "__exit__", "__aiter__", "__await__")}  # type: ignore[attr-defined]


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


def test_every_public_python_function_has_a_docstring_and_annotations() -> None:
    import multihop.cli
    import multihop.paths
    import multihop.runtime

    for mod in (multihop.runtime, multihop.paths, multihop.cli, multihop.errors):
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                assert inspect.getdoc(obj), f"{mod.__name__}.{name} has no docstring"
            if inspect.isfunction(obj):
                ann = obj.__annotations__
                assert "return" in ann, f"{mod.__name__}.{name} has no return annotation"


#: multihop.idl's deprecated aliases of the modules that moved to multihop.flounder (checked there).
_MOVED = {"binding", "server", "wire", "connect"}


def _idl_modules() -> list[Any]:
    """multihop.idl (the compiler) and multihop.flounder (the run-time support), and every module in them."""
    import importlib
    import pkgutil

    import multihop.flounder
    import multihop.idl

    out: list[Any] = []
    for pkg in (multihop.idl, multihop.flounder):
        names = [m.name for m in pkgutil.iter_modules(pkg.__path__) if not (pkg is multihop.idl and m.name in _MOVED)]
        out += [pkg] + [importlib.import_module(f"{pkg.__name__}.{name}") for name in names]
    return out


def _undocumented(qual: str, fn: Any) -> list[str]:
    """What a public function or method lacks: a docstring, a return annotation, parameter annotations."""
    problems = []
    if not inspect.getdoc(fn):
        problems.append(f"{qual} has no docstring")
    ann = getattr(fn, "__annotations__", {})
    if "return" not in ann:
        problems.append(f"{qual} has no return annotation")
    for name, p in inspect.signature(fn).parameters.items():
        if name not in ("self", "cls") and name not in ann:
            problems.append(f"{qual}: parameter '{name}' has no annotation")
    return problems


def test_every_public_idl_function_and_class_is_documented_and_annotated() -> None:
    """Every public function and class of every multihop.idl module, and every public method and
    property of those classes: a docstring; functions and methods are fully annotated."""
    problems: list[str] = []
    modules = _idl_modules()
    assert {m.__name__.rsplit(".", 1)[-1] for m in modules} >= {"parser", "checker", "pygen", "cgen", "command", "binding", "server", "wire"}
    for mod in modules:
        if not inspect.getdoc(mod):
            problems.append(f"{mod.__name__} has no module docstring")
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            qual = f"{mod.__name__}.{name}"
            if inspect.isfunction(obj):
                problems += _undocumented(qual, obj)
            elif inspect.isclass(obj):
                if not inspect.getdoc(obj):
                    problems.append(f"{qual} has no docstring")
                for mname, member in vars(obj).items():
                    if mname.startswith("_"):
                        continue
                    if isinstance(member, property):
                        if not inspect.getdoc(member) or "return" not in getattr(member.fget, "__annotations__", {}):
                            problems.append(f"{qual}.{mname} (property) lacks a docstring or return annotation")
                    elif isinstance(member, (staticmethod, classmethod)):
                        problems += _undocumented(f"{qual}.{mname}", member.__func__)
                    elif inspect.isfunction(member):
                        problems += _undocumented(f"{qual}.{mname}", member)
    assert not problems, "\n".join(problems)
