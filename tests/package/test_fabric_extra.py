"""The fabric is an extra: ``pip install 'multihop[fabric]'`` brings the ``multihop-fabric`` wheel, whose one file of
substance is the ``multihop-bridge`` binary (core-rs/fabric/pyproject.toml, maturin ``bindings = "bin"``); the base
install does not depend on Zenoh. ``bash .ci/setup`` builds that wheel and installs it, so it is checked here as
installed, not only as declared."""

from __future__ import annotations

import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

from multihop.fabric import bridge_binary

ROOT = Path(__file__).resolve().parents[2]


def test_the_fabric_extra_is_the_bridge_wheel_and_the_base_install_stays_lean() -> None:
    main = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    fabric = tomllib.loads((ROOT / "core-rs" / "fabric" / "pyproject.toml").read_text())
    assert main["optional-dependencies"]["fabric"] == [f"multihop-fabric=={fabric['project']['version']}"]
    assert fabric["tool"]["maturin"]["bindings"] == "bin" and fabric["tool"]["maturin"]["features"] == ["zenoh"]
    assert not [d for d in main["dependencies"] if "zenoh" in d or "fabric" in d], main["dependencies"]


def test_the_installed_wheel_carries_the_bridge_that_runtimes_start() -> None:
    dist = metadata.distribution("multihop-fabric")
    files = [f for f in dist.files or [] if f.name == "multihop-bridge"]
    assert len(files) == 1, dist.files
    installed = Path(str(dist.locate_file(files[0]))).resolve()
    assert installed.is_file()
    # Run with nothing: the usage, naming the runtime mode, and exit 2.
    r = subprocess.run([str(installed)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--runtime-dir DIR" in r.stderr, r.stderr
    # What Runtime.start(..., fabric=...) runs: $MULTIHOP_BRIDGE if set (a test's choice), else this wheel's.
    assert Path(bridge_binary()).is_file()
