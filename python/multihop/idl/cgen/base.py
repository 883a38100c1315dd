"""The C back end's shared parts: C types, the helper text every source starts with, naming and parameter lists."""

from __future__ import annotations

from multihop.idl.model import (
    Arg,
    Array,
    Builtin,
    DynArray,
    Enum,
    Interface,
    Message,
    String,
    Struct,
    Type,
    has_caps,
)
from multihop.idl.names import c_name

CTYPES = {
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "uintptr": "uint64_t",
    "size": "uint64_t",
    "iref": "uint64_t",
    "errval": "uint64_t",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "intptr": "int64_t",
    "bool": "bool",
    "char": "char",
    "cap": "int",
    "give_away_cap": "int",
}

C_HELPERS = r"""
#ifndef MHIDL_HELPERS_DEFINED
#define MHIDL_HELPERS_DEFINED
/* Little-endian scalar access, independent of the host's byte order and alignment. */
static inline void mhidl_put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void mhidl_put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void mhidl_put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline uint16_t mhidl_get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t mhidl_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t mhidl_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline int8_t mhidl_get_i8(const uint8_t *p) { int8_t v; memcpy(&v, p, 1); return v; }
static inline int16_t mhidl_get_i16(const uint8_t *p) { uint16_t u = mhidl_get_u16(p); int16_t v; memcpy(&v, &u, 2); return v; }
static inline int32_t mhidl_get_i32(const uint8_t *p) { uint32_t u = mhidl_get_u32(p); int32_t v; memcpy(&v, &u, 4); return v; }
static inline int64_t mhidl_get_i64(const uint8_t *p) { uint64_t u = mhidl_get_u64(p); int64_t v; memcpy(&v, &u, 8); return v; }
static inline char mhidl_get_char(const uint8_t *p) { char c; memcpy(&c, p, 1); return c; }
/* Monotonic milliseconds; the deadline of a timeout_ms (-1: none) and what is left of it (-1: no limit). */
static inline int64_t mhidl_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + (int64_t)(t.tv_nsec / 1000000);
}
/* Close `n` descriptors (handles nobody will take). */
static inline void mhidl_close_all(const int *fds, size_t n)
{
    for (size_t i = 0; fds != NULL && i < n; i++) close(fds[i]);
}
static inline int64_t mhidl_deadline(int64_t timeout_ms) { return timeout_ms < 0 ? -1 : mhidl_now_ms() + timeout_ms; }
static inline int64_t mhidl_left(int64_t deadline)
{
    if (deadline < 0) return -1;
    int64_t left = deadline - mhidl_now_ms();
    return left > 0 ? left : 0;
}
/* Strict UTF-8 (no overlong forms, no surrogates, at most U+10FFFF), as Python decodes it. */
static inline int mhidl_utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1Fu; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0Fu; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07u; }
        else return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (uint32_t)(s[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}
#endif
"""


def is_bytes_elem(t: Type) -> bool:
    return isinstance(t, Builtin) and t.name in ("uint8", "char")


def c_comment(text: str) -> str:
    """``text`` made safe inside a C comment (no ``*/``, no line breaks)."""
    return text.replace("*/", "* /").replace("\n", " ").replace("\r", " ")


def has_enum(t: Type) -> bool:
    if isinstance(t, Enum):
        return True
    if isinstance(t, Struct):
        return any(has_enum(f.type) for f in t.fields)
    if isinstance(t, (Array, DynArray)):
        return has_enum(t.element)
    return False


class CBase:
    """What every part of the C back end shares: the interface, its prefix, C names and parameter lists."""

    def __init__(self, iface: Interface) -> None:
        assert iface.name is not None
        self.iface = iface
        self.p = iface.name
        self.has_caps = any(self.caps_of(m) for m in iface.messages)

    @staticmethod
    def caps_of(m: Message) -> bool:
        """Whether message ``m`` carries capabilities."""
        return any(has_caps(a.type) for a in m.args)

    def fd_params(self, m: Message, decode: bool) -> list[str]:
        """The handle parameters of ``m``'s encoder or decoder (none for a message without capabilities)."""
        if not self.caps_of(m):
            return []
        if decode:
            return ["const int *mh_fds", "size_t mh_nfds"]
        return ["int *mh_fds", "size_t *mh_nfds", "uint64_t *mh_give"]

    # -- naming ----------------------------------------------------------------

    def ctype(self, t: Type) -> str:
        """The C type of a scalar or named type (not of an anonymous array)."""
        if isinstance(t, Builtin):
            return CTYPES[t.name]
        assert t.name is not None
        return f"{self.p}_{t.name}_t"

    def field_decl(self, t: Type, name: str) -> str:
        """A declaration of ``name`` with type ``t`` (arrays get their ``[N]``)."""
        if isinstance(t, Array) and t.name is None:
            return f"{self.ctype(t.element)} {name}[{t.length}]"
        return f"{self.ctype(t)} {name}"

    def fn(self, m: Message, what: str) -> str:
        """The C function name ``<iface>_<message>_<what>``."""
        return f"{self.p}_{m.name}_{what}"

    def max_macro(self, m: Message, a: Arg) -> str:
        """The macro holding the maximum of a bounded argument."""
        return f"{self.p}_{m.name}_{a.name}_MAX"

    # -- parameters ------------------------------------------------------------

    def params_in(self, a: Arg) -> list[str]:
        """Parameters carrying an argument into encode (and into an rx handler)."""
        n, t = c_name(a.name), a.type
        if isinstance(t, String):
            return [f"const char *{n}"]
        if isinstance(t, DynArray):
            return [
                f"const {self.ctype(t.element)} *{n}",
                f"size_t {c_name(t.length_name)}",
            ]
        if isinstance(t, Array):
            return [f"const {self.field_decl(t, n)}"]
        if isinstance(t, Struct):
            return [f"const {self.ctype(t)} *{n}"]
        return [f"{self.ctype(t)} {n}"]

    def params_out(self, a: Arg) -> list[str]:
        """Parameters receiving an argument from decode."""
        n, t = c_name(a.name), a.type
        if isinstance(t, String):
            return [f"char {'**' if t.maximum is None else '*'}{n}"]
        if isinstance(t, DynArray):
            stars = "**" if t.maximum is None else "*"
            return [
                f"{self.ctype(t.element)} {stars}{n}",
                f"size_t *{c_name(t.length_name)}",
            ]
        if isinstance(t, Array):
            return [self.field_decl(t, n)]
        return [f"{self.ctype(t)} *{n}"]

    def names_in(self, a: Arg) -> list[str]:
        """The C parameter names that carry an argument (an array's length too)."""
        t = a.type
        if isinstance(t, DynArray):
            return [c_name(a.name), c_name(t.length_name)]
        return [c_name(a.name)]

    def sig(self, params: list[str]) -> str:
        """A C parameter list (``void`` if empty)."""
        return ", ".join(params) if params else "void"
