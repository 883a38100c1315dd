"""Ring steps through the Python API: one message into a channel and out of its other end, in one process.

UMP: the Python call, the slot write and the slot read, no monitor.  Multi-hop:
the same calls plus the forwarding steps of the monitors on the path (the
forwarding step as Python sees it; the bare Rust step is ``cargo bench
--bench pingpong``).
"""

from __future__ import annotations

from typing import Any

import pytest

import multihop as mh

MSG = b"x" * 64
BATCH = [MSG] * 16


@pytest.mark.benchmark(group="ring: UMP")
def test_ump_send_recv_64b(benchmark: Any, ump: tuple[mh.Channel, mh.Channel]) -> None:
    c, s = ump

    def step() -> bytes:
        c.send(MSG)
        return s.recv()

    assert benchmark(step) == MSG


@pytest.mark.benchmark(group="ring: UMP")
def test_ump_try_send_try_recv_64b(benchmark: Any, ump: tuple[mh.Channel, mh.Channel]) -> None:
    c, s = ump

    def step() -> bytes | None:
        c.try_send(MSG)
        return s.try_recv()

    assert benchmark(step) == MSG


@pytest.mark.benchmark(group="ring: UMP")
def test_ump_batch_of_16x64b(benchmark: Any, ump: tuple[mh.Channel, mh.Channel]) -> None:
    c, s = ump

    def step() -> list[bytes]:
        c.send_batch(BATCH)
        return s.recv_batch(16)

    assert benchmark(step) == BATCH


@pytest.mark.benchmark(group="ring: multi-hop (forwarding from Python)")
def test_multihop_send_recv_64b_two_monitors(benchmark: Any, multihop_2: tuple[mh.Channel, mh.Channel]) -> None:
    c, s = multihop_2

    def step() -> bytes:
        c.send(MSG)
        return s.recv(timeout=5)

    assert benchmark(step) == MSG


@pytest.mark.benchmark(group="ring: multi-hop (forwarding from Python)")
def test_multihop_send_recv_64b_three_monitors(benchmark: Any, multihop_3: tuple[mh.Channel, mh.Channel]) -> None:
    c, s = multihop_3
    assert c.stats()["hops"] == 3

    def step() -> bytes:
        c.send(MSG)
        return s.recv(timeout=5)

    assert benchmark(step) == MSG
