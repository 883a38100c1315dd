"""The multihop command: up / status / down from a shell, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import unique_name


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "multihop.cli", *args], capture_output=True, text=True, timeout=60, env=os.environ.copy())


def test_up_status_down_from_the_shell() -> None:
    name = unique_name("cli")
    up = run("up", name, "--cores", "0-2", "--routing", "ring")
    try:
        assert up.returncode == 0, up.stderr
        st = run("status", name)
        assert st.returncode == 0, st.stderr
        assert "routing row: 0->0, 1->1, 2->1" in st.stdout  # core 0 in a 3-core ring
        assert "forwarding entries=0" in st.stdout
        js = json.loads(run("status", name, "--json").stdout)
        assert [m["core"] for m in js["monitors"]] == [0, 1, 2]
        again = run("up", name, "--cores", "0-1")
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        down = run("down", name)
    assert down.returncode == 0, down.stderr
    gone = run("status", name)
    assert gone.returncode == 1 and "no runtime named" in gone.stderr


def test_bad_arguments_are_one_line_errors() -> None:
    r = run("up", unique_name(), "--cores", "3-1")
    assert r.returncode == 1 and "RoutingError" in r.stderr
    r = run("up", unique_name(), "--routing", "hypercube")
    assert r.returncode == 2 and "invalid choice" in r.stderr
