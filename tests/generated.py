"""Importing a generated Python stub file the way a user's program would."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path


def import_file(path: Path) -> types.ModuleType:
    """Import a generated .py file as a module (not registered in sys.modules)."""
    spec = importlib.util.spec_from_file_location(f"gen_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
