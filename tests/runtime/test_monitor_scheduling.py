"""How monitors share their CPU: they poll only while traffic flows, and a
CPU-bound process next to a polling monitor does not starve forwarding."""

from __future__ import annotations

import time

import psutil

import multihop as mh
import procs
from chanpair import channel_pair
from parked import all_threads_asleep
from session import unique_name


def _monitor_cpu_seconds(rt: mh.Runtime) -> float:
    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in rt.monitor_pids.values())


def test_monitors_stop_polling_when_traffic_stops() -> None:
    with mh.Runtime.start(unique_name("idle"), cores=[0, 1]) as rt:
        with channel_pair(rt, "multihop") as (c, s):
            for _i in range(2000):  # enough traffic for the monitors to start polling
                c.send(b"x")
                s.send(s.recv(timeout=5))
                c.recv(timeout=5)
            polls = sum(m["data"]["polls"] for m in rt.status()["monitors"])
            assert polls > 0, "the monitors never polled during the burst"
            # Idle: wait until no thread of any monitor is runnable (the forwarders parked after their
            # poll budget, the guards asleep), then measure a second of idleness.
            deadline = time.monotonic() + 10
            while not all(all_threads_asleep(pid) for pid in rt.monitor_pids.values()):
                assert time.monotonic() < deadline, "the monitors never went idle"
                time.sleep(0.001)
            before = _monitor_cpu_seconds(rt)
            time.sleep(1.0)
            used = _monitor_cpu_seconds(rt) - before
            assert used < 0.05, f"idle monitors used {used:.3f} s of CPU in 1 s"


def test_a_cpu_hog_on_the_monitors_cpu_does_not_stall_forwarding() -> None:
    with mh.Runtime.start(unique_name("hog"), cores=[0, 1]) as rt:
        running = procs.CTX.Event()
        with channel_pair(rt, "multihop") as (c, s), procs.child(procs.cpu_hog, rt.cpu_of(0), 60.0, running):
            assert running.wait(30), "the CPU hog never started spinning"
            t0 = time.monotonic()
            for i in range(300):
                c.send(i.to_bytes(4, "little"), timeout=30)
                assert s.recv(timeout=30) == i.to_bytes(4, "little")
                s.send(b"ok", timeout=30)
                assert c.recv(timeout=30) == b"ok"
            elapsed = time.monotonic() - t0
        # A monitor polling at SCHED_IDLE next to a CPU hog would stall for a
        # second or more at a time (its poll budget turns polling off when
        # steps come far apart, and a guard thread promotes a starved poller:
        # core-rs/monitor/src/idle_poll.rs, whose unit test covers the guard); 300
        # round trips would take minutes. The bound is loose on purpose.
        assert elapsed < 30, f"300 round trips next to a CPU hog took {elapsed:.1f} s"
