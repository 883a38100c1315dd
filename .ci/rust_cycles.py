#!/usr/bin/env python3
"""Fail on an import circle between the Rust modules of any crate under core-rs/ (issue 25).

Between crates the compiler already refuses a circle (a crate depends only on crates below it); within a
crate it does not, so this reads every crate's src/ and follows each path a module names: `crate::a::b`
(also inside `use crate::{a, b::{c, d}}` groups) and `super::x`, resolved to the file of the longest module
prefix that exists. A module and the files of its own mod tree (`a` and `a/b.rs`) are one room: a child may
use its parent's items and the parent declares its children. A circle is a strongly connected component of
two or more rooms. Prints each circle and exits 1 if there is one; prints the module count and exits 0 if not.

Usage: python3 .ci/rust_cycles.py [REPO]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import sccs  # .ci/sccs.py, beside this script (its directory is on sys.path when it runs)

COMMENT = re.compile(r"//[^\n]*")
USE_CRATE = re.compile(r"\buse\s+crate::([^;]*);", re.S)
CRATE_PATH = re.compile(r"\bcrate((?:::\w+)+)")
SUPER_PATH = re.compile(r"\b((?:super::)+)((?:\w+::)*\w+)")


def modules(src: Path) -> dict[tuple[str, ...], Path]:
    """Module path -> file, for every .rs file under a crate's src/ (mod.rs and lib.rs name their folder)."""
    out: dict[tuple[str, ...], Path] = {}
    for f in sorted(src.rglob("*.rs")):
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        out[tuple(parts)] = f
    return out


def use_tree(text: str) -> list[list[str]]:
    """The paths of one use tree: `a::{b, c::{d, e}}` -> [a, b], [a, c, d], [a, c, e]."""
    out: list[list[str]] = []

    def walk(prefix: list[str], s: str) -> None:
        depth, parts, cur = 0, [], ""
        for ch in s:
            depth += ch == "{"
            depth -= ch == "}"
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        for part in (p.strip() for p in parts):
            if not part:
                continue
            if "{" in part:
                head, inner = part.split("{", 1)
                walk(prefix + [x for x in head.split("::") if x.strip()], inner[: inner.rfind("}")])
            else:
                out.append(prefix + [x.strip() for x in part.split(" as ")[0].split("::") if x.strip()])

    walk([], text)
    return out


def graph(src: Path) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    mods = modules(src)
    g: dict[tuple[str, ...], set[tuple[str, ...]]] = {m: set() for m in mods}
    for key, f in mods.items():
        text = COMMENT.sub("", f.read_text(encoding="utf-8"))
        paths = [p for m in USE_CRATE.finditer(text) for p in use_tree(m.group(1))]
        paths += [m.group(1).strip(":").split("::") for m in CRATE_PATH.finditer(text)]
        for m in SUPER_PATH.finditer(text):
            up = m.group(1).count("super::")
            paths.append(list(key[: max(0, len(key) - up)]) + m.group(2).split("::"))
        for path in paths:
            t = tuple(path)
            while t and t not in mods:
                t = t[:-1]
            if not t or t[: len(key)] == key or key[: len(t)] == t:
                continue  # the crate root, or this module's own mod tree
            g[key].add(t)
    return g


def circles(g: dict[tuple[str, ...], set[tuple[str, ...]]]) -> list[list[tuple[str, ...]]]:
    """Strongly connected components of two or more nodes (.ci/sccs.py)."""
    return sccs.circles(g)


def main() -> int:
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    found, total = 0, 0
    for manifest in sorted((repo / "core-rs").rglob("Cargo.toml")):
        src = manifest.parent / "src"
        if "target" in manifest.parts or not src.is_dir():
            continue
        g = graph(src)
        total += len(g)
        for c in circles(g):
            found += 1
            print(f"rust module circle in {manifest.parent.relative_to(repo)}: " + " -> ".join("::".join(m) for m in c))
    if found:
        print(f"{found} circle(s): a module imports (through the others) a module that imports it; move the shared part below both")
        return 1
    print(f"rust modules: {total}, no circle between them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
