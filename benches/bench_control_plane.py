"""The control plane at scale: bind rate, status time and monitor memory per channel.

Run: .venv/bin/python benches/bench_control_plane.py [--sizes 1000,10000,100000] [--quick]

For each size N, a fresh runtime on real cores 0 and 1 (two monitors, one per CPU: real cores,
not virtual), one process holding both ends: N multi-hop channels bound from core 0 to a service
on core 1 (taken from its backlog as they come), then:

- bind rate (binds per second), against the rate of the bare control exchange a bind is built
  of (connect, hello, one request, one reply: a status request with limit 0) measured in the same
  run: the ratio says how many such exchanges a bind costs;
- status time: the whole status (every channel listed; ~150 bytes per channel, streamed in
  pieces) against the summary (limit 0: counts only) of the same monitors;
- memory: the monitors' RSS growth per channel (their forwarding entries and records), against
  the growth of the process that holds both ends of every channel.

UMP channels are measured at 1,000 only: each end maps its ring segment and its peer's doorbell
(two descriptors and two mappings per channel per process), so 100,000 of them in one process
would pass the default limits (ulimit -n here is 20,000, vm.max_map_count 65,530); a multi-hop
channel costs its process neither (it rides on the dispatcher's one link).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import psutil

import multihop as mh
from multihop import _core


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def bare_exchange_rate(rt: mh.Runtime, seconds: float = 1.0) -> float:
    """Control exchanges per second: a status request with limit 0 (connect, hello, request, reply)."""
    sock = str(rt.dir / f"mon-{rt.cores[1]}.sock")
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        _core.monitor_status(sock, timeout=10, limit=0)
        n += 1
    return n / (time.monotonic() - t0)


def one_size(n: int, transport: str) -> dict[str, float]:
    name = f"cp-{os.getpid()}-{n}-{transport}"
    with mh.Runtime.start(name, cores=[0, 1]) as rt:
        mons = list(rt.monitor_pids.values())
        srv, cli = rt.dispatcher(1), rt.dispatcher(0)
        svc = srv.export("cp", backlog=65536)
        exchange = bare_exchange_rate(rt)
        mon0, me0 = sum(rss(p) for p in mons), rss(os.getpid())
        ends, peers = [], []
        t0 = time.monotonic()
        for _ in range(n):
            ends.append(cli.bind("cp", transport=transport, timeout=60))
            if svc.queued >= 1000:
                while svc.queued:
                    peers.append(svc.accept(timeout=10))
        while len(peers) < n:
            peers.append(svc.accept(timeout=10))
        bind_s = time.monotonic() - t0
        ends[-1].send(b"x")
        assert peers[-1].recv(timeout=10) == b"x"
        t0 = time.monotonic()
        full = rt.status()
        full_s = time.monotonic() - t0
        counts = [m["counts"]["channels"] for m in full["monitors"]]
        assert counts == [n, n], counts
        t0 = time.monotonic()
        for _ in range(5):
            rt.status(limit=0)
        summary_s = (time.monotonic() - t0) / 5
        mon1, me1 = sum(rss(p) for p in mons), rss(os.getpid())
        for ch in ends + peers:
            ch.close()
        return {
            "binds_per_s": n / bind_s,
            "exchanges_per_s": exchange,
            "status_s": full_s,
            "summary_s": summary_s,
            "mon_bytes_per_ch": (mon1 - mon0) / n / len(mons),
            "proc_bytes_per_ch": (me1 - me0) / n,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000", help="channel counts per monitor (multi-hop)")
    ap.add_argument("--quick", action="store_true", help="1,000 and 10,000 only")
    a = ap.parse_args()
    sizes = [1000, 10000] if a.quick else [int(s) for s in a.sizes.split(",")]
    os.environ.setdefault("MULTIHOP_RUNTIME_ROOT", tempfile.mkdtemp(prefix="mh-bench-cp-"))
    print("control plane: two monitors on real cores 0 and 1, both channel ends in this process")
    print(
        f"  {'channels':>9} {'transport':>9} | {'binds/s':>9} {'exchg/s':>9} {'ratio':>6} | "
        f"{'status':>9} {'summary':>9} {'ratio':>7} | {'monitor B/ch':>12} {'ends B/ch':>10} {'ratio':>6}"
    )
    rows = [(n, "multihop") for n in sizes] + [(1000, "ump")]
    for n, transport in rows:
        r = one_size(n, transport)
        print(
            f"  {n:>9,} {transport:>9} | {r['binds_per_s']:>9,.0f} {r['exchanges_per_s']:>9,.0f} "
            f"{r['exchanges_per_s'] / r['binds_per_s']:>5.1f}x | {r['status_s'] * 1000:>7.1f}ms {r['summary_s'] * 1000:>7.2f}ms "
            f"{r['status_s'] / r['summary_s']:>6.0f}x | {r['mon_bytes_per_ch']:>12,.0f} {r['proc_bytes_per_ch']:>10,.0f} "
            f"{r['mon_bytes_per_ch'] / max(r['proc_bytes_per_ch'], 1):>5.2f}x",
            flush=True,
        )
    print("  (ratio columns: bare control exchanges per bind; whole status over summary; a monitor's bytes per")
    print("   channel over the ends' process bytes per channel)")


if __name__ == "__main__":
    main()
