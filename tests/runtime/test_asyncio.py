"""asyncio over real channels between processes (multihop.aio).

The test process runs one event loop on core 0's dispatcher; peers in spawned
processes use the blocking API on core 1.  Every await is bounded
(``asyncio.wait_for``); a test waits for a task to be parked on the doorbell by
looking at the loop's bell (``watching``), never by sleeping.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable, TypeVar

import pytest

import aio_procs
import multihop as mh
import multihop.aio
import procs
from generated import import_file

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
TRANSPORTS = ["ump", "multihop"]


def unique_name(prefix: str = "t") -> str:
    from session import unique_name as un

    return un(prefix)


def run(coro: Awaitable[T], timeout: float = 60.0) -> T:
    """Run ``coro`` on a fresh event loop, bounded by ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))  # type: ignore[arg-type]


async def until(pred: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Yield to the loop until ``pred()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0)


def watching() -> int:
    """How many waits the running loop's doorbell has registered."""
    bell = mh.aio.bell_of()
    return 0 if bell is None else bell.watching


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_thousand_channels_served_by_one_loop(rt: mh.Runtime) -> None:
    """1,000 channels (half UMP, half multi-hop) from a peer process, each served by its own task on
    one event loop: one doorbell descriptor, no thread per channel, every message echoed."""
    k = 1000
    service = unique_name("many")
    bound, go, result = procs.CTX.Event(), procs.CTX.Event(), procs.CTX.Queue()

    async def main(d: mh.Dispatcher) -> None:
        svc = d.export(service, backlog=256)
        with procs.child(aio_procs.many_peer, rt.name, 1, service, k, bound, go, result) as p:
            chans = [await svc.accept_async(timeout=60) for _ in range(k)]
            assert sorted({c.transport for c in chans}) == ["multihop", "ump"]
            before = threads()

            async def echo(ch: mh.Channel) -> None:
                await ch.send_async(await ch.recv_async(timeout=60))

            tasks = [asyncio.create_task(echo(c)) for c in chans]
            await until(lambda: watching() == k, f"{k} receives parked on the doorbell")
            assert threads() <= before + 1, "a thread per channel?"
            bell = mh.aio.bell_of()
            assert bell is not None
            fds = os.listdir("/proc/self/fd")
            go.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
            assert result.get(timeout=60) == k
            assert watching() == 0
            assert len(os.listdir("/proc/self/fd")) <= len(fds) + 1
            p.join(30)
            assert p.exitcode == 0

    with rt.dispatcher(0) as d:
        run(main(d), 180)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_cancelled_receive_leaves_the_channel_usable(rt: mh.Runtime, transport: str) -> None:
    """A receive cancelled while parked, or at any point around its message's arrival, takes
    nothing: every echoed message is received exactly once, in order, by later receives."""
    service = unique_name("echo")
    ready = procs.CTX.Event()
    n = 300

    async def main(d: mh.Dispatcher) -> None:
        ch = await d.bind_async(service, transport=transport, timeout=30)
        # Parked, then cancelled: the channel goes on.
        t = asyncio.create_task(ch.recv_async())
        await until(lambda: watching() == 1, "the receive parked on the doorbell")
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(t, 10)
        assert watching() == 0
        await ch.send_async(b"after")
        assert await asyncio.wait_for(ch.recv_async(), 10) == b"after"
        # Cancelled at every point of the race with the echo's arrival.
        got: list[int] = []
        for i in range(n):
            await ch.send_async(i.to_bytes(4, "little"))
            t = asyncio.create_task(ch.recv_async(timeout=30))
            for _ in range(i % 5):
                await asyncio.sleep(0)
            t.cancel()
            try:
                got.append(int.from_bytes(await asyncio.wait_for(t, 30), "little"))
            except asyncio.CancelledError:
                # Message i is still in the channel: the next receive gets it (taking it now also
                # keeps a multi-hop window from filling up with echoes nobody reads).
                got.append(int.from_bytes(await ch.recv_async(timeout=30), "little"))
        assert got == list(range(n)), "a message was lost or duplicated by a cancelled receive"
        # Nothing polls: a receive parked on an idle channel is never woken before its timeout.
        before = mh.aio.stats()["wakeups"]
        with pytest.raises(mh.Timeout):
            await ch.recv_async(timeout=0.3)
        assert mh.aio.stats()["wakeups"] == before
        ch.close()

    with procs.child(procs.echo_server, rt.name, 1, service, ready) as p, rt.dispatcher(0) as d:
        assert ready.wait(30), "the echo service did not export in time"
        run(main(d))
        p.join(30)
        assert p.exitcode == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sigkilled_peer_raises_channel_closed_in_the_awaiting_task(rt: mh.Runtime, transport: str) -> None:
    service = unique_name("kill")
    ready = procs.CTX.Event()

    async def main(d: mh.Dispatcher) -> None:
        svc = d.export(service)
        with procs.child(aio_procs.bind_and_hold, rt.name, 1, service, transport, ready) as p:
            ch = await svc.accept_async(timeout=30)
            assert ch.transport == transport
            t = asyncio.create_task(ch.recv_async())
            await until(lambda: watching() == 1 and ready.is_set(), "the receive parked on the doorbell")
            os.kill(p.pid, signal.SIGKILL)
            with pytest.raises(mh.ChannelClosed):
                await asyncio.wait_for(t, 20)
            assert ch.close_cause == ("peer died" if transport == "ump" else "teardown")
            # `async for` over a channel whose peer died: a UMP end knows it died and raises;
            # a multi-hop TEARDOWN cannot tell a death from a close, so the loop just ends.
            if transport == "ump":
                with pytest.raises(mh.ChannelClosed):
                    async for _ in ch:
                        pass
            else:
                assert [m async for m in ch] == []

    with rt.dispatcher(0) as d:
        run(main(d))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_send_async_waits_for_room_without_blocking_the_loop(rt: mh.Runtime, transport: str) -> None:
    """A reader that reads nothing yet: a multi-hop window of 4 (credit) and then the held frames (four of
    64 messages; core-rs/dispatcher/src/multihop/held.rs), or a small UMP ring (room), fills up, the next send_async waits on
    the doorbell while another task keeps running, and it goes once the reader drains; everything
    arrives, in order."""
    service = unique_name("gate")
    ready, gate, result = procs.CTX.Event(), procs.CTX.Event(), procs.CTX.Queue()

    async def main(d: mh.Dispatcher) -> None:
        ch = await d.bind_async(service, transport=transport, window=4, max_message=64, timeout=30)
        sent: list[bytes] = []
        for i in range(100_000):  # fill: the window (multi-hop) or the ring (UMP)
            m = i.to_bytes(8, "little")
            try:
                ch.try_send(m)
            except mh.TxBusy:
                break
            sent.append(m)
        assert 0 < len(sent) < 100_000
        if transport == "multihop":
            assert len(sent) == 4 and ch.stats()["in_flight"] == 4
            for i in range(4, 4 + 256):  # no credit: each of these is held for the next one, and returns at once
                m = i.to_bytes(8, "little")
                await asyncio.wait_for(ch.send_async(m, timeout=60), 10)
                sent.append(m)
            assert ch.stats()["held"] == 256
        blocked = len(sent).to_bytes(8, "little")
        sender = asyncio.create_task(ch.send_async(blocked, timeout=60))
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while not sender.done() and ticks < 100_000:
                ticks += 1
                await asyncio.sleep(0.001)

        tick = asyncio.create_task(ticker())
        await until(lambda: watching() == 1 and ticks >= 50, "the send parked while the ticker ran")
        assert not sender.done(), "the send went without room"
        gate.set()
        await asyncio.wait_for(sender, 30)
        sent.append(blocked)
        await asyncio.wait_for(tick, 30)
        for i in range(len(sent), len(sent) + 200):  # more than the ring or window holds: waits again
            m = i.to_bytes(8, "little")
            await ch.send_async(m, timeout=30)
            sent.append(m)
        await ch.send_async(b"END", timeout=30)
        assert result.get(timeout=30) == b"".join(sent)
        ch.close()

    with procs.child(aio_procs.gated_reader, rt.name, 1, service, ready, gate, result) as p, rt.dispatcher(0) as d:
        assert ready.wait(30), "the reader did not export in time"
        run(main(d))
        p.join(30)
        assert p.exitcode == 0


def test_accept_async_and_async_for_while_the_loop_runs(rt: mh.Runtime) -> None:
    """accept_async waits for a peer process's blocking binds (UMP, then multi-hop) while another
    task runs; `async for` on each ends cleanly when the peer closes."""
    service = unique_name("acc")
    result = procs.CTX.Queue()

    async def main(d: mh.Dispatcher) -> None:
        svc = d.export(service)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while ticks < 100_000:
                ticks += 1
                await asyncio.sleep(0.001)

        tick = asyncio.create_task(ticker())
        with pytest.raises(mh.Timeout):
            await svc.accept_async(timeout=0.02)
        # Parked in accept with no client yet: the other task runs meanwhile.
        accepting = asyncio.create_task(svc.accept_async(timeout=60))
        before = ticks
        await until(lambda: watching() == 1 and ticks >= before + 20, "accept parked while the ticker ran")
        assert not accepting.done()
        with procs.child(aio_procs.binder, rt.name, 1, service, TRANSPORTS, result) as p:
            for t in TRANSPORTS:
                ch = await asyncio.wait_for(accepting, 60) if t == TRANSPORTS[0] else await svc.accept_async(timeout=30)
                assert ch.transport == t
                got = []
                async for m in ch:
                    got.append(m)
                    await ch.send_async(b"ok")
                assert got == [b"hello " + t.encode()]
                assert ch.close_cause in ("peer", "teardown")
            assert result.get(timeout=30) == "done"
            p.join(30)
        tick.cancel()

    with rt.dispatcher(0) as d:
        run(main(d))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_bind_async_cancelled_while_pending_tears_the_late_channel_down(rt: mh.Runtime, transport: str) -> None:
    """A bind the service holds (on_connect waits) is pending on the doorbell; cancelled, it gives
    up, and the channel the service sets up afterwards is closed for it."""
    service = unique_name("slow")
    ready, gate, result = procs.CTX.Event(), procs.CTX.Event(), procs.CTX.Queue()

    async def main(d: mh.Dispatcher) -> None:
        t = asyncio.create_task(d.bind_async(service, transport=transport, timeout=30))
        await until(lambda: watching() == 1, "the bind pending on the doorbell")
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(t, 10)

    with procs.child(aio_procs.slow_acceptor, rt.name, 1, service, ready, gate, result) as p, rt.dispatcher(0) as d:
        assert ready.wait(30), "the service did not export in time"
        run(main(d))
        gate.set()
        assert result.get(timeout=60) == "closed"
        p.join(30)
        assert p.exitcode == 0


def test_bind_async_errors(rt: mh.Runtime) -> None:
    async def main(d: mh.Dispatcher) -> None:
        with pytest.raises(mh.BindError):
            await d.bind_async(unique_name("nobody"), transport="ump", timeout=5)
        with pytest.raises(mh.BindError):
            await d.bind_async(unique_name("nobody"), transport="auto", timeout=5)
        with pytest.raises(ValueError, match="window"):
            await d.bind_async("x", transport="multihop", window=0)
        with pytest.raises(ValueError, match="transport"):
            await d.bind_async("x", transport="carrier-pigeon")
        with pytest.raises(TypeError, match="one of name or iref"):
            await d.bind_async()
        svc = d.export(unique_name("local"))
        ch = await d.bind_async(svc.name, transport="auto", timeout=5)
        peer = await svc.accept_async(timeout=5)
        with pytest.raises(ValueError, match="timeout"):
            await ch.recv_async(timeout=-1)
        with pytest.raises(TypeError, match="bytes-like"):
            await ch.send_async("text")  # type: ignore[arg-type]
        await ch.send_async(b"still fine")
        assert await peer.recv_async(timeout=5) == b"still fine"
        ch.close()
        assert [m async for m in peer] == []

    with rt.dispatcher(0) as d:
        run(main(d))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_flounder_next_async_and_rpc_async(rt: mh.Runtime, tmp_path: Path, transport: str) -> None:
    """The generated kvstore binding's rpc_async calls against a blocking server in another
    process; a message that came while an rpc waited is kept for rx.next_async."""
    out = tmp_path / "kvstore_if.py"
    r = subprocess.run(
        [sys.executable, "-m", "multihop.cli", "stubgen", str(ROOT / "flounder-idl" / "kvstore.if"), "--lang", "python", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    mod = import_file(out)
    service = unique_name("kv")
    ready = procs.CTX.Event()

    async def main(d: mh.Dispatcher) -> None:
        ch = await d.bind_async(service, transport=transport, timeout=30)
        b = mod.KvstoreBinding(ch, dispatcher=d)
        st = mod.status
        assert await b.rpc_async.put(key="a", value=b"1", overwrite=False, timeout=10) == st.KV_OK
        assert await b.rpc_async.put(key="a", value=b"x", overwrite=False, timeout=10) == st.KV_EXISTS
        assert await b.rpc_async.get(key="a", timeout=10) == (st.KV_OK, b"1")
        assert await b.rpc_async.put(key="a", value=b"2", overwrite=True, timeout=10) == st.KV_OK
        inv = await asyncio.wait_for(b.rx.next_async(), 10)  # came before the response: kept, in order
        assert inv.name == "invalidate" and inv.key == "a"
        results = await asyncio.gather(*(b2.rpc_async.get(key="a", timeout=10) for b2 in [b]))
        assert results == [mod.results.get(st.KV_OK, b"2")]
        pending = asyncio.create_task(b.rx.next_async())
        await until(lambda: watching() == 1, "next_async parked on the doorbell")
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(pending, 10)
        assert await b.rpc_async.get(key="zz", timeout=10) == (st.KV_NOT_FOUND, b"")
        with pytest.raises(mh.Timeout):
            await b.rx.next_async(timeout=0.01)
        ch.close()

    with procs.child(aio_procs.kv_serve, rt.name, 1, service, str(out), ready) as p, rt.dispatcher(0) as d:
        assert ready.wait(30), "the kvstore service did not export in time"
        run(main(d))
        p.join(30)
        assert p.exitcode == 0


def test_the_bridge_fallback_serves_the_same_contract(rt: mh.Runtime) -> None:
    """Where io_uring cannot wait on a futex, one bridge thread and an eventfd do (forced here)."""
    service = unique_name("bridge")
    code = f"""
import asyncio, multihop as mh
async def main():
    rt = mh.Runtime.attach({rt.name!r})
    d = rt.dispatcher(0)
    svc = d.export({service!r})
    ch = await d.bind_async({service!r}, transport="multihop", timeout=10)
    peer = await svc.accept_async(timeout=10)
    t = asyncio.create_task(peer.recv_async(timeout=10))
    while mh.aio.bell_of() is None or mh.aio.bell_of().watching != 1:
        await asyncio.sleep(0)
    await ch.send_async(b"through the bridge")
    assert await asyncio.wait_for(t, 10) == b"through the bridge"
    print(mh.aio.bell_of().kind)
asyncio.run(asyncio.wait_for(main(), 30))
"""
    env = dict(os.environ, MULTIHOP_ASYNC_BRIDGE="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "bridge"


def test_accept_async_raises_what_on_connect_raised(rt: mh.Runtime) -> None:
    """The on_connect callback runs on the acceptor thread; its exception refuses the client and
    wakes the task in accept_async, which raises it."""
    service = unique_name("refuse")
    result = procs.CTX.Queue()

    def on_connect(info: dict[str, object]) -> bool:
        raise RuntimeError(f"not today, pid {info['client_pid']}")

    async def main(d: mh.Dispatcher) -> None:
        svc = d.export(service, on_connect=on_connect)
        with procs.child(aio_procs.binder, rt.name, 1, service, ["ump"], result) as p:
            with pytest.raises(RuntimeError, match=f"not today, pid {p.pid}"):
                await svc.accept_async(timeout=30)
            assert "BindError" in result.get(timeout=30)
            p.join(30)

    with rt.dispatcher(0) as d:
        run(main(d))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_closing_an_end_wakes_its_own_waiting_task(rt: mh.Runtime, transport: str) -> None:
    """A task parked in `async for` (or recv_async) on an end that another task closes wakes at
    once: the loop ends (closed by this end), a later receive raises ChannelClosed."""
    service = unique_name("selfclose")
    ready = procs.CTX.Event()

    async def main(d: mh.Dispatcher) -> None:
        ch = await d.bind_async(service, transport=transport, timeout=30)
        await ch.send_async(b"one")
        assert await ch.recv_async(timeout=10) == b"one"

        async def consume() -> list[bytes]:
            return [m async for m in ch]

        t = asyncio.create_task(consume())
        await until(lambda: watching() == 1, "the loop parked")
        ch.close()
        assert await asyncio.wait_for(t, 10) == []
        assert ch.close_cause == "this end"
        with pytest.raises(mh.ChannelClosed, match="closed by this end"):
            await ch.recv_async(timeout=10)

    with procs.child(procs.echo_server, rt.name, 1, service, ready) as p, rt.dispatcher(0) as d:
        assert ready.wait(30), "the echo service did not export in time"
        run(main(d))
        p.join(30)
        assert p.exitcode == 0


def test_the_asyncio_benchmark_runs() -> None:
    """benches/bench_asyncio.py keeps working (a tiny scale; its figures are not judged here)."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "benches" / "bench_asyncio.py"), "--scale", "0.01"], capture_output=True, text=True, timeout=240, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr
    rows = [ln.split()[0] for ln in r.stdout.splitlines() if ln.startswith(("ump ", "multihop "))]
    assert rows == ["ump", "multihop", "multihop"], r.stdout
    assert "asyncio streams over a Unix socket: round trip" in r.stdout


def test_a_dead_monitor_ends_multihop_waits_with_channel_closed(rt: mh.Runtime) -> None:
    """SIGKILL of this core's monitor: a task parked on a multi-hop receive gets ChannelClosed
    ("monitor gone"), and `async for` raises it too (a monitor's death is not a clean close)."""
    service = unique_name("mondie")
    ready = procs.CTX.Event()

    async def main(d: mh.Dispatcher) -> None:
        svc = d.export(service)
        with procs.child(aio_procs.bind_and_hold, rt.name, 1, service, "multihop", ready) as p:
            ch = await svc.accept_async(timeout=30)
            t = asyncio.create_task(ch.recv_async())
            await until(lambda: watching() == 1 and ready.is_set(), "the receive parked on the doorbell")
            os.kill(rt.monitor_pids[0], signal.SIGKILL)
            with pytest.raises(mh.ChannelClosed, match="monitor is gone"):
                await asyncio.wait_for(t, 20)
            assert ch.close_cause == "monitor gone"
            with pytest.raises(mh.ChannelClosed):
                async for _ in ch:
                    pass
            p.join(30)

    with rt.dispatcher(0) as d:
        run(main(d))
