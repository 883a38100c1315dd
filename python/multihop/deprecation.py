"""Old names kept for one release: the ``DeprecationWarning`` they give, and aliases of moved modules.

Renamed in 0.2 (issue 25, the layout of ``docs/architecture.md``); every old name keeps working,
with a ``DeprecationWarning``, until the release after:

* ``multihop.idl.binding``, ``.server``, ``.wire``, ``.connect`` -> ``multihop.flounder.*`` (the run-time
  support of generated code);
* ``multihop.dispatch`` and every ``multihop.dispatch.X`` -> ``multihop.news`` and ``multihop.news.X``;
  the command ``multihop dispatch ...`` -> ``multihop news ...``;
* ``Runtime.group(name, ...)`` -> ``multihop.groups.group(rt, name, ...)`` (the core imports no application);
* ``multihop.groups.calibrate``, ``.calibrate_group``, ``.agent``, ``.probe``, ``.live``, ``.shootdown`` ->
  ``multihop.bench.groups.*`` (measurement runs are the benchmarks'; where the models are kept:
  ``multihop.groups.stored``);
* ``multihop.ges.testbed``, ``.floor``, ``.nats_peer`` -> ``multihop.bench.ges.*``;
* ``multihop.news.measure``, ``.workload`` -> ``multihop.bench.news.*``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

__all__ = ["alias_modules", "alias_package", "moved", "warn_deprecated"]


#: ``warnings.warn``'s ``stacklevel`` from a function here: 1 is that function, 2 the deprecated function or
#: module (or the alias loader), 3 the code that used the old name (``warnings`` skips the import machinery's
#: frames itself, so an import counts as one frame).
_USER = 3


def warn_deprecated(text: str) -> None:
    """Give a ``DeprecationWarning`` saying ``text``, pointed at the code that used the old name."""
    warnings.warn(text, DeprecationWarning, stacklevel=_USER)


def moved(old: str, new: str) -> None:
    """Say (``DeprecationWarning``) that module ``old`` moved to ``new`` and that ``old`` goes in the next release."""
    warnings.warn(
        f"{old} moved to {new}: import {new} instead ({old} is an alias that goes in the next release)",
        DeprecationWarning,
        stacklevel=_USER,
    )


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as the new module itself (one module object under two names)."""

    def __init__(self) -> None:
        self.packages: dict[str, str] = {}  # old package -> new package: every old.X is new.X
        self.modules: dict[str, str] = {}  # old module -> new module

    def new_name(self, old: str) -> str | None:
        """The module ``old`` stands for, or None if it is no alias."""
        if old in self.modules:
            return self.modules[old]
        for pkg, new in self.packages.items():
            if old.startswith(pkg + "."):
                return new + old[len(pkg) :]
        return None

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        """A spec for an alias (its loader is this finder), None for any other name."""
        return importlib.machinery.ModuleSpec(fullname, self) if self.new_name(fullname) is not None else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        """The default module (a placeholder that :meth:`exec_module` replaces)."""
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        """Put the new module in the placeholder's place: the import then returns the new module itself."""
        new = self.new_name(module.__name__)
        assert new is not None  # find_spec gave this module a spec
        moved(module.__name__, new)
        sys.modules[module.__name__] = importlib.import_module(new)


_ALIASES = _AliasFinder()


def _install() -> None:
    if _ALIASES not in sys.meta_path:
        sys.meta_path.append(_ALIASES)  # last: a module that exists under the old name is found first


def alias_package(old: str, new: str) -> None:
    """Make every ``old.X`` import as ``new.X`` (the same module object), each with a ``DeprecationWarning``.

    Called by the ``__init__`` of package ``old``, which keeps only that call and its own re-exports.
    """
    _ALIASES.packages[old] = new
    _install()


def alias_modules(moves: dict[str, str]) -> None:
    """Make each old module name of ``moves`` import as its new module (the same object), with a
    ``DeprecationWarning``: for modules that moved out of a package that stays (its ``__init__`` calls this).

    The new modules are named, not imported, so a package may name modules of a layer above it here; the
    aliases go in the next release.
    """
    _ALIASES.modules.update(moves)
    _install()
