"""Real `multihop bench SUITE --quick` runs write traces that `analyze` turns into reports.

Each suite runs in its own process (the CLI), against real runtimes; the
analysis runs in the session's shared Spark session.  Then: Ctrl-C stops a
run cleanly, and the README's main job (bench all + analyze) works end to end.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq
import pytest

import multihop as mh
import multihop.analysis as analysis
from multihop import rts
from multihop.bench.peers import available_peers
from multihop.bench.suites import SUITES

PNG = b"\x89PNG\r\n\x1a\n"
CLI = [sys.executable, "-m", "multihop.cli"]


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _bench(suite: str, out: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*CLI, "bench", suite, "--quick", "--out", str(out), *extra],
                       capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _check_plots(report_dir: Path) -> list[str]:
    pngs = sorted(report_dir.glob("*.png"))
    assert pngs, "no plots"
    for p in pngs:
        data = p.read_bytes()
        assert data.startswith(PNG) and len(data) > 1000, p
    return [p.name for p in pngs]


def _check_channels(report: Path, plots: list[str]) -> None:
    rows = _csv(report / "latency.csv")
    assert {(r["transport"], int(r["size"])) for r in rows} == {
        (t, s) for t in ("ump", "multihop") for s in (0, 64, 4096, 65536)
    }
    assert {int(r["hops"]) for r in rows if r["transport"] == "ump"} == {0}
    assert {int(r["hops"]) for r in rows if r["transport"] == "multihop"} == {2}
    oneway = [r for r in _csv(report / "throughput.csv") if r["kind"] == "oneway"]
    assert len(oneway) == 8 and all(float(r["throughput_msgs"]) > 0 for r in oneway)
    assert "throughput_vs_size.png" in plots


def _check_hops(report: Path, plots: list[str]) -> None:
    rows = _csv(report / "latency.csv")
    assert sorted(int(r["hops"]) for r in rows) == [1, 2, 4]
    slope = [r for r in _csv(report / "cost_per_hop.csv") if r["transport"] == "multihop"]
    assert slope and int(slope[0]["hops_min"]) == 1 and int(slope[0]["hops_max"]) == 4
    assert "latency_vs_hops.png" in plots


def _check_routing(report: Path, plots: list[str]) -> None:
    rows = _csv(report / "latency.csv")
    cores = [0, 1, 2, 3]
    topo = mh.Topology(sockets=[[0, 1], [2, 3]])
    for mode in rts.MODES:
        table = rts.routing_table(topo, mode, cores)
        mine = [r for r in rows if r["routing"] == mode]
        assert len(mine) == 2 * len(cores) ** 2  # binds and round trips, every ordered pair
        for r in mine:
            src, dst = int(r["src_core"]), int(r["dst_core"])
            assert int(r["hops"]) == len(rts.path(table, src, dst)), (mode, src, dst)  # observed == table
            assert ("op=bind," if int(r["size"]) == -1 else "op=rtt,") in r["case"]
        for what in ("64", "bind"):
            assert f"_{mode}_multihop_{what}.png" in " ".join(plots)
    pairs = _csv(report / "core_pairs.csv")
    assert len(pairs) == 2 * 3 * 16


def _check_window(report: Path, plots: list[str]) -> None:
    rows = _csv(report / "throughput_by_window.csv")
    assert sorted(int(r["window"]) for r in rows) == [1, 4, 16, 64]
    assert all(float(r["throughput_msgs"]) > 0 for r in rows)
    assert "throughput_vs_window.png" in plots


def _check_fanout(report: Path, plots: list[str]) -> None:
    lat = _csv(report / "latency.csv")
    assert {(r["transport"], int(r["fanout"])) for r in lat} == {(t, k) for t in ("ump", "multihop") for k in (1, 2, 4)}
    for r in _csv(report / "throughput.csv"):
        if r["kind"] == "oneway":
            assert int(r["messages"]) == 2000 * int(r["fanout"])  # every receiver got every message


def _check_resources(report: Path, plots: list[str]) -> None:
    rows = _csv(report / "resources.csv")
    topo = mh.Topology(sockets=[[0, 1], [2, 3]])
    assert {(r["routing"], r["transport"], r["component"]) for r in rows} == {
        (m, t, c) for m in rts.MODES for t in ("ump", "multihop") for c in ("monitor", "channel", "idle-monitor")
    }
    for r in rows:
        assert int(r["links"]) == len(rts.links(rts.routing_table(topo, r["routing"], [0, 1, 2, 3])))
        assert int(r["rss_bytes"]) >= 0 and float(r["cpu_s"]) >= 0
        if r["component"] == "monitor":
            forwarded = int(r["messages"])
            assert int(r["rss_bytes"]) > 1_000_000  # a live process
            # UMP channels never pass through a monitor; multi-hop ones do, both ways
            assert forwarded == 0 if r["transport"] == "ump" else forwarded >= 2 * 16 * 200


def _check_peers(report: Path, plots: list[str]) -> None:
    lat = _csv(report / "latency.csv")
    expected = {"ump", "multihop", *available_peers()}
    assert {"pipe", "queue", "zmq"} <= expected  # pyzmq is a test dependency
    assert {r["transport"] for r in lat} == expected
    ratios = _csv(report / "baseline_ratios.csv")
    compared = {r["case"].split("transport=")[1].split(",")[0] for r in ratios if r["suite"] == "peers"}
    assert compared == expected - {"pipe"}  # every other transport against Pipe


CHECKS = {
    "channels": _check_channels, "hops": _check_hops, "routing": _check_routing, "window": _check_window,
    "fanout": _check_fanout, "resources": _check_resources, "peers": _check_peers,
}  # fmt: skip


def test_every_suite_has_a_check() -> None:
    assert set(CHECKS) == set(SUITES) - {"all"}


@pytest.mark.parametrize("suite", sorted(CHECKS))
def test_quick_suite_trace_feeds_the_analysis(suite: str, tmp_path: Path, spark: Any) -> None:
    out = tmp_path / "traces"
    r = _bench(suite, out)
    steps = [line for line in r.stderr.splitlines() if line.startswith("[")]
    assert steps and steps[-1].startswith(f"[{len(steps)}/{len(steps)}] {suite}: ")  # the progress lines
    runs = list(out.iterdir())
    assert len(runs) == 1 and f"trace written to {runs[0]}" in r.stdout
    assert set(pq.read_table(runs[0] / "cases.parquet").column("suite").to_pylist()) == {suite}
    report = analysis.run([str(out)], str(tmp_path / "report"))
    assert report.name == "report.md" and report.stat().st_size > 0
    CHECKS[suite](report.parent, _check_plots(report.parent))


def _session_procs(sid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getsid(p.pid) == sid:
                found.append(p)
        except (ProcessLookupError, PermissionError):
            continue
    return found


def test_ctrl_c_stops_cleanly_and_keeps_finished_cases(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    root = Path(os.environ["MULTIHOP_RUNTIME_ROOT"])
    before = set(root.iterdir()) if root.exists() else set()
    shm_before = set(os.listdir("/dev/shm"))
    p = subprocess.Popen([*CLI, "bench", "all", "--quick", "--out", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, env=os.environ.copy())
    err: list[str] = []
    try:
        deadline = time.monotonic() + 120
        assert p.stderr is not None
        while time.monotonic() < deadline:  # until the third suite (routing) is under way
            line = p.stderr.readline()
            if not line:
                break
            err.append(line)
            if line.startswith("[2/") and " routing: " in line:
                break
        assert err and " routing: " in err[-1], "".join(err)
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        _, rest = p.communicate(timeout=60)
        err.append(rest)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    text = "".join(err)
    assert p.returncode == 130, text[-3000:]
    assert "interrupted" in text and "Traceback" not in text, text[-3000:]
    deadline = time.monotonic() + 10
    while _session_procs(p.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session_procs(p.pid) == []  # no monitor, server or receiver left behind
    after = set(root.iterdir()) if root.exists() else set()
    assert after == before  # every runtime directory removed
    assert {n for n in set(os.listdir("/dev/shm")) - shm_before if "multihop" in n} == set()
    (run,) = list(out.iterdir())
    suites = set(pq.read_table(run / "cases.parquet").column("suite").to_pylist())
    assert {"channels", "hops"} <= suites and suites <= {"channels", "hops", "routing"}


def test_main_job_bench_all_then_analyze(tmp_path: Path) -> None:
    """The README's first command, less the set-up: every suite, then the report."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert ("bash .ci/setup && .venv/bin/multihop bench all --quick --out bench-out && "
            ".venv/bin/multihop analyze bench-out -o report") in readme
    out, rep = tmp_path / "bench-out", tmp_path / "report"
    r = _bench("all", out, timeout=400)
    order = [line.split(": ")[0].split("] ")[1] for line in r.stderr.splitlines() if line.startswith("[1/")]
    assert order == [s for s in SUITES if s != "all"]
    a = subprocess.run([*CLI, "analyze", str(out), "-o", str(rep)], capture_output=True, text=True, timeout=300)
    assert a.returncode == 0, a.stderr[-3000:]
    assert f"report: {rep / 'report.md'}" in a.stdout
    md = (rep / "report.md").read_text()
    for title in ("Latency per case", "Memory and CPU", "Cost per hop", "Ratios to the baseline"):
        assert title in md
    _check_plots(rep)


def test_unknown_suite_is_a_clear_error() -> None:
    r = subprocess.run([*CLI, "bench", "nope", "--quick"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "unknown suite 'nope'" in r.stderr


def test_bad_trace_interval_is_a_clear_error(tmp_path: Path) -> None:
    r = subprocess.run([*CLI, "bench", "window", "--quick", "--trace-every", "0", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "sampling interval must be a positive integer, got 0" in r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written
