"""Where monitors run: the machine's CPUs, not the starting thread's affinity mask (issue 26 §3).

A runtime started by a pinned process (``taskset``, a benchmark harness, ``os.sched_setaffinity``)
used to put every monitor on that one CPU, and ``dispatcher(core=1, pin=True)`` on it too, with no
word (multi-hop round trip 48 us against 21 us). The machine's CPUs are what the process may be
scheduled on, its cgroup's cpuset; when cores must share a CPU, ``start`` warns and ``status`` says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import multihop as mh
from multihop.cli import format_status
from multihop.topology import machine_cpus
from session import unique_name

_PINNED_START = (
    "import json, os, sys, warnings, multihop as mh\n"
    "os.sched_setaffinity(0, {0})\n"
    "with warnings.catch_warnings(record=True) as w:\n"
    "    warnings.simplefilter('always')\n"
    "    rt = mh.Runtime.start(sys.argv[1], cores=[0, 1])\n"
    "with rt:\n"
    "    mons = {str(c): sorted(os.sched_getaffinity(p)) for c, p in rt.monitor_pids.items()}\n"
    "    d = rt.dispatcher(core=1, pin=True)\n"
    "    print(json.dumps({'monitors': mons, 'cpu_of': [rt.cpu_of(0), rt.cpu_of(1)], 'pinned': sorted(os.sched_getaffinity(0)),\n"
    "                      'warnings': [str(x.message) for x in w], 'shared': rt.status(limit=0)['shared_cpus']}))\n"
    "    d.detach()\n"
)


def test_a_runtime_started_by_a_pinned_process_puts_its_monitors_on_different_cpus() -> None:
    cpus = machine_cpus()
    assert len(cpus) >= 2 and cpus[:2] == [0, 1], f"this test needs CPUs 0 and 1 in the process's cpuset, has {cpus}"
    out = subprocess.run(
        [sys.executable, "-c", _PINNED_START, unique_name("pinned")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[1],
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    # Read from the kernel: the monitors' actual affinity.
    assert got["monitors"] == {"0": [0], "1": [1]}, got
    assert got["cpu_of"] == [0, 1] and got["pinned"] == [1], got
    assert got["warnings"] == [] and got["shared"] == {}, got


def test_cores_that_must_share_a_cpu_are_warned_about_and_shown_in_status() -> None:
    cpus = machine_cpus()
    cores = list(range(len(cpus) + 2))  # two more cores than CPUs: two CPUs take a second monitor
    with pytest.warns(RuntimeWarning) as rec:
        rt = mh.Runtime.start(unique_name("shared"), cores=cores)
    with rt:
        want = {str(cpus[c % len(cpus)]): [cpus[c % len(cpus)], len(cpus) + c] for c in range(2)} if cpus == list(range(len(cpus))) else None
        shared = rt.status(limit=0)["shared_cpus"]
        if want is not None:
            assert shared == want, shared
        assert sum(len(v) for v in shared.values()) == 4, shared
        text = str(rec[0].message)
        for cpu, on in shared.items():
            assert f"cores {', '.join(map(str, on))} share CPU {cpu}" in text, text
            assert f"cores {', '.join(map(str, on))} share CPU {cpu}" in format_status(rt.status(limit=0))
        assert f"has {len(cpus)} CPU(s) for {len(cores)} core(s)" in text
        # The kernel agrees: each monitor is where status says.
        placement = rt.status(limit=0)["cpus"]
        for core, pid in rt.monitor_pids.items():
            assert sorted(os.sched_getaffinity(pid)) == [placement[str(core)]]


def test_no_warning_when_every_core_has_a_cpu(rt: mh.Runtime) -> None:
    # (rt: cores 0 and 1, started by conftest) -- a fresh start with a CPU per core says nothing.
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with mh.Runtime.start(unique_name("quiet"), cores=[0]) as one:
            assert one.status(limit=0)["shared_cpus"] == {}
    assert rt.status(limit=0)["shared_cpus"] == {} and rt.status(limit=0)["cpus"] == {"0": 0, "1": 1}


def _tree(tmp: Path, cgroup: str, mountinfo: str, files: dict[str, str], online: str = "0-7") -> tuple[Path, Path]:
    proc, sysfs = tmp / "proc", tmp / "sys"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text(mountinfo.replace("TMP", str(tmp)))
    sysfs.mkdir()
    (sysfs / "online").write_text(online + "\n")
    for rel, text in files.items():
        f = tmp / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return proc, sysfs


def test_machine_cpus_reads_the_cgroup_cpuset_v2_v1_and_falls_back_to_online(tmp_path: Path) -> None:
    # cgroup v2: the process's own cgroup has no cpuset file (controller not enabled there): its parent's counts.
    v2 = tmp_path / "v2"
    proc, sysfs = _tree(
        v2,
        "0::/jobs/job1\n",
        "30 25 0:26 / TMP/cg rw,nosuid - cgroup2 cgroup2 rw\n",
        {"cg/jobs/cpuset.cpus.effective": "2-3,6\n", "cg/cpuset.cpus.effective": "0-7\n"},
    )
    assert machine_cpus(proc, sysfs) == [2, 3, 6]
    # cgroup v1: the cpuset hierarchy's effective_cpus, whatever the other controllers say.
    v1 = tmp_path / "v1"
    proc, sysfs = _tree(
        v1,
        "4:memory:/x\n3:cpuset:/box\n0::/\n",
        "40 25 0:30 / TMP/cpuset rw - cgroup cgroup rw,cpuset\n41 25 0:31 / TMP/mem rw - cgroup cgroup rw,memory\n",
        {"cpuset/box/cpuset.effective_cpus": "1,4-5\n"},
    )
    assert machine_cpus(proc, sysfs) == [1, 4, 5]
    # Only online CPUs count; no cpuset to read: the online CPUs.
    proc, sysfs = _tree(tmp_path / "none", "1:name=systemd:/\n", "", {}, online="0-3")
    assert machine_cpus(proc, sysfs) == [0, 1, 2, 3]
    proc, sysfs = _tree(
        tmp_path / "off",
        "0::/\n",
        "30 25 0:26 / TMP/cg rw - cgroup2 cgroup2 rw\n",
        {"cg/cpuset.cpus.effective": "0-7\n"},
        online="0-1",
    )
    assert machine_cpus(proc, sysfs) == [0, 1]
