"""kill -9 and SIGSTOP/SIGCONT of every process kind mid-stream (issue 18 §8, issue 17 §7).

Each process kind of a running stream (client, server, the monitor of either end, a monitor that
only forwards, the runtime's starter) is killed, or stopped and continued, while a client streams
sequence numbers to a server across three monitors. See ``scenario.py`` for what must hold; the
long version (more messages, both transports, repeated) is ``benches/bench_attack.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import scenario
from session import unique_name

ROOT = Path(os.environ["MULTIHOP_RUNTIME_ROOT"])


@pytest.mark.parametrize("target", scenario.TARGETS)
def test_kill_9_mid_stream(target: str) -> None:
    scenario.check(scenario.run(ROOT, unique_name("kill"), target, "kill", n=60_000))


@pytest.mark.parametrize("target", scenario.TARGETS)
def test_sigstop_then_sigcont_mid_stream_loses_nothing(target: str) -> None:
    scenario.check(scenario.run(ROOT, unique_name("stop"), target, "stop", n=60_000))


@pytest.mark.parametrize("target", ["client", "server"])
def test_kill_9_of_a_ump_end_mid_stream(target: str) -> None:
    scenario.check(scenario.run(ROOT, unique_name("kill-ump"), target, "kill", transport="ump", n=300_000))
