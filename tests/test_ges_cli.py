"""``multihop ges up|status|graph|down`` from the shell, and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import multihop as mh
from conftest import unique_name

SMALL = """levels = 3
[[broker]]
address = "1.1.1.1"
core = 0
[[broker]]
address = "1.1.1.2"
core = 1
[[broker]]
address = "1.1.2.1"
[[broker]]
address = "1.2.1.1"
[[gateway]]
a = "1.1.1.1"
b = "1.1.1.2"
[[gateway]]
a = "1.1.1.2"
b = "1.1.2.1"
[[gateway]]
a = "1.1.2.1"
b = "1.2.1.1"
cost = 3
"""


def ges(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "multihop.cli", "ges", *args], capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture
def small(tmp_path: Path) -> Path:
    f = tmp_path / "small.toml"
    f.write_text(SMALL)
    return f


@pytest.fixture
def running(small: Path) -> Iterator[str]:
    name = unique_name("gescli")
    try:
        ges("up", str(small), "--name", name)
        yield name
    finally:
        ges("down", name, check=False)
        try:
            mh.Runtime.attach(name).stop()
        except mh.RuntimeNotFound:
            pass


def test_help_lists_the_ges_commands() -> None:
    out = subprocess.run([sys.executable, "-m", "multihop.cli", "--help"], capture_output=True, text=True).stdout
    assert "ges" in out and "GES broker hierarchy" in out
    sub = subprocess.run([sys.executable, "-m", "multihop.cli", "ges", "--help"], capture_output=True, text=True).stdout
    for cmd in ("up", "status", "graph", "down"):
        assert cmd in sub


def test_up_status_graph_down(running: str, tmp_path: Path) -> None:
    text = ges("status", running).stdout
    assert "4 broker(s)" in text
    assert "broker 1.1.2.1" in text and "gatekeeper levels 1, 2" in text
    assert "1.2 -> 1.2.1.1 (5)" in text  # 1.1.2.1 holds the level-2 gateway: matrix 0 + 2, plus its extra cost 3
    js = json.loads(ges("status", running, "--at", "1.1.1.1", "--json").stdout)
    assert js["1.1.1.1"]["routing_cache"]["1.2"] == [7.0, "1.1.1.2"]
    png = tmp_path / "live.png"
    ges("graph", "--name", running, "--at", "1.1.1.1", "-o", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rt = mh.Runtime.attach(running)
    ges("down", running)
    assert not rt.alive or pytest.fail("ges down left the runtime it started running")


def test_graph_from_a_topology_file(small: Path, tmp_path: Path) -> None:
    png = tmp_path / "g.png"
    out = ges("graph", str(small), "--at", "1.1.1.2", "-o", str(png)).stdout
    assert "wrote" in out and png.stat().st_size > 10_000


@pytest.mark.parametrize(
    "text, words",
    [
        (SMALL.replace('address = "1.1.2.1"', 'address = "1.1.1.2"'), ["small.toml:8", "duplicate address"]),
        (SMALL.replace('b = "1.2.1.1"', 'b = "1.2.1.9"'), ["small.toml:18", "unknown broker 1.2.1.9"]),
        (SMALL.replace('address = "1.2.1.1"', 'address = "1.2.1.64"'), ["small.toml:10", "block limit"]),
        ("[[broker]\n", ["not valid TOML"]),
    ],
)
def test_bad_topology_files_fail_with_the_line(tmp_path: Path, text: str, words: list[str]) -> None:
    f = tmp_path / "small.toml"
    f.write_text(text)
    p = ges("up", str(f), "--name", unique_name("gesbad"), check=False)
    assert p.returncode == 1
    for w in words:
        assert w in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_errors_leave_the_running_system_alone(running: str, small: Path) -> None:
    p = ges("up", str(small), "--name", running, check=False)
    assert p.returncode == 1 and "already runs" in p.stderr
    p = ges("status", unique_name("nothing"), check=False)
    assert p.returncode == 1 and "no runtime named" in p.stderr
    p = ges("status", running, "--at", "1.1.1.9", check=False)
    assert "1.1.1.9" in p.stdout + p.stderr
    assert "4 broker(s)" in ges("status", running).stdout  # still all there


def test_status_of_a_runtime_without_ges() -> None:
    with mh.Runtime.start(unique_name("plain"), cores=[0]) as rt:
        p = ges("status", rt.name, check=False)
        assert p.returncode == 1 and "no GES system runs" in p.stderr
