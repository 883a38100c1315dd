"""Every ```python block of README.md runs as a new user would run it (issue 17 §7).

Each block runs in a fresh ``python -c`` in an empty directory of its own (a new user's script does not run
from this repository's root, so a block may not lean on relative paths into it), with the import lines of
the blocks before it put first (a reader who copies a later block has made those imports), and
against a private ``MULTIHOP_RUNTIME_ROOT``. A block that fails names itself: its number, its
line in README.md, its first line, and what it printed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_IMPORT = re.compile(r"^(import \S.*|from \S+ import .*)$")


def blocks(text: str) -> list[tuple[int, str]]:
    """(line number in README.md, code) of every ```python block, in order."""
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _FENCE.finditer(text)]


def imports(code: str) -> list[str]:
    """The top-level import lines of a block."""
    return [ln for ln in code.splitlines() if _IMPORT.match(ln)]


def script(all_blocks: list[tuple[int, str]], k: int) -> str:
    """Block `k` as a reader runs it: the imports of the blocks before it, then the block."""
    before = [ln for _, code in all_blocks[:k] for ln in imports(code)]
    return "\n".join(dict.fromkeys(before)) + "\n" + all_blocks[k][1]


def test_the_readme_has_python_blocks_and_the_extraction_finds_them() -> None:
    sample = "x\n```python\nimport a\nprint(1)\n```\n\n```sh\nls\n```\n```python\nfrom b import c\nc()\n```\n"
    got = blocks(sample)
    assert [line for line, _ in got] == [3, 11]  # the first line of each block's code
    assert script(got, 1) == "import a\nfrom b import c\nc()\n"
    assert len(blocks(README.read_text())) >= 2


@pytest.mark.parametrize("k", range(len(blocks(README.read_text()))))
def test_readme_block_runs(k: int) -> None:
    all_blocks = blocks(README.read_text())
    line, code = all_blocks[k]
    first = next((ln for ln in code.splitlines() if ln.strip()), "")
    with tempfile.TemporaryDirectory(prefix="mh-readme-") as root, tempfile.TemporaryDirectory(prefix="mh-readme-cwd-") as cwd:
        env = {**os.environ, "MULTIHOP_RUNTIME_ROOT": root}
        try:
            r = subprocess.run([sys.executable, "-c", script(all_blocks, k)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"README.md block {k + 1} (line {line}, {first!r}) did not finish in 120 s:\n{e.stderr or ''}")
        left = os.listdir(root)
    assert r.returncode == 0, f"README.md block {k + 1} (line {line}, {first!r}) failed:\n{r.stderr[-4000:]}"
    assert not left, f"README.md block {k + 1} (line {line}) left runtimes behind: {left}"
