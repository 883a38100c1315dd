"""Every module of multihop.groups documents and annotates its public functions, classes and methods."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import multihop.bench.groups
import multihop.groups
import multihop.groups.ordering


def modules() -> list[Any]:
    """multihop.groups and its measurements (multihop.bench.groups), every module of them."""
    out = []
    for pkg in (multihop.groups, multihop.groups.ordering, multihop.bench.groups):
        out.append(pkg)
        out += [importlib.import_module(f"{pkg.__name__}.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)]
    return out


def undocumented(qual: str, fn: Any) -> list[str]:
    problems = []
    if not inspect.getdoc(fn):
        problems.append(f"{qual} has no docstring")
    ann = getattr(fn, "__annotations__", {})
    if "return" not in ann:
        problems.append(f"{qual} has no return annotation")
    for name in inspect.signature(fn).parameters:
        if name not in ("self", "cls") and name not in ann:
            problems.append(f"{qual}: parameter '{name}' has no annotation")
    return problems


def test_every_public_name_is_documented_and_annotated() -> None:
    problems: list[str] = []
    mods = modules()
    assert {m.__name__.rsplit(".", 1)[-1] for m in mods} >= {
        "service",
        "member",
        "simnet",
        "checkers",
        "trees",
        "model",
        "simulate",
        "machine_tree",
        "stored",
        "calibrate",
        "live",
        "fifo",
        "causal",
        "total",
    }
    for mod in mods:
        if not inspect.getdoc(mod):
            problems.append(f"{mod.__name__} has no module docstring")
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            qual = f"{mod.__name__}.{name}"
            if inspect.isfunction(obj):
                problems += undocumented(qual, obj)
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
                        problems += undocumented(f"{qual}.{mname}", member.__func__)
                    elif inspect.isfunction(member):
                        problems += undocumented(f"{qual}.{mname}", member)
    assert not problems, "\n".join(problems)


def test_the_package_exports_what_it_lists() -> None:
    for name in multihop.groups.__all__:
        assert getattr(multihop.groups, name) is not None
