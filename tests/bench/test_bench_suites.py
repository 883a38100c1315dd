"""Real `multihop bench SUITE --quick` runs write traces that `analyze` turns into reports.

Each suite runs in its own process (the CLI), against real runtimes; the
analysis runs in this process, in the session's shared Spark session (one
JVM for the whole test run).  Then: Ctrl-C stops a run cleanly (during
routing and during peers), --attach, --cores and --routing reach the suites,
and the README's main job (bench all + analyze, analyze through the CLI's
entry point) works end to end.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import psutil
import pyarrow.parquet as pq
import pytest

import multihop as mh
import multihop.analysis as analysis
from multihop import cli, rts
from multihop.bench.peers import available_peers
from multihop.bench.suites import SUITES
from multihop.bench.suites.options import QUICK_REPEATS
from session import unique_name

PNG = b"\x89PNG\r\n\x1a\n"
CLI = [sys.executable, "-m", "multihop.cli"]


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _bench(suite: str, out: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [*CLI, "bench", suite, "--quick", "--out", str(out), *extra], capture_output=True, text=True, timeout=timeout, env=os.environ.copy()
    )
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
    every = _csv(report / "latency.csv")
    rows = [r for r in every if "@" not in r["transport"]]
    assert {(r["transport"], int(r["size"])) for r in rows} == {(t, s) for t in ("ump", "multihop") for s in (0, 64, 4096, 65536)}
    assert {int(r["hops"]) for r in rows if r["transport"] == "ump"} == {0}
    assert {int(r["hops"]) for r in rows if r["transport"] == "multihop"} == {2}
    oneway = [r for r in _csv(report / "throughput.csv") if r["kind"] == "oneway"]
    assert len({r["case"] for r in oneway}) == 8 and all(float(r["throughput_msgs"]) > 0 for r in oneway)
    assert len(oneway) == 8 * QUICK_REPEATS  # one row per repeat
    # Every process layout, multi-hop next to Pipe started the same way (--quick: round trips only).
    from multihop.bench.layouts import LAYOUTS

    want = {f"{t}@{lay.name}" for t in ("multihop", "pipe") for lay in LAYOUTS}
    assert {r["transport"] for r in every if "@" in r["transport"]} == want
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
    rows = [r for r in _csv(report / "throughput_by_window.csv") if r["kind"] == "oneway"]
    assert sorted(int(r["window"]) for r in rows) == [1, 4, 16, 64]
    assert all(int(r["cases"]) == QUICK_REPEATS and float(r["throughput_min"]) <= float(r["throughput_max"]) for r in rows)
    # Fair link sharing: a ping-pong alone, next to a flood, and next to a flood on unfair link queues.
    loads = {c.split("load=")[1].split(",")[0] for c in (r["case"] for r in _csv(report / "latency.csv")) if "load=" in c}
    assert loads == {"alone", "flood", "flood-unfair"}
    assert any(p.startswith("latency_cdf_") and "_window" in p for p in plots)
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
    assert plots == ["resources.png"]  # its own plot; its totals stay out of the throughput plots


def _check_peers(report: Path, plots: list[str]) -> None:
    lat = _csv(report / "latency.csv")
    expected = {"ump", "multihop", *available_peers()}
    assert {"pipe", "queue", "zmq"} <= expected  # pyzmq is a test dependency
    assert {r["transport"] for r in lat} == expected
    ratios = _csv(report / "baseline_ratios.csv")
    compared = {r["case"].split("transport=")[1].split(",")[0] for r in ratios if r["suite"] == "peers"}
    assert compared == expected - {"pipe"}  # every other transport against Pipe


def _check_dispatch(report: Path, plots: list[str]) -> None:
    mine = [r for r in _csv(report / "latency.csv") if r["suite"] == "dispatch"]
    cases = {r["case"] for r in mine}
    for k in ("1", "10"):
        for path in ("dispatch", "plain"):
            assert any(f"fanout={k}," in c and f"path={path}," in c for c in cases), (k, path, cases)
    assert any("op=takeover" in c and "kind=rtt" in c for c in cases)  # one row per orphaned sink
    assert any("op=macro" in c for c in cases)
    ratios = [r for r in _csv(report / "baseline_ratios.csv") if r["suite"] == "dispatch"]
    assert len(ratios) == 2 and all("path=plain" in r["baseline_case"] for r in ratios)
    assert all(float(r["throughput_ratio"]) > 0 for r in ratios)
    for r in _csv(report / "throughput.csv"):
        if r["suite"] == "dispatch" and "kind=oneway" in r["case"]:
            assert int(r["messages"]) > 0


def _check_ges(report: Path, plots: list[str]) -> None:
    from multihop.bench.ges.nats_peer import nats_available

    rows = _csv(report / "ges_latency.csv")
    want = {
        ("fig14", "native", "1.6.1.10", 9),
        ("fig14", "python", "1.6.1.10", 9),  # the native engine and the Python path side by side
        ("fig20", "native", "1.6.1.10", 4),
        ("fig20", "native", "1.5.1.1", 2),
        ("fig20", "native", "1.5.1.22", 1),
    }
    if nats_available() is None:
        want.add(("fig14", "nats", "nats", 3))  # NATS beside figure 14, with the same clients
    assert {(r["topology"], r["engine"], r["measuring"], int(r["hops"])) for r in rows} == want
    for r in rows:
        expected = int(r["published"]) * int(r["match"]) // 100
        if r["engine"] == "nats":  # (NATS drops what a slow consumer does not take: no promise to check)
            assert int(r["received"]) > 0, r
            continue
        assert int(r["received"]) == expected and int(r["others_min"]) == expected, r  # every subscriber, every match
        assert float(r["mean_ms"]) > 0
        assert float(r["broker_cpu_us"]) >= 0  # (from the processes' counters, in 1/100 s ticks: a short case may read 0)
    assert all(float(r["broker_cpu_us"]) > 0 for r in rows if r["topology"] == "fig14" and r["match"] == "100" and float(r["rate"]) == 0)
    assert {"ges_latency_match100.png", "ges_latency_match10.png", "ges_throughput.png", "ges_latency_hops.png", "ges_engines.png"} <= set(plots)


def _check_groups(report: Path, plots: list[str]) -> None:
    lat = [r for r in _csv(report / "latency.csv") if r["suite"] == "groups"]
    want = {f"group-{m}" for m in ("unicast", "broadcast", "radix", "numa")} | {"pipe"}
    assert {(r["transport"], int(r["fanout"])) for r in lat} == {(t, k) for t in want for k in (1, 3)}
    assert all(float(r["p50_ns"]) > 0 for r in lat)
    tp = [r for r in _csv(report / "throughput.csv") if r["suite"] == "groups"]
    assert {r["transport"] for r in tp} >= {"group-fifo", "group-total"}
    for r in tp:
        if r["transport"] in ("group-fifo", "group-total"):
            assert int(r["messages"]) == 2000 * 3  # every member got every message
    assert "groups_shootdown.png" in plots


def _check_fabric(report: Path, plots: list[str]) -> None:
    from multihop.bench.fabric_peers import PEERS

    installed = {name for name, make in PEERS.items() if make().available() is None}
    assert {"tcp", "runtime"} <= installed  # the standard library's peer, and ours (the bridge is built for the tests)
    lat = [r for r in _csv(report / "latency.csv") if r["suite"] == "fabric"]
    assert {(r["transport"], r["kind"], int(r["size"])) for r in lat} == {(p, "rtt", 64) for p in installed}
    assert all(float(r["p50_ns"]) > 0 and int(r["samples"]) == 300 * QUICK_REPEATS for r in lat)
    tp = [r for r in _csv(report / "throughput.csv") if r["suite"] == "fabric" and r["kind"] == "oneway"]
    want = {(p, size) for p in installed for size in (64, 4096)}
    assert {(r["transport"], int(r["size"])) for r in tp} == want and len(tp) == len(want) * QUICK_REPEATS  # every run exact
    assert all(int(r["messages"]) == (3000 if r["size"] == "64" else 1000) and float(r["throughput_msgs"]) > 0 for r in tp)
    if "zenoh" in installed:  # the baseline: every other peer's case against zenoh-python's of the same kind and size
        ratios = [r for r in _csv(report / "baseline_ratios.csv") if r["suite"] == "fabric"]
        assert {r["case"] for r in ratios} == {r["case"] for r in lat + tp if r["transport"] != "zenoh"}
        assert all("transport=zenoh" in r["baseline_case"] for r in ratios)
    assert "fabric.png" in plots


CHECKS = {
    "channels": _check_channels, "hops": _check_hops, "routing": _check_routing, "window": _check_window,
    "fanout": _check_fanout, "resources": _check_resources, "peers": _check_peers, "dispatch": _check_dispatch,
    "ges": _check_ges, "groups": _check_groups, "fabric": _check_fabric,
}  # fmt: skip


def test_every_suite_has_a_check() -> None:
    assert set(CHECKS) == set(SUITES) - {"all"}


ONCE = {"dispatch", "ges", "groups"}
"""Suites that measure each case once (long cases, no findings read off them); the others repeat every case."""


def _check_repeats_and_load(suite: str, run: Path) -> None:
    """Every case of a repeating suite has rows for repeats 0 .. n-1, and every repeat its load."""
    cases = pq.read_table(run / "cases.parquet").to_pylist()
    by_case: dict[str, list[int]] = {}
    for c in cases:
        by_case.setdefault(c["case"], []).append(c["repeat"])
        # what else ran: measured for every repeat (the figures may be anything >= 0 on a shared machine)
        assert c["busy_cpu"] is not None and c["own_cpu"] is not None and c["foreign_cpu"] is not None and c["load1"] is not None, c
        assert c["foreign_cpu"] == pytest.approx(max(c["busy_cpu"] - c["own_cpu"], 0.0))
    quick_layout = [k for k in by_case if "layout=" in k]  # the per-layout cases: once with --quick
    want = [0] if suite in ONCE else list(range(QUICK_REPEATS))
    assert all(sorted(v) == (want if k not in quick_layout else [0]) for k, v in by_case.items()), by_case
    ours = [c for c in cases if c["transport"] == "multihop" and c["kind"] == "rtt" and c["suite"] in ("channels", "peers", "hops", "window")]
    for c in ours:  # a multi-hop case over a runtime of ours: the monitors' counters and weight, over the repeat
        assert c["monitor_forwarded"] is not None and c["monitor_forwarded"] > 0 and c["monitor_parks"] is not None, c
        assert c["monitor_weight"] in ("light", "fair", "mixed"), c


@pytest.mark.parametrize("suite", sorted(CHECKS))
def test_quick_suite_trace_feeds_the_analysis(suite: str, tmp_path: Path, spark: Any) -> None:
    out = tmp_path / "traces"
    r = _bench(suite, out)
    steps = [line for line in r.stderr.splitlines() if line.startswith("[")]
    assert steps and steps[-1].startswith(f"[{len(steps)}/{len(steps)}] {suite}: ")  # the progress lines
    runs = list(out.iterdir())
    assert len(runs) == 1 and f"trace written to {runs[0]}" in r.stdout
    assert set(pq.read_table(runs[0] / "cases.parquet").column("suite").to_pylist()) == {suite}
    _check_repeats_and_load(suite, runs[0])
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


def _threads(pid: int) -> set[str]:
    """The thread ids of process `pid` now."""
    try:
        return set(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return set()


def _interrupt(out: Path, args: list[str], at: Callable[[str], bool], new_thread: bool = False) -> tuple[int, str]:
    """Run `multihop bench ARGS` in its own session; Ctrl-C it once a progress line satisfies `at`
    (and, with `new_thread`, once the bench process has started a thread after that line).

    Returns the exit status and stderr, after checking that nothing is left
    behind: no process of the session, no runtime directory, no shared memory.
    """
    root = Path(os.environ["MULTIHOP_RUNTIME_ROOT"])
    before = set(root.iterdir()) if root.exists() else set()
    shm_before = set(os.listdir("/dev/shm"))
    p = subprocess.Popen(
        [*CLI, "bench", *args, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=os.environ.copy(),
    )
    err: list[str] = []
    try:
        deadline = time.monotonic() + 120
        assert p.stderr is not None
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            err.append(line)
            if at(line):
                break
        assert err and at(err[-1]), "".join(err)
        if new_thread:
            tids = _threads(p.pid)
            while not _threads(p.pid) - tids:
                assert time.monotonic() < deadline and p.poll() is None, "no new thread in the bench process"
                time.sleep(0.001)
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        _, rest = p.communicate(timeout=60)  # a hang at interpreter exit fails here
        err.append(rest)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    text = "".join(err)
    deadline = time.monotonic() + 10
    while _session_procs(p.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session_procs(p.pid) == []  # no monitor, server or receiver left behind
    after = set(root.iterdir()) if root.exists() else set()
    assert after == before  # every runtime directory removed
    assert {n for n in set(os.listdir("/dev/shm")) - shm_before if "multihop" in n} == set()
    return p.returncode, text


def test_ctrl_c_stops_cleanly_and_keeps_finished_cases(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    code, text = _interrupt(out, ["all", "--quick"], lambda line: line.startswith("[2/") and " routing: " in line)
    assert code == 130, text[-3000:]
    assert "interrupted" in text and "Traceback" not in text, text[-3000:]
    (run,) = list(out.iterdir())
    suites = set(pq.read_table(run / "cases.parquet").column("suite").to_pylist())
    assert {"channels", "hops"} <= suites and suites <= {"channels", "hops", "routing"}


def test_ctrl_c_during_the_peers_suite(tmp_path: Path) -> None:
    """Interrupted while multiprocessing.Queue streams run: the queues must not hold up the exit.

    The moment: the queue case's first put, which starts the queue's feeder thread in the bench process
    (the only thread it starts there), not a delay that a slow or fast machine puts into another case.
    """
    out = tmp_path / "traces"
    code, text = _interrupt(out, ["peers", "--quick"], lambda line: " peers: queue 64 B" in line, new_thread=True)
    assert code == 130, text[-3000:]
    assert "interrupted" in text and "Traceback" not in text, text[-3000:]
    (run,) = list(out.iterdir())
    transports = set(pq.read_table(run / "cases.parquet").column("transport").to_pylist())
    assert {"ump", "multihop", "pipe"} <= transports and transports <= {"ump", "multihop", "pipe", "queue"}


@pytest.mark.timeout(1200)  # every suite, each case three times (3-4 minutes on a quiet machine, more under load), then Spark
def test_main_job_bench_all_then_analyze(tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command, less the set-up: every suite, then the report.

    `multihop analyze` runs through the CLI's entry point in this process, so
    it borrows the session's Spark (no second JVM) and must leave it running.
    """
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert ("bash .ci/setup && .venv/bin/multihop bench all --quick --out bench-out && .venv/bin/multihop analyze bench-out -o report") in readme
    out, rep = tmp_path / "bench-out", tmp_path / "report"
    r = _bench("all", out, timeout=900)
    order = [line.split(": ")[0].split("] ")[1] for line in r.stderr.splitlines() if line.startswith("[1/")]
    assert order == [s for s in SUITES if s != "all"]
    assert cli.main(["analyze", str(out), "-o", str(rep)]) == 0
    assert f"report: {rep / 'report.md'}" in capsys.readouterr().out
    md = (rep / "report.md").read_text()
    for title in ("Latency per case", "Memory and CPU", "Cost per hop", "Ratios to the baseline"):
        assert title in md
    _check_plots(rep)
    # each table holds the suites it is about, and only those
    assert {x["suite"] for x in _csv(rep / "cost_per_hop.csv")} == {"hops", "routing"}
    assert {x["suite"] for x in _csv(rep / "throughput_by_size.csv")} == {"channels", "peers"}
    assert {x["suite"] for x in _csv(rep / "throughput_by_window.csv")} == {"window"}
    assert {x["suite"] for x in _csv(rep / "core_pairs.csv")} == {"routing"}
    assert {x["suite"] for x in _csv(rep / "baseline_ratios.csv")} == {"peers", "dispatch", "groups", "fabric"}  # groups: Pipes; fabric: zenoh
    assert {x["suite"] for x in _csv(rep / "resources.csv")} == {"resources"}
    assert "resources" not in {x["suite"] for x in _csv(rep / "throughput.csv")}
    # channels and peers measured the same figures in this run: the report sets them side by side
    same = {(x["figure"], x["suite_a"], x["suite_b"]) for x in _csv(rep / "consistency.csv")}
    assert ("multi-hop round trip, 64 B", "channels", "peers") in same and ("UMP round trip, 64 B", "channels", "peers") in same
    assert ("multi-hop one-way, 64 B, window 16", "channels", "window") in same
    assert all(x["agree"] in ("yes", "no") for x in _csv(rep / "consistency.csv"))
    assert "## Consistency" in md and "## Load during the cases" in md
    assert spark.range(3).count() == 3  # the borrowed session was not stopped


def test_unknown_suite_is_a_clear_error() -> None:
    r = subprocess.run([*CLI, "bench", "nope", "--quick"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "unknown suite 'nope'" in r.stderr


def test_bad_trace_interval_is_a_clear_error(tmp_path: Path) -> None:
    r = subprocess.run([*CLI, "bench", "window", "--quick", "--trace-every", "0", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "sampling interval must be a positive integer, got 0" in r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def test_attach_runs_on_a_runtime_started_with_up(tmp_path: Path) -> None:
    name, small = unique_name("bench-up"), unique_name("bench-up1")
    root = Path(os.environ["MULTIHOP_RUNTIME_ROOT"])
    try:
        assert _cli("up", name, "--cores", "0-1", "--routing", "ring").returncode == 0
        assert _cli("up", small, "--cores", "0").returncode == 0
        before = set(root.iterdir())
        r = _bench("hops", tmp_path / "t", "--attach", name)
        assert f"attached to runtime {name!r}: cores [0, 1], routing ring" in r.stderr
        (run,) = list((tmp_path / "t").iterdir())
        cases = pq.read_table(run / "cases.parquet").to_pylist()
        assert {(c["routing"], c["src_core"], c["dst_core"], c["hops"]) for c in cases} == {
            ("ring", 0, 0, 1), ("ring", 0, 1, 2)
        }  # fmt: skip
        assert set(root.iterdir()) == before  # no runtime of its own
        assert mh.Runtime.attach(name).alive  # and the attached one still runs
        bad = _cli("bench", "routing", "--quick", "--attach", small, "--out", str(tmp_path / "bad"))
        assert bad.returncode == 1
        assert (f"suite routing needs at least 2 cores (core pairs to route between); the attached runtime {small!r} has cores [0]") in bad.stderr
        assert not (tmp_path / "bad").exists()
        both = _cli("bench", "window", "--attach", name, "--routing", "ring", "--out", str(tmp_path / "bad"))
        assert both.returncode == 1 and "leave out --routing" in both.stderr
        gone = _cli("bench", "window", "--attach", unique_name("none"), "--out", str(tmp_path / "bad"))
        assert gone.returncode == 1 and "RuntimeNotFound" in gone.stderr and "multihop up" in gone.stderr
        fab = _cli("bench", "fabric", "--quick", "--attach", name, "--out", str(tmp_path / "bad"))  # runtimes of its own
        assert fab.returncode == 1 and "suite fabric: it starts a runtime of its own on each machine" in fab.stderr, fab.stderr
        assert not (tmp_path / "bad").exists()
        from multihop.bench.suites import BenchOptions, choose

        chosen, left_out = choose("all", BenchOptions(quick=True, attach=name), mh.Runtime.attach(name))  # `all` leaves it out, saying so
        assert [m.NAME for m in chosen] == [s for s in SUITES if s not in ("all", "fabric")]
        assert left_out == [
            "suite fabric left out: it starts a runtime of its own on each machine (network namespace), so it does not run with --attach"
        ]
    finally:
        for n in (name, small):
            _cli("down", n)


def test_cores_and_routing_reach_the_suites_with_their_own_topology(tmp_path: Path) -> None:
    _bench("routing", tmp_path / "r", "--cores", "0-1", "--routing", "ring")
    (run,) = list((tmp_path / "r").iterdir())
    cases = pq.read_table(run / "cases.parquet").to_pylist()
    assert {c["routing"] for c in cases} == {"ring"}  # one mode, not the three
    assert {(c["src_core"], c["dst_core"]) for c in cases} == {(s, d) for s in (0, 1) for d in (0, 1)}
    _bench("hops", tmp_path / "h", "--cores", "0-2", "--routing", "direct")
    (run,) = list((tmp_path / "h").iterdir())
    hops = {(c["routing"], c["hops"]) for c in pq.read_table(run / "cases.parquet").to_pylist()}
    assert hops == {("direct", 1), ("direct", 2)}  # direct routing: a core itself, or one link away
    r = _cli("bench", "resources", "--quick", "--cores", "3", "--out", str(tmp_path / "x"))
    assert r.returncode == 1 and "suite resources needs at least 2 cores" in r.stderr and "--cores gives [3]" in r.stderr
    assert "--cores CORES" in _cli("bench", "--help").stdout and "virtual cores 0-3" in _cli("bench", "--help").stdout


def test_repeats_option_reaches_the_suite(tmp_path: Path) -> None:
    """``--repeats N`` measures each case N times (cases rows for repeats 0 .. N-1); 0 is refused before anything runs."""
    import pyarrow.parquet as pq

    bad = _cli("bench", "window", "--quick", "--repeats", "0", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 1 and "repeats must be a positive integer, got 0" in bad.stderr
    assert not (tmp_path / "bad").exists()
    r = _cli("bench", "window", "--quick", "--repeats", "2", "--out", str(tmp_path), timeout=240)
    assert r.returncode == 0, r.stderr
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir() and p.name != "bad"]
    cases = pq.read_table(run / "cases.parquet").to_pylist()
    by_case: dict[str, set[int]] = {}
    for c in cases:
        by_case.setdefault(c["case"], set()).add(c["repeat"])
    assert by_case and all(reps == {0, 1} for reps in by_case.values()), by_case
