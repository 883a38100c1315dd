"""One "machine" of a fabric test: a runtime joined to a fabric, run inside a network namespace (issue 27).

Started by tests/fabric/test_fabric_runtime.py with ``ip netns exec`` (tests/netns.py); it reports what it sees as
JSON lines on stdout, each with ``t`` (CLOCK_MONOTONIC nanoseconds: every namespace of the machine shares that
clock, so the test compares times across machines), and stops when its stdin closes (or after ``--max-seconds``).

``serve``: start runtime ``--runtime`` with the fabric and export, on its second core,
  ``echo`` (fabric): every message back, each on the channel it came on;
  ``sink`` (fabric): takes numbered messages (8-byte little-endian first), checks the sequence, reports at the end;
  ``private`` (local only): must never be reachable from the fabric.
``client``: start runtime ``--runtime`` with the fabric, then run ``--mode`` against ``--target`` (``svc@RT``):
  ``rpc``: ``--count`` numbered messages on each of ``--channels`` channels, each echo checked (FIFO, no loss, no
  duplicate), window ``--window``; ``oneway``: ``--count`` numbered messages to a sink in batches, then close;
  ``hold``: a numbered message every 10 ms, echoes checked, until the channel closes (reports when and how many);
  ``probe``: the refusals (a local-only service, a UMP bind, handles on a bridged channel), each reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import multihop as mh
import multihop.idl as idl

T = TypeVar("T")
ECHO_IF = Path(__file__).resolve().parents[2] / "flounder-idl" / "echo.if"


class Echo:
    """The Flounder echo interface's handler (flounder-idl/echo.if)."""

    def echo(self, request: bytes) -> bytes:
        return request

    def say(self, text: str) -> str:
        return f"you said {text}"

    def bye(self) -> None:
        pass


def emit(event: str, **kw: Any) -> None:
    kw.update(event=event, t=time.monotonic_ns())
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def fabric_of(a: argparse.Namespace) -> mh.Fabric:
    return mh.Fabric(a.fabric, listen=a.listen, connect=a.connect, lease=a.lease)


def number(m: bytes) -> int:
    return int.from_bytes(m[:8], "little")


def serve(a: argparse.Namespace) -> None:
    with mh.Runtime.start(a.runtime, cores=[0, 1], fabric=fabric_of(a)) as rt:
        d = rt.dispatcher(1)
        echo = d.export("echo", fabric=True, backlog=128)
        sink = d.export("sink", fabric=True)
        private = d.export("private")
        flounder = idl.load(ECHO_IF).EchoBinding.export(d, "fecho", Echo(), fabric=True)

        def echo_one(ch: mh.Channel) -> None:
            try:
                while True:
                    ch.send_batch(ch.recv_batch(64, timeout=None))
            except mh.ChannelClosed:
                pass

        def accept_echo() -> None:
            while True:
                ch = echo.accept(timeout=None)
                threading.Thread(target=echo_one, args=(ch,), daemon=True).start()

        def take_sink() -> None:
            while True:
                ch = sink.accept(timeout=None)
                got, errors, first = 0, "", None
                try:
                    while True:
                        for m in ch.recv_batch(256, timeout=None):
                            if first is None:
                                first = time.monotonic_ns()
                            if number(m) != got and not errors:
                                errors = f"message {number(m)} where {got} was due"
                            got += 1
                except mh.ChannelClosed:
                    pass
                emit("sink_done", received=got, errors=errors, first_t=first)

        for fn in (accept_echo, take_sink):
            threading.Thread(target=fn, daemon=True).start()
        emit("ready", dir=str(rt.dir), monitors=rt.monitor_pids, bridge=rt._bridge.pid if rt._bridge else None)
        wait_for_stdin(a)
        del private
        flounder.close()


STDIN_CLOSED = threading.Event()


def read_stdin(runtime: str) -> None:
    """Serve the test's requests (``status``) until stdin closes."""
    for line in sys.stdin:
        if line.strip() == "status":
            from multihop.fabric import status

            try:
                emit("status", status=status(mh.Runtime.attach(runtime).dir))
            except mh.MultihopError as e:
                emit("status", status={"error": str(e)})
    STDIN_CLOSED.set()


def wait_for_stdin(a: argparse.Namespace) -> None:
    STDIN_CLOSED.wait(a.max_seconds)


def until_bound(make: Callable[[], T], timeout: float = 20.0) -> T:
    """``make()`` (a bind across the fabric), retried on BindError until the target runtime's services are known
    here, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return make()
        except mh.BindError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def bind(d: mh.Dispatcher, target: str, window: int) -> mh.Channel:
    """A multi-hop channel to `target` (``svc@RUNTIME``), once it can be bound."""
    return until_bound(lambda: d.bind(target, transport="multihop", window=window, timeout=5.0))


def rebind(d: mh.Dispatcher, a: argparse.Namespace) -> None:
    """After a close: bind the target again until it works (a peer back) or ``--rebind-seconds`` pass; report the
    first refusal (and how long that bind took) and the outcome. A channel is never resumed: this is a new one."""
    deadline = time.monotonic() + a.rebind_seconds
    first: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            ch = d.bind(a.target, transport="multihop", timeout=2.0)
            ch.send(b"again!!!", timeout=10)
            echo = ch.recv(timeout=10)
            ch.close()
            emit("rebind", outcome="bound", echo=echo.decode(), first_refusal=first)
            return
        except mh.MultihopError as e:
            if first is None:
                first = {"error": type(e).__name__, "message": str(e), "seconds": time.monotonic() - t0}
            time.sleep(0.2)
    emit("rebind", outcome="refused", first_refusal=first)


def client(a: argparse.Namespace) -> None:
    with mh.Runtime.start(a.runtime, cores=[0, 1], fabric=fabric_of(a)) as rt:
        d = rt.dispatcher(1)
        emit("ready", dir=str(rt.dir), monitors=rt.monitor_pids, bridge=rt._bridge.pid if rt._bridge else None)
        if a.mode == "rpc":
            chans = [bind(d, a.target, a.window) for _ in range(a.channels)]
            emit("bound", channels=len(chans))
            t0 = time.perf_counter()
            size = max(8, a.size)
            pad = bytes(size - 8)
            errors = []
            lock = threading.Lock()

            def run(ch: mh.Channel) -> None:
                sent = got = 0
                while got < a.count:
                    while sent < a.count and sent - got < a.window:
                        ch.send(sent.to_bytes(8, "little") + pad)
                        sent += 1
                    m = ch.recv(timeout=30)
                    if number(m) != got or len(m) != size:
                        with lock:
                            errors.append(f"echo {number(m)} ({len(m)} B) where {got} was due")
                        return
                    got += 1

            threads = [threading.Thread(target=run, args=(ch,)) for ch in chans]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            secs = time.perf_counter() - t0
            emit("done", count=a.count * len(chans), seconds=secs, errors=errors, rtt_us=secs / a.count * 1e6 if len(chans) == 1 else None)
            if a.stay:
                wait_for_stdin(a)  # the channels stay open for the test to look at
            for ch in chans:
                ch.close()
            return
        elif a.mode == "oneway":
            ch = bind(d, a.target, a.window)
            emit("bound", channels=1)
            t0 = time.perf_counter()
            pad = bytes(max(0, a.size - 8))
            batch = 64
            for start in range(0, a.count, batch):
                ch.send_batch([i.to_bytes(8, "little") + pad for i in range(start, min(a.count, start + batch))], timeout=60)
            ch.flush(timeout=120)
            secs = time.perf_counter() - t0
            emit("done", count=a.count, seconds=secs, msgs_per_s=a.count / secs)
            ch.close()
        elif a.mode == "hold":
            ch = bind(d, a.target, 4)
            emit("bound", channels=1)
            sent = got = 0
            try:
                while not STDIN_CLOSED.is_set():
                    ch.send(sent.to_bytes(8, "little"), timeout=30)
                    sent += 1
                    m = ch.recv(timeout=30)
                    if number(m) != got:
                        emit("error", what=f"echo {number(m)} where {got} was due")
                        return
                    got += 1
                    time.sleep(0.01)
                ch.close()
                return
            except mh.ChannelClosed as e:
                emit("closed", sent=sent, echoed=got, message=str(e))
            except mh.MultihopError as e:
                emit("error", what=f"{type(e).__name__}: {e}", sent=sent, echoed=got)
                return
            if a.rebind_seconds > 0:
                rebind(d, a)
        elif a.mode == "flounder":
            echo = idl.load(ECHO_IF)
            b = until_bound(lambda: echo.EchoBinding.bind(d, a.target, transport="multihop", timeout=5))
            emit("bound", channels=1)
            said = [b.rpc.say(f"call {i}", timeout=10) for i in range(a.count)]
            blobs = [b.rpc.echo(bytes([i % 256]) * (i * 37 % 4096), timeout=10) for i in range(a.count)]
            ok = said == [f"you said call {i}" for i in range(a.count)] and blobs == [bytes([i % 256]) * (i * 37 % 4096) for i in range(a.count)]
            emit("done", count=a.count, ok=ok, first=said[:2])
            b.channel.close()
        elif a.mode == "probe":
            for target, transport in ((a.target.replace("echo@", "private@"), "multihop"), (a.target, "ump")):
                try:
                    d.bind(target, transport=transport, timeout=2.0)
                    emit("probe", target=target, transport=transport, outcome="bound")
                except mh.MultihopError as e:
                    emit("probe", target=target, transport=transport, outcome=type(e).__name__, message=str(e))
            ch = bind(d, a.target, 16)
            r, w = os.pipe()
            try:
                ch.send(b"with a handle", handles=[r], timeout=5)
                emit("probe", target=a.target, transport="handles", outcome="sent")
            except mh.CapSendError as e:
                emit("probe", target=a.target, transport="handles", outcome="CapSendError", reason=e.reason, message=str(e))
            finally:
                os.close(r)
                os.close(w)
            ch.send(b"still works")
            emit("probe", target=a.target, transport="after", outcome=ch.recv(timeout=10).decode())
            ch.close()
        wait_for_stdin(a) if a.stay else None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["serve", "client"])
    p.add_argument("--runtime", required=True)
    p.add_argument("--fabric", default="lab")
    p.add_argument("--listen", action="append", default=[])
    p.add_argument("--connect", action="append", default=[])
    p.add_argument("--lease", type=float, default=3.0)
    p.add_argument("--target", default="")
    p.add_argument("--mode", default="rpc", choices=["rpc", "oneway", "hold", "probe", "flounder"])
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--window", type=int, default=16)
    p.add_argument("--channels", type=int, default=1)
    p.add_argument("--stay", action="store_true")
    p.add_argument("--rebind-seconds", type=float, default=0.0)
    p.add_argument("--max-seconds", type=float, default=170.0)
    a = p.parse_args()
    threading.Thread(target=read_stdin, args=(a.runtime,), daemon=True).start()
    try:
        (serve if a.role == "serve" else client)(a)
    except Exception as e:  # reported, so the test names it
        emit("error", what=f"{type(e).__name__}: {e}")
        raise


if __name__ == "__main__":
    main()
