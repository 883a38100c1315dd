"""Typed stubs of generated Flounder bindings (multihop.idl.pyi): true to the generated modules, and
they let a type checker catch wrong records.

Every shipped interface is generated both ways (the module with multihop.idl.load, the stub with
generate_pyi) and the stub is compared with the module; mypy then checks a program that uses the
stubs rightly (no error) and wrongly (the errors it must report, on the lines they are on).
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from multihop.idl import load, parse
from multihop.idl.errors import IdlCodegenError
from multihop.idl.model import Enum, Struct
from multihop.idl.names import py_binding_class, py_type
from multihop.idl.pyi import generate_pyi

ROOT = Path(__file__).resolve().parents[2]
IDL = ROOT / "flounder-idl"
IMPORTS = [IDL / "types.if"]
INTERFACES = sorted(p.stem for p in IDL.glob("*.if") if p.stem != "types")


def _classes(body: list[ast.stmt]) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in body if isinstance(n, ast.ClassDef)}


def _fields(cls: ast.ClassDef) -> list[str]:
    return [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def _methods(cls: ast.ClassDef) -> dict[str, list[str]]:
    """Method name -> its parameters (without self)."""
    out = {}
    for f in cls.body:
        if isinstance(f, ast.FunctionDef) and f.name != "__init__":
            out[f.name] = [a.arg for a in f.args.args[1:]] + [a.arg for a in f.args.kwonlyargs]
    return out


def test_the_shipped_interfaces_are_all_here() -> None:
    assert {"dispatch", "echo", "kvstore", "ges_broker", "ges_client"} <= set(INTERFACES)


@pytest.mark.parametrize("name", INTERFACES)
def test_the_stub_declares_what_the_generated_module_has(name: str) -> None:
    iface = parse(IDL / f"{name}.if", IMPORTS)
    mod = load(iface)
    tree = ast.parse(generate_pyi(iface))
    top = _classes(tree.body)

    # every message's record class, with its fields in order; the send side takes the same fields
    records = _classes(top["messages"].body)
    assert sorted(records) == sorted(mod.MESSAGE_NUMBERS)
    tx = _methods(top["_mhTx"])
    assert sorted(tx) == sorted(mod.MESSAGE_NUMBERS)
    for msg in mod.MESSAGE_NUMBERS:
        fields = list(getattr(mod.messages, msg)._fields)
        assert _fields(records[msg]) == fields, msg
        assert tx[msg] == [*fields, "timeout"], msg

    # every struct (a named tuple) and enum, by its module-level name
    for t in iface.types.values():
        if not isinstance(t, (Enum, Struct)):
            continue
        pub = py_type(t.name, py_binding_class(name))
        value = getattr(mod, pub)
        if isinstance(t, Struct):
            assert _fields(top[pub]) == list(value._fields), pub
        else:
            got = [(s.targets[0].id, s.value.value) for s in top[pub].body if isinstance(s, ast.Assign)]
            assert got == [(m.name, m.value) for m in value], pub

    # rpcs: one client method each with the runtime method's parameters; several outs -> results.NAME
    rpc = _methods(top["_mhRpc"])
    runtime_rpc = {n: list(inspect.signature(f).parameters)[1:] for n, f in vars(mod._mhRpc).items() if inspect.isfunction(f) and n != "__init__"}
    assert rpc == runtime_rpc
    results = [s.target.id for s in top["results"].body if isinstance(s, ast.AnnAssign)]
    assert sorted(results) == sorted(n for n in vars(mod.results) if not n.startswith("_"))
    for r in results:
        assert _fields(top[f"_mhO_{r}"]) == list(getattr(mod.results, r)._fields)


def test_stub_of_an_interface_with_capabilities_is_refused_naming_the_argument() -> None:
    iface = parse('interface c "c" {\n    message give(uint8 x, cap fd);\n};\n')
    with pytest.raises(IdlCodegenError, match=r":2:\d+: pyi back end: message 'give' argument 'fd' carries a capability"):
        generate_pyi(iface)


def test_command_line_writes_the_stub_and_reports_a_bad_file(tmp_path: Path) -> None:
    out = tmp_path / "kvstore_if.pyi"
    r = subprocess.run(
        [sys.executable, "-m", "multihop.idl.pyi", str(IDL / "kvstore.if"), "-I", str(IMPORTS[0]), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert out.read_text() == generate_pyi(parse(IDL / "kvstore.if", IMPORTS))
    bad = tmp_path / "bad.if"
    bad.write_text('interface bad "b" {\n    message m(nosuchtype x);\n};\n')
    r = subprocess.run([sys.executable, "-m", "multihop.idl.pyi", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert f"{bad}:2:" in r.stderr and "nosuchtype" in r.stderr


USES = """\
from stubs import dispatch_if as D, kvstore_if as K

def right(b: K.KvstoreBinding, c: D.messages.news) -> int:
    got = b.rpc.get("key")
    news = D.messages.news(D.nid(1, 2), 3, 0, 10, c.origin, "a b", b"payload")
    return got.st + len(got.value) + news.seq + c.source.hi + len(b.rpc.list("", 10).names)

def wrong(b: K.KvstoreBinding, c: D.messages.news) -> None:
    D.messages.news(D.nid(1, 2), "3", 0, 10, c.origin, "a b", b"payload")
    c.sink
    b.rpc.put("key", "not bytes", True)
    b.tx.invalidate(7)
"""
WRONG = {9: "arg-type", 10: "attr-defined", 11: "arg-type", 12: "arg-type"}


def test_mypy_accepts_right_uses_of_the_stubs_and_reports_wrong_ones(tmp_path: Path) -> None:
    """The stubs type-check under --strict, and they make mypy report a wrong field type, an attribute a
    message does not have, a wrong rpc argument and a wrong send argument (and nothing else)."""
    pkg = tmp_path / "stubs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in ("dispatch", "kvstore"):
        iface = parse(IDL / f"{name}.if", IMPORTS)
        (pkg / f"{name}_if.pyi").write_text(generate_pyi(iface))
    (tmp_path / "uses.py").write_text(USES)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "c"),
            "--config-file",
            "/dev/null",
            "stubs",
            "uses.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in r.stdout.splitlines() if ": error: " in line]
    found = {int(line.split(":")[1]): line.rsplit("[", 1)[-1].rstrip("]") for line in errors}
    assert all(line.startswith("uses.py:") for line in errors), r.stdout
    assert found == WRONG, r.stdout
