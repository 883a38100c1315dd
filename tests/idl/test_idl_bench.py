"""benches/bench_idl.py speaks bench.if end to end: run with tiny counts, it must finish and report
every phase (a lost or wrong message makes it fail: each round is checked against the server's done)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import multihop.idl as idl

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benches" / "bench_idl.py"


def test_bench_uses_every_message_of_bench_if() -> None:
    source = BENCH.read_text()
    iface = idl.parse(ROOT / "flounder-idl" / "bench.if", imports=[ROOT / "flounder-idl" / "types.if"])
    for m in iface.messages:
        name = m.rpc if m.rpc is not None else m.name
        assert re.search(rf"\b{name}\b", source), f"bench_idl.py never uses {m.name}"


def test_bench_idl_runs_the_protocol_with_small_counts() -> None:
    r = subprocess.run(
        [sys.executable, str(BENCH), "--n", "300", "--rounds", "1", "--rtt", "50", "--size", "33"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    out = r.stdout
    for needle in [
        "every round checked against the server's done",
        "1. three(uint64 a, b, c): 26 bytes, 300 messages x 1 rounds",
        "ratio stub / raw",
        "2. rpc rtt(in uint64 seq, out uint64 seq_back): 50 round trips x 1 rounds",
        "stub b.rpc.rtt(seq=)",
        "3. req/resp with a 33-byte payload: 50 timed messages",
        "one way",
        "encode",
        "decode",
    ]:
        assert needle in out, f"{needle!r} missing from:\n{out}"
