"""A runtime whose monitors may hold only 64 descriptors (a hard RLIMIT_NOFILE of 64), attached to until
something gives (issue 26 §4).

Before: attaches failed after 10-20 s with ``Timeout`` ("the monitor did not answer in time": a
request whose descriptors the full table could not take was dropped as a bad frame) or a relayed
``pidfd_open ... Too many open files``. Now whatever runs out in the attach, bind or monitor paths
is said at once, as a ``MonitorError`` naming RLIMIT_NOFILE, its value and whose it is; the monitor
goes on serving the dispatchers it has, and takes new ones again once others leave. A dispatcher's
own process out of descriptors says the same of itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import multihop as mh
from session import unique_name

TESTS = Path(__file__).resolve().parent.parent

# Starts a detached runtime from a process whose descriptor limit is 64, soft and hard: the monitors inherit it.
_STARTER = (
    "import resource, sys, multihop as mh\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n"
    "mh.Runtime.start(sys.argv[1], cores=[0, 1], detached=True)\n"
)


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_monitors_out_of_descriptors_say_so_at_once_and_keep_serving(transport: str) -> None:
    name = unique_name("nofile")
    subprocess.run([sys.executable, "-c", _STARTER, name], check=True, timeout=60, cwd=TESTS)
    rt = mh.Runtime.attach(name)
    kept: list[tuple[Any, Any, Any]] = []
    try:
        srv = rt.dispatcher(1)
        svc = srv.export("nofile", backlog=256)
        failure: BaseException | None = None
        for _ in range(64):  # bounded: the monitor of core 0 runs out well before 64 dispatchers
            d = None
            try:
                d = rt.dispatcher(0)
                ch = d.bind("nofile", transport=transport, timeout=30)
                kept.append((d, ch, svc.accept(timeout=30)))
            except mh.MultihopError as e:
                failure = e
                if d is not None:
                    d.detach()
                break
        assert failure is not None, "64 dispatchers attached to a monitor that may hold 64 descriptors"
        assert not isinstance(failure, mh.Timeout), f"a timeout instead of the reason: {failure}"
        assert isinstance(failure, mh.MonitorError), f"{type(failure).__name__}: {failure}"
        assert "RLIMIT_NOFILE = 64 (hard limit 64)" in str(failure) and "monitor 0" in str(failure), str(failure)
        assert len(kept) >= 3, f"only {len(kept)} dispatchers before it ran out"
        # The monitor goes on: what it serves still works...
        for _, ch, peer in kept:
            ch.send(b"still here", timeout=10)
            assert peer.recv(timeout=10) == b"still here"
        assert rt.alive and "error" not in rt.status(limit=0)["monitors"][0]
        # ...and once dispatchers leave, it takes new ones again.
        for d, ch, peer in kept[-3:]:
            ch.close()
            peer.close()
            d.detach()
        del kept[-3:]
        deadline_tries = 50
        for attempt in range(deadline_tries):  # bounded: the monitor frees a departed dispatcher's descriptors promptly
            try:
                with rt.dispatcher(0) as d:
                    ch = d.bind("nofile", transport=transport, timeout=30)
                    peer = svc.accept(timeout=30)
                    ch.send(b"again", timeout=10)
                    assert peer.recv(timeout=10) == b"again"
                    ch.close()
                break
            except mh.MonitorError as e:
                assert "RLIMIT_NOFILE" in str(e), str(e)
                if attempt == deadline_tries - 1:
                    raise
                import time

                time.sleep(0.1)
    finally:
        for d, _ch, _peer in kept:
            d.detach()
        rt.stop()


_CLIENT = (
    "import os, resource, sys, multihop as mh\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))\n"
    "held = []\n"
    "try:\n"
    "    while True:\n"
    "        held.append(os.open('/dev/null', os.O_RDONLY))\n"
    "except OSError:\n"
    "    pass\n"
    "for fd in held[:1]:\n"  # leave one: the attach gets its socket, then runs out
    "    os.close(fd)\n"
    "try:\n"
    "    mh.Runtime.attach(sys.argv[1]).dispatcher(0)\n"
    "except mh.MultihopError as e:\n"
    "    print(type(e).__name__, e)\n"
)


def test_a_dispatcher_out_of_descriptors_names_its_own_limit(rt: mh.Runtime) -> None:
    out = subprocess.run([sys.executable, "-c", _CLIENT, rt.name], capture_output=True, text=True, timeout=60, cwd=TESTS)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("MonitorError "), out.stdout
    assert "RLIMIT_NOFILE = 40 (hard limit 40)" in out.stdout and "this process" in out.stdout, out.stdout
    assert rt.alive
