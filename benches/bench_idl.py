"""Generated Flounder stubs against raw channel calls, speaking flounder-idl/bench.if end to end.

Usage::

    .venv/bin/python benches/bench_idl.py [--n 200000] [--rounds 5] [--rtt 20000] [--size 64] [--runtime NAME]

A spawned server process (pinned to the CPU of core 1, this process to the CPU of core 0, as
``multihop.bench.peers`` does) serves bench.if over a real UMP channel.  Each phase opens with
``start(run, count, size, from_core)`` answered by ``ready(run)``, and every round ends with
``nop()`` answered by ``done(run, received, bytes, elapsed)``: what the server saw, which the
client checks (every message arrived).

1. **three** (run 1), the stub-cost case, alternating in the same run between
   * raw: ``ch.send(data)`` of the 26 bytes of ``three(a, b, c)``, encoded once beforehand;
   * stub: ``b.tx.three(a=..., b=..., c=...)``, which encodes and sends the same bytes every time.
   The sender's own cost of each, in bursts of 2000 that fit the ring, each followed by an
   untimed nop/done exchange that returns once the server has taken it (median burst per round, median over ``--rounds``), and their ratio
   (goal: stub <= 1.5x raw); then the same end to end, a stream as fast as the server takes it
   (receiver-bound), each round closed by nop/done.
2. **rtt** (run 2): round trips of the rpc ``rtt(in seq, out seq_back)``, alternating between the
   stub ``b.rpc.rtt(seq=i)`` and raw ``ch.send(call bytes); ch.recv()``; ``--rtt`` per round.
3. **req/resp** (run 3): ``--rtt`` timed messages ``req(seq, t_send, payload[--size])`` echoed as
   ``resp(seq, t_send, t_recv, payload)``; one-way (server clock minus sender clock, both
   CLOCK_MONOTONIC) and round-trip medians.

Then the per-message cost of encoding: on the native fast path (a message of scalars: stub less
raw send, from the bursts) and in the Python encoder (the stub over a channel whose ``send`` does
nothing and which has no fast path, less the bare call); and of decoding (``decode`` of the 26
bytes into a typed record), in this process.
Without ``--runtime`` it starts a runtime on cores 0-1 and stops it at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import multihop as mh
import multihop.idl

ROOT = Path(__file__).resolve().parent.parent
BENCH_IF = ROOT / "flounder-idl" / "bench.if"
TYPES_IF = ROOT / "flounder-idl" / "types.if"
SERVICE = "bench-idl"
T = 60.0  # seconds any single wait may take

_CTX = mp.get_context("spawn")


def _load() -> Any:
    """The generated binding module of bench.if."""
    return mh.idl.load(BENCH_IF, imports=[TYPES_IF])


def server(name: str, core: int, cpu: int | None, ready: Any) -> None:
    """Serve bench.if until the client closes: count ``three``s, answer start, nop, rtt and req."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    mod = _load()
    three = mod.MESSAGE_NUMBERS["three"]
    rt = mh.Runtime.attach(name)
    with rt.dispatcher(core) as d:
        svc = d.export(SERVICE)
        ready.set()
        ch = svc.accept(timeout=30)
        b = mod.BenchBinding(ch)
        run, received, nbytes, t0 = 0, 0, 0, time.perf_counter_ns()
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline:
            try:
                batch = ch.recv_batch(4096, timeout=T)
            except mh.ChannelClosed:
                return
            for m in batch:
                received += 1
                nbytes += len(m)
                if len(m) == 26 and m[0] == three and m[1] == 0:
                    continue  # the stub-cost stream: counted, not decoded (as fast as the raw receiver)
                msg = mod.decode(m)
                if msg.name == "start":
                    run, received, nbytes, t0 = msg.run, 0, 0, time.perf_counter_ns()
                    b.tx.ready(run=run, timeout=T)
                elif msg.name == "nop":  # end of a round: what arrived since the last start or nop
                    b.tx.done(run=run, received=received - 1, bytes=nbytes - len(m), elapsed=time.perf_counter_ns() - t0, timeout=T)
                    received, nbytes, t0 = 0, 0, time.perf_counter_ns()
                elif msg.name == "rtt_call":
                    b.tx.rtt_response(seq_back=msg.seq, timeout=T)
                elif msg.name == "req":
                    b.tx.resp(seq=msg.seq, t_send=msg.t_send, t_recv=time.perf_counter_ns(), payload=msg.payload, timeout=T)
                elif msg.name != "three":
                    raise mh.ProtocolError(f"bench server: unexpected message {msg!r}")


class _NullChannel:
    """A channel whose send does nothing: isolates the stub's own work."""

    def send(self, data: bytes, timeout: float | None = None) -> None:
        return None

    def recv(self, timeout: float | None = None) -> bytes:
        raise mh.Timeout("null channel")

    def try_recv(self) -> None:
        return None


def _per_call_ns(fn: Callable[[int], None], n: int) -> float:
    t0 = time.perf_counter_ns()
    fn(n)
    return (time.perf_counter_ns() - t0) / n


class Client:
    """The client side of the bench.if protocol over one channel."""

    def __init__(self, mod: Any, ch: mh.Channel) -> None:
        self.mod, self.ch = mod, ch
        self.b = mod.BenchBinding(ch)

    def expect(self, name: str) -> Any:
        """The next message, which must be ``name``."""
        msg = self.b.rx.next(timeout=T)
        if msg.name != name:
            raise mh.ProtocolError(f"expected {name} from the bench server, got {msg!r}")
        return msg

    def start(self, run: int, count: int, size: int) -> None:
        """Open a phase: start(run, ...) -> ready(run)."""
        self.b.tx.start(run=run, count=count, size=size, from_core=0, timeout=T)
        if self.expect("ready").run != run:
            raise mh.ProtocolError("the bench server answered another run's start")

    def end_round(self, run: int, count: int, size: int) -> Any:
        """Close a round: nop() -> done(run, received, bytes, elapsed), checked against what was sent."""
        self.b.tx.nop(timeout=T)
        done = self.expect("done")
        if (done.run, done.received, done.bytes) != (run, count, count * size):
            raise mh.ProtocolError(f"run {run}: sent {count} messages of {size} bytes, the server saw {done!r}")
        return done


def main(argv: list[str] | None = None) -> int:
    """Run the three phases and the in-process encode/decode costs; print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000, help="three() messages per round (default 200000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each kind, alternating (default 5)")
    ap.add_argument("--rtt", type=int, default=20_000, help="round trips per rtt round and req/resp (default 20000)")
    ap.add_argument("--size", type=int, default=64, help="req/resp payload bytes (default 64, at most 65536)")
    ap.add_argument("--runtime", default=None, help="use this running runtime (cores 0 and 1) instead of starting one")
    args = ap.parse_args(argv)
    n, rounds, nrtt = args.n, args.rounds, args.rtt
    if min(n, rounds, nrtt) < 1 or not 0 <= args.size <= 65536:
        ap.error("--n, --rounds and --rtt must be at least 1; --size between 0 and 65536")

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
        p = _CTX.Process(target=server, args=(rt.name, 1, server_cpu, ready), daemon=True)
        p.start()
        if not ready.wait(30):
            raise mh.MonitorError("the bench server did not start")
        with rt.dispatcher(0, pin=two_cpus) as d, d.bind(SERVICE, transport="ump", timeout=30) as ch:
            c = Client(mod, ch)
            b = c.b

            # -- 1. three: stub against raw send ---------------------------------------------
            def raw_round(k: int) -> None:
                send = ch.send
                for _ in range(k):
                    send(data)

            def stub_round(k: int) -> None:
                three = b.tx.three
                for _ in range(k):
                    three(a=1, b=2, c=3)

            def timed(body: Callable[[int], None]) -> float:
                t0 = time.perf_counter_ns()
                body(n)
                c.end_round(1, n, len(data))
                return (time.perf_counter_ns() - t0) / n

            # The sender's own cost: bursts that fit the ring, each followed by a
            # nop/done exchange (untimed) that returns once the server has taken
            # the burst, so the receiver is never the limit (the rounds above are
            # end to end: receiver-bound).
            burst = min(2000, n)

            def burst_ns(body: Callable[[int], None]) -> list[float]:
                out = []
                for _ in range(n // burst):
                    t0 = time.perf_counter_ns()
                    body(burst)
                    out.append((time.perf_counter_ns() - t0) / burst)
                    c.end_round(1, burst, len(data))
                return out

            c.start(1, n * (2 * rounds + 2) + 2 * rounds * (n // burst) * burst, len(data))
            timed(raw_round)  # warm up both paths (and the ring's pages)
            timed(stub_round)
            raw_ns: list[float] = []
            stub_ns: list[float] = []
            raw_burst: list[float] = []
            stub_burst: list[float] = []
            for _ in range(rounds):
                raw_ns.append(timed(raw_round))
                stub_ns.append(timed(stub_round))
                raw_burst.append(statistics.median(burst_ns(raw_round)))
                stub_burst.append(statistics.median(burst_ns(stub_round)))

            # -- 2. rtt: the rpc through the stub against the same bytes sent raw -----------
            call = mod.encode("rtt_call", seq=7)
            reply = mod.encode("rtt_response", seq_back=7)

            def raw_rtt(k: int) -> None:
                send, recv = ch.send, ch.recv
                for _ in range(k):
                    send(call)
                    if recv(T) != reply:
                        raise mh.ProtocolError("rtt: the raw round trip came back wrong")

            def stub_rtt(k: int) -> None:
                rtt = b.rpc.rtt
                for i in range(k):
                    if rtt(seq=i, timeout=T) != i:
                        raise mh.ProtocolError("rtt: seq_back differs from seq")

            def timed_rtt(body: Callable[[int], None]) -> float:
                t0 = time.perf_counter_ns()
                body(nrtt)
                ns = (time.perf_counter_ns() - t0) / nrtt
                c.end_round(2, nrtt, len(call))
                return ns

            c.start(2, nrtt * 2 * rounds, len(call))
            timed_rtt(raw_rtt)
            timed_rtt(stub_rtt)
            raw_rtt_ns: list[float] = []
            stub_rtt_ns: list[float] = []
            for _ in range(rounds):
                raw_rtt_ns.append(timed_rtt(raw_rtt))
                stub_rtt_ns.append(timed_rtt(stub_rtt))

            # -- 3. req/resp: timed messages with a payload -----------------------------------
            payload = bytes(range(256)) * (args.size // 256) + bytes(args.size % 256)
            req_size = len(mod.encode("req", seq=0, t_send=0, payload=payload))
            c.start(3, nrtt, req_size)
            one_way: list[int] = []
            round_trip: list[int] = []
            for i in range(nrtt):
                b.tx.req(seq=i, t_send=time.perf_counter_ns(), payload=payload, timeout=T)
                r = c.expect("resp")
                now = time.perf_counter_ns()
                if r.seq != i or r.payload != payload:
                    raise mh.ProtocolError(f"req/resp: response {r.seq} does not match request {i}")
                one_way.append(r.t_recv - r.t_send)
                round_trip.append(now - r.t_send)
            c.end_round(3, nrtt, req_size)

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
    sraw, sstub = statistics.median(raw_burst), statistics.median(stub_burst)
    ratio = sstub / sraw
    rraw, rstub = statistics.median(raw_rtt_ns), statistics.median(stub_rtt_ns)
    cpus = f"CPUs {rt.cpu_of(0)} -> {rt.cpu_of(1) if len(old_affinity) > 1 else rt.cpu_of(0)}"
    print(f"bench.if over UMP, {cpus}; every round checked against the server's done(received, bytes)")
    print(f"1. three(uint64 a, b, c): 26 bytes, {n} messages x {rounds} rounds")
    print("  the sender's cost (bursts of 2000 that fit the ring; median burst of each round):")
    print(f"  raw ch.send(data)          {sraw:8.1f} ns/msg   (rounds: {', '.join(f'{x:.0f}' for x in raw_burst)})")
    print(f"  stub b.tx.three(a=, b=, c=) {sstub:7.1f} ns/msg   (rounds: {', '.join(f'{x:.0f}' for x in stub_burst)})")
    print(f"  ratio stub / raw           {ratio:8.2f}x       (goal <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")
    print("  end to end (a stream of the whole round, as fast as the receiver takes it):")
    print(f"  raw ch.send(data)          {raw:8.1f} ns/msg   (rounds: {', '.join(f'{x:.0f}' for x in raw_ns)})")
    print(f"  stub b.tx.three(a=, b=, c=) {stub:7.1f} ns/msg   (rounds: {', '.join(f'{x:.0f}' for x in stub_ns)})")
    print(f"  ratio stub / raw           {stub / raw:8.2f}x")
    print(f"2. rpc rtt(in uint64 seq, out uint64 seq_back): {nrtt} round trips x {rounds} rounds")
    print(f"  raw ch.send + ch.recv      {rraw:8.1f} ns/rt    (rounds: {', '.join(f'{x:.0f}' for x in raw_rtt_ns)})")
    print(f"  stub b.rpc.rtt(seq=)       {rstub:8.1f} ns/rt    (rounds: {', '.join(f'{x:.0f}' for x in stub_rtt_ns)})")
    print(f"  ratio stub / raw           {rstub / rraw:8.2f}x")
    print(f"3. req/resp with a {args.size}-byte payload: {nrtt} timed messages")
    print(f"  one way (server clock - t_send) median {statistics.median(one_way) / 1000:8.2f} us")
    print(f"  round trip                      median {statistics.median(round_trip) / 1000:8.2f} us")
    print(f"encode, native fast path (stub less raw send, bursts)  {sstub - sraw:6.1f} ns/msg")
    print(f"encode, Python encoder (stub over a null channel, less the bare call) {enc_ns:6.1f} ns/msg")
    print(f"decode (mod.decode of the 26 bytes to a record)       {dec_ns:6.1f} ns/msg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
