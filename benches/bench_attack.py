"""The attack suite's long soaks (the quick versions are tests/attack/).

Run: .venv/bin/python benches/bench_attack.py [--quick] [--cycles 200] [--updown 50] [--channels 64] [--messages 50000]

- start/stop cycles: ``Runtime.start`` on cores 0-2 (core 2 virtual on a 2-CPU machine), one UMP
  and one multi-hop channel used, ``stop``; this process's descriptors, threads and children, the
  runtime root's files, named shared memory and monitor processes counted before and after
  (growth must be 0). Baseline, same run: spawning the same number of bare interpreters
  (``python -c pass``, one per monitor) per cycle.
- ``multihop up`` / ``multihop down`` cycles from the shell, counted the same way.
- K multi-hop channels x M messages each way between two processes (cores 0 and 1, real cores),
  every message checked for loss, duplication and order; baseline, same run: the same over UMP.
- kill -9 and SIGSTOP/SIGCONT of every process kind mid-stream, with ten times the messages of the
  quick tests (see tests/attack/scenario.py).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(os.environ.setdefault("MULTIHOP_RUNTIME_ROOT", tempfile.mkdtemp(prefix="mh-bench-attack-")))
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent / "tests" / "attack")]

import psutil  # noqa: E402

import multihop as mh  # noqa: E402
import procs  # noqa: E402
import scenario  # noqa: E402


def snapshot() -> dict[str, object]:
    me = psutil.Process()
    monitors = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if "multihop.monitor" in " ".join(p.info["cmdline"] or []) and str(ROOT) in " ".join(p.info["cmdline"] or [])
    ]
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": me.num_threads(),
        "children": len([c for c in me.children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]),
        "monitors": len(monitors),
        "files": sum(1 for _ in ROOT.rglob("*")),
        "shm": len([n for n in os.listdir("/dev/shm") if "multihop" in n]),
    }


def settled() -> dict[str, object]:
    gc.collect()
    snap = snapshot()
    for _ in range(100):
        time.sleep(0.05)
        again = snapshot()
        if again == snap:
            break
        snap = again
    return snap


def cycle(name: str, i: int) -> None:
    with mh.Runtime.start(name, cores=[0, 1, 2]) as rt, rt.dispatcher(2) as srv, rt.dispatcher(0) as cli:
        svc = srv.export("cycle")
        for transport in ("ump", "multihop"):
            ch = cli.bind("cycle", transport=transport, timeout=10)
            ch.send(b"%d" % i)
            assert svc.accept(timeout=10).recv(timeout=10) == b"%d" % i
            ch.close()


def growth(before: dict[str, object], after: dict[str, object]) -> str:
    diff = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    return "none" if not diff else f"GROWTH {diff}"


def start_stop(cycles: int) -> None:
    name = f"soak-{os.getpid()}"
    cycle(name, -1)
    before = settled()
    t0 = time.monotonic()
    for i in range(cycles):
        cycle(name, i)
    per = (time.monotonic() - t0) / cycles
    after = settled()
    t0 = time.monotonic()
    for _ in range(min(cycles, 20)):
        for _ in range(3):
            subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare = (time.monotonic() - t0) / min(cycles, 20)
    print(
        f"  {cycles} start/use/stop cycles (3 monitors, cores 0-2, core 2 virtual): {per * 1000:.0f} ms per cycle; "
        f"3 bare interpreters {bare * 1000:.0f} ms: {per / bare:.2f}x"
    )
    print(f"    before {before}\n    after  {after}\n    growth: {growth(before, after)}")


def up_down(cycles: int) -> None:
    cli = [sys.executable, "-m", "multihop.cli"]
    name = f"updown-{os.getpid()}"
    before = settled()
    t0 = time.monotonic()
    for _ in range(cycles):
        subprocess.run([*cli, "up", name, "--cores", "0-1"], check=True, capture_output=True, timeout=60)
        subprocess.run([*cli, "down", name], check=True, capture_output=True, timeout=60)
    per = (time.monotonic() - t0) / cycles
    after = settled()
    t0 = time.monotonic()
    for _ in range(min(cycles, 20)):
        subprocess.run([*cli, "--help"], check=True, capture_output=True)
        subprocess.run([*cli, "--help"], check=True, capture_output=True)
    bare = (time.monotonic() - t0) / min(cycles, 20)
    print(
        f"  {cycles} `multihop up` / `multihop down` cycles: {per * 1000:.0f} ms per cycle; two `multihop --help` "
        f"{bare * 1000:.0f} ms: {per / bare:.2f}x"
    )
    print(f"    growth: {growth(before, after)}")


def streams(k: int, n: int, transport: str) -> tuple[float, bool]:
    name = f"streams-{transport}-{os.getpid()}"
    with mh.Runtime.start(name, cores=[0, 1]):
        ready, result, done = procs.CTX.Event(), procs.CTX.Queue(), procs.CTX.Barrier(2)
        t0 = time.monotonic()
        with (
            procs.child(procs.mh_stream_peer, name, 1, "server", "s", k, n, ready, result, done, transport),
            procs.child(procs.mh_stream_peer, name, 0, "client", "s", k, n, ready, result, done, transport),
        ):
            got = [result.get(timeout=900), result.get(timeout=900)]
        took = time.monotonic() - t0
    ok = all(sent == [n] * k and recvd == [n] * k for _, sent, recvd in got)
    return 2 * k * n / took, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20 cycles, 5 up/down, 16 x 10,000, scenarios at the tests' size")
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--updown", type=int, default=50)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--messages", type=int, default=50_000)
    a = ap.parse_args()
    if a.quick:
        a.cycles, a.updown, a.channels, a.messages = 20, 5, 16, 10_000
    print(f"attack soaks (machine: {os.cpu_count()} CPUs; runtime root {ROOT})")
    start_stop(a.cycles)
    up_down(a.updown)
    mh_rate, mh_ok = streams(a.channels, a.messages, "multihop")
    ump_rate, ump_ok = streams(a.channels, a.messages, "ump")
    print(
        f"  {a.channels} channels x {a.messages:,} messages each way, every one checked: multi-hop {mh_rate:,.0f} msg/s "
        f"({'0 lost, duplicated or reordered' if mh_ok else 'LOSS, DUPLICATION OR REORDER'}); UMP {ump_rate:,.0f} msg/s "
        f"({'clean' if ump_ok else 'BROKEN'}): {mh_rate / ump_rate:.2f}x UMP (real cores 0 and 1)"
    )
    n = 60_000 if a.quick else 600_000
    for action in ("kill", "stop"):
        for target in scenario.TARGETS:
            o = scenario.run(ROOT, f"sc-{action}-{target.replace(' ', '-')}-{os.getpid()}", target, action, n=n)
            try:
                scenario.check(o)
                verdict = "held"
            except AssertionError as e:
                verdict = f"BROKE: {e}"
            ends = {r: getattr(o, r) for r in ("client", "server")}
            late = {r: f"{v[2] - o.acted_at:.3f} s" for r, v in ends.items() if v and action == "kill" and r != target}
            print(
                f"  {action:>4} {target:<18} mid-stream ({n:,} msgs): {verdict}; "
                f"client {ends['client'][:2] if ends['client'] else '-'}, server {ends['server'][:2] if ends['server'] else '-'}"
                f"{', closed after ' + str(late) if late else ''}",
                flush=True,
            )


if __name__ == "__main__":
    main()
