"""The public-API documentation check, written once (tests/docs/test_api_docs.py runs it per subsystem).

Every public function and class of a module has a docstring; every public method and property of those
classes too; functions and methods annotate every parameter and their return, properties their return;
every module has a docstring. Public means: a name without a leading underscore, defined in that module
(names it imports are checked where they are defined).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType
from typing import Any, Callable, Iterable


def package_modules(packages: Iterable[ModuleType], skip: Callable[[ModuleType, str], bool] = lambda pkg, name: False) -> list[ModuleType]:
    """Each package, then every module directly in it (``pkgutil.iter_modules``) but those ``skip(package, name)`` leaves out."""
    out: list[ModuleType] = []
    for pkg in packages:
        out.append(pkg)
        out += [importlib.import_module(f"{pkg.__name__}.{m.name}") for m in pkgutil.iter_modules(pkg.__path__) if not skip(pkg, m.name)]
    return out


def undocumented(qual: str, fn: Any) -> list[str]:
    """What a public function or method lacks: a docstring, a return annotation, parameter annotations."""
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


def doc_problems(modules: Iterable[ModuleType]) -> list[str]:
    """Everything the public API of ``modules`` lacks (see the module docstring), one line per problem."""
    problems: list[str] = []
    for mod in modules:
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
    return problems
