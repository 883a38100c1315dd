"""core-rs/include/multihop.h is written by hand (its prose is the C ABI's manual); this checks it against the ABI
itself, core-rs/src/capi.rs (issue 25): every `#[no_mangle] extern "C"` function is declared in the header with the
same name, parameter names, parameter types and return type, every `pub const MH_*` is `#define`d to the same value,
the opaque handle types are declared, and the header declares nothing the library does not export.

Types map one to one (`*const c_char` is `const char *`, `*mut *mut mh_channel` is `mh_channel **`, ...), except that
a byte buffer (`*const u8` / `*mut u8`) is `const void *` / `void *` in C, so a caller passes any buffer without a cast.
Why a check rather than cbindgen: cbindgen would write `const uint8_t *` for those buffers (a `char *` argument then
warns under -Wpointer-sign) and would order and word the header its own way; the header's text and groupings are
kept, and this test keeps its declarations true.
"""

from __future__ import annotations

import re
from pathlib import Path

from multihop import _core

ROOT = Path(__file__).resolve().parents[2]
CAPI = ROOT / "core-rs" / "src" / "capi.rs"
HEADER = ROOT / "core-rs" / "include" / "multihop.h"

_SCALARS = {"c_int": "int", "u32": "uint32_t", "u64": "uint64_t", "i64": "int64_t", "usize": "size_t", "c_char": "char"}
_BYTES = {"u8": "void"}  # a byte buffer is void * in C


def _c_type(rust: str) -> str:
    """The C spelling of a Rust FFI type (`*const c_char` -> `const char *`, `*mut *mut mh_channel` -> `mh_channel **`)."""
    rust = rust.strip()
    for prefix, const in (("*const ", True), ("*mut ", False)):
        if rust.startswith(prefix):
            inner = rust[len(prefix) :].strip()
            if inner.startswith("*"):
                return _c_type(inner) + (" const *" if const else " *")
            return ("const " if const else "") + _BYTES.get(inner, _SCALARS.get(inner, inner)) + " *"
    return _SCALARS.get(rust, rust)


def _norm(c: str) -> str:
    """One spelling of a C type for comparing: single spaces, none around `*` (`const void*const*`)."""
    return re.sub(r"\s*\*\s*", "*", re.sub(r"\s+", " ", c.strip()))


def _rust_functions() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    text = CAPI.read_text()
    out = {}
    for m in re.finditer(r'#\[no_mangle\]\s*pub (?:unsafe )?extern "C" fn (\w+)\((.*?)\)\s*(?:->\s*([^{]+?))?\s*\{', text, re.S):
        name, params, ret = m.group(1), m.group(2), m.group(3)
        args = []
        for p in (p.strip() for p in params.split(",")):
            if p:
                pname, ptype = p.split(":", 1)
                args.append((pname.strip(), _norm(_c_type(ptype))))
        out[name] = (_norm(_c_type(ret)) if ret else "void", args)
    return out


def _header_functions() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    out = {}
    for m in re.finditer(r"^([A-Za-z_][\w\s\*]*?)\b(mh_\w+)\s*\(([^)]*)\)\s*;", text, re.M):
        ret, name, params = m.group(1), m.group(2), m.group(3)
        args = []
        for p in (p.strip() for p in params.split(",")):
            if p and p != "void":
                pm = re.match(r"(.*?)(\w+)$", p, re.S)
                assert pm, f"{name}: cannot read parameter {p!r}"
                args.append((pm.group(2), _norm(pm.group(1))))
        out[name] = (_norm(ret), args)
    return out


def test_every_exported_function_is_declared_as_the_abi_defines_it() -> None:
    rust, header = _rust_functions(), _header_functions()
    assert len(rust) >= 20, f"read only {sorted(rust)} from capi.rs"
    assert set(rust) == set(header), f"only in capi.rs: {set(rust) - set(header)}; only in multihop.h: {set(header) - set(rust)}"
    for name, (ret, args) in rust.items():
        assert header[name] == (ret, args), f"{name}: capi.rs says {ret} {name}{args}, multihop.h {header[name]}"


def test_every_constant_is_defined_with_the_abis_value() -> None:
    text = CAPI.read_text()
    consts = {m.group(1): int(m.group(2)) for m in re.finditer(r"pub const (MH_\w+): c_int = (-?\d+);", text)}
    assert "MH_OK" in consts and "MH_E_HELD_LOST" in consts
    assert re.search(r"pub const MH_MAX_HANDLES: usize = multihop_base::handles::MAX_HANDLES;", text)
    consts["MH_MAX_HANDLES"] = _core.MAX_HANDLES  # the engine's value, as the library exports it
    defines = {m.group(1): int(m.group(2)) for m in re.finditer(r"^#define (MH_\w+) (-?\d+)", HEADER.read_text(), re.M)}
    assert consts == defines, f"capi.rs {consts} vs multihop.h {defines}"


def test_handle_types_are_opaque_in_the_header() -> None:
    text = HEADER.read_text()
    for t in re.findall(r"pub struct (mh_\w+)", CAPI.read_text()):
        assert f"typedef struct {t} {t};" in text, t


def test_the_type_mapping_itself() -> None:
    assert _norm(_c_type("*const c_char")) == _norm("const char *")
    assert _norm(_c_type("*mut *mut mh_channel")) == _norm("mh_channel **")
    assert _norm(_c_type("*const *const u8")) == _norm("const void *const *")
    assert _norm(_c_type("*mut u8")) == _norm("void *")
    assert _norm(_c_type("i64")) == "int64_t"
