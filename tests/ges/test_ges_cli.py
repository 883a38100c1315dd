"""``multihop ges up|status|graph|join|down`` from the shell, and its errors."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

import multihop as mh
from session import unique_name

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
    for cmd in ("up", "status", "graph", "join", "down"):
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
    out = ges("join", running, "--via", "1.1.1.1").stdout  # below the default thresholds: 1.1.1.1 takes it
    assert "broker 1.1.1.0 joined" in out
    joined = json.loads(ges("status", running, "--at", "1.1.1.0", "--json").stdout)["1.1.1.0"]
    assert [link["peer"] for link in joined["links"]] == ["1.1.1.1"] and joined["routing_cache"]["1.2"][1] == "1.1.1.1"
    bad = ges("join", running, "--via", "9.9.9.9", check=False)
    assert bad.returncode != 0 and "no broker 9.9.9.9" in bad.stderr
    assert "5 broker(s)" in ges("status", running).stdout  # the bad join changed nothing
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


# ---- newcomers (issue 26 §5): ges graph on a lean install, ges crash without storage, ges pub / ges sub ----------------


def test_graph_on_a_lean_install_names_the_extra_up_front(without_extras: dict[str, str], small: Path, tmp_path: Path) -> None:
    png = tmp_path / "g.png"
    r = subprocess.run(
        [sys.executable, "-m", "multihop.cli", "ges", "graph", str(small), "--at", "1.1.1.2", "-o", str(png)],
        capture_output=True,
        text=True,
        timeout=120,
        env=without_extras,
    )
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("multihop ges: ExtraMissing: multihop ges graph needs the analysis extra; missing: matplotlib ("), r.stderr
    assert r.stderr.rstrip().endswith("Install it with pip install 'multihop[analysis]'")
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not png.exists()


def test_the_readme_extras_table_lists_what_ges_graph_needs() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `analysis` |"))
    assert "matplotlib" in row and "multihop ges graph" in row


def test_crash_without_storage_says_how_to_start_a_durable_system(running: str) -> None:
    for cmd in ("crash", "restart"):
        p = ges(cmd, running, "1.1.1.1", check=False)
        assert p.returncode == 1 and "multihop ges up TOPOLOGY --name NAME --durable" in p.stderr, p.stderr
    assert "4 broker(s)" in ges("status", running).stdout  # nothing was killed


def test_up_takes_a_shipped_topology_by_name_and_says_which_exist() -> None:
    p = ges("up", "quickstrat", "--name", unique_name("gesname"), check=False)
    assert p.returncode == 1 and "no topology file 'quickstrat', and no shipped topology of that name" in p.stderr
    assert "quickstart" in p.stderr and "paper_fig5" in p.stderr


def _wait_for_line(p: subprocess.Popen[str], word: str, limit: float = 60.0) -> str:
    """Read ``p``'s stderr until a line holds ``word`` (bounded by ``limit`` seconds)."""
    assert p.stderr is not None
    deadline = time.monotonic() + limit
    seen = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([p.stderr], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = p.stderr.readline()
        if not line:
            break
        seen.append(line)
        if word in line:
            return line
    pytest.fail(f"no line with {word!r} from {p.args}: {seen}")


def _sub(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "multihop.cli", "ges", "sub", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_pub_and_sub_from_the_shell(running: str) -> None:
    sub = _sub(running, "--at", "1.2.1.1", "--profile", "sport=football,score=*", "--count", "3", "--timeout", "60")
    try:
        assert "subscribed as sub-" in _wait_for_line(sub, "subscribed")
        out = ges("pub", running, "--at", "1.1.1.1", '{"sport": "football", "score": 1}', '{"sport": "tennis", "score": 0}').stdout
        assert out.startswith("published 2 events as pub-") and "at broker 1.1.1.1" in out
        p = subprocess.run(
            [sys.executable, "-m", "multihop.cli", "ges", "pub", running],
            input='{"sport": "football", "score": 2}\n\n{"sport": "football", "score": "3"}\n',
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0 and "published 2 events" in p.stdout, p.stderr
        stdout, stderr = sub.communicate(timeout=60)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.communicate()
    assert sub.returncode == 0, stderr
    assert [json.loads(line) for line in stdout.splitlines()] == [
        {"sport": "football", "score": 1},
        {"sport": "football", "score": 2},
        {"sport": "football", "score": "3"},
    ]


@pytest.mark.parametrize(
    "args, words",
    [
        (["pub", "{bad"], ["event 1 ('{bad') is not JSON"]),
        (["pub", '{"sport": "football"}', "[1, 2]"], ["event 2 ('[1, 2]') must be a JSON object of attributes"]),
        (["pub", '{"sport": null}'], ["event 1", "attribute 'sport'"]),
        (["sub"], ["give --profile"]),
        (["sub", "--profile", "sport"], ["'sport' is not ATTR=VALUE"]),
        (["sub", "--profile", "sport=x", "--count", "-1"], ["--count must be 0 or more"]),
        (["sub", "--profile", "sport=x", "--state", "s.json"], ["--state is for a GES system with stable storage"]),
    ],
)
def test_pub_and_sub_refuse_bad_input_in_one_line(running: str, args: list[str], words: list[str], tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "multihop.cli", "ges", args[0], running, *args[1:]], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    for w in words:
        assert w in p.stderr, p.stderr


def test_a_durable_subscriber_across_runs_with_a_state_file(tmp_path: Path) -> None:
    """--state keeps a subscriber (its credential, positions, events not printed yet) across runs: away, its home
    stores what matches; Ctrl-C saves it; the next run prints what it missed, once."""
    name = unique_name("gescli-state")
    state = tmp_path / "alice.json"
    try:
        ges("up", "quickstart", "--name", name, "--durable")
        out = subprocess.run(
            [sys.executable, "-m", "multihop.cli", "ges", "sub", name, "--id", "alice", "--profile", "n=*", "--state", str(state), "--count", "0"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0 and out.stdout == "" and "subscribed as alice" in out.stderr, out.stderr
        assert state.stat().st_mode & 0o777 == 0o600  # it holds her credential
        assert json.loads(state.read_text())["credential"]
        ges("pub", name, "--at", "1.2.2", *(json.dumps({"n": i}) for i in range(1, 6)))
        p = subprocess.run(
            [sys.executable, "-m", "multihop.cli", "ges", "sub", name, "--state", str(state), "--count", "2"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0 and [json.loads(x)["n"] for x in p.stdout.splitlines()] == [1, 2], p.stderr
        assert len(json.loads(state.read_text())["pending"]) == 3  # came in the same batch, not printed yet: kept
        plain = ges("sub", name, "--id", "alice", "--profile", "n=*", "--count", "1", check=False)
        assert plain.returncode == 1 and "ClientIdInUse" in plain.stderr  # her id is hers
        wrong = ges("sub", name, "--state", str(state), "--profile", "m=*", check=False)
        assert wrong.returncode == 1 and "leave --profile out to resume it" in wrong.stderr
        sub = _sub(name, "--state", str(state))
        try:
            _wait_for_line(sub, "subscribed as alice")
            ges("pub", name, json.dumps({"n": 6}))
            assert sub.stdout is not None
            lines = [sub.stdout.readline() for _ in range(4)]  # (bounded: the pipe ends when the process does)
            sub.send_signal(signal.SIGINT)
            rest, err = sub.communicate(timeout=60)
        finally:
            if sub.poll() is None:
                sub.kill()
                sub.communicate()
        assert sub.returncode == 130 and "interrupted" in err
        assert [json.loads(x)["n"] for x in lines + rest.splitlines()] == [3, 4, 5, 6]
        ges("pub", name, json.dumps({"n": 7}))
        p = subprocess.run(
            [sys.executable, "-m", "multihop.cli", "ges", "sub", name, "--state", str(state), "--timeout", "3"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0 and [json.loads(x)["n"] for x in p.stdout.splitlines()] == [7], p.stderr
    finally:
        ges("down", name, check=False)
        try:
            mh.Runtime.attach(name).stop()
        except mh.RuntimeNotFound:
            pass
