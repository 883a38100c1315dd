"""Every public function, class, method and property of multihop.ges is documented and annotated;
the generated stubs of flounder-idl/ges_broker.if and ges_client.if, and their typed stubs, are current;
docs/ges.md's shell blocks (the quick start) run as written."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import multihop.ges

ROOT = Path(__file__).resolve().parents[2]


def _modules() -> list[Any]:
    out = []
    for pkg in (multihop.ges, importlib.import_module("multihop.ges.live")):
        out.append(pkg)
        for m in pkgutil.iter_modules(pkg.__path__):
            if m.name.endswith("_if") or m.name == "live":
                continue  # generated stubs (checked below) / the subpackage (walked itself)
            out.append(importlib.import_module(f"{pkg.__name__}.{m.name}"))
    return out


def _undocumented(qual: str, fn: Any) -> list[str]:
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


def test_every_public_ges_name_is_documented_and_annotated() -> None:
    problems: list[str] = []
    for mod in _modules():
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


_SH = re.compile(r"^```sh[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_TEXT = re.compile(r"^[ \t]*```text[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)


def test_the_shell_blocks_of_docs_ges_md_run_as_written(tmp_path: Path) -> None:
    """docs/ges.md's ```sh blocks (the quick start) run in order, as one session of a reader's shell: bash, an
    empty directory, ``multihop`` on PATH (the activated virtualenv), a private runtime root. Every command
    succeeds, each ```text block (an output the page shows) is in what they printed, and nothing is left running.
    (Its ```python blocks run alone in tests/docs/test_readme.py.)"""
    page = (ROOT / "docs" / "ges.md").read_text()
    scripts = _SH.findall(page)
    assert scripts, "docs/ges.md has no shell block"
    root, cwd = tmp_path / "root", tmp_path / "cwd"
    root.mkdir()
    cwd.mkdir()
    env = {**os.environ, "MULTIHOP_RUNTIME_ROOT": str(root), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = "set -euo pipefail\n" + "\n".join(scripts)
    try:
        r = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    finally:
        for name in os.listdir(root):  # a failed run may leave its system: stop it (bounded by the commands' own timeouts)
            subprocess.run([sys.executable, "-m", "multihop.cli", "ges", "down", name], env=env, capture_output=True, timeout=120)
            subprocess.run([sys.executable, "-m", "multihop.cli", "down", name], env=env, capture_output=True, timeout=120)
    assert r.returncode == 0, f"docs/ges.md's shell blocks failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    at = 0
    for expected in _TEXT.findall(page):
        text = "\n".join(line.strip() for line in expected.strip().splitlines())
        found = r.stdout.find(text, at)
        assert found >= 0, f"docs/ges.md shows\n{text}\nbut the commands printed\n{r.stdout}"
        at = found + len(text)
    assert not os.listdir(root), f"the quick start left runtimes behind: {os.listdir(root)}"
