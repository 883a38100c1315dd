"""Encoding, checking and decoding one value of any IDL type, as lines of C."""

from __future__ import annotations

from multihop.idl.cgen.base import CBase, has_enum, is_bytes_elem
from multihop.idl.model import (
    Array,
    Builtin,
    Enum,
    Struct,
    Type,
)
from multihop.idl.names import c_name


class ValueCodecs(CBase):
    """Value-level C code: ``enc_value``, ``chk_value``, ``dec_value``."""

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
        if is_bytes_elem(t.element):
            return [f"{ind}memcpy(mh_p, {expr}, {t.length}); mh_p += {t.length};"]
        i = f"mh_i{depth}"
        return (
            [f"{ind}for (size_t {i} = 0; {i} < {t.length}; {i}++) {{"]
            + self.enc_value(t.element, f"({expr})[{i}]", ind + "    ", depth + 1)
            + [f"{ind}}}"]
        )

    def chk_value(self, t: Type, expr: str, ind: str, depth: int = 0) -> list[str]:
        """C statements returning MH_E_INVALID if ``expr`` holds an enum value out of range."""
        if not has_enum(t):
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
        if is_bytes_elem(t.element):
            return [f"{ind}memcpy({lv}, mh_p, {t.length}); mh_p += {t.length};"]
        i = f"mh_i{depth}"
        return (
            [f"{ind}for (size_t {i} = 0; {i} < {t.length}; {i}++) {{"]
            + self.dec_value(t.element, f"({lv})[{i}]", ind + "    ", depth + 1)
            + [f"{ind}}}"]
        )
