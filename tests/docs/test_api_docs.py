"""Every public function, class, method and property of each part of multihop is documented and annotated.

One check (tests/api_docs.py), run on each part's modules: the core (and the command line), the IDL compiler
with the run-time support of generated code (multihop.flounder), and the applications GES, groups and news.
Generated stubs (*_if modules) and the deprecated aliases are left out; the stubs are checked by the
generated-files gate, the aliases by tests/package/test_renames.py.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Callable

import pytest

from api_docs import doc_problems, package_modules


def _core() -> list[ModuleType]:
    """multihop itself and every module of the core (pyproject.toml's lowest layer), and the command line."""
    names = ["runtime", "rts", "topology", "errors", "aio", "paths", "extras", "monitor", "defaults", "deprecation", "cli"]
    return [importlib.import_module("multihop")] + [importlib.import_module(f"multihop.{n}") for n in names]


#: multihop.idl's deprecated aliases of the modules that moved to multihop.flounder (checked there).
_MOVED = {"binding", "server", "wire", "connect"}


def _idl() -> list[ModuleType]:
    """multihop.idl (the compiler) and multihop.flounder (the run-time support), and every module in them."""
    import multihop.flounder
    import multihop.idl

    mods = package_modules([multihop.idl, multihop.flounder], skip=lambda pkg, name: pkg is multihop.idl and name in _MOVED)
    assert {m.__name__.rsplit(".", 1)[-1] for m in mods} >= {"parser", "checker", "pygen", "cgen", "command", "binding", "server", "wire"}
    return mods


def _ges() -> list[ModuleType]:
    """multihop.ges and multihop.ges.live, every module of them but the generated stubs."""
    import multihop.ges
    import multihop.ges.live

    # generated stubs (checked by the generated-files gate) / the subpackage (walked itself)
    return package_modules([multihop.ges, multihop.ges.live], skip=lambda pkg, name: name.endswith("_if") or name == "live")


def _groups() -> list[ModuleType]:
    """multihop.groups and its measurements (multihop.bench.groups), every module of them."""
    import multihop.bench.groups
    import multihop.groups
    import multihop.groups.ordering

    mods = package_modules([multihop.groups, multihop.groups.ordering, multihop.bench.groups])
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
    return mods


def _news() -> list[ModuleType]:
    """Every module of multihop.news (the QoS dispatching application) but the generated stubs."""
    import multihop.news

    mods = package_modules([multihop.news], skip=lambda pkg, name: name == "dispatch_if")
    assert len(mods) > 25
    return mods


@pytest.mark.parametrize("modules", [_core, _idl, _ges, _groups, _news], ids=["core", "idl", "ges", "groups", "news"])
def test_every_public_name_is_documented_and_annotated(modules: Callable[[], list[ModuleType]]) -> None:
    problems = doc_problems(modules())
    assert not problems, "\n".join(problems)
