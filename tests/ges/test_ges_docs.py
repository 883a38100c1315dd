"""docs/ges.md's shell blocks (the quick start) run as written.

(The public API of multihop.ges is documented and annotated: tests/docs/test_api_docs.py; the generated stubs
are current: `multihop stubgen --check` in .ci/test.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
