"""The import gates of .ci/test: .ci/py_imports.py finds circles (hidden ones too) and applications reaching into
the core's private parts, and the repository passes them and its import-linter contracts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / ".ci" / "py_imports.py"


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECKER), str(root), "multihop"], capture_output=True, text=True, timeout=120)


def package(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package ``multihop`` under ``tmp_path/python`` made of ``files`` (path -> text)."""
    root = tmp_path / "python"
    for rel, text in {"multihop/__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_repository_has_no_circle_and_no_private_import() -> None:
    r = check(ROOT / "python")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 import circle(s), 0 import(s) of the core's private parts" in r.stderr


@pytest.mark.parametrize(
    "b_text",
    [
        "import multihop.a\n",
        "def f():\n    from multihop import a\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from multihop.a import X\n",
        "import importlib\n\ndef f():\n    return importlib.import_module('multihop.a')\n",
        "from . import a\n",
    ],
    ids=["module-level", "inside-a-function", "type-checking", "import_module", "relative"],
)
def test_a_circle_is_found_however_its_import_is_written(tmp_path: Path, b_text: str) -> None:
    root = package(tmp_path, {"multihop/a.py": "from multihop import b\nX = 1\n", "multihop/b.py": b_text})
    r = check(root)
    assert r.returncode == 1
    assert "import circle of 2 files: multihop.a multihop.b" in r.stdout
    assert "multihop/a.py:1 imports multihop.b" in r.stdout


def test_a_package_importing_its_own_submodules_is_no_circle(tmp_path: Path) -> None:
    root = package(tmp_path, {"multihop/p/__init__.py": "from multihop.p.x import X\n", "multihop/p/x.py": "import multihop.p\nX = 1\n"})
    assert check(root).returncode == 0


def test_an_application_may_not_import_the_extension_a_private_name_or_another_applications_native_module(tmp_path: Path) -> None:
    root = package(
        tmp_path,
        {
            "multihop/runtime.py": "def _hidden():\n    pass\n\ndef shown():\n    pass\n",
            "multihop/ges/__init__.py": "",
            "multihop/ges/a.py": "from multihop import _core\nfrom multihop.runtime import _hidden, shown\n",
            "multihop/groups/__init__.py": "import multihop._core\nfrom multihop import _ges\n",
            "multihop/ges/native.py": "from multihop import _ges\nfrom multihop._ges import Engine\n",  # GES's own native module
            "multihop/news/__init__.py": "from multihop._ges import Engine\n",
            "multihop/bench/__init__.py": "from multihop import _core\nfrom multihop.runtime import _hidden\n",  # not an application
        },
    )
    r = check(root)
    assert r.returncode == 1
    assert r.stdout.splitlines() == [
        "multihop/ges/a.py:1: application module multihop.ges.a imports multihop._core, not the core's public API",
        "multihop/ges/a.py:2: application module multihop.ges.a imports multihop.runtime._hidden, not the core's public API",
        "multihop/groups/__init__.py:1: application module multihop.groups imports multihop._core, not the core's public API",
        "multihop/groups/__init__.py:2: application module multihop.groups imports multihop._ges, the native module of multihop.ges, not its own",
        "multihop/news/__init__.py:1: application module multihop.news imports multihop._ges, the native module of multihop.ges, not its own",
    ]


@pytest.mark.skipif(shutil.which("lint-imports", path=str(Path(sys.executable).parent)) is None, reason="import-linter not installed")
def test_the_import_linter_contracts_are_kept() -> None:
    r = subprocess.run([str(Path(sys.executable).parent / "lint-imports")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Contracts: 3 kept, 0 broken." in r.stdout
