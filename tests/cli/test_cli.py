"""The multihop command: up / status / down from a shell, and its errors."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

from session import unique_name


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


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs: a zombie (exited, not reaped yet by whoever adopted it) does not."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _start_group_service(name: str) -> int:
    """Start runtime ``name``'s group service from a process of its own that then exits (as a user's script
    does), with a member that stays joined; the service's pid."""
    script = (
        "import multihop as mh\n"
        "from multihop import groups\n"
        f"rt = mh.Runtime.attach({name!r})\n"
        "groups.group(rt, 'g')\n"
        "with rt.dispatcher(1) as d:\n"
        "    g = d.join('g')\n"
        "    g.send(g.broadcast, b'x')\n"
        "    g.recv(timeout=10)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert r.returncode == 0, r.stderr
    from multihop.paths import runtime_dir

    pid = int((runtime_dir(name) / "gsd.pid").read_text())
    assert _running(pid)
    return pid


def test_down_returns_once_the_group_service_is_gone() -> None:
    name = unique_name("cligsd")
    up = run("up", name, "--cores", "0-1")
    assert up.returncode == 0, up.stderr
    pid = 0
    try:
        pid = _start_group_service(name)
    finally:
        down = run("down", name)
    assert down.returncode == 0, down.stderr
    assert not _running(pid), "the group service still runs after `multihop down` returned"
    assert f"group service (pid {pid}) stopped" in down.stdout


def test_down_stops_a_group_service_that_cannot_exit_by_itself() -> None:
    """A stopped (SIGSTOP) group service cannot notice its monitors go: `down` stops it and waits, bounded."""
    name = unique_name("cligsd")
    up = run("up", name, "--cores", "0-1")
    assert up.returncode == 0, up.stderr
    pid = 0
    try:
        pid = _start_group_service(name)
        os.kill(pid, signal.SIGSTOP)
    finally:
        t0 = time.monotonic()
        down = run("down", name)
        took = time.monotonic() - t0
        if pid and _running(pid):
            os.kill(pid, signal.SIGKILL)  # clean up what the old `down` left
    assert down.returncode == 0, down.stderr
    assert not _running(pid), "a stopped group service outlived `multihop down`"
    assert took < 30, f"down took {took:.1f} s"  # generous: proves it does not hang


def test_status_refuses_a_limit_out_of_range() -> None:
    """``--limit 99999999999999999999`` exited 0 printing every monitor UNREACHABLE."""
    name = unique_name("clilim")
    up = run("up", name, "--cores", "0-1")
    assert up.returncode == 0, up.stderr
    try:
        for bad in ("99999999999999999999", "4294967296", "-2", "ten"):
            r = run("status", name, "--limit", bad)
            assert r.returncode == 2 and "--limit" in r.stderr and bad in r.stderr and "UNREACHABLE" not in r.stdout, (bad, r.stdout, r.stderr)
        for good in ("0", "-1", "4294967295"):
            r = run("status", name, "--limit", good)
            assert r.returncode == 0 and "UNREACHABLE" not in r.stdout, (good, r.stdout, r.stderr)
    finally:
        run("down", name)


def _own_parsers() -> dict[str, argparse.ArgumentParser]:
    """The parsers of every subcommand whose arguments python/multihop/cli.py (or the stubgen and groups
    modules it calls) defines, by their command line."""
    from multihop.cli import build_parser

    out: dict[str, argparse.ArgumentParser] = {}

    def walk(prefix: str, p: argparse.ArgumentParser) -> None:
        out[prefix] = p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    if prefix == "multihop" and name in ("analyze", "news", "dispatch", "ges"):
                        continue  # their arguments are their packages' (python/multihop/{analysis,news,ges})
                    walk(f"{prefix} {name}", child)

    walk("multihop", build_parser())
    return out


def test_every_argument_has_a_help_text_that_gives_its_default() -> None:
    problems = []
    for where, p in _own_parsers().items():
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            what = f"{where} {'/'.join(action.option_strings) or action.dest}"
            text = action.help or ""
            if not text or text == argparse.SUPPRESS:
                problems.append(f"{what}: no help text")
                continue
            default = action.default
            if default in (None, False, [], argparse.SUPPRESS) or action.required:
                continue
            if "default" not in text.lower() or (isinstance(default, str) and default not in text):
                problems.append(f"{what}: its help does not give its default {default!r}: {text!r}")
    assert not problems, "\n".join(problems)
    assert len(_own_parsers()) >= 10


def test_demo_labels_its_figures_by_transport_and_prints_whole_rates() -> None:
    name = unique_name("clidemo")
    r = subprocess.run(
        [sys.executable, "-m", "multihop.cli", "demo", "--name", name, "--scale", "0.005"],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = lines[0].split()
    assert "UMP" in header and "multihop" not in header, lines[0]
    rows = [re.split(r"\s{2,}", ln.strip()) for ln in lines[2:]]
    assert len(rows) == 4 and all(len(row) == 5 for row in rows), r.stdout
    rates = [row for row in rows if row[3] == "msg/s"]
    assert len(rates) == 3, r.stdout
    for row in rates:
        for n in row[1:3]:
            assert re.fullmatch(r"\d{1,3}(,\d{3})*", n), row  # whole, thousands separated
