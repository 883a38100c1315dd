"""Every ```python block of README.md and docs/*.md runs alone, as written (issue 17 §7, issue 26 §5).

A reader copies one block into a file and runs it: so each block runs by itself, exactly as the page has
it (nothing of the blocks before it is added: no imports, no names), in a fresh ``python -c`` in an empty
directory of its own (a new user's script does not run from this repository's root, so a block may not lean
on relative paths into it), against a private ``MULTIHOP_RUNTIME_ROOT``. A block that fails names itself:
its page, its number, its line, its first line, and what it printed. Blocks that are not meant to run are
fenced as something other than ``python`` (``text``, ``pycon``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks(text: str) -> list[tuple[int, str]]:
    """(line number of its first line of code, code) of every ```python block of a page, in order."""
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _FENCE.finditer(text)]


def every_block() -> list[tuple[str, int, int, str]]:
    """(page, block number from 1, line, code) of every ```python block of the pages."""
    out = []
    for page in PAGES:
        for k, (line, code) in enumerate(blocks(page.read_text()), 1):
            out.append((str(page.relative_to(ROOT)), k, line, code))
    return out


def test_the_extraction_finds_every_block_and_adds_nothing() -> None:
    sample = "x\n```python\nimport a\nprint(1)\n```\n\n```sh\nls\n```\n```python\nfrom b import c\nc()\n```\n"
    got = blocks(sample)
    assert [line for line, _ in got] == [3, 11]  # the first line of each block's code
    assert [code for _, code in got] == ["import a\nprint(1)\n", "from b import c\nc()\n"]  # as written, alone
    assert len(blocks((ROOT / "README.md").read_text())) >= 2


def test_a_block_that_leans_on_an_earlier_one_fails_here() -> None:
    """The README's second block once used ``mh`` imported by the first only: run alone, it must fail."""
    r = run_block("ch = mh.Runtime\n")
    assert r.returncode != 0 and "NameError: name 'mh' is not defined" in r.stderr


def run_block(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` alone as a reader would: a fresh interpreter, an empty directory, a private runtime root;
    checks that it leaves no runtime behind."""
    with tempfile.TemporaryDirectory(prefix="mh-readme-") as root, tempfile.TemporaryDirectory(prefix="mh-readme-cwd-") as cwd:
        env = {**os.environ, "MULTIHOP_RUNTIME_ROOT": root}
        r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        left = os.listdir(root)
    assert not left or r.returncode != 0, f"the block left runtimes behind: {left}"
    return r


@pytest.mark.parametrize(("page", "k", "line", "code"), every_block(), ids=[f"{p}#{k}" for p, k, _, _ in every_block()])
def test_block_runs_alone(page: str, k: int, line: int, code: str) -> None:
    first = next((ln for ln in code.splitlines() if ln.strip()), "")
    try:
        r = run_block(code)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{page} block {k} (line {line}, {first!r}) did not finish in 120 s:\n{e.stderr or ''}")
    assert r.returncode == 0, f"{page} block {k} (line {line}, {first!r}) failed run alone:\n{r.stderr[-4000:]}"
