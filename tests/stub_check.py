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
