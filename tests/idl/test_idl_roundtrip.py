"""Property tests: random interfaces and random values round-trip, Python <-> Python and Python <-> C.

* Python: a message sent by the generated tx stub over a real channel is
  decoded by the peer's generated rx to the values sent, re-encoding gives the
  same bytes, and the bytes equal an independent reference encoder written
  from flounder-idl/WIRE.md.
* C: a batch of N_RANDOM interfaces, drawn at random by hypothesis on every
  run (``--hypothesis-seed`` replays a run; the sources are written next to
  the driver and named in failures), plus the shipped ones and cap-free
  Barrelfish ones, is compiled once per test run into one driver linked
  against libmultihop_core.so; a Python-encoded message goes through C decode
  -> C encode and must come back byte for byte, and decode in Python to the
  original values.  Mutated messages must be accepted or rejected alike by
  both back ends.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

import multihop as mh
import multihop.idl as idl
from chanpair import runtime_pair
from multihop.idl.model import Array, Builtin, DynArray, Enum, Interface, Message, String, Struct, Type, fixed_size
from multihop.idl.names import py_arg, py_name

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "flounder-idl"
DATA = Path(__file__).resolve().parents[1] / "idl_data"
BARRELFISH = DATA / "barrelfish"
BF_IMPORTS = [BARRELFISH / "types.if", BARRELFISH / "platform_x86_32.if", BARRELFISH / "arch_x86_64.if"]
INCLUDE = ROOT / "core-rs" / "include"
GCC = shutil.which("gcc")

# -- random interfaces ------------------------------------------------------------------------

SCALARS = [
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "int8",
    "int16",
    "int32",
    "int64",
    "int",
    "bool",
    "char",
    "size",
    "uintptr",
    "intptr",
    "iref",
    "errval",
]
_RESERVED = set(SCALARS) | {
    "interface",
    "message",
    "call",
    "response",
    "rpc",
    "in",
    "out",
    "typedef",
    "struct",
    "enum",
    "alias",
    "string",
    "cap",
    "give_away_cap",
}
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_DIGITS = "0123456789"
names = st.builds(str.__add__, st.sampled_from(_LOWER), st.text(_LOWER + _DIGITS, max_size=5)).filter(lambda s: s not in _RESERVED)
values_names = st.builds(str.__add__, st.sampled_from(_LOWER.upper()), st.text(_LOWER.upper() + _DIGITS, max_size=4))


@st.composite
def interface_source(draw: st.DrawFn, name: str = "r") -> str:
    """Flounder source of a random interface: aliases, enums, structs, arrays, messages, rpcs."""
    used: set[str] = set()

    def fresh(strategy: st.SearchStrategy[str]) -> str:
        """A name not used yet in this interface (names and enum values share one set)."""
        n = draw(strategy.filter(lambda x: x not in used))
        used.add(n)
        return n

    class _Pool:
        def __init__(self, strategy: st.SearchStrategy[str]) -> None:
            self.strategy = strategy

        def __next__(self) -> str:
            return fresh(self.strategy)

    pool, vpool = _Pool(names), _Pool(values_names)
    fixed = list(SCALARS)
    decls: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["alias", "typedef", "enum", "array", "struct", "struct"]))
        n = next(pool)
        if kind in ("alias", "typedef"):  # both alias spellings; half the time of an own composite type
            own = fixed[len(SCALARS) :]
            target = draw(st.sampled_from(own if own and draw(st.booleans()) else SCALARS))
            decls.append(f"alias {n} {target};" if kind == "alias" else f"typedef {target} {n};")
        elif kind == "enum":
            vals = [next(vpool) for _ in range(draw(st.integers(1, 4)))]
            decls.append(f"typedef enum {{ {', '.join(vals)} }} {n};")
        elif kind == "array":
            decls.append(f"typedef {draw(st.sampled_from(fixed))} {n}[{draw(st.integers(1, 4))}];")
        else:
            fields = []
            for _ in range(draw(st.integers(1, 4))):
                dims = draw(st.sampled_from(["", "", "", "[2]", "[3]"]))
                fields.append(f"{draw(st.sampled_from(fixed))} {next(pool)}{dims};")
            decls.append(f"typedef struct {{ {' '.join(fields)} }} {n};")
        fixed.append(n)

    def arg() -> str:
        kind = draw(st.sampled_from(["fixed", "fixed", "fixed", "inline", "dyn", "dyn", "olddyn", "str", "oldstr"]))
        n, t = next(pool), draw(st.sampled_from(fixed))
        if kind == "fixed":
            return f"{t} {n}"
        if kind == "inline":
            return f"{t} {n}[{draw(st.integers(1, 3))}]"
        if kind == "dyn":
            return f"{t} {n}[{next(pool)}, {draw(st.integers(1, 6))}]"
        if kind == "olddyn":
            return f"{t} {n}[{next(pool)}]"
        if kind == "str":
            return f"String {n}[{draw(st.integers(1, 12))}]"
        return f"string {n}"

    msgs: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        kw = draw(st.sampled_from(["message", "message", "call", "response"]))
        msgs.append(f"{kw} {next(pool)}({', '.join(arg() for _ in range(draw(st.integers(0, 5))))});")
    for _ in range(draw(st.integers(0, 2))):
        args = [f"{draw(st.sampled_from(['in', 'out']))} {arg()}" for _ in range(draw(st.integers(0, 4)))]
        msgs.append(f"rpc {next(pool)}({', '.join(args)});")
    body = draw(st.permutations(msgs)) if draw(st.booleans()) else msgs
    return f'interface {name} "random interface" {{\n    ' + "\n    ".join(decls + list(body)) + "\n};\n"


def _clip_utf8(s: str, limit: int) -> str:
    return s.encode("utf-8")[:limit].decode("utf-8", "ignore")


def value_of(t: Type) -> st.SearchStrategy[Any]:
    """Values of a model type, as a caller would pass them."""
    if isinstance(t, Builtin):
        if t.kind == "bool":
            return st.booleans()
        if t.kind == "char":
            return st.binary(min_size=1, max_size=1)
        return st.integers(t.lo, t.hi)
    if isinstance(t, Enum):
        return st.integers(0, len(t.values) - 1)
    if isinstance(t, Struct):
        return st.tuples(*(value_of(f.type) for f in t.fields))
    if isinstance(t, Array):
        if _bytes_elem(t.element):
            return st.binary(min_size=t.length, max_size=t.length)
        return st.lists(value_of(t.element), min_size=t.length, max_size=t.length)
    if isinstance(t, DynArray):
        cap = 5 if t.maximum is None else t.maximum
        if _bytes_elem(t.element):
            return st.binary(max_size=cap)
        return st.lists(value_of(t.element), max_size=cap)
    assert isinstance(t, String)
    cap = 12 if t.maximum is None else t.maximum
    text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=cap)
    return text.map(lambda s: _clip_utf8(s, cap))


def _bytes_elem(t: Type) -> bool:
    return isinstance(t, Builtin) and t.name in ("uint8", "char")


def args_of(m: Message) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({py_arg(a.name): value_of(a.type) for a in m.args})


def norm(v: Any) -> Any:
    """Compare values as data: tuples for sequences and structs, ints for enums, bytes for bytes-likes."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, (list, tuple)):
        return tuple(norm(x) for x in v)
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return int(v)
    return v


# -- an independent reference encoder, straight from WIRE.md -----------------------------------


def ref_fixed(t: Type, v: Any) -> bytes:
    if isinstance(t, Builtin):
        if t.kind == "bool":
            return b"\x01" if v else b"\x00"
        if t.kind == "char":
            return bytes(v)
        return int(v).to_bytes(t.size, "little", signed=t.kind == "int")
    if isinstance(t, Enum):
        return int(v).to_bytes(4, "little")
    if isinstance(t, Struct):
        return b"".join(ref_fixed(f.type, x) for f, x in zip(t.fields, v, strict=True))
    assert isinstance(t, Array)
    if _bytes_elem(t.element):
        return bytes(v)
    return b"".join(ref_fixed(t.element, x) for x in v)


def ref_encode(m: Message, values: dict[str, Any]) -> bytes:
    out = m.number.to_bytes(2, "little")
    vals = [values[py_arg(a.name)] for a in m.args]
    for a, v in zip(m.args, vals, strict=True):
        if fixed_size(a.type) is not None:
            out += ref_fixed(a.type, v)
    for a, v in zip(m.args, vals, strict=True):
        t = a.type
        if isinstance(t, String):
            data = v.encode("utf-8")
            out += len(data).to_bytes(8, "little") + data
        elif isinstance(t, DynArray):
            data = bytes(v) if _bytes_elem(t.element) else b"".join(ref_fixed(t.element, x) for x in v)
            out += len(v).to_bytes(8, "little") + data
    return out


@pytest.fixture(scope="module")
def channel() -> Iterator[tuple[mh.Channel, mh.Channel]]:
    """A real UMP channel pair of a two-core runtime, shared by the module's examples."""
    with runtime_pair("idl-roundtrip") as pair:
        yield pair


# -- Python <-> Python ------------------------------------------------------------------------


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_python_roundtrip_random_interfaces(channel: tuple[mh.Channel, mh.Channel], data: st.DataObject) -> None:
    """Each message goes out through the generated tx stub over a real channel; the peer's
    generated rx decodes it to the same values."""
    src = data.draw(interface_source("py"), label="interface")
    iface = idl.parse(src)
    mod = idl.load(iface)
    a, b = channel
    assert b.try_recv() is None, "a message of an earlier example is still in the channel"
    tx, rx = mod.Binding(a), mod.Binding(b)
    for m in iface.messages:
        args = data.draw(args_of(m), label=m.name)
        wire = mod.encode(m.name, **args)
        assert wire == ref_encode(m, args)
        getattr(tx.tx, py_name(m.name))(**args, timeout=5.0)
        rec = rx.rx.next(timeout=5.0)
        assert rec.name == m.name and rec.number == m.number
        assert norm(rec._values()) == norm(tuple(args[py_arg(a.name)] for a in m.args))
        assert mod.encode(m.name, **rec._asdict()) == wire


# -- Python <-> C -----------------------------------------------------------------------------

DRIVER = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
@INCLUDES@

/* the codec needs no channel; the send/recv stubs link against the real libmultihop_core.so */

typedef int (*reencode_fn)(const uint8_t *, size_t, uint8_t *, size_t, size_t *);
static const reencode_fn table[] = { @TABLE@ };

static int unhex(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

int main(void)
{
    char *line = NULL;
    size_t linecap = 0;
    uint8_t *in = NULL, *out = NULL;
    size_t incap = 0, outcap = 0;
    while (getline(&line, &linecap, stdin) > 0) {
        char *sp = strchr(line, ' ');
        if (sp == NULL) return 2;
        int k = atoi(line);
        char *hex = sp + 1;
        size_t hl = strcspn(hex, "\n");
        size_t n = hl / 2;
        if (n + 1 > incap) { incap = 2 * n + 16; in = realloc(in, incap); }
        for (size_t i = 0; i < n; i++) in[i] = (uint8_t)(unhex(hex[2 * i]) << 4 | unhex(hex[2 * i + 1]));
        size_t outlen = 0;
        int rc = table[k](in, n, out, outcap, &outlen);
        if (rc == MH_E_TOO_LARGE) {
            outcap = outlen;
            out = realloc(out, outcap ? outcap : 1);
            rc = table[k](in, n, out, outcap, &outlen);
        }
        if (rc != MH_OK) {
            printf("ERR %d\n", rc);
        } else {
            printf("OK ");
            for (size_t i = 0; i < outlen; i++) printf("%02x", out[i]);
            printf("\n");
        }
        fflush(stdout);
    }
    free(line); free(in); free(out);
    return 0;
}
"""


#: Random interfaces compiled into the C driver on each run (one gcc batch: two compilers, one link).
N_RANDOM = 20


def draw_interfaces(n: int) -> list[str]:
    """n distinct random interface sources, new on every run (hypothesis draws them; bounded tries)."""
    found: list[str] = []

    @settings(max_examples=4 * n, database=None, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(interface_source())
    def grab(src: str) -> None:
        if len(found) < n and src not in found:
            found.append(src)

    grab()
    assert len(found) == n, f"only {len(found)} distinct interfaces in {4 * n} draws"
    return found


@dataclass
class CDriver:
    ifaces: list[Interface]
    mods: list[Any]
    sources: list[str]
    proc: subprocess.Popen

    def reencode(self, k: int, data: bytes) -> bytes | int:
        """C decode + encode of message ``data`` under interface k: the bytes, or the error code."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{k} {data.hex()}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().split()
        assert line, "C driver died"
        return bytes.fromhex(line[1]) if line[0] == "OK" and len(line) > 1 else (b"" if line[0] == "OK" else int(line[1]))

    def source(self, k: int) -> str:
        """Interface k as written (random ones as drawn this run), for failure messages."""
        return self.sources[k]


@pytest.fixture(scope="module")
def cdriver(tmp_path_factory: pytest.TempPathFactory):
    if GCC is None:
        pytest.fail("gcc is required for the C tests (it is part of this machine kind; apt-get install gcc)")
    from cdylib import private_cdylib

    lib = private_cdylib(tmp_path_factory.mktemp("cdylib"))
    out = tmp_path_factory.mktemp("idl_c")
    sources = [src.replace("interface r ", f"interface r{i} ", 1) for i, src in enumerate(draw_interfaces(N_RANDOM))]
    (out / "random_interfaces.if.txt").write_text("\n".join(sources))
    ifaces = [idl.parse(src) for src in sources]
    shipped = [p for p in sorted(SHIPPED.glob("*.if")) if p.name != "types.if"]
    ifaces += [idl.parse(p, imports=[SHIPPED / "types.if"]) for p in shipped]
    bf = [BARRELFISH / f"{n}.if" for n in ("intermon", "ping_pong", "ata_rw28")]
    ifaces += [idl.parse(p, imports=BF_IMPORTS) for p in bf]
    sources += [p.read_text() for p in shipped + bf]
    for iface in ifaces:
        header, source = idl.generate_c(iface)
        (out / f"{iface.name}.h").write_text(header)
        (out / f"{iface.name}.c").write_text(source)
    driver = DRIVER.replace("@INCLUDES@", "\n".join(f'#include "{i.name}.h"' for i in ifaces))
    driver = driver.replace("@TABLE@", ", ".join(f"{i.name}_reencode" for i in ifaces))
    (out / "driver.c").write_text(driver)
    # two compiler processes (one per core), then one link
    cfiles = sorted(out.glob("*.c"))
    halves = [cfiles[0::2], cfiles[1::2]]
    procs = [
        subprocess.Popen(
            [GCC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", "-I", str(INCLUDE), "-I", str(out), *map(str, h)],
            cwd=out,
            stderr=subprocess.PIPE,
            text=True,
        )
        for h in halves
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    exe = out / "driver"
    r = subprocess.run(
        [GCC, *map(str, sorted(out.glob("*.o"))), "-L", str(lib.parent), "-lmultihop_core", f"-Wl,-rpath,{lib.parent}", "-o", str(exe)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    drv = CDriver(ifaces, [idl.load(i) for i in ifaces], sources, proc)
    yield drv
    proc.stdin.close()  # type: ignore[union-attr]
    proc.wait(timeout=10)


def test_generator_emits_both_alias_spellings() -> None:
    """The interface strategy can write `alias NAME TYPE;` and `typedef TYPE NAME;`, of scalars and of
    its own composite types (found by search, so the check does not depend on this run's batch)."""
    plain = r"^(?!.*\b(?:struct|enum)\b).*"
    for pattern in (r"\balias (\w+) (\w+);", r"typedef (?!struct|enum)(\w+) (\w+);"):
        src = find(
            interface_source(),
            lambda s, p=pattern: re.search(p, s) is not None,
            settings=settings(database=None, max_examples=2000, phases=[Phase.generate]),
        )
        assert re.search(pattern, src) and re.match(plain, re.search(pattern, src).group(0))
        idl.parse(src)
    composite = find(
        interface_source(),
        lambda s: re.search(r"typedef struct \{[^}]*\} (\w+);.*typedef \1 \w+;", s, re.S) is not None,
        settings=settings(database=None, max_examples=5000, phases=[Phase.generate]),
    )
    iface = idl.parse(composite)
    assert any(isinstance(t, Struct) for t in iface.aliases.values())


def test_c_batch_is_this_runs_random_draw(cdriver: CDriver) -> None:
    randoms = cdriver.sources[:N_RANDOM]
    assert len(set(randoms)) == N_RANDOM and all(s.startswith(f"interface r{i} ") for i, s in enumerate(randoms))
    assert [i.name for i in cdriver.ifaces[:N_RANDOM]] == [f"r{i}" for i in range(N_RANDOM)]


def test_c_batch_covers_the_language(cdriver: CDriver) -> None:
    kinds: set[str] = set()
    for iface in cdriver.ifaces:
        for t in iface.types.values():
            kinds.add(type(t).__name__)
        for m in iface.messages:
            for a in m.args:
                t = a.type
                kinds.add(type(t).__name__ + ("" if not isinstance(t, (DynArray, String)) else ("-bounded" if t.maximum else "-unbounded")))
    assert {"Enum", "Struct", "Array", "Builtin", "DynArray-bounded", "DynArray-unbounded", "String-bounded", "String-unbounded"} <= kinds


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_python_encode_c_decode_encode_python_decode(cdriver: CDriver, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, len(cdriver.ifaces) - 1), label="interface")
    iface, mod = cdriver.ifaces[k], cdriver.mods[k]
    m = data.draw(st.sampled_from(iface.messages), label="message")
    args = data.draw(args_of(m), label="args")
    wire = mod.encode(m.name, **args)
    back = cdriver.reencode(k, wire)
    assert back == wire, f"C re-encoded {m.name} differently; interface:\n{cdriver.source(k)}"
    rec = mod.decode(back)
    assert norm(rec._values()) == norm(tuple(args[py_arg(a.name)] for a in m.args))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_mutated_messages_are_judged_alike(cdriver: CDriver, data: st.DataObject) -> None:
    """A damaged message: Python and C both reject it, or both accept it and re-encode it the same."""
    k = data.draw(st.integers(0, len(cdriver.ifaces) - 1), label="interface")
    iface, mod = cdriver.ifaces[k], cdriver.mods[k]
    m = data.draw(st.sampled_from(iface.messages), label="message")
    wire = bytearray(mod.encode(m.name, **data.draw(args_of(m), label="args")))
    how = data.draw(st.sampled_from(["flip", "truncate", "extend", "set"]), label="mutation")
    if how == "flip" and wire:
        i = data.draw(st.integers(0, len(wire) - 1))
        wire[i] ^= data.draw(st.integers(1, 255))
    elif how == "truncate":
        del wire[data.draw(st.integers(0, len(wire))) :]
    elif how == "extend":
        wire += data.draw(st.binary(min_size=1, max_size=9))
    elif wire:
        i = data.draw(st.integers(0, len(wire) - 1))
        wire[i] = data.draw(st.sampled_from([0, 1, 2, 0x7F, 0x80, 0xC0, 0xED, 0xF4, 0xFF]))
    wire = bytes(wire)
    try:
        rec = mod.decode(wire)
    except idl.DecodeError:
        expected: bytes | None = None
    else:
        expected = mod.encode(rec.name, **rec._asdict())
    got = cdriver.reencode(k, wire)
    if expected is None:
        assert got == -6, f"C accepted what Python rejects: {wire.hex()}; interface:\n{cdriver.source(k)}"
    else:
        assert got == expected, f"C and Python disagree on {wire.hex()}; interface:\n{cdriver.source(k)}"
