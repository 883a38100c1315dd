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
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import multihop as mh
from cdylib import ensure_cdylib
from session import unique_name

ROOT = Path(__file__).resolve().parents[2]
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


_PROG = r"""
#include <stdio.h>
#include "multihop.h"

int main(int argc, char **argv) {
    mh_dispatcher *d; mh_service *svc; mh_channel *ch, *peer;
    char buf[64]; size_t n;
    if (mh_attach(argv[1], 0, &d) != MH_OK || mh_export(d, "header-echo", &svc) != MH_OK
        || mh_bind(d, "header-echo", "ump", 5000, &ch) != MH_OK || mh_accept(svc, 5000, &peer) != MH_OK
        || mh_send(ch, "ping", 4, -1) != MH_OK || mh_recv(peer, buf, sizeof buf, &n, 5000) != MH_OK) {
        fprintf(stderr, "%s\n", mh_last_error());
        return 1;
    }
    printf("%.*s\n", (int)n, buf);
    mh_close(ch); mh_close(peer); mh_service_free(svc); mh_detach(d);
    return 0;
}
"""


def test_the_c_headers_build_lines_work(tmp_path: Path) -> None:
    """core-rs/include/multihop.h says how to build a C program: its cargo line is the one the C tests use, and
    its gcc line, run as written from the repository's root, links a program that talks over a live runtime."""
    header = (ROOT / "core-rs" / "include" / "multihop.h").read_text()
    comment = header[: header.index("*/")]
    lines = [ln.lstrip(" *").strip() for ln in comment.splitlines()]
    cargo = [ln for ln in lines if ln.startswith("cargo build")]
    gcc = [ln for ln in lines if ln.startswith("gcc ")]
    assert len(cargo) == 1 and len(gcc) == 1, f"the header's build lines: {cargo + gcc}"
    assert shlex.split(cargo[0]) == ["cargo", "build", "--release", "-p", "multihop-core", "--target-dir", "target/capi"]
    ensure_cdylib()  # what that cargo line builds (built once for every C test)
    prog = tmp_path / "prog.c"
    prog.write_text(_PROG)
    argv = [str(prog) if a == "prog.c" else a.replace("$PWD", str(ROOT)) for a in shlex.split(gcc[0])]
    built = subprocess.run([*argv, "-o", str(tmp_path / "prog")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, f"the header's gcc line failed:\n{gcc[0]}\n{built.stderr[-3000:]}"
    with mh.Runtime.start(name := unique_name("hdr"), cores=[0, 1]):
        r = subprocess.run([str(tmp_path / "prog"), name], capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert r.returncode == 0 and r.stdout == "ping\n", r.stderr


_BARE = re.compile(r"(?<![\w/.-])multihop (?:up|down|status|demo|bench|stubgen|analyze|news|dispatch|ges|groups)\b")


def test_the_readme_says_to_activate_the_venv_before_its_first_bare_multihop_command() -> None:
    """The README's first commands spell out ``.venv/bin/multihop``; later ones say ``multihop``: it must say,
    before the first of those, that activating the virtualenv puts ``multihop`` on PATH."""
    text = (ROOT / "README.md").read_text()
    first = _BARE.search(text)
    assert first is not None
    activate = text.find("source .venv/bin/activate")
    line = text.count("\n", 0, first.start()) + 1
    assert 0 <= activate < first.start(), f"README.md line {line} says {first.group(0)!r} before saying to `source .venv/bin/activate`"
