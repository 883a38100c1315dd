#!/usr/bin/env python3
"""Import rules import-linter cannot check (run by .ci/test next to ``lint-imports``): no circles, and the
applications use the core's public API.

**Circles.** Every import counts, wherever it is written: at module level, inside a function or method, under
``if TYPE_CHECKING:``, and ``importlib.import_module("literal")`` / ``__import__("literal")`` calls. An import
is an edge from the importing file to the file it loads: ``from a.b import c`` goes to ``a/b/c.py`` when ``c`` is a
module, else to ``a/b/__init__.py``. A module's import of one of its own enclosing packages is no edge (the
package's ``__init__`` has run before the module anyway). A circle is a strongly connected set of two or more
files; each is printed with the import lines that close it.

**The core's public API.** An application (:data:`APPLICATIONS`) imports neither the extension module
``multihop._core`` (import-linter sees only ``.py`` files, so a forbidden contract cannot name it) nor a
private name (``_x``) of a core module. An application's own native module (issue 25: GES's codec goes "into a
clearly separate native module of its own"; :data:`APP_EXTENSIONS`) may be imported by that application and by no
other. :data:`EXEMPT` lists the imports allowed for now, each with why.

Usage: py_imports.py [ROOT] [PACKAGE]    (defaults: the repository's python/ and multihop)
Exit 0 when every rule holds, 1 otherwise (each breach printed).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import sccs  # .ci/sccs.py, beside this script (its directory is on sys.path when it runs)

APPLICATIONS = ("multihop.ges", "multihop.groups", "multihop.news")
"""The applications: they use only the core's public API."""

CORE_EXTENSION = "multihop._core"

APP_EXTENSIONS = {
    # GES's native event engine: codec, profile graphs, event routing (crate core-rs/ges, issue 28); the core
    # extension registers it, nothing of it is the core's
    "multihop._ges": "multihop.ges",
}
"""An application's own native module -> the one application that may import it. Any other ``multihop._x`` that
is no ``.py`` file of the package is an extension module too: no application imports one that is not its own."""

EXEMPT: set[tuple[str, str]] = set()
"""(importing module, imported name) pairs the public-API rule lets through."""

CORE_PACKAGES = ("multihop.flounder",)
"""Packages of the core (besides the top-level modules of ``multihop``)."""


def modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file, for every .py file of ``package`` under ``root``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest prefix of dotted ``name`` that is a known module."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _literal_import(node: ast.Call) -> str | None:
    """The module a call ``importlib.import_module("x")`` / ``import_module("x")`` / ``__import__("x")`` names."""
    f = node.func
    called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if called in ("import_module", "__import__") and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def imports(name: str, path: Path, known: dict[str, Path]) -> dict[str, list[int]]:
    """The modules of ``known`` that module ``name`` (file ``path``) imports, each with the lines that do."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, list[int]] = defaultdict(list)
    for node in ast.walk(tree):
        targets: list[str] = []
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif isinstance(node, ast.Call):
            literal = _literal_import(node)
            targets = [literal] if literal is not None else []
        for target in targets:
            hit = _resolve(target, known)
            if hit is None or hit == name or name.startswith(hit + "."):
                continue  # outside the package, itself, or one of its own enclosing packages
            found[hit].append(line)
    return found


def _is_core(module: str) -> bool:
    """Whether ``module`` is a module of the core: a top-level module of multihop, or in a core package."""
    return module.count(".") == 1 or any(module == p or module.startswith(p + ".") for p in CORE_PACKAGES)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _extension(dotted: str, known: dict[str, Path]) -> str | None:
    """The extension module (``multihop._x``, no ``.py`` file of the package) ``dotted`` is or lies in."""
    parts = dotted.split(".")
    if len(parts) < 2 or not parts[1].startswith("_"):
        return None
    top = ".".join(parts[:2])
    return None if top in known else top


def private_uses(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """What application module ``name`` imports that is not the core's public API: ``multihop._core``, an
    extension module that is not the application's own (:data:`APP_EXTENSIONS`), or a private name of a core
    module; as (what, line)."""
    app = next((a for a in APPLICATIONS if _within(name, a)), None)
    if app is None:
        return []
    root = APPLICATIONS[0].partition(".")[0]
    named: list[tuple[str, int]] = []  # (dotted name imported, line)
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            named += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                named.append((full if node.module == root else node.module, node.lineno))
                if a.name.startswith("_") and full not in known and _is_core(node.module) and node.module in known:
                    out.append((full, node.lineno))
    for dotted, line in named:
        ext = _extension(dotted, known) if _within(dotted, root) else None
        if ext is not None and APP_EXTENSIONS.get(ext) != app:
            out.append((ext, line))
    return sorted(((what, line) for what, line in out if (name, what) not in EXEMPT), key=lambda use: use[1])


def circles(graph: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """The strongly connected sets of two or more modules (.ci/sccs.py), modules taken in sorted order."""
    return sccs.circles({name: graph[name] for name in sorted(graph)})


def main(argv: list[str]) -> int:
    """Print every circle of the package's import graph; 1 if there is one."""
    repo = Path(__file__).resolve().parent.parent
    root = Path(argv[1]) if len(argv) > 1 else repo / "python"
    package = argv[2] if len(argv) > 2 else "multihop"
    known = modules(root, package)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    found = circles(graph)
    for comp in found:
        members = set(comp)
        print(f"import circle of {len(comp)} files: {' '.join(comp)}")
        for a in comp:
            for b, lines in sorted(graph[a].items()):
                if b in members:
                    where = ", ".join(str(n) for n in sorted(set(lines)))
                    print(f"  {known[a].relative_to(root)}:{where} imports {b}")
    private = {name: private_uses(name, path, known) for name, path in known.items()}
    for name, uses in sorted(private.items()):
        for what, line in uses:
            owner = APP_EXTENSIONS.get(what)
            why = f"the native module of {owner}, not its own" if owner else "not the core's public API"
            print(f"{known[name].relative_to(root)}:{line}: application module {name} imports {what}, {why}")
    breaches = sum(len(v) for v in private.values())
    edges = sum(len(v) for v in graph.values())
    print(
        f"{len(known)} modules, {edges} imports between them, {len(found)} import circle(s), "
        f"{breaches} import(s) of the core's private parts by an application",
        file=sys.stderr,
    )
    return 1 if found or breaches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
