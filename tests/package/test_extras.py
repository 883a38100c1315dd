"""The lean base install: channels, monitors and generated bindings without any extra; commands that need an extra say which.

The extras are made unimportable for real, in a fresh interpreter: a directory
first on ``PYTHONPATH`` holds a package of each extra's name (pyarrow,
pyspark, matplotlib, zmq, cffi) whose import raises ImportError, exactly what
``import pyarrow`` does where it is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from extras_shadow import NOT_BASE
from multihop.bench import suite_names
from multihop.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a fresh interpreter."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def test_channels_monitors_and_bindings_need_no_extra(without_extras: dict[str, str], tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        import multihop as mh
        for name in {NOT_BASE!r}:
            try:
                __import__(name)
            except ImportError:
                pass
            else:
                raise SystemExit(f"{{name}} imported: the shadow did not work")
        echo = mh.idl.load({str(ROOT / "flounder-idl" / "echo.if")!r})

        class Echo:
            def echo(self, request):
                return request

        with mh.Runtime.start("lean-{os.getpid()}", cores=[0, 1, 2], routing="ring") as rt:
            srv, cli = rt.dispatcher(2), rt.dispatcher(0)
            with echo.EchoBinding.export(srv, "e", Echo()):
                for transport in ("ump", "multihop", "auto"):
                    b = echo.EchoBinding.bind(cli, "e", transport=transport)
                    assert b.rpc.echo(transport.encode(), timeout=10) == transport.encode()
                    b.channel.close()
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {NOT_BASE!r})
        print("ok", loaded)
    """)
    r = run(["-c", script], without_extras, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok []"


def test_help_and_stubgen_need_no_extra(without_extras: dict[str, str], tmp_path: Path) -> None:
    r = run(["-m", "multihop.cli", "--help"], without_extras)
    assert r.returncode == 0 and "analyze" in r.stdout and "bench" in r.stdout, r.stderr
    r = run(["-m", "multihop.cli", "bench", "--help"], without_extras)
    assert r.returncode == 0 and ", ".join(suite_names.SUITES) in " ".join(r.stdout.split())
    r = run(["-m", "multihop.cli", "stubgen", str(ROOT / "flounder-idl" / "echo.if"), "-o", str(tmp_path)], without_extras)
    assert r.returncode == 0 and (tmp_path / "echo.py").exists(), r.stderr


def test_bench_without_its_extra_names_it(without_extras: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "bench-out"
    r = run(["-m", "multihop.cli", "bench", "channels", "--quick", "--out", str(out)], without_extras)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("multihop bench: ExtraMissing: multihop bench needs the bench extra; missing: pyarrow (")
    assert r.stderr.rstrip().endswith("Install it with pip install 'multihop[bench]'")
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists(), "a run that could not start wrote a trace directory"


def test_analyze_without_its_extra_names_it(without_extras: dict[str, str], tmp_path: Path) -> None:
    r = run(["-m", "multihop.cli", "analyze", str(tmp_path), "-o", str(tmp_path / "rep")], without_extras)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith(
        "multihop analyze: AnalysisUnavailable: multihop analyze needs the analysis extra; "
        "missing: pyarrow (No module named 'pyarrow' (shadowed)), pyspark ("
    )
    assert "Install it with pip install 'multihop[analysis]'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "rep").exists()


def test_pyproject_keeps_the_base_lean_and_the_extras_complete() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(reqs: list[str]) -> set[str]:
        return {r.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip() for r in reqs}

    assert names(project["dependencies"]) == {"numpy", "psutil"}
    extras = {k: names(v) for k, v in project["optional-dependencies"].items()}
    for extra, modules in EXTRAS.items():
        assert set(modules) <= extras[extra], extra
    assert "pyzmq" in extras["bench"] and extras["zmq"] == {"pyzmq"}
    # .ci/setup installs the test extra: it must bring every other extra along, and cffi for the C-ABI tests.
    assert set().union(*(v for k, v in extras.items() if k != "test")) | {"cffi", "pytest-benchmark"} <= extras["test"]


def test_suite_names_known_without_the_extra_match_the_suites() -> None:
    from multihop.bench.suites import SUITES

    assert suite_names.SUITES == SUITES
