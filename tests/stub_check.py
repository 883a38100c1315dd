"""What the .pyi checks share (``runtime/test_stubs.py`` for ``_core.pyi``, ``ges/test_ges_native_stubs.py`` for
``_ges.pyi``): a stub function's parameters and defaults, an extension callable's, and which members count."""

from __future__ import annotations

import ast
import inspect

_NO_DEFAULT = "<required>"


def _params(fn: ast.FunctionDef) -> list[tuple[str, object]]:
    """(name, default) of every parameter of a stub, self/cls left out."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults: list[object] = [_NO_DEFAULT] * (len(positional) - len(a.defaults)) + [ast.literal_eval(d) for d in a.defaults]
    out = list(zip((x.arg for x in positional), defaults, strict=True))
    if a.vararg:
        out.append(("*" + a.vararg.arg, _NO_DEFAULT))
    out += [(x.arg, _NO_DEFAULT if d is None else ast.literal_eval(d)) for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
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


def stub_names(tree: ast.Module) -> set[str]:
    """The module-level names a stub declares: classes, functions and annotated constants."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def check_classes(tree: ast.Module, module: object, what: str) -> None:
    """Every class of the stub has the members, properties and parameters the ``module``'s class has."""
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(module, node.name)
        stub_members = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
        if "__init__" in stub_members:
            # A pyclass constructor is its __new__; the stub spells it __init__.
            got = _runtime_params(cls)
            assert got == _params(stub_members.pop("__init__")), f"{node.name}(): {what} {got}"
        runtime_members = _public(n for n in vars(cls))
        assert set(stub_members) == runtime_members, (
            f"{node.name}: only in stub {set(stub_members) - runtime_members}, only in {what} {runtime_members - set(stub_members)}"
        )
        for name, fn in stub_members.items():
            is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)
            member = inspect.getattr_static(cls, name)
            if is_property:
                assert not callable(member) or hasattr(member, "__get__"), f"{node.name}.{name} is not a property"
                continue
            got = _runtime_params(getattr(cls, name))
            if got is not None:
                assert got == _params(fn), f"{node.name}.{name}: {what} {got} vs stub {_params(fn)}"


def check_functions(tree: ast.Module, module: object, what: str) -> None:
    """Every function of the stub has the ``module``'s function's parameters and defaults."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            got = _runtime_params(getattr(module, node.name))
            assert got == _params(node), f"{node.name}: {what} {got} vs stub {_params(node)}"
