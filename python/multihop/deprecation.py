"""Old names kept for one release: the ``DeprecationWarning`` they give, and aliases of moved modules.

Renamed in 0.2 (issue 25, the layout of ``docs/architecture.md``); every old name keeps working,
with a ``DeprecationWarning``, until the release after:

========================================================  =====================================================
old                                                       new
========================================================  =====================================================
``multihop.idl.binding`` / ``.server`` / ``.wire`` /       ``multihop.flounder.binding`` / ``.server`` / ``.wire``
``.connect``                                              / ``.connect`` (the run-time support of generated code)
``multihop.dispatch`` and every ``multihop.dispatch.X``   ``multihop.news`` and ``multihop.news.X``
``multihop dispatch ...`` (the command)                    ``multihop news ...``
``Runtime.group(name, ...)``                               ``multihop.groups.group(rt, name, ...)``
========================================================  =====================================================
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

__all__ = ["alias_package", "moved", "warn_deprecated"]


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
    """Imports ``OLD.X`` as the module ``NEW.X`` itself (one module object under two names)."""

    def __init__(self, old: str, new: str) -> None:
        self.old = old
        self.new = new

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.old + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        """The default module (a placeholder that :meth:`exec_module` replaces)."""
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        """Put the new module in the placeholder's place: the import then returns the new module itself."""
        new = self.new + module.__name__[len(self.old) :]
        moved(module.__name__, new)
        sys.modules[module.__name__] = importlib.import_module(new)


def alias_package(old: str, new: str) -> None:
    """Make every ``old.X`` import as ``new.X`` (the same module object), each with a ``DeprecationWarning``.

    Called by the ``__init__`` of package ``old``, which keeps only that call and its own re-exports.
    """
    if not any(isinstance(f, _AliasFinder) and f.old == old for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder(old, new))
