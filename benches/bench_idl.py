"""Cost of a generated Flounder stub against a raw ``ch.send`` of the same bytes.

Usage::

    .venv/bin/python benches/bench_idl.py [--n 200000] [--rounds 5] [--runtime NAME]

Over a real UMP channel between two processes (this one pinned to the CPU of core 0, a spawned
receiver pinned to the CPU of core 1, as ``multihop.bench.peers`` does), the sender alternates,
in the same run, between

* **raw**: ``ch.send(data)`` of the 26 bytes of ``bench.three(a, b, c)``, encoded once beforehand;
* **stub**: ``b.tx.three(a=..., b=..., c=...)`` of the generated binding of ``flounder-idl/bench.if``,
  which encodes and sends the same bytes every time.

It prints the per-message cost of each (median over the rounds; each round sends ``--n`` messages
and waits for the receiver's acknowledgement) and their ratio (goal: stub <= 1.5x raw), then the
per-message cost of encoding (the stub over a channel whose ``send`` does nothing, less the bare
call) and of decoding (``decode`` of the 26 bytes into a typed record).  Without ``--runtime`` it
starts a runtime on cores 0-1 and stops it at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import multihop as mh
import multihop.idl

ROOT = Path(__file__).resolve().parent.parent
BENCH_IF = ROOT / "flounder-idl" / "bench.if"
TYPES_IF = ROOT / "flounder-idl" / "types.if"
SERVICE = "bench-idl"
END, QUIT, ACK = b"end-of-round", b"quit", b"ok"

_CTX = mp.get_context("spawn")


def _load() -> Any:
    return mh.idl.load(BENCH_IF, imports=[TYPES_IF])


def receiver(name: str, core: int, cpu: int | None, ready: Any) -> None:
    """Drain messages in batches; acknowledge each end-of-round marker; stop at quit."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(SERVICE)
        ready.set()
        ch = svc.accept(timeout=30)
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline:
            for m in ch.recv_batch(4096, timeout=60):
                if len(m) != 26:  # every data message is 26 bytes; markers are not
                    if m == END:
                        ch.send(ACK, timeout=60)
                    elif m == QUIT:
                        return


class _NullChannel:
    """A channel whose send does nothing: isolates the stub's own work."""

    def send(self, data: bytes, timeout: float | None = None) -> None:
        return None

    def recv(self, timeout: float | None = None) -> bytes:
        raise mh.Timeout("null channel")

    def try_recv(self) -> None:
        return None


def _per_call_ns(fn: Any, n: int) -> float:
    t0 = time.perf_counter_ns()
    fn(n)
    return (time.perf_counter_ns() - t0) / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000, help="messages per round (default 200000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each kind, alternating (default 5)")
    ap.add_argument("--runtime", default=None, help="use this running runtime (cores 0 and 1) instead of starting one")
    args = ap.parse_args(argv)
    n, rounds = args.n, args.rounds

    mod = _load()
    data = mod.encode("three", a=1, b=2, c=3)
    assert len(data) == 26 and mod.decode(data).name == "three"

    own = args.runtime is None
    rt = mh.Runtime.start(f"bench-idl-{os.getpid()}", cores=[0, 1]) if own else mh.Runtime.attach(args.runtime)
    p = None
    old_affinity = os.sched_getaffinity(0)
    try:
        two_cpus = len(old_affinity) > 1
        server_cpu = rt.cpu_of(1) if two_cpus else None
        ready = _CTX.Event()
        p = _CTX.Process(target=receiver, args=(rt.name, 1, server_cpu, ready), daemon=True)
        p.start()
        if not ready.wait(30):
            raise mh.MonitorError("the receiver did not start")
        with rt.dispatcher(0, pin=two_cpus) as d, d.bind(SERVICE, transport="ump", timeout=30) as ch:
            b = mod.BenchBinding(ch)

            def raw_round(k: int) -> None:
                send = ch.send
                for _ in range(k):
                    send(data)

            def stub_round(k: int) -> None:
                three = b.tx.three
                for _ in range(k):
                    three(a=1, b=2, c=3)

            def timed(body: Any) -> float:
                t0 = time.perf_counter_ns()
                body(n)
                ch.send(END, timeout=60)
                if ch.recv(timeout=60) != ACK:
                    raise mh.ProtocolError("the receiver answered something else than its ack")
                return (time.perf_counter_ns() - t0) / n

            timed(raw_round)  # warm up both paths (and the ring's pages)
            timed(stub_round)
            raw_ns: list[float] = []
            stub_ns: list[float] = []
            for _ in range(rounds):
                raw_ns.append(timed(raw_round))
                stub_ns.append(timed(stub_round))
            ch.send(QUIT, timeout=60)

        # Encode and decode on their own, in this process (still pinned).
        nb = mod.BenchBinding(_NullChannel())
        null_send = _NullChannel().send
        m = max(n, 100_000)

        def bare(k: int) -> None:
            for _ in range(k):
                null_send(data)

        def stub_null(k: int) -> None:
            three = nb.tx.three
            for _ in range(k):
                three(a=1, b=2, c=3)

        def decode(k: int) -> None:
            dec = mod.decode
            for _ in range(k):
                dec(data)

        enc_ns = statistics.median(_per_call_ns(stub_null, m) - _per_call_ns(bare, m) for _ in range(3))
        dec_ns = statistics.median(_per_call_ns(decode, m) for _ in range(3))
    finally:
        os.sched_setaffinity(0, old_affinity)
        if p is not None:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
        if own:
            rt.stop()

    raw, stub = statistics.median(raw_ns), statistics.median(stub_ns)
    ratio = stub / raw
    print(f"bench.three(uint64 a, b, c): 26 bytes, {n} messages x {rounds} rounds, UMP, "
          f"CPUs {rt.cpu_of(0)} -> {rt.cpu_of(1) if len(old_affinity) > 1 else rt.cpu_of(0)}")
    print(f"  raw ch.send(data)          {raw:8.1f} ns/msg   (rounds: {', '.join(f'{x:.0f}' for x in raw_ns)})")
    print(f"  stub b.tx.three(a=, b=, c=) {stub:7.1f} ns/msg   (rounds: {', '.join(f'{x:.0f}' for x in stub_ns)})")
    print(f"  ratio stub / raw           {ratio:8.2f}x       (goal <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")
    print(f"  encode (stub over a null channel, less the bare call) {enc_ns:6.1f} ns/msg")
    print(f"  decode (mod.decode of the 26 bytes to a record)       {dec_ns:6.1f} ns/msg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
