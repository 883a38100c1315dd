"""The report leads with its findings: per suite the headline figures, baseline and ratio; then plots, tables, notes.

* :func:`multihop.analysis.findings.find` over hand-made tables: which rows
  each suite's headline takes, the ratio and how it reads, missing baselines,
  virtual cores, several runs.
* A synthetic ``bench all``-like trace with exact figures, analysed in the
  session's Spark: ``findings.csv`` and the order of the report's sections.
* ``report.html`` opened in a real headless Chromium (Debian's ``chromium``,
  installed by ``.ci/setup``): a screenshot that is not blank, the findings
  table shown, and every image decoded.
* ``multihop analyze`` in a fresh process with its own JVM: stdout is the
  report's paths, stderr is progress lines, and no Spark/log4j chatter.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from multihop.analysis import run
from multihop.analysis.findings import Finding, find, format_amount
from multihop.analysis.report import MAX_SHOWN
from multihop.analysis.table import Table
from multihop.bench.trace import TraceWriter, case_name

ROOT = Path(__file__).resolve().parent.parent


# -- find() over hand-made tables -------------------------------------------------------------------

LAT_COLS = [
    "run_id",
    "suite",
    "case",
    "kind",
    "transport",
    "routing",
    "size",
    "hops",
    "window",
    "src_core",
    "dst_core",
    "fanout",
    "samples",
    "p50_ns",
]
THR_COLS = ["run_id", "suite", "case", "kind", "transport", "routing", "size", "hops", "window", "src_core", "dst_core", "fanout", "throughput_msgs"]


def _lat(
    run: str,
    suite: str,
    transport: str,
    p50: float,
    *,
    size: int = 64,
    hops: int = -1,
    window: int = -1,
    src: int = 0,
    dst: int = 1,
    fanout: int = -1,
    routing: str | None = "direct",
) -> tuple[Any, ...]:
    case = f"{suite}-{transport}-{size}-{hops}-{window}-{src}-{dst}-{fanout}-{routing}"
    return (run, suite, case, "rtt", transport, routing, size, hops, window, src, dst, fanout, 100, p50)


def _thr(run: str, suite: str, transport: str, rate: float, *, size: int = 64, window: int = -1) -> tuple[Any, ...]:
    return (run, suite, f"{suite}-{transport}-{size}-{window}", "oneway", transport, "direct", size, -1, window, 0, 1, -1, rate)


def test_findings_of_channels_and_peers_read_their_ratio_right() -> None:
    lat = Table(
        "latency",
        "",
        LAT_COLS,
        [
            _lat("r", "channels", "ump", 1_000),
            _lat("r", "channels", "multihop", 12_000),
            _lat("r", "channels", "ump", 900, size=0),  # 64 B is the headline size when measured
            _lat("r", "peers", "ump", 300),
            _lat("r", "peers", "multihop", 12_000),
            _lat("r", "peers", "pipe", 24_000),
        ],
    )
    thr = Table(
        "throughput",
        "",
        THR_COLS,
        [
            _thr("r", "channels", "ump", 6e6),
            _thr("r", "channels", "multihop", 6e5, window=16),
            _thr("r", "peers", "pipe", 2e5),
            _thr("r", "peers", "ump", 8e6),
        ],
    )
    got = {(f.suite, f.finding): f for f in find({"latency": lat, "throughput": thr})}
    f = got[("channels", "multi-hop round trip, 64 B (p50)")]
    assert (f.value, f.baseline, f.baseline_value, f.ratio, f.reading) == (12_000, "UMP round trip", 1_000, 12.0, "12x slower")
    f = got[("channels", "multi-hop one-way, 64 B")]
    assert (f.ratio, f.reading) == (pytest.approx(0.1), "10x slower")  # higher is better for throughput
    assert got[("peers", "UMP round trip, 64 B (p50)")].reading == "80x faster"
    assert got[("peers", "multi-hop round trip, 64 B (p50)")].reading == "2.0x faster"
    assert got[("peers", "UMP one-way, 64 B")].reading == "40x faster"
    assert ("peers", "multi-hop one-way, 64 B") not in got  # no such case: no line
    assert [f.suite for f in find({"latency": lat, "throughput": thr})] == ["channels"] * 2 + ["peers"] * 3


def test_findings_of_hops_routing_window_fanout_resources() -> None:
    lat = Table(
        "latency",
        "",
        LAT_COLS,
        [
            _lat("r", "hops", "multihop", 10_000, hops=1, routing="ring", dst=0),
            *[
                _lat("r", "routing", "multihop", 1000 * (1 + (s != d)) * (2 if m == "ring" else 1), src=s, dst=d, routing=m)
                for m in ("direct", "ring")
                for s in range(4)
                for d in range(4)
            ],
            *[
                _lat("r", "routing", "multihop", 500_000 if m == "direct" else 250_000, size=-1, src=s, dst=d, routing=m)
                for m in ("direct", "ring")
                for s in range(4)
                for d in range(4)
            ],
            _lat("r", "fanout", "ump", 1_000, fanout=1),
            _lat("r", "fanout", "ump", 8_000, fanout=4),
        ],
    )
    thr = Table("throughput", "", THR_COLS, [_thr("r", "window", "multihop", 1e5 * w**0.5, window=w) for w in (1, 4, 16, 64)])
    cost = Table(
        "cost_per_hop",
        "",
        ["run_id", "suite", "transport", "routing", "kind", "size", "window", "fanout", "hops_min", "hops_max", "slope_ns_per_hop", "r2"],
        [("r", "hops", "multihop", "ring", "rtt", 64, 16, -1, 1, 4, 2_500.0, 0.99)],
    )
    res = Table(
        "resources",
        "",
        ["run_id", "suite", "case", "transport", "routing", "component", "rss_bytes", "cpu_s", "duration_ns"],
        [
            ("r", "resources", "a", "multihop", "direct", "channel", 300 << 10, 0.1, 10**9),
            ("r", "resources", "b", "ump", "direct", "channel", 200 << 10, 0.1, 10**9),
            ("r", "resources", "c", "multihop", "direct", "idle-monitor", 20 << 20, 0.005, 5 * 10**8),
            ("r", "resources", "d", "ump", "direct", "idle-monitor", 20 << 20, 0.001, 5 * 10**8),
        ],
    )
    machines = Table("machines", "", ["run_id", "cores"], [("r", 2)])
    found = find({"latency": lat, "throughput": thr, "cost_per_hop": cost, "resources": res, "machines": machines})
    text = [(f.suite, f.finding, format_amount(f.value, f.unit), f.reading) for f in found]
    assert text == [
        ("hops", "round-trip cost per monitor hop, 64 B (hops 1-4, r² 0.99)", "2.5 µs/hop", "+25 % per hop"),
        ("routing", "ring: round trip, median over core pairs, 64 B [virtual cores 0-3 on 2 CPUs]", "4 µs", "2.0x slower"),
        ("routing", "ring: bind time, median over core pairs [virtual cores 0-3 on 2 CPUs]", "250 µs", "2.0x faster"),
        ("window", "best window: 64, one-way 64 B", "800 k msg/s", "2.0x faster"),  # against the default, 16
        ("fanout", "UMP publish round trip to 4 receivers", "8 µs", "8.0x slower"),
        ("resources", "direct: memory per multi-hop channel (RSS growth)", "300 KiB", "1.50x more"),
        ("resources", "CPU of an idle monitor (worst mode: direct)", "1 % of a CPU", ""),
    ]


def test_findings_per_run_and_amounts() -> None:
    lat = Table(
        "latency", "", LAT_COLS, [_lat(r, "channels", t, v) for r, t, v in (("a", "ump", 1000), ("a", "multihop", 3000), ("b", "multihop", 2000))]
    )
    found = find({"latency": lat})
    assert [(f.run_id, f.baseline_value, f.ratio) for f in found] == [("a", 1000, 3.0), ("b", None, None)]
    assert found[1].reading == ""
    assert Finding("r", "s", "x", 1.0, "ns", "y", 1.0).reading == "the same"
    assert [
        format_amount(v, u)
        for v, u in ((950, "ns"), (12_345, "ns"), (2.5e6, "ns"), (3e9, "ns"), (5e6, "msg/s"), (512, "B"), (3 << 20, "B"), (0.25, "cpu"))
    ] == ["950 ns", "12.3 µs", "2.5 ms", "3 s", "5 M msg/s", "512 B", "3 MiB", "25 % of a CPU"]


# -- a synthetic bench-all run, analysed ------------------------------------------------------------

FIGURES = {"ump": 1_000, "multihop": 12_000, "pipe": 24_000}


def _bench_like(out: Path) -> Path:
    """One run of every suite's shape with constant latencies (exact percentiles) and known rates."""
    n = 200
    send = np.arange(n, dtype=np.int64) * 100_000
    with TraceWriter(out, run_id="synthetic", suite="all", machine={"cores": 2}) as w:

        def rtt(suite: str, p: dict[str, Any], lat: int, k: int = n) -> None:
            p = dict(p, suite=suite, kind="rtt")
            w.add_messages(case_name(p), p, send[:k], send[:k] + lat, suite=suite)
            w.add_case(case_name(p), p, messages=k, duration_ns=10**9, suite=suite)

        def oneway(suite: str, p: dict[str, Any], rate: float, **extra: Any) -> None:
            p = dict(p, suite=suite, kind="oneway")
            w.add_case(case_name(p), p, messages=int(rate), duration_ns=10**9, kind="oneway", suite=suite, **extra)

        for suite in ("channels", "peers"):
            for t, lat in FIGURES.items():
                if suite == "channels" and t == "pipe":
                    continue
                p = {
                    "transport": t,
                    "routing": None if t == "pipe" else "direct",
                    "size": 64,
                    "src_core": 0,
                    "dst_core": 1,
                    "window": 16 if t == "multihop" else -1,
                }
                rtt(suite, p, lat)
                oneway(suite, p, 10**9 / lat)
        for h, dst in ((1, 0), (2, 1), (4, 3)):
            rtt(
                "hops",
                {"transport": "multihop", "routing": "ring", "size": 64, "window": 16, "hops": h, "src_core": 0, "dst_core": dst},
                5_000 + 3_000 * h,
            )
        for mode, factor in (("direct", 1), ("fat-tree", 3)):
            for s in range(4):
                for d in range(4):
                    p = {"transport": "multihop", "routing": mode, "window": 16, "hops": 1 + (s != d), "src_core": s, "dst_core": d}
                    rtt("routing", dict(p, size=64, op="rtt"), 10_000 * factor, k=20)
                    rtt("routing", dict(p, size=-1, op="bind"), 400_000, k=3)
        for win in (1, 16, 64):
            oneway(
                "window",
                {"transport": "multihop", "routing": "direct", "size": 64, "window": win, "hops": 2, "src_core": 0, "dst_core": 1},
                10_000 * win,
            )
        for k in (1, 2, 4):
            rtt("fanout", {"transport": "ump", "routing": "direct", "size": 64, "fanout": k, "hops": 0, "src_core": 0}, 1_000 * k * k, k=50)
        for t, rss in (("ump", 200 << 10), ("multihop", 300 << 10)):
            for comp in ("channel", "monitor", "idle-monitor"):
                oneway(
                    "resources",
                    {"transport": t, "routing": "direct", "size": 64, "component": comp, "channels": 16, "links": 2},
                    400,
                    rss_bytes=rss,
                    cpu_s=0.01,
                )
    return w.run_dir


@pytest.fixture(scope="module")
def report_dir(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    traces = _bench_like(tmp_path_factory.mktemp("synthetic"))
    out = tmp_path_factory.mktemp("synthetic-report")
    run([str(traces)], out)
    return out


def test_findings_csv_of_a_bench_like_run(report_dir: Path) -> None:
    with (report_dir / "findings.csv").open(newline="") as f:
        rows = {(r["suite"], r["finding"]): r for r in csv.DictReader(f)}
    assert rows[("channels", "multi-hop round trip, 64 B (p50)")]["reading"] == "12x slower"
    assert rows[("peers", "UMP round trip, 64 B (p50)")]["reading"] == "24x faster"
    assert float(rows[("peers", "UMP one-way, 64 B")]["ratio"]) == pytest.approx(24.0, rel=1e-3)
    hop = rows[("hops", "round-trip cost per monitor hop, 64 B (hops 1-4, r² 1.00) [virtual cores 0-3 on 2 CPUs]")]
    assert float(hop["value"]) == pytest.approx(3_000) and float(hop["baseline_value"]) == 8_000
    fat = rows[("routing", "fat-tree: round trip, median over core pairs, 64 B [virtual cores 0-3 on 2 CPUs]")]
    assert (float(fat["value"]), fat["reading"]) == (30_000, "3.0x slower")
    assert rows[("window", "best window: 64, one-way 64 B")]["reading"] == "4.0x faster"
    assert rows[("fanout", "UMP publish round trip to 4 receivers")]["reading"] == "16x slower"
    assert rows[("resources", "direct: memory per multi-hop channel (RSS growth)")]["reading"] == "1.50x more"
    assert [s for s, _ in rows] == sorted([s for s, _ in rows], key=["channels", "peers", "hops", "routing", "window", "fanout", "resources"].index)


def test_report_reads_findings_then_plots_then_tables_then_notes(report_dir: Path) -> None:
    md = (report_dir / "report.md").read_text()
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert heads == ["## Findings", "## Plots", "## Detailed tables", "## Notes"]
    first_screen = md.splitlines()[:30]
    assert any("| peers | UMP round trip, 64 B (p50) | 1 µs | Pipe round trip: 24 µs | 24x faster |" == line for line in first_screen), "\n".join(
        first_screen
    )
    # The per-case latency table (more than MAX_SHOWN rows) is a link, not a wall of rows.
    with (report_dir / "latency.csv").open(newline="") as f:
        cases = len(list(csv.DictReader(f)))
    assert cases > MAX_SHOWN
    assert f"Data: [latency.csv](latency.csv), {cases} rows (too long to show here: see the CSV)." in md
    assert sum(1 for line in md.splitlines() if line.startswith("| synthetic | ")) < cases
    html = (report_dir / "report.html").read_text()
    assert html.index('id="findings"') < html.index('id="plots"') < html.index('id="tables"') < html.index('id="notes"')


# -- report.html in a real browser ---------------------------------------------------------------------

CHECK_SCRIPT = """
<script>
window.addEventListener("load", function () {
  var imgs = Array.from(document.images);
  var broken = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  var f = document.getElementById("findings");
  var box = f ? f.getBoundingClientRect() : null;
  var out = document.createElement("pre");
  out.id = "browser-check";
  out.textContent = JSON.stringify({
    images: imgs.length, broken: broken.map(function (i) { return i.alt; }),
    findingRows: f ? f.tBodies[0].rows.length : 0,
    findingsOnFirstScreen: !!box && box.top < window.innerHeight && box.height > 0,
    summary: (document.getElementById("summary") || {}).textContent || ""
  });
  document.body.appendChild(out);
});
</script>
"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("Chromium is required for the report test: bash .ci/setup installs it (apt-get install chromium)")


def _headless(browser: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--window-size=1280,1000",
        f"--user-data-dir={cwd / 'profile'}",
        "--virtual-time-budget=10000",
    ]
    return subprocess.run([browser, *flags, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_report_html_in_headless_chromium(report_dir: Path, tmp_path: Path) -> None:
    import json

    from matplotlib.image import imread

    browser = _chromium()
    page = tmp_path / "report.html"  # a copy of the report with the checking script appended
    page.write_text((report_dir / "report.html").read_text().replace("</body>", CHECK_SCRIPT + "</body>"))
    shot = tmp_path / "screenshot.png"
    r = _headless(browser, f"--screenshot={shot}", (report_dir / "report.html").as_uri(), cwd=tmp_path)
    assert shot.exists(), r.stderr[-3000:]
    pixels = imread(shot)
    assert pixels.shape[:2] == (1000, 1280) and float(pixels[..., :3].std()) > 0.02, "the screenshot is blank"
    r = _headless(browser, "--dump-dom", page.as_uri(), cwd=tmp_path)
    found = re.search(r'<pre id="browser-check">(.*?)</pre>', r.stdout, re.S)
    assert found, r.stdout[-2000:] + r.stderr[-3000:]
    check = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    pngs = [p for p in report_dir.glob("*.png")]
    assert check["images"] == len(pngs) > 5 and check["broken"] == []
    assert check["findingRows"] >= 10 and check["findingsOnFirstScreen"]
    assert "Runs: synthetic" in check["summary"]


# -- the command, with its own JVM ----------------------------------------------------------------------


def test_analyze_prints_progress_and_paths_only(tmp_path: Path) -> None:
    traces = _bench_like(tmp_path / "t")
    out = tmp_path / "rep"
    env = dict(os.environ)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    with subprocess.Popen(
        [sys.executable, "-m", "multihop.cli", "analyze", str(traces), "-o", str(out), "--master", "local[2]"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as p:
        try:
            stdout, stderr = p.communicate(timeout=300)
        finally:
            p.kill()
    assert p.returncode == 0, stderr
    assert stdout.splitlines() == [f"report: {out / 'report.md'}", f"        {out / 'report.html'}"]
    lines = stderr.splitlines()
    assert lines and all(line.startswith("analyze: ") for line in lines), stderr
    assert [line.split(":")[1].split()[0] for line in lines] == ["traces", "starting", "computing", "drawing", "writing"]
    assert "WARN" not in stderr and "log4j" not in stderr
    from multihop.analysis.spark import jvm_log_path

    assert not jvm_log_path().with_name(f"spark-{p.pid}.log").exists()  # the JVM's output went there, then away


def test_setup_installs_chromium_or_says_how() -> None:
    assert "bash .ci/ensure-chromium" in (ROOT / ".ci" / "setup").read_text()
    script = [shutil.which("bash") or "/bin/bash", str(ROOT / ".ci" / "ensure-chromium")]
    ok = subprocess.run(script, capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]})
    assert ok.returncode == 0 and ok.stderr == ""  # this machine has it: silent
    if os.getuid() == 0:  # the not-root path, without installing anything
        script = [shutil.which("setpriv") or "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *script]
    r = subprocess.run(script, capture_output=True, text=True, timeout=60, env={"PATH": "/nonexistent"})
    assert r.returncode == 1
    assert r.stderr.startswith(
        "setup: Chromium is missing (the report test opens report.html in it), and installing it needs root: run 'sudo apt-get install -y chromium'"
    )
