"""`multihop stubgen` end to end: the command in a subprocess, its files imported or compiled."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from generated import import_file

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "flounder-idl"
TYPES_IF = SHIPPED / "types.if"
BARRELFISH = Path(__file__).resolve().parents[1] / "idl_data" / "barrelfish"
INCLUDE = ROOT / "core-rs" / "include"
GCC = shutil.which("gcc")


def multihop(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``multihop ARGS`` (the console script's entry point, in a fresh interpreter)."""
    return subprocess.run([sys.executable, "-m", "multihop.cli", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def written(r: subprocess.CompletedProcess[str]) -> list[Path]:
    """The files a successful run printed."""
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return [Path(line) for line in r.stdout.splitlines()]


@pytest.fixture
def extra_import(tmp_path: Path) -> Path:
    """A second import file, so the nargs and repeated forms of --import both have two files to take."""
    p = tmp_path / "more.if"
    p.write_text("alias weight uint32;\n")
    return p


@pytest.fixture
def uses_two(tmp_path: Path) -> Path:
    """An interface that needs both flounder-idl/types.if and the extra import."""
    p = tmp_path / "two.if"
    p.write_text('interface two "needs two imports" {\n    message m(coreid c, weight w);\n    rpc r(in nanos t, out weight w);\n};\n')
    return p


def test_python_stub_to_a_file_imports_and_round_trips(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "echo_if.py"
    assert written(multihop("stubgen", str(SHIPPED / "echo.if"), "--lang", "python", "-o", str(out))) == [out]
    mod = import_file(out)
    assert mod.INTERFACE == "echo" and mod.EchoBinding is mod.Binding
    assert mod.decode(mod.encode("ping", seq=3, data=b"hi")) == mod.messages.ping(3, b"hi")


def test_defaults_python_into_the_current_directory(tmp_path: Path) -> None:
    files = written(multihop("stubgen", str(SHIPPED / "bench.if"), "--import", str(TYPES_IF), cwd=tmp_path))
    assert files == [Path("bench.py")] and (tmp_path / "bench.py").is_file()
    mod = import_file(tmp_path / "bench.py")
    assert mod.decode(mod.encode("start", run=1, count=2, size=3, from_core=65535)).from_core == 65535


@pytest.mark.parametrize(
    "form",
    [
        ["--import", "{types}", "{more}"],  # nargs: one flag, two files
        ["--import", "{types}", "--import", "{more}"],  # repeated
        ["-I", "{types}", "-I", "{more}"],  # short, repeated
        ["-I", "{types}", "{more}"],  # short, nargs
    ],
    ids=["nargs", "repeated", "short-repeated", "short-nargs"],
)
def test_import_forms_all_work(tmp_path: Path, extra_import: Path, uses_two: Path, form: list[str]) -> None:
    imports = [a.format(types=TYPES_IF, more=extra_import) for a in form]
    out = tmp_path / "out.py"
    mod = import_file(written(multihop("stubgen", str(uses_two), *imports, "--lang", "python", "-o", str(out)))[0])
    assert mod.decode(mod.encode("m", c=7, w=2**32 - 1)).w == 2**32 - 1


def test_file_after_the_import_list_with_double_dash(tmp_path: Path, extra_import: Path, uses_two: Path) -> None:
    files = written(multihop("stubgen", "--lang", "python", "-o", str(tmp_path), "--import", str(TYPES_IF), str(extra_import), "--", str(uses_two)))
    assert files == [tmp_path / "two.py"]


def test_file_swallowed_by_the_import_list_is_explained(extra_import: Path, uses_two: Path) -> None:
    r = multihop("stubgen", "--import", str(TYPES_IF), str(extra_import), str(uses_two))
    assert r.returncode == 1 and r.stdout == ""
    assert "no interface file given" in r.stderr and "put the interface file first" in r.stderr


def test_c_stubs_compile(tmp_path: Path, extra_import: Path, uses_two: Path) -> None:
    out = tmp_path / "c"
    files = written(multihop("stubgen", str(uses_two), "--lang", "c", "--out", str(out), "--import", str(TYPES_IF), str(extra_import)))
    assert files == [out / "two.h", out / "two.c"]
    files += written(multihop("stubgen", str(BARRELFISH / "ping_pong.if"), "--lang", "c", "-o", str(out)))
    main = out / "main.c"
    main.write_text('#include "two.h"\n#include "ping_pong.h"\nint main(void) { return two_msg_name(1) == 0; }\n')
    from cdylib import private_cdylib

    lib = private_cdylib(tmp_path)
    exe = tmp_path / "main"
    r = subprocess.run(
        [
            GCC,
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            str(INCLUDE),
            "-I",
            str(out),
            str(out / "two.c"),
            str(out / "ping_pong.c"),
            str(main),
            "-L",
            str(lib.parent),
            "-lmultihop_core",
            f"-Wl,-rpath,{lib.parent}",
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert subprocess.run([str(exe)], timeout=30).returncode == 0


@pytest.mark.parametrize(
    "args, needle",
    [
        ([str(SHIPPED / "bench.if")], "bench.if:8:58: unknown type 'coreid'"),
        ([str(TYPES_IF)], "no interface declared: a file of only 'alias' and 'typedef' lines is an import file"),
        (["flounder-idl/echo"], "FileNotFoundError: [Errno 2] no such Flounder interface file: 'flounder-idl/echo'"),
        ([str(SHIPPED / "echo.if"), "--import", "nowhere.if"], "no such Flounder interface file: 'nowhere.if'"),
        ([str(SHIPPED / "echo.if"), "--lang", "c", "-o", "echo.py"], "the C back end writes NAME.h and NAME.c into a directory"),
    ],
    ids=["missing-import", "import-file", "no-such-path", "no-such-import", "c-to-a-file"],
)
def test_errors_exit_1_with_one_clear_line(tmp_path: Path, args: list[str], needle: str) -> None:
    r = multihop("stubgen", *args, "-o", str(tmp_path)) if "-o" not in args else multihop("stubgen", *args)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout == "" and needle in r.stderr, r.stderr
    assert r.stderr.startswith("multihop stubgen: ") and len(r.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir()), "a failed run wrote files"


def test_bad_usage_is_argparse_exit_2() -> None:
    r = multihop("stubgen", str(SHIPPED / "echo.if"), "--lang", "rust")
    assert r.returncode == 2 and "invalid choice: 'rust'" in r.stderr
    r = multihop("stubgen", "--help")
    assert r.returncode == 0 and "--import IMPORT.if [IMPORT.if ...]" in r.stdout and "--out" in r.stdout


def test_an_endless_input_is_refused_at_the_cap_naming_the_file(tmp_path: Path) -> None:
    """``multihop stubgen /dev/zero`` read 2.7 GB in 5 s: the input is capped, the error names file and cap."""
    from multihop.idl import MAX_SOURCE_BYTES

    r = multihop("stubgen", "/dev/zero", "-o", str(tmp_path))
    assert r.returncode == 1 and r.stderr.startswith("multihop stubgen: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "/dev/zero" in r.stderr and f"{MAX_SOURCE_BYTES // (1 << 20)} MiB" in r.stderr, r.stderr
    big = tmp_path / "big.if"
    big.write_bytes(b"// " + b"x" * MAX_SOURCE_BYTES + b"\n")
    r = multihop("stubgen", str(TYPES_IF), "--import", str(big), "-o", str(tmp_path / "out"))
    assert r.returncode == 1 and str(big) in r.stderr and "MiB" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_an_unknown_type_names_the_import_option(tmp_path: Path) -> None:
    r = multihop("stubgen", str(SHIPPED / "bench.if"), "-o", str(tmp_path))
    assert r.returncode == 1 and f"--import {TYPES_IF}" in r.stderr, r.stderr
    assert written(multihop("stubgen", str(SHIPPED / "bench.if"), "--import", str(TYPES_IF), "-o", str(tmp_path)))


# ---- the generated files the repository keeps: one list, one gate -------------------------------------


def _copy_checkout(tmp_path: Path) -> Path:
    """The interface files and generated files of this checkout, copied under ``tmp_path`` (a root of its own)."""
    from multihop.idl.generated_files import GENERATED

    root = tmp_path / "repo"
    shutil.copytree(SHIPPED, root / "flounder-idl")
    for e in GENERATED:
        (root / e.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / e.path, root / e.path)
    return root


def test_every_generated_file_is_listed_once_and_fresh() -> None:
    """The gate .ci/test runs: every committed generated file is what the compiler makes today."""
    from multihop.idl.generated_files import GENERATED

    paths = [e.path for e in GENERATED]
    assert len(paths) == len(set(paths)), "a generated file is listed twice"
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "python").rglob("*_if.py*")}
    assert on_disk == set(paths), "every committed *_if.py / *_if.pyi is in multihop.idl.generated_files.GENERATED"
    r = multihop("stubgen", "--check")
    assert r.returncode == 0 and r.stdout.startswith(f"all {len(paths)} generated files are fresh"), r.stdout + r.stderr


def test_check_names_a_stale_file_and_all_rewrites_it(tmp_path: Path) -> None:
    from multihop.idl.generated_files import GENERATED

    root = _copy_checkout(tmp_path)
    stale = GENERATED[0]
    (root / stale.path).write_text((root / stale.path).read_text() + "# edited by hand\n")
    (root / GENERATED[1].path).unlink()
    r = multihop("stubgen", "--check", "--root", str(root))
    assert r.returncode == 1 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr.splitlines() == [f"{e.path} is stale: regenerate it with `multihop stubgen --all` (or {e.command})" for e in GENERATED[:2]]
    r = multihop("stubgen", "--all", "--root", str(root))
    assert r.returncode == 0 and r.stdout.splitlines() == [GENERATED[0].path, GENERATED[1].path], r.stdout + r.stderr
    assert (root / stale.path).read_text() == (ROOT / stale.path).read_text()
    assert multihop("stubgen", "--check", "--root", str(root)).returncode == 0
    assert multihop("stubgen", "--all", "--root", str(root)).stdout == ""  # nothing left to change


def test_check_and_all_take_no_interface_file_and_need_a_checkout(tmp_path: Path) -> None:
    r = multihop("stubgen", "--check", str(SHIPPED / "echo.if"))
    assert r.returncode == 1 and "give no interface file" in r.stderr
    r = multihop("stubgen", "--check", "--all")
    assert r.returncode == 2 and "not allowed with argument" in r.stderr
    r = multihop("stubgen", "--check", "--root", str(tmp_path))
    assert r.returncode == 1 and "is not a checkout of multihop" in r.stderr
