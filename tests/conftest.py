"""Fixtures shared by every subsystem's tests: a runtime, process cleanup, Spark, an install without extras.

The tests live in one directory per subsystem (runtime, handles, idl, ges, groups, news, bench, analysis,
cli, c, attack, docs, package); the modules they share (this directory's *.py: session, procs, chanpair,
cdylib, ...) are importable by name, since pyproject.toml puts tests/ on pytest's ``pythonpath``. Fixtures of
one subsystem only are in that subsystem's conftest.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

# isort: off
import session  # noqa: F401  (first: it points MULTIHOP_RUNTIME_ROOT at the session's private root)
import multihop as mh

# isort: on
from extras_shadow import shadowed_extras
from session import monitor_processes, unique_name


@pytest.fixture
def rt() -> Iterator[mh.Runtime]:
    """A fresh two-core runtime, stopped after the test even if it fails."""
    runtime = mh.Runtime.start(unique_name(), cores=[0, 1])
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


@pytest.fixture
def without_extras(tmp_path: Path) -> dict[str, str]:
    """An environment in which every package of an extra fails to import."""
    return shadowed_extras(tmp_path)
