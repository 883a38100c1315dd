"""The generated parts of the docs are what the code says today (issue 25 §5), so they cannot drift.

- ``docs/modules.md``'s module map (every Python module and every Rust module with its first sentence of
  documentation) and ``docs/cli.md``'s command list (every ``multihop`` subcommand with its ``--help`` line) are
  regenerated in memory by ``.ci/gen_docs.py`` and compared with the committed pages.
- ``docs/architecture.svg`` carries the sha256 of the ``docs/architecture.dot`` it was drawn from, and that source
  still renders with Graphviz's ``dot`` (installed by ``.ci/setup`` through ``.ci/ensure-graphviz``).

Each failure names the command that fixes it: ``bash .ci/docs``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = "bash .ci/docs"


def _gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / ".ci" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_docs", mod)
    spec.loader.exec_module(mod)
    return mod


GEN = _gen_docs()


@pytest.mark.parametrize("page", sorted(GEN.SECTIONS))
def test_the_generated_part_of_the_page_is_current(page: str) -> None:
    committed = (ROOT / page).read_text()
    fresh = GEN.regenerate(page, committed)
    if fresh != committed:
        old, new = committed.splitlines(), fresh.splitlines()
        diff = [f"- {ln}" for ln in old if ln not in new][:10] + [f"+ {ln}" for ln in new if ln not in old][:10]
        pytest.fail(f"{page} is stale (its generated part differs from what the code says): run `{FIX}` and commit it\n" + "\n".join(diff))


def test_the_module_map_names_every_module_with_its_doc() -> None:
    text = (ROOT / "docs" / "modules.md").read_text()
    python = sorted((ROOT / "python" / "multihop").rglob("*.py"))
    rust = sorted(ROOT.glob("core-rs/**/src/**/*.rs"))
    assert python and rust
    for path in python + rust:
        assert f"](../{path.relative_to(ROOT).as_posix()})" in text, f"docs/modules.md does not list {path.relative_to(ROOT)}: run `{FIX}`"
    undocumented = [str(p.relative_to(ROOT)) for p in python if not GEN.python_doc_line(p)]
    undocumented += [str(p.relative_to(ROOT)) for p in rust if not GEN.rust_doc_line(p)]
    assert not undocumented, f"modules with no documentation to list (give each a docstring or a //! line): {undocumented}"


def test_the_summary_is_the_first_sentence_of_the_first_paragraph() -> None:
    assert GEN.summary(["", "A ring pair: two rings", "in one segment. The rest.", "", "More."]) == "A ring pair: two rings in one segment."
    assert GEN.summary(["No full stop at all"]) == "No full stop at all"
    assert GEN.summary(["Binds (TN-006 2.5), e.g. a bind.", "Next"]) == "Binds (TN-006 2.5), e.g. a bind."


def test_the_command_list_has_every_subcommand_of_multihop_help() -> None:
    """Every name ``multihop --help`` lists (and each group's subcommands) has a row in docs/cli.md."""
    from multihop.cli import build_parser

    text = (ROOT / "docs" / "cli.md").read_text()
    help_text = build_parser().format_help()
    top = help_text[help_text.index("{") + 1 : help_text.index("}")].split(",")
    assert "up" in top and "ges" in top
    for name in top:
        assert f"| `multihop {name}` |" in text, f"docs/cli.md has no row for `multihop {name}`: run `{FIX}`"


def test_the_architecture_picture_is_drawn_from_the_committed_source() -> None:
    dot_src = ROOT / "docs" / "architecture.dot"
    svg = (ROOT / "docs" / "architecture.svg").read_text()
    digest = hashlib.sha256(dot_src.read_bytes()).hexdigest()
    assert f"<!-- source: docs/architecture.dot sha256 {digest} " in svg, (
        f"docs/architecture.svg was not drawn from the current docs/architecture.dot: run `{FIX}` and commit both"
    )
    assert "<svg" in svg and "</svg>" in svg


def test_the_architecture_source_renders_with_dot() -> None:
    dot = shutil.which("dot")
    if dot is None:
        pytest.fail("Graphviz's dot is required to check docs/architecture.dot: bash .ci/setup installs it (bash .ci/ensure-graphviz)")
    r = subprocess.run([dot, "-Tsvg", str(ROOT / "docs" / "architecture.dot")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "<svg" in r.stdout, f"dot cannot render docs/architecture.dot:\n{r.stderr[-3000:]}"
    assert not r.stderr.strip(), f"dot warns about docs/architecture.dot:\n{r.stderr[-3000:]}"


def test_readme_shows_the_picture_and_architecture_md_names_the_command() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "](docs/architecture.svg)" in readme
    arch = (ROOT / "docs" / "architecture.md").read_text()
    assert "](architecture.svg)" in arch and FIX in arch
    assert "bash .ci/ensure-graphviz" in (ROOT / ".ci" / "setup").read_text()


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    """Every link of README.md and docs/*.md to a file of the repository names one that exists (and, for a
    Markdown page with ``#anchor``, one of its headings): pages moved to docs/ must not leave links behind."""
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in _LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md":
                headings = {_anchor(h) for h in re.findall(r"^#+ (.*)$", dest.read_text(), re.M)}
                if anchor not in headings:
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_bench_index_lists_every_bench_with_what_it_measures() -> None:
    text = (ROOT / "benches" / "README.md").read_text()
    benches = sorted((ROOT / "benches").glob("*.py")) + sorted((ROOT / "benches").glob("*.c"))
    for path in benches:
        assert f"[`{path.name}`]({path.name})" in text, f"benches/README.md does not list {path.name}: run `{FIX}`"
    empty = [line for line in text.splitlines() if line.startswith("| [`") and line.rstrip().endswith("|  |")]
    assert not empty, f"benches without a first doc sentence: {empty}"
