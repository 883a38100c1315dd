"""C back end: an interface model in, a header and a source file out.

The generated C speaks the same wire format as the Python back end
(``flounder-idl/WIRE.md``) and compiles with ``gcc -std=c11 -Wall -Wextra -Werror``.
For interface ``N`` and message ``M`` it provides (see the header's comments):

* types ``N_T_t`` for each struct, enum (constants ``N_VALUE``) and array typedef;
* ``int N_M_encode(uint8_t *buf, size_t cap, size_t *len, <in args>)``:
  ``*len`` is always set to the size needed; ``MH_E_TOO_LARGE`` if ``cap`` is
  smaller (so ``cap`` 0 asks for the size), ``MH_E_INVALID`` for a bad value;
* ``int N_M_decode(const uint8_t *buf, size_t len, <out params>)``:
  ``MH_E_PROTOCOL`` if the bytes are not a well-formed ``M``;
* ``N_rx_handlers`` (one function pointer per message), ``N_dispatch`` (decode
  by message number and call the handler), ``N_msgnum``, ``N_msg_name``,
  ``N_reencode`` (decode then encode again: checks a message is well-formed);
* over the C ABI of ``multihop.h``, through a binding ``N_binding`` (a channel
  and its rpc backlog; ``N_binding_init`` / ``N_binding_destroy``; made by
  ``N_bind(d, name, transport, timeout_ms, &b)`` with transport ``"ump"``,
  ``"multihop"`` or ``"auto"``, or on the service side by ``N_export`` and
  ``N_accept(svc, timeout_ms, &b)``):
  ``N_M_send`` per message, ``N_recv`` (hand out the oldest backlog message,
  else receive one, and dispatch it), and ``N_R_rpc`` per rpc (send the call,
  wait for the response, decode it).  While an rpc waits, other messages are
  kept in order in the backlog (at most ``N_BACKLOG_MAX``), never lost: see
  the text of the generated header.

Argument mapping: scalars by value (``uint64`` -> ``uint64_t``, ``size``/``iref``
/``errval``/``uintptr`` -> ``uint64_t``, ``intptr`` -> ``int64_t``); structs by
``const N_T_t *``; fixed arrays as arrays; ``T a[len, MAX]`` as ``const T *a, size_t len``;
strings as NUL-terminated ``const char *``.  On decode, bounded dynamic arrays
and strings are copied into caller buffers (``N_M_A_MAX`` elements; a string
needs ``MAX + 1`` bytes) and unbounded ones (``T a[len]``, ``string s``) are
``malloc``'d for the caller to ``free``.

Capabilities (``cap``, ``give_away_cap``, also in structs and arrays) are ``int``
file descriptors (-1 for none).  A message that carries them has an encoder that
also fills ``int mh_fds[MH_MAX_HANDLES]``, ``*mh_nfds`` and ``*mh_give`` (bit i: handle
i is given away) and a decoder that takes the handles that came (``mh_fds``,
``mh_nfds``); its send stub uses ``mh_send_handles``.  An interface with
capabilities receives with ``mh_recv_handles``: its ``N_dispatch``,
``N_reencode`` take the handles beside the bytes, its backlog keeps them, and a
handler owns the descriptors it is given (a message that does not decode has
its handles closed).
"""

from __future__ import annotations

from multihop.idl.ccheck import BACKLOG_MAX, check_c_names
from multihop.idl.checker import check_generatable
from multihop.idl.model import (
    Arg,
    Array,
    Builtin,
    DynArray,
    Enum,
    Interface,
    Message,
    Rpc,
    String,
    Struct,
    Type,
    arg_text,
    fixed_size,
    has_caps,
)
from multihop.idl.names import c_name

__all__ = ["generate_c"]

_CTYPES = {
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

_HELPERS = r"""
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


def _is_bytes_elem(t: Type) -> bool:
    return isinstance(t, Builtin) and t.name in ("uint8", "char")


def _comment(text: str) -> str:
    """``text`` made safe inside a C comment (no ``*/``, no line breaks)."""
    return text.replace("*/", "* /").replace("\n", " ").replace("\r", " ")


def _has_enum(t: Type) -> bool:
    if isinstance(t, Enum):
        return True
    if isinstance(t, Struct):
        return any(_has_enum(f.type) for f in t.fields)
    if isinstance(t, (Array, DynArray)):
        return _has_enum(t.element)
    return False


class _CGen:
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
            return _CTYPES[t.name]
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
            return [f"const {self.ctype(t.element)} *{n}", f"size_t {c_name(t.length_name)}"]
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
            return [f"{self.ctype(t.element)} {stars}{n}", f"size_t *{c_name(t.length_name)}"]
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

    # -- value codecs ------------------------------------------------------------

    def enc_value(self, t: Type, expr: str, ind: str, depth: int = 0) -> list[str]:
        """C statements writing ``expr`` at ``mh_p`` and advancing it."""
        if isinstance(t, Builtin):
            if t.kind == "cap":
                give = "*mh_give |= (uint64_t)1 << *mh_nfds; " if t.name == "give_away_cap" else ""
                return [
                    f"{ind}{{ /* {t.name}: a presence byte, the descriptor beside the bytes */",
                    f"{ind}    int mh_fd = ({expr});",
                    f"{ind}    *mh_p++ = mh_fd >= 0 ? 1 : 0;",
                    f"{ind}    if (mh_fd >= 0) {{",
                    f"{ind}        if (*mh_nfds >= MH_MAX_HANDLES) return MH_E_INVALID;",
                    f"{ind}        {give}mh_fds[(*mh_nfds)++] = mh_fd;",
                    f"{ind}    }}",
                    f"{ind}}}",
                ]
            if t.kind == "bool":
                return [f"{ind}*mh_p++ = ({expr}) ? 1 : 0;"]
            if t.kind == "char":
                return [f"{ind}*mh_p++ = (uint8_t)({expr});"]
            if t.size == 1:
                return [f"{ind}*mh_p++ = (uint8_t)({expr});"]
            bits = 8 * t.size
            return [f"{ind}mhidl_put_u{bits}(mh_p, (uint{bits}_t)({expr})); mh_p += {t.size};"]
        if isinstance(t, Enum):
            return [f"{ind}mhidl_put_u32(mh_p, (uint32_t)({expr})); mh_p += 4;"]
        if isinstance(t, Struct):
            out: list[str] = []
            for f in t.fields:
                out += self.enc_value(f.type, f"({expr}).{c_name(f.name)}", ind, depth)
            return out
        assert isinstance(t, Array)
        if _is_bytes_elem(t.element):
            return [f"{ind}memcpy(mh_p, {expr}, {t.length}); mh_p += {t.length};"]
        i = f"mh_i{depth}"
        return (
            [f"{ind}for (size_t {i} = 0; {i} < {t.length}; {i}++) {{"]
            + self.enc_value(t.element, f"({expr})[{i}]", ind + "    ", depth + 1)
            + [f"{ind}}}"]
        )

    def chk_value(self, t: Type, expr: str, ind: str, depth: int = 0) -> list[str]:
        """C statements returning MH_E_INVALID if ``expr`` holds an enum value out of range."""
        if not _has_enum(t):
            return []
        if isinstance(t, Enum):
            return [f"{ind}if ((uint32_t)({expr}) >= {len(t.values)}u) return MH_E_INVALID;"]
        if isinstance(t, Struct):
            out: list[str] = []
            for f in t.fields:
                out += self.chk_value(f.type, f"({expr}).{c_name(f.name)}", ind, depth)
            return out
        assert isinstance(t, Array)
        i = f"mh_i{depth}"
        return (
            [f"{ind}for (size_t {i} = 0; {i} < {t.length}; {i}++) {{"]
            + self.chk_value(t.element, f"({expr})[{i}]", ind + "    ", depth + 1)
            + [f"{ind}}}"]
        )

    def dec_value(self, t: Type, lv: str, ind: str, depth: int = 0) -> list[str]:
        """C statements reading a value at ``mh_p`` into lvalue ``lv`` (bounds already checked)."""
        if isinstance(t, Builtin):
            if t.kind == "cap":
                return [
                    f"{ind}if (*mh_p > 1) goto mh_bad;",
                    f"{ind}if (*mh_p++) {{",
                    f"{ind}    if (mh_k >= mh_nfds) goto mh_bad;",
                    f"{ind}    {lv} = mh_fds[mh_k++];",
                    f"{ind}}} else {{",
                    f"{ind}    {lv} = -1;",
                    f"{ind}}}",
                ]
            if t.kind == "bool":
                return [f"{ind}{lv} = (*mh_p++ != 0);"]
            if t.kind == "char":
                return [f"{ind}{lv} = mhidl_get_char(mh_p); mh_p += 1;"]
            if t.size == 1:
                if t.kind == "int":
                    return [f"{ind}{lv} = mhidl_get_i8(mh_p); mh_p += 1;"]
                return [f"{ind}{lv} = *mh_p++;"]
            bits = 8 * t.size
            kind = "i" if t.kind == "int" else "u"
            return [f"{ind}{lv} = mhidl_get_{kind}{bits}(mh_p); mh_p += {t.size};"]
        if isinstance(t, Enum):
            return [
                f"{ind}if (mhidl_get_u32(mh_p) >= {len(t.values)}u) goto mh_bad;",
                f"{ind}{lv} = ({self.ctype(t)})mhidl_get_u32(mh_p); mh_p += 4;",
            ]
        if isinstance(t, Struct):
            out: list[str] = []
            for f in t.fields:
                out += self.dec_value(f.type, f"({lv}).{c_name(f.name)}", ind, depth)
            return out
        assert isinstance(t, Array)
        if _is_bytes_elem(t.element):
            return [f"{ind}memcpy({lv}, mh_p, {t.length}); mh_p += {t.length};"]
        i = f"mh_i{depth}"
        return (
            [f"{ind}for (size_t {i} = 0; {i} < {t.length}; {i}++) {{"]
            + self.dec_value(t.element, f"({lv})[{i}]", ind + "    ", depth + 1)
            + [f"{ind}}}"]
        )

    # -- per message ---------------------------------------------------------------

    def fixed_part(self, m: Message) -> int:
        """Bytes of the message number plus the fixed-size arguments."""
        return 2 + sum(fixed_size(a.type) or 0 for a in m.args if fixed_size(a.type) is not None)

    def gen_encode(self, m: Message) -> list[str]:
        """``int N_M_encode(buf, cap, len, args...)``: check, size, then write."""
        params = ["uint8_t *mh_buf", "size_t mh_cap", "size_t *mh_len"] + self.fd_params(m, False)
        for a in m.args:
            params += self.params_in(a)
        fixed = [a for a in m.args if fixed_size(a.type) is not None]
        dyn = [a for a in m.args if fixed_size(a.type) is None]
        out = [f"int {self.fn(m, 'encode')}({self.sig(params)})", "{"]
        if self.caps_of(m):
            out.append("    if (mh_fds == NULL || mh_nfds == NULL || mh_give == NULL) return MH_E_INVALID;")
            out.append("    *mh_nfds = 0;")
            out.append("    *mh_give = 0;")
        out.append(f"    size_t mh_need = {self.fixed_part(m)};")
        for a in fixed:
            if isinstance(a.type, Struct):
                out.append(f"    if ({c_name(a.name)} == NULL) return MH_E_INVALID;")
                out += self.chk_value(a.type, f"*{c_name(a.name)}", "    ")
            else:
                out += self.chk_value(a.type, c_name(a.name), "    ")
        for k, a in enumerate(dyn):
            n, t = c_name(a.name), a.type
            if isinstance(t, String):
                out.append(f"    if ({n} == NULL) return MH_E_INVALID;")
                out.append(f"    size_t mh_n{k} = strlen({n});")
                if t.maximum is not None:
                    out.append(f"    if (mh_n{k} > {t.maximum}u) return MH_E_INVALID;")
                out.append(f"    if (mh_n{k} > SIZE_MAX - mh_need - 8) return MH_E_INVALID;")
                out.append(f"    mh_need += 8 + mh_n{k};")
                continue
            assert isinstance(t, DynArray)
            ln = c_name(t.length_name)
            esize = fixed_size(t.element)
            assert esize is not None
            out.append(f"    if ({n} == NULL && {ln} > 0) return MH_E_INVALID;")
            if t.maximum is not None:
                out.append(f"    if ({ln} > {t.maximum}u) return MH_E_INVALID;")
            out.append(f"    if ({ln} > (SIZE_MAX - mh_need - 8) / {esize}u) return MH_E_INVALID;")
            out.append(f"    mh_need += 8 + {ln} * {esize}u;")
            if _has_enum(t.element):
                out.append(f"    for (size_t mh_j = 0; mh_j < {ln}; mh_j++) {{")
                out += self.chk_value(t.element, f"{n}[mh_j]", "        ", 1)
                out.append("    }")
        out += [
            "    *mh_len = mh_need;",
            "    if (mh_cap < mh_need || mh_buf == NULL) return MH_E_TOO_LARGE;",
            "    uint8_t *mh_p = mh_buf;",
            f"    mhidl_put_u16(mh_p, {m.number}); mh_p += 2;",
        ]
        for a in fixed:
            expr = f"*{c_name(a.name)}" if isinstance(a.type, Struct) else c_name(a.name)
            out += self.enc_value(a.type, expr, "    ")
        for k, a in enumerate(dyn):
            n, t = c_name(a.name), a.type
            if isinstance(t, String):
                out.append(f"    mhidl_put_u64(mh_p, (uint64_t)mh_n{k}); mh_p += 8;")
                out.append(f"    if (mh_n{k} > 0) memcpy(mh_p, {n}, mh_n{k});")
                out.append(f"    mh_p += mh_n{k};")
                continue
            assert isinstance(t, DynArray)
            ln = c_name(t.length_name)
            out.append(f"    mhidl_put_u64(mh_p, (uint64_t){ln}); mh_p += 8;")
            if _is_bytes_elem(t.element):
                out.append(f"    if ({ln} > 0) memcpy(mh_p, {n}, {ln});")
                out.append(f"    mh_p += {ln};")
            else:
                out.append(f"    for (size_t mh_j = 0; mh_j < {ln}; mh_j++) {{")
                out += self.enc_value(t.element, f"{n}[mh_j]", "        ", 1)
                out.append("    }")
        out += ["    (void)mh_p;", "    return MH_OK;", "}", ""]
        return out

    def gen_decode(self, m: Message) -> list[str]:
        """``int N_M_decode(buf, len, outs...)``: bounds-checked reads; frees what it allocated on failure."""
        params = ["const uint8_t *mh_buf", "size_t mh_len"] + self.fd_params(m, True)
        for a in m.args:
            params += self.params_out(a)
        fixed = [a for a in m.args if fixed_size(a.type) is not None]
        dyn = [a for a in m.args if fixed_size(a.type) is None]
        allocs = [
            a for a in dyn if (isinstance(a.type, (String, DynArray)) and a.type.maximum is None)
        ]
        out = [f"int {self.fn(m, 'decode')}({self.sig(params)})", "{"]
        for a in allocs:
            out.append(f"    *{c_name(a.name)} = NULL;")
        fx = self.fixed_part(m)
        cmp = "<" if dyn else "!="
        out += [
            f"    if (mh_buf == NULL || mh_len {cmp} {fx}u || mhidl_get_u16(mh_buf) != {m.number}) goto mh_bad;",
            "    const uint8_t *mh_p = mh_buf + 2;",
            "    const uint8_t *const mh_end = mh_buf + mh_len;",
            "    (void)mh_end;",
        ]
        if self.caps_of(m):
            out += ["    size_t mh_k = 0; /* handles taken */", "    if (mh_fds == NULL && mh_nfds > 0) goto mh_bad;"]
        for a in fixed:
            n, t = c_name(a.name), a.type
            lv = n if isinstance(t, Array) else f"*{n}"
            out += self.dec_value(t, lv, "    ")
        for k, a in enumerate(dyn):
            n, t = c_name(a.name), a.type
            out += [
                "    {",
                "        if ((size_t)(mh_end - mh_p) < 8) goto mh_bad;",
                "        uint64_t mh_n = mhidl_get_u64(mh_p); mh_p += 8;",
            ]
            if isinstance(t, String):
                if t.maximum is not None:
                    out.append(f"        if (mh_n > {t.maximum}u) goto mh_bad;")
                out += [
                    "        if (mh_n > (uint64_t)(mh_end - mh_p)) goto mh_bad;",
                    "        if (memchr(mh_p, 0, (size_t)mh_n) != NULL || !mhidl_utf8_ok(mh_p, (size_t)mh_n)) goto mh_bad;",
                ]
                if t.maximum is None:
                    out += [
                        f"        *{n} = (char *)malloc((size_t)mh_n + 1);",
                        f"        if (*{n} == NULL) {{ mh_rc = MH_E_INVALID; goto mh_fail; }}",
                        f"        char *mh_s = *{n};",
                    ]
                else:
                    out.append(f"        char *mh_s = {n};")
                out += [
                    "        if (mh_n > 0) memcpy(mh_s, mh_p, (size_t)mh_n);",
                    "        mh_s[mh_n] = '\\0';",
                    "        mh_p += mh_n;",
                    "    }",
                ]
                continue
            assert isinstance(t, DynArray)
            ln = c_name(t.length_name)
            esize = fixed_size(t.element)
            if t.maximum is not None:
                out.append(f"        if (mh_n > {t.maximum}u) goto mh_bad;")
            out.append(f"        if (mh_n > (uint64_t)(mh_end - mh_p) / {esize}u) goto mh_bad;")
            et = self.ctype(t.element)
            if t.maximum is None:
                out += [
                    f"        *{n} = ({et} *)malloc(mh_n > 0 ? (size_t)mh_n * sizeof({et}) : 1);",
                    f"        if (*{n} == NULL) {{ mh_rc = MH_E_INVALID; goto mh_fail; }}",
                    f"        {et} *mh_a = *{n};",
                ]
            else:
                out.append(f"        {et} *mh_a = {n};")
            if _is_bytes_elem(t.element):
                out += ["        if (mh_n > 0) memcpy(mh_a, mh_p, (size_t)mh_n);", "        mh_p += mh_n;"]
            else:
                out.append("        for (size_t mh_j = 0; mh_j < (size_t)mh_n; mh_j++) {")
                out += self.dec_value(t.element, "mh_a[mh_j]", "            ", 1)
                out.append("        }")
            out += [f"        *{ln} = (size_t)mh_n;", "    }"]
        out.append("    if (mh_p != mh_end) goto mh_bad;")
        if self.caps_of(m):
            out.append("    if (mh_k != mh_nfds) goto mh_bad; /* more handles than capabilities */")
        out += ["    return MH_OK;", "mh_bad:"]
        if allocs:
            out.append("    mh_rc = MH_E_PROTOCOL;")
            out.append("mh_fail:")
            for a in allocs:
                out.append(f"    free(*{c_name(a.name)}); *{c_name(a.name)} = NULL;")
            out.append("    return mh_rc;")
            out.insert(2, "    int mh_rc = MH_E_PROTOCOL;")
        else:
            out.append("    return MH_E_PROTOCOL;")
        out += ["}", ""]
        return out

    def locals_for(self, m: Message) -> tuple[list[str], list[str], list[str], list[str]]:
        """(declarations, decode call args, handler call args, cleanup) for decoding ``m`` into locals."""
        decls: list[str] = []
        dec_args: list[str] = []
        call_args: list[str] = []
        cleanup: list[str] = []
        for k, a in enumerate(m.args):
            t = a.type
            v = f"mh_v{k}"
            if isinstance(t, String):
                if t.maximum is None:
                    decls.append(f"char *{v} = NULL;")
                    dec_args.append(f"&{v}")
                else:
                    decls.append(f"char *{v} = (char *)malloc({t.maximum}u + 1);")
                    decls.append(f"if ({v} == NULL) mh_rc = MH_E_INVALID;")
                    dec_args.append(v)
                call_args.append(v)
                cleanup.append(f"free({v});")
            elif isinstance(t, DynArray):
                et = self.ctype(t.element)
                decls.append(f"size_t {v}n = 0;")
                if t.maximum is None:
                    decls.append(f"{et} *{v} = NULL;")
                    dec_args += [f"&{v}", f"&{v}n"]
                else:
                    decls.append(f"{et} *{v} = ({et} *)malloc({t.maximum}u * sizeof({et}));")
                    decls.append(f"if ({v} == NULL) mh_rc = MH_E_INVALID;")
                    dec_args += [v, f"&{v}n"]
                # an explicit cast where C before C2x calls the qualifier change incompatible
                cast = f"(const {et} *)" if isinstance(t.element, Array) else ""
                call_args += [cast + v, f"{v}n"]
                cleanup.append(f"free({v});")
            elif isinstance(t, Array):
                decls.append(f"{self.field_decl(t, v)};")
                dec_args.append(v)
                cast = f"(const {self.ctype(t.element)} *)" if isinstance(t.element, Array) else ""
                call_args.append(cast + v)
            elif isinstance(t, Struct):
                decls.append(f"{self.ctype(t)} {v};")
                dec_args.append(f"&{v}")
                call_args.append(f"&{v}")
            else:
                decls.append(f"{self.ctype(t)} {v};")
                dec_args.append(f"&{v}")
                call_args.append(v)
        return decls, dec_args, call_args, cleanup

    def gen_send(self, m: Message) -> list[str]:
        """``int N_M_send(b, timeout_ms, args...)``: encode into a stack (or heap) buffer and ``mh_send``
        (``mh_send_handles`` with the message's handles, for a message with capabilities)."""
        params = [f"{self.p}_binding *mh_b", "int64_t mh_timeout_ms"]
        names: list[str] = []
        for a in m.args:
            params += self.params_in(a)
            names += self.names_in(a)
        caps = self.caps_of(m)
        fd_args = ", mh_fds, &mh_nfds, &mh_give" if caps else ""
        call_tail = fd_args + "".join(", " + n for n in names)
        enc = self.fn(m, "encode")

        def send(buf: str) -> str:
            if caps:
                return f"mh_send_handles(mh_b->ch, {buf}, mh_n, mh_fds, mh_nfds, mh_give, mh_timeout_ms)"
            return f"mh_send(mh_b->ch, {buf}, mh_n, mh_timeout_ms)"

        out = [f"int {self.fn(m, 'send')}({self.sig(params)})", "{",
               "    if (mh_b == NULL || mh_b->ch == NULL) return MH_E_INVALID;"]
        if caps:
            out += ["    int mh_fds[MH_MAX_HANDLES];", "    size_t mh_nfds = 0;", "    uint64_t mh_give = 0;"]
        if all(fixed_size(a.type) is not None for a in m.args):
            size = self.fixed_part(m)
            out += [
                f"    uint8_t mh_msg[{size}];",
                "    size_t mh_n = 0;",
                f"    int mh_rc = {enc}(mh_msg, sizeof mh_msg, &mh_n{call_tail});",
                "    if (mh_rc != MH_OK) return mh_rc;",
                f"    return {send('mh_msg')};",
                "}",
                "",
            ]
            return out
        out += [
            "    uint8_t mh_msg[256];",
            "    size_t mh_n = 0;",
            f"    int mh_rc = {enc}(mh_msg, sizeof mh_msg, &mh_n{call_tail});",
            "    if (mh_rc == MH_E_TOO_LARGE) {",
            "        uint8_t *mh_heap = (uint8_t *)malloc(mh_n);",
            "        if (mh_heap == NULL) return MH_E_INVALID;",
            f"        mh_rc = {enc}(mh_heap, mh_n, &mh_n{call_tail});",
            f"        if (mh_rc == MH_OK) mh_rc = {send('mh_heap')};",
            "        free(mh_heap);",
            "        return mh_rc;",
            "    }",
            "    if (mh_rc != MH_OK) return mh_rc;",
            f"    return {send('mh_msg')};",
            "}",
            "",
        ]
        return out

    # -- the binding -------------------------------------------------------------------

    def binding_decl(self) -> list[str]:
        """The header's binding type, its backlog bound and its functions, with the rules of the backlog."""
        p = self.p
        return [
            "",
            "/* ---- the binding: a channel and its rpc backlog ----",
            f" * Every send, receive and rpc goes through a binding. {p}_binding_init(&b, ch) wraps a channel",
            f" * (from mh_bind or mh_accept); {p}_binding_destroy(&b) frees what the binding holds (the channel",
            " * stays open: mh_close it).",
            " *",
            f" * Backlog: while {p}_R_rpc waits for its response, every other message that arrives is kept, in",
            f" * order, in the binding's backlog (at most {p}_BACKLOG_MAX messages). {p}_recv hands the backlog out",
            " * first, oldest first, and only then receives from the channel. No message is lost:",
            f" * - backlog full when an rpc starts: the rpc returns MH_E_BUSY and sends nothing ({p}_recv drains it);",
            " * - backlog full while an rpc waits: the rpc returns MH_E_BUSY and stops receiving; its response",
            f" *   comes later through {p}_recv, after the backlog, to the handler of R_response;",
            f" * - an rpc that times out (MH_E_TIMEOUT) likewise leaves its response to {p}_recv.",
            f" * A binding is for one thread at a time. {p}_backlog_count says how many messages wait in it.",
            " */",
            f"#define {p}_BACKLOG_MAX {BACKLOG_MAX}u",
            f"typedef struct {p}_binding {{",
            "    mh_channel *ch; /* the channel */",
            "    /* private: the backlog, a ring of malloc'd messages */",
            f"    uint8_t *mh_msg[{p}_BACKLOG_MAX];",
            f"    size_t mh_len[{p}_BACKLOG_MAX];",
            *([f"    int *mh_fds[{p}_BACKLOG_MAX]; /* the handles that came with each (malloc'd) */",
               f"    size_t mh_nfds[{p}_BACKLOG_MAX];"] if self.has_caps else []),
            "    size_t mh_head, mh_count;",
            f"}} {p}_binding;",
            f"void {p}_binding_init({p}_binding *mh_b, mh_channel *mh_ch);",
            f"void {p}_binding_destroy({p}_binding *mh_b);",
            f"size_t {p}_backlog_count(const {p}_binding *mh_b);",
            "",
            "/* ---- binding and exporting ----",
            f" * {p}_bind: bind to the service `name` (mh_bind) and wrap the channel in *b. `transport` is",
            ' * "ump", "multihop" or "auto" (UMP when the routing table links the two cores directly,',
            " * multi-hop otherwise; NULL means \"auto\"). On failure b->ch is NULL.",
            f" * {p}_export: export `name` through `d` (mh_export); {p}_accept: take the next client's",
            " * channel (mh_accept) and wrap it in *b. Serve a binding by calling",
            f" * {p}_recv(&b, timeout, &handlers, state) in a loop until it returns MH_E_CLOSED; when done,",
            f" * mh_close(b.ch) and {p}_binding_destroy(&b).",
            " */",
            f"int {p}_bind(mh_dispatcher *mh_d, const char *mh_name, const char *mh_transport, int64_t mh_timeout_ms,",
            f"             {p}_binding *mh_b);",
            f"int {p}_export(mh_dispatcher *mh_d, const char *mh_name, mh_service **mh_out);",
            f"int {p}_accept(mh_service *mh_s, int64_t mh_timeout_ms, {p}_binding *mh_b);",
        ]

    def binding_source(self) -> list[str]:
        """The binding's functions and the two receive helpers the rpcs and ``N_recv`` share."""
        p = self.p
        return [
            f"void {p}_binding_init({p}_binding *mh_b, mh_channel *mh_ch)",
            "{",
            "    if (mh_b == NULL) return;",
            "    memset(mh_b, 0, sizeof *mh_b);",
            "    mh_b->ch = mh_ch;",
            "}",
            "",
            f"void {p}_binding_destroy({p}_binding *mh_b)",
            "{",
            "    if (mh_b == NULL) return;",
            f"    for (size_t mh_i = 0; mh_i < {p}_BACKLOG_MAX; mh_i++) free(mh_b->mh_msg[mh_i]);",
            *([f"    for (size_t mh_i = 0; mh_i < {p}_BACKLOG_MAX; mh_i++) {{ /* handles nobody took: closed */",
               "        mhidl_close_all(mh_b->mh_fds[mh_i], mh_b->mh_nfds[mh_i]);",
               "        free(mh_b->mh_fds[mh_i]);",
               "    }"] if self.has_caps else []),
            "    memset(mh_b, 0, sizeof *mh_b);",
            "}",
            "",
            f"size_t {p}_backlog_count(const {p}_binding *mh_b) {{ return mh_b == NULL ? 0 : mh_b->mh_count; }}",
            "",
            f"int {p}_bind(mh_dispatcher *mh_d, const char *mh_name, const char *mh_transport, int64_t mh_timeout_ms,",
            f"             {p}_binding *mh_b)",
            "{",
            "    if (mh_b == NULL) return MH_E_INVALID;",
            "    mh_channel *mh_ch = NULL;",
            '    int mh_rc = mh_bind(mh_d, mh_name, mh_transport == NULL ? "auto" : mh_transport, mh_timeout_ms, &mh_ch);',
            f"    {p}_binding_init(mh_b, mh_rc == MH_OK ? mh_ch : NULL);",
            "    return mh_rc;",
            "}",
            "",
            f"int {p}_export(mh_dispatcher *mh_d, const char *mh_name, mh_service **mh_out)",
            "{",
            "    return mh_export(mh_d, mh_name, mh_out);",
            "}",
            "",
            f"int {p}_accept(mh_service *mh_s, int64_t mh_timeout_ms, {p}_binding *mh_b)",
            "{",
            "    if (mh_b == NULL) return MH_E_INVALID;",
            "    mh_channel *mh_ch = NULL;",
            "    int mh_rc = mh_accept(mh_s, mh_timeout_ms, &mh_ch);",
            f"    {p}_binding_init(mh_b, mh_rc == MH_OK ? mh_ch : NULL);",
            "    return mh_rc;",
            "}",
            "",
            "/* Receive one message into stack[cap] or, if longer, a malloc'd buffer; *m points at it. */",
            f"static int {p}_mh_recv_msg(mh_channel *mh_ch, uint8_t *mh_stack, size_t mh_cap, uint8_t **mh_m, size_t *mh_n,",
            f"                          {'int *mh_fds, size_t *mh_nfds, ' if self.has_caps else ''}int64_t mh_timeout_ms)",
            "{",
            "    *mh_m = mh_stack;",
            f"    int mh_rc = {self.recv_call('mh_stack', 'mh_cap', 'mh_timeout_ms')};",
            "    if (mh_rc == MH_E_TOO_LARGE) { /* the message stays in the channel: take it with a buffer that fits */",
            "        uint8_t *mh_heap = (uint8_t *)malloc(*mh_n > 0 ? *mh_n : 1);",
            "        if (mh_heap == NULL) return MH_E_INVALID;",
            f"        mh_rc = {self.recv_call('mh_heap', '*mh_n', '0')};",
            "        if (mh_rc == MH_OK) *mh_m = mh_heap;",
            "        else free(mh_heap);",
            "    }",
            "    return mh_rc;",
            "}",
            "",
        ] + (self.backlog_push() if self.iface.rpcs else [])

    def fdp(self) -> str:
        """The handle parameters of dispatch and reencode (an interface with capabilities)."""
        return "const int *mh_fds, size_t mh_nfds, " if self.has_caps else ""

    def recv_call(self, buf: str, cap: str, timeout: str) -> str:
        """The C call receiving one message (and its handles, in an interface with capabilities)."""
        if self.has_caps:
            return f"mh_recv_handles(mh_ch, {buf}, {cap}, mh_n, mh_fds, MH_MAX_HANDLES, mh_nfds, {timeout})"
        return f"mh_recv(mh_ch, {buf}, {cap}, mh_n, {timeout})"

    def backlog_push(self) -> list[str]:
        """The helper that keeps a message in the backlog (only rpcs use it)."""
        p = self.p
        return [
            "/* Append a received message (on the stack buffer or already malloc'd) to the backlog. */",
            f"static int {p}_mh_backlog_push({p}_binding *mh_b, const uint8_t *mh_stack, uint8_t *mh_m, size_t mh_n"
            + (", const int *mh_fds, size_t mh_nfds)" if self.has_caps else ")"),
            "{",
            "    uint8_t *mh_keep = mh_m;",
            "    if (mh_m == mh_stack) {",
            "        mh_keep = (uint8_t *)malloc(mh_n > 0 ? mh_n : 1);",
            "        if (mh_keep == NULL) return MH_E_INVALID;",
            "        if (mh_n > 0) memcpy(mh_keep, mh_m, mh_n);",
            "    }",
            f"    size_t mh_i = (mh_b->mh_head + mh_b->mh_count) % {p}_BACKLOG_MAX;",
            *(["    int *mh_kfds = NULL;",
               "    if (mh_nfds > 0) {",
               "        mh_kfds = (int *)malloc(mh_nfds * sizeof(int));",
               "        if (mh_kfds == NULL) { if (mh_keep != mh_m) free(mh_keep); return MH_E_INVALID; }",
               "        memcpy(mh_kfds, mh_fds, mh_nfds * sizeof(int));",
               "    }",
               "    mh_b->mh_fds[mh_i] = mh_kfds;",
               "    mh_b->mh_nfds[mh_i] = mh_nfds;"] if self.has_caps else []),
            "    mh_b->mh_msg[mh_i] = mh_keep;",
            "    mh_b->mh_len[mh_i] = mh_n;",
            "    mh_b->mh_count++;",
            "    return MH_OK;",
            "}",
            "",
        ]

    def gen_rpc(self, r: Rpc) -> list[str]:
        """``int N_R_rpc(b, timeout_ms, ins..., outs...)``: call, then wait for the response, keeping other messages."""
        p = self.p
        params = [f"{p}_binding *mh_b", "int64_t mh_timeout_ms"]
        names: list[str] = []
        for a in r.in_args:
            params += self.params_in(a)
            names += self.names_in(a)
        outs: list[str] = []
        for a in r.out_args:
            params += self.params_out(a)
            outs.append(c_name(a.name))
            if isinstance(a.type, DynArray):
                outs.append(c_name(a.type.length_name))
        caps = self.has_caps
        resp_fds = ", mh_fds, mh_nfds" if self.caps_of(r.response) else ""
        return [
            f"int {p}_{r.name}_rpc({self.sig(params)})",
            "{",
            "    if (mh_b == NULL || mh_b->ch == NULL) return MH_E_INVALID;",
            f"    if (mh_b->mh_count >= {p}_BACKLOG_MAX) return MH_E_BUSY;",
            "    const int64_t mh_deadline = mhidl_deadline(mh_timeout_ms);",
            f"    int mh_rc = {self.fn(r.call, 'send')}(mh_b, mh_timeout_ms{''.join(', ' + n for n in names)});",
            "    if (mh_rc != MH_OK) return mh_rc;",
            f"    for (;;) {{ /* at most {p}_BACKLOG_MAX rounds, and no longer than the deadline */",
            f"        if (mh_b->mh_count >= {p}_BACKLOG_MAX) return MH_E_BUSY;",
            "        uint8_t mh_msg[512];",
            "        uint8_t *mh_m = mh_msg;",
            "        size_t mh_n = 0;",
            *(["        int mh_fds[MH_MAX_HANDLES];", "        size_t mh_nfds = 0;"] if caps else []),
            f"        mh_rc = {p}_mh_recv_msg(mh_b->ch, mh_msg, sizeof mh_msg, &mh_m, &mh_n, "
            + ("mh_fds, &mh_nfds, " if caps else "") + "mhidl_left(mh_deadline));",
            "        if (mh_rc != MH_OK) return mh_rc;",
            f"        if (mh_n >= 2 && mhidl_get_u16(mh_m) == {r.response.number}) {{",
            *(["            if (mh_nfds > 0) { mhidl_close_all(mh_fds, mh_nfds); mh_rc = MH_E_PROTOCOL; } else"]
              if caps and not resp_fds else []),
            f"            mh_rc = {self.fn(r.response, 'decode')}(mh_m, mh_n{resp_fds}{''.join(', ' + n for n in outs)});",
            *(["            if (mh_rc != MH_OK) mhidl_close_all(mh_fds, mh_nfds);"] if resp_fds else []),
            "            if (mh_m != mh_msg) free(mh_m);",
            "            return mh_rc;",
            "        }",
            f"        mh_rc = {p}_mh_backlog_push(mh_b, mh_msg, mh_m, mh_n{', mh_fds, mh_nfds' if caps else ''});",
            "        if (mh_rc != MH_OK) {",
            *(["            mhidl_close_all(mh_fds, mh_nfds);"] if caps else []),
            "            if (mh_m != mh_msg) free(mh_m);",
            "            return mh_rc;",
            "        }",
            "    }",
            "}",
            "",
        ]

    # -- whole files -------------------------------------------------------------------

    def header(self) -> str:
        """The text of ``N.h``."""
        iface, p = self.iface, self.p
        guard = f"MHIDL_{p.upper()}_H"
        h = [
            f"/* Flounder interface {p}: {_comment(iface.description or '')}",
            f" * Generated by multihop.idl from {_comment(iface.file)}; do not edit.",
            " * Wire format: flounder-idl/WIRE.md. Functions return MH_OK or a negative MH_E_* code. */",
            f"#ifndef {guard}",
            f"#define {guard}",
            "",
            "#include <stdbool.h>",
            "#include <stddef.h>",
            "#include <stdint.h>",
            "",
            '#include "multihop.h"',
            "",
            "#ifdef __cplusplus",
            'extern "C" {',
            "#endif",
            "",
        ]
        for t in iface.types.values():
            if isinstance(t, Enum):
                vals = ", ".join(f"{p}_{v} = {i}" for i, v in enumerate(t.values))
                h.append(f"typedef enum {p}_{t.name}_e {{ {vals} }} {p}_{t.name}_t;")
                h.append(f"#define {p}_{t.name}_COUNT {len(t.values)}")
            elif isinstance(t, Struct):
                h.append(f"typedef struct {p}_{t.name}_s {{")
                for f in t.fields:
                    h.append(f"    {self.field_decl(f.type, c_name(f.name))};")
                h.append(f"}} {p}_{t.name}_t;")
            else:
                assert isinstance(t, Array)
                h.append(f"typedef {self.ctype(t.element)} {p}_{t.name}_t[{t.length}];")
        if iface.aliases:  # after the types: an alias may name a struct, enum or array type
            h += ["", "/* aliases */"]
            for name, t in iface.aliases.items():
                if isinstance(t, Builtin) and t.kind != "cap":
                    h.append(f"typedef {self.ctype(t)} {p}_{name}_t;")
                elif isinstance(t, (Enum, Struct)) or (isinstance(t, Array) and t.name is not None):
                    h.append(f"typedef {self.ctype(t)} {p}_{name}_t;")
        h += self.binding_decl()
        h += ["", "/* message numbers (uint16, little-endian, first on the wire) */", f"enum {p}_msgnum {{"]
        for m in iface.messages:
            h.append(f"    {p}_{m.name}_MSGNUM = {m.number},")
        h += ["};", ""]
        for m in iface.messages:
            for a in m.args:
                if isinstance(a.type, (String, DynArray)) and a.type.maximum is not None:
                    h.append(f"#define {self.max_macro(m, a)} {a.type.maximum}u")
        h.append("")
        for m in iface.messages:
            sig = ", ".join(arg_text(a) for a in m.args)
            h.append(f"/* {m.kind} {m.name}({sig}) */")
            pin = ["uint8_t *mh_buf", "size_t mh_cap", "size_t *mh_len"] + self.fd_params(m, False)
            pout = ["const uint8_t *mh_buf", "size_t mh_len"] + self.fd_params(m, True)
            psend = [f"{p}_binding *mh_b", "int64_t mh_timeout_ms"]
            for a in m.args:
                pin += self.params_in(a)
                psend += self.params_in(a)
                pout += self.params_out(a)
            h.append(f"int {self.fn(m, 'encode')}({self.sig(pin)});")
            h.append(f"int {self.fn(m, 'decode')}({self.sig(pout)});")
            h.append(f"int {self.fn(m, 'send')}({self.sig(psend)});")
            h.append("")
        for r in iface.rpcs:
            params = [f"{p}_binding *mh_b", "int64_t mh_timeout_ms"]
            for a in r.in_args:
                params += self.params_in(a)
            for a in r.out_args:
                params += self.params_out(a)
            h.append(f"/* rpc {r.name}: send {r.name}_call, wait for {r.name}_response (other messages go to the backlog),")
            h.append(" * decode it into the out parameters. MH_E_BUSY: the backlog is full (see the binding above). */")
            h.append(f"int {p}_{r.name}_rpc({self.sig(params)});")
        h += [
            "",
            "/* One handler per message; a NULL handler makes dispatch return MH_E_INVALID.",
            " * Pointers passed to a handler are valid only during the call. */",
            f"typedef struct {p}_rx_handlers {{",
        ]
        for m in iface.messages:
            params = ["void *mh_st"]
            for a in m.args:
                params += self.params_in(a)
            h.append(f"    void (*{c_name(m.name)})({', '.join(params)});")
        if not iface.messages:
            h.append("    int mh_unused;")
        h += [
            f"}} {p}_rx_handlers;",
            "",
            "/* message number of an encoded message, or MH_E_PROTOCOL */",
            f"int {p}_msgnum(const uint8_t *mh_buf, size_t mh_len);",
            "/* name of a message number, or NULL */",
            f"const char *{p}_msg_name(int mh_num);",
            "/* decode one message and call its handler: MH_OK, MH_E_PROTOCOL (malformed/unknown), MH_E_INVALID (no handler)"
            + (" *\n * (with the handles that came with it: the handler owns the descriptors it is given; they are"
               "\n * closed if the message does not decode or has no handler) */" if self.has_caps else " */"),
            f"int {p}_dispatch(const uint8_t *mh_buf, size_t mh_len, {self.fdp()}const {p}_rx_handlers *mh_h, void *mh_st);",
            "/* dispatch the oldest message of the backlog if there is one, else receive one (mh_recv) and dispatch it */",
            f"int {p}_recv({p}_binding *mh_b, int64_t mh_timeout_ms, const {p}_rx_handlers *mh_h, void *mh_st);",
            "/* decode a message and encode it again into out (a well-formed message comes back byte for byte) */",
            f"int {p}_reencode(const uint8_t *mh_in, size_t mh_inlen, {self.fdp()}uint8_t *mh_out, size_t mh_cap, size_t *mh_outlen);",
            "",
            "#ifdef __cplusplus",
            "}",
            "#endif",
            f"#endif /* {guard} */",
            "",
        ]
        return "\n".join(h)

    def source(self) -> str:
        """The text of ``N.c``."""
        iface, p = self.iface, self.p
        s = [
            f"/* Flounder interface {p}: codec and stubs. Generated by multihop.idl from {_comment(iface.file)}; do not edit. */",
            "#ifndef _POSIX_C_SOURCE",
            "#define _POSIX_C_SOURCE 200809L /* clock_gettime */",
            "#endif",
            "#include <stdlib.h>",
            "#include <string.h>",
            "#include <time.h>",
            "#include <unistd.h> /* close */",
            "",
            f'#include "{p}.h"',
            _HELPERS,
        ]
        for m in iface.messages:
            s += self.gen_encode(m)
            s += self.gen_decode(m)
            s += self.gen_send(m)
        s += self.binding_source()
        for r in iface.rpcs:
            s += self.gen_rpc(r)
        # msgnum, names
        s += [
            f"int {p}_msgnum(const uint8_t *mh_buf, size_t mh_len)",
            "{",
            "    if (mh_buf == NULL || mh_len < 2) return MH_E_PROTOCOL;",
            "    switch (mhidl_get_u16(mh_buf)) {",
        ]
        for m in iface.messages:
            s.append(f"    case {m.number}: return {m.number};")
        s += ["    default: return MH_E_PROTOCOL;", "    }", "}", ""]
        s += [f"const char *{p}_msg_name(int mh_num)", "{", "    switch (mh_num) {"]
        for m in iface.messages:
            s.append(f'    case {m.number}: return "{m.name}";')
        s += ["    default: return NULL;", "    }", "}", ""]
        # dispatch (an interface with capabilities: with the handles; closed unless a handler took them)
        caps = self.has_caps
        if caps:
            s += [
                f"static int {p}_mh_dispatch(const uint8_t *mh_buf, size_t mh_len, const int *mh_fds, size_t mh_nfds,",
                f"                           const {p}_rx_handlers *mh_h, void *mh_st, int mh_close)",
            ]
        else:
            s.append(f"int {p}_dispatch(const uint8_t *mh_buf, size_t mh_len, const {p}_rx_handlers *mh_h, void *mh_st)")
        s += [
            "{",
            f"    int mh_num = {p}_msgnum(mh_buf, mh_len);",
            *(["    if (mh_num < 0 && mh_close) mhidl_close_all(mh_fds, mh_nfds);"] if caps else []),
            "    if (mh_num < 0) return mh_num;",
            "    switch (mh_num) {",
        ]
        for m in iface.messages:
            decls, dec_args, call_args, cleanup = self.locals_for(m)
            hn = c_name(m.name)
            mfds = ", mh_fds, mh_nfds" if self.caps_of(m) else ""
            s.append(f"    case {m.number}: {{")
            s.append("        int mh_rc = MH_OK;")
            if caps and not mfds:
                s.append("        if (mh_nfds > 0) mh_rc = MH_E_PROTOCOL; /* handles with a message that takes none */")
            s += [f"        {d}" for d in decls]
            s.append("        if (mh_rc == MH_OK)")
            s.append(f"            mh_rc = {self.fn(m, 'decode')}(mh_buf, mh_len{mfds}{''.join(', ' + x for x in dec_args)});")
            s.append(f"        if (mh_rc == MH_OK && (mh_h == NULL || mh_h->{hn} == NULL)) mh_rc = MH_E_INVALID;")
            s.append(f"        if (mh_rc == MH_OK) mh_h->{hn}(mh_st{''.join(', ' + x for x in call_args)});")
            if caps:
                s.append("        if (mh_rc != MH_OK && mh_close) mhidl_close_all(mh_fds, mh_nfds);")
            s += [f"        {c}" for c in cleanup]
            s += ["        return mh_rc;", "    }"]
        s += ["    default:", *(["        if (mh_close) mhidl_close_all(mh_fds, mh_nfds);"] if caps else []),
              "        return MH_E_PROTOCOL;", "    }", "}", ""]
        if caps:
            s += [
                f"int {p}_dispatch(const uint8_t *mh_buf, size_t mh_len, const int *mh_fds, size_t mh_nfds,",
                f"                 const {p}_rx_handlers *mh_h, void *mh_st)",
                "{",
                f"    return {p}_mh_dispatch(mh_buf, mh_len, mh_fds, mh_nfds, mh_h, mh_st, 1);",
                "}",
                "",
            ]
        # recv: the backlog first, then the channel
        s += [
            f"int {p}_recv({p}_binding *mh_b, int64_t mh_timeout_ms, const {p}_rx_handlers *mh_h, void *mh_st)",
            "{",
            "    if (mh_b == NULL || mh_b->ch == NULL) return MH_E_INVALID;",
            "    if (mh_b->mh_count > 0) {",
            "        uint8_t *mh_old = mh_b->mh_msg[mh_b->mh_head];",
            "        size_t mh_oldn = mh_b->mh_len[mh_b->mh_head];",
            "        mh_b->mh_msg[mh_b->mh_head] = NULL;",
            *(["        int *mh_ofds = mh_b->mh_fds[mh_b->mh_head];",
               "        size_t mh_onfds = mh_b->mh_nfds[mh_b->mh_head];",
               "        mh_b->mh_fds[mh_b->mh_head] = NULL;",
               "        mh_b->mh_nfds[mh_b->mh_head] = 0;"] if caps else []),
            f"        mh_b->mh_head = (mh_b->mh_head + 1) % {p}_BACKLOG_MAX;",
            "        mh_b->mh_count--;",
            (f"        int mh_rc = {p}_dispatch(mh_old, mh_oldn, mh_ofds, mh_onfds, mh_h, mh_st);" if caps
             else f"        int mh_rc = {p}_dispatch(mh_old, mh_oldn, mh_h, mh_st);"),
            *(["        free(mh_ofds);"] if caps else []),
            "        free(mh_old);",
            "        return mh_rc;",
            "    }",
            "    uint8_t mh_msg[1024];",
            "    uint8_t *mh_m = mh_msg;",
            "    size_t mh_n = 0;",
            *(["    int mh_fds[MH_MAX_HANDLES];", "    size_t mh_nfds = 0;"] if caps else []),
            f"    int mh_rc = {p}_mh_recv_msg(mh_b->ch, mh_msg, sizeof mh_msg, &mh_m, &mh_n, "
            + ("mh_fds, &mh_nfds, " if caps else "") + "mh_timeout_ms);",
            (f"    if (mh_rc == MH_OK) mh_rc = {p}_dispatch(mh_m, mh_n, mh_fds, mh_nfds, mh_h, mh_st);" if caps
             else f"    if (mh_rc == MH_OK) mh_rc = {p}_dispatch(mh_m, mh_n, mh_h, mh_st);"),
            "    if (mh_m != mh_msg) free(mh_m);",
            "    return mh_rc;",
            "}",
            "",
        ]
        # reencode: dispatch with handlers that encode again
        s += [
            f"struct {p}_mh_reencode {{ uint8_t *out; size_t cap; size_t *outlen; int rc;"
            + (" const int *fds; size_t nfds; };" if caps else " };"),
        ]
        for m in iface.messages:
            params = ["void *mh_st"]
            names: list[str] = []
            for a in m.args:
                params += self.params_in(a)
                names += self.names_in(a)
            mcaps = self.caps_of(m)
            s += [
                f"static void {p}_mh_re_{m.number}({', '.join(params)})",
                "{",
                f"    struct {p}_mh_reencode *mh_r = (struct {p}_mh_reencode *)mh_st;",
                *(["    int mh_fds[MH_MAX_HANDLES];", "    size_t mh_nfds = 0;", "    uint64_t mh_give = 0;"] if mcaps else []),
                f"    mh_r->rc = {self.fn(m, 'encode')}(mh_r->out, mh_r->cap, mh_r->outlen"
                + (", mh_fds, &mh_nfds, &mh_give" if mcaps else "") + f"{''.join(', ' + n for n in names)});",
                *(["    /* the same handles must come out, in the same order */",
                   "    if (mh_r->rc == MH_OK && (mh_nfds != mh_r->nfds || (mh_nfds > 0 && memcmp(mh_fds, mh_r->fds, mh_nfds * sizeof(int)) != 0)))",
                   "        mh_r->rc = MH_E_PROTOCOL;",
                   "    (void)mh_give;"] if mcaps else []),
                "}",
            ]
        s += [
            f"int {p}_reencode(const uint8_t *mh_in, size_t mh_inlen, {self.fdp()}uint8_t *mh_out, size_t mh_cap, size_t *mh_outlen)",
            "{",
            f"    static const {p}_rx_handlers mh_h = {{",
        ]
        for m in iface.messages:
            s.append(f"        .{c_name(m.name)} = {p}_mh_re_{m.number},")
        if not iface.messages:
            s.append("        .mh_unused = 0,")
        s += [
            "    };",
            (f"    struct {p}_mh_reencode mh_r = {{ mh_out, mh_cap, mh_outlen, MH_OK, mh_fds, mh_nfds }};" if caps
             else f"    struct {p}_mh_reencode mh_r = {{ mh_out, mh_cap, mh_outlen, MH_OK }};"),
            (f"    int mh_rc = {p}_mh_dispatch(mh_in, mh_inlen, mh_fds, mh_nfds, &mh_h, &mh_r, 0); /* the caller keeps its handles */"
             if caps else f"    int mh_rc = {p}_dispatch(mh_in, mh_inlen, &mh_h, &mh_r);"),
            "    return mh_rc != MH_OK ? mh_rc : mh_r.rc;",
            "}",
            "",
        ]
        return "\n".join(s)


def generate_c(iface: Interface) -> tuple[str, str]:
    """Generate ``(header_text, source_text)`` for ``iface`` (files ``NAME.h`` and ``NAME.c``).

    Raises :class:`~multihop.idl.errors.IdlCodegenError` for interfaces the
    back end cannot generate: import-only models, and names whose C
    identifiers would collide (see :mod:`multihop.idl.ccheck`).
    """
    check_generatable(iface, "C")
    check_c_names(iface)
    g = _CGen(iface)
    return g.header(), g.source()
