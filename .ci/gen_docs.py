"""Write the generated parts of the documentation, so they cannot drift from the code (issue 25 §5).

- ``docs/modules.md``, the module map: every Python module of ``python/multihop/`` (grouped by the import layers
  of ``pyproject.toml``'s import-linter contract) and every Rust module of the engine's crates
  (``core-rs/*/src/**.rs``, grouped by crate in the workspace's order), each with the first sentence of its
  documentation: the module docstring's, or the first ``//!`` paragraph's.
- ``benches/README.md``, the bench index: every benchmark of ``benches/`` (scripts, C programs, micro-benchmarks)
  and the Rust benches of the crates, each with the first sentence of its documentation, which says what it
  measures and against what.
- ``docs/cli.md``, the command list: every ``multihop`` subcommand with its ``--help`` line, read from
  ``multihop.cli.build_parser()``.

Each generated part sits between two markers of its page; the rest of the page is written by hand and left
alone. Run ``bash .ci/docs`` (which also renders the architecture picture) or ``.venv/bin/python
.ci/gen_docs.py``; ``--check`` writes nothing and fails naming every stale page. ``tests/docs/test_module_map.py``
runs the same check.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIX = "bash .ci/docs"  # the one command that rewrites every generated part (and renders the picture)


def _cell(text: str) -> str:
    """``text`` as a Markdown table cell: reST roles and double backquotes as Markdown code, ``|`` escaped."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    text = re.sub(r"``(.+?)``", r"`\1`", text)
    return text.replace("|", "\\|").strip()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\[*])")


def summary(lines: list[str]) -> str:
    """The first sentence of the first paragraph of ``lines`` (a docstring's or ``//!`` comment's lines), on one
    line: a doc's first physical line is often cut mid-sentence, its first sentence says what the module is."""
    para: list[str] = []
    for line in lines:
        if not line.strip():
            if para:
                break
            continue
        para.append(line.strip())
    text = " ".join(para)
    m = _SENTENCE_END.search(text)
    return text[: m.start()] if m else text


def python_doc_line(path: Path) -> str:
    """The first sentence of a Python file's module docstring ("" if it has none)."""
    doc = ast.get_docstring(ast.parse(path.read_text(), filename=str(path)), clean=True)
    return summary(doc.splitlines()) if doc else ""


def rust_doc_line(path: Path) -> str:
    """The first sentence of a Rust file's ``//!`` documentation ("" if it has none)."""
    lines = path.read_text().splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("//!")), None)
    if first is None:
        return ""
    doc = []
    for line in lines[first:]:
        if not line.startswith("//!"):
            break
        doc.append(line[3:])
    return _plain_rustdoc_links(summary(doc))


def _plain_rustdoc_links(text: str) -> str:
    """Rustdoc's intra-doc links (``[`X`](crate::path)``, ``[`X`]``) as plain code: their targets are Rust paths,
    not files, and would be broken links in a Markdown page."""
    text = re.sub(r"\[(`[^`\]]+`)\]\([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z0-9_]+)+\)", r"\1", text)
    return re.sub(r"\[(`[^`\]]+`)\](?!\()", r"\1", text)


def _module_name(pkg_root: Path, path: Path) -> str:
    parts = list(path.relative_to(pkg_root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_layers(root: Path) -> list[tuple[str, list[str]]]:
    """(label, top-level children of ``multihop``) per layer, top to bottom, from the import-linter contract."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c.get("type") == "layers" and c.get("containers") == ["multihop"]]
    out = []
    for layer in layers:
        names = [n.strip() for n in layer.replace(":", "|").split("|") if n.strip()]
        out.append((layer, names))
    return out


def python_section(root: Path) -> str:
    pkg = root / "python" / "multihop"
    modules = sorted(pkg.rglob("*.py"), key=lambda p: _module_name(pkg, p))
    layers = python_layers(root)
    by_layer: dict[int, list[Path]] = {k: [] for k in range(len(layers))}
    core = len(layers) - 1  # the package itself (multihop/__init__.py) belongs to the core
    for path in modules:
        name = _module_name(pkg, path)
        child = name.split(".")[1] if "." in name else None
        k = next((i for i, (_, names) in enumerate(layers) if child in names), core if child is None else None)
        if k is None:
            raise SystemExit(f"{path}: module {name} is in no layer of pyproject.toml's import-linter contract")
        by_layer[k].append(path)
    lines = ["## Python: `python/multihop/`, by layer (top to bottom)", ""]
    for k, (label, _) in enumerate(layers):
        lines += [f"### `{label}`", "", "| module | what it is |", "| --- | --- |"]
        for path in by_layer[k]:
            rel = path.relative_to(root).as_posix()
            lines.append(f"| [`{_module_name(pkg, path)}`](../{rel}) | {_cell(python_doc_line(path))} |")
        lines.append("")
    return "\n".join(lines)


def rust_crates(root: Path) -> list[tuple[str, Path]]:
    """(package name, crate directory) of every workspace member, in the workspace's order (bottom to top)."""
    members = tomllib.loads((root / "Cargo.toml").read_text())["workspace"]["members"]
    out = []
    for member in members:
        crate = root / member
        out.append((tomllib.loads((crate / "Cargo.toml").read_text())["package"]["name"], crate))
    return out


def rust_section(root: Path) -> str:
    lines = ["## Rust: the engine's crates (bottom to top)", ""]
    for name, crate in rust_crates(root):
        src = crate / "src"
        lines += [f"### `{name}` (`{crate.relative_to(root).as_posix()}`)", "", "| module | what it is |", "| --- | --- |"]
        for path in sorted(src.rglob("*.rs"), key=lambda p: p.relative_to(src).as_posix()):
            rel = path.relative_to(root).as_posix()
            lines.append(f"| [`{path.relative_to(src).as_posix()}`](../{rel}) | {_cell(rust_doc_line(path))} |")
        lines.append("")
    return "\n".join(lines)


def module_map(root: Path = ROOT) -> str:
    return python_section(root) + "\n" + rust_section(root)


def command_list() -> str:
    """Every ``multihop`` subcommand, nested ones included, with its ``--help`` line, as ``build_parser`` has them."""
    sys.path.insert(0, str(ROOT / "python"))
    from multihop.cli import build_parser

    rows = ["| command | what it does (its `--help` line) |", "| --- | --- |"]

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {c.dest: c.help or "" for c in action._choices_actions}
                for name, sub in action.choices.items():
                    rows.append(f"| `{' '.join([*path, name])}` | {_cell(' '.join(helps.get(name, '').split()))} |")
                    walk(sub, [*path, name])

    walk(build_parser(), ["multihop"])
    return "\n".join(rows) + "\n"


def _c_doc_line(path: Path) -> str:
    """The first sentence of a C file's leading ``/* ... */`` comment."""
    m = re.search(r"/\*(.*?)\*/", path.read_text(), re.S)
    return summary([line.strip().lstrip("*").strip() for line in m.group(1).splitlines()]) if m else ""


def bench_index(root: Path = ROOT) -> str:
    """Every benchmark with what it measures: benches/*.py and *.c, benches/micro/, the crates' ``benches/``."""
    rows = ["| bench | what it measures, and against what (the first sentence of its documentation) |", "| --- | --- |"]
    files = sorted((root / "benches").glob("*.py")) + sorted((root / "benches").glob("*.c"))
    files += sorted(p for p in (root / "benches" / "micro").glob("*.py") if p.name != "conftest.py")
    for path in files:
        doc = python_doc_line(path) if path.suffix == ".py" else _c_doc_line(path)
        rows.append(f"| [`{path.relative_to(root / 'benches').as_posix()}`]({path.relative_to(root / 'benches').as_posix()}) | {_cell(doc)} |")
    for path in sorted(root.glob("core-rs/**/benches/*.rs")):
        if "target" in path.parts:
            continue
        rel = path.relative_to(root).as_posix()
        rows.append(f"| [`{rel}`](../{rel}) (`cargo bench`) | {_cell(rust_doc_line(path))} |")
    return "\n".join(rows) + "\n"


#: page -> (marker name, what goes between its markers)
SECTIONS = {
    "docs/modules.md": ("module-map", module_map),
    "docs/cli.md": ("commands", command_list),
    "benches/README.md": ("bench-index", bench_index),
}


def begin(name: str) -> str:
    return f"<!-- {name}:begin (generated by .ci/gen_docs.py: run `{FIX}`; do not edit by hand) -->\n"


def end(name: str) -> str:
    return f"<!-- {name}:end -->\n"


def regenerate(page: str, text: str) -> str:
    """``text`` (the page as it is) with its generated part written anew."""
    name, make = SECTIONS[page]
    b, e = begin(name), end(name)
    i, j = text.find(b), text.find(e)
    if i < 0 or j < i:
        raise SystemExit(f"{page}: no markers {b.strip()!r} ... {e.strip()!r} around its generated part")
    body = make() if make is command_list else make(ROOT)
    return text[: i + len(b)] + "\n" + body + "\n" + text[j:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="write nothing; fail naming every page whose generated part is stale")
    a = p.parse_args(argv)
    stale = []
    for page in SECTIONS:
        path = ROOT / page
        old = path.read_text()
        new = regenerate(page, old)
        if new != old:
            stale.append(page)
            if not a.check:
                path.write_text(new)
    if a.check and stale:
        print(f"stale generated docs: {', '.join(stale)}; run `{FIX}`", file=sys.stderr)
        return 1
    for page in stale:
        print(f"wrote {page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
