"""Shared fixtures: private runtime root, unique runtimes, process cleanup."""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest

_ROOT = Path(tempfile.mkdtemp(prefix="mh-test-root-"))
os.environ["MULTIHOP_RUNTIME_ROOT"] = str(_ROOT)  # children inherit it

import multihop as mh  # noqa: E402

_counter = itertools.count()


def monitor_processes() -> list[psutil.Process]:
    """Live (non-zombie) monitor processes that belong to this test session."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = p.info["cmdline"] or []
            if "multihop.monitor" in cmd and str(_ROOT) in " ".join(cmd) and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def unique_name(prefix: str = "t") -> str:
    """A runtime name no other test uses."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}"


@pytest.fixture
def rt() -> Iterator[mh.Runtime]:
    """A fresh two-core runtime, stopped after the test even if it fails."""
    runtime = mh.Runtime.start(unique_name(), cores=[0, 1])
    try:
        yield runtime
    finally:
        runtime.stop()


@pytest.fixture
def rt6() -> Iterator[mh.Runtime]:
    """Six virtual cores in two declared sockets (the live group tests), stopped after the test even if it fails."""
    runtime = mh.Runtime.start(unique_name("grp"), cores=list(range(6)), topology=mh.Topology([[0, 1, 2], [3, 4, 5]]))
    try:
        yield runtime
    finally:
        runtime.stop()


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_monitors() -> Iterator[None]:
    yield
    left = monitor_processes()
    for p in left:
        p.kill()
    assert not left, f"monitor processes left behind: {[p.pid for p in left]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A small local Spark session shared by the whole test run.

    Spark and Java are installed by .ci/setup; without them this fails (it
    never skips: a skipped analysis test must not count as a pass).
    """
    from multihop.analysis.spark import find_java

    find_java()  # raises SparkUnavailable saying how to install Java
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("multihop-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
