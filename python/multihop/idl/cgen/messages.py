"""Per-message C functions: the encoder, the decoder and the send stub."""

from __future__ import annotations

from multihop.idl.cgen.base import has_enum, is_bytes_elem
from multihop.idl.cgen.values import ValueCodecs
from multihop.idl.model import (
    Array,
    DynArray,
    Message,
    String,
    Struct,
    fixed_size,
)
from multihop.idl.names import c_name


class Messages(ValueCodecs):
    """``N_M_encode``, ``N_M_decode`` and ``N_M_send`` for each message."""

    def fixed_part(self, m: Message) -> int:
        """Bytes of the message number plus the fixed-size arguments."""
        return 2 + sum(fixed_size(a.type) or 0 for a in m.args if fixed_size(a.type) is not None)

    def gen_encode(self, m: Message) -> list[str]:
        """``int N_M_encode(buf, cap, len, args...)``: check, size, then write."""
        params = [
            "uint8_t *mh_buf",
            "size_t mh_cap",
            "size_t *mh_len",
        ] + self.fd_params(m, False)
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
            if has_enum(t.element):
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
            if is_bytes_elem(t.element):
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
        allocs = [a for a in dyn if (isinstance(a.type, (String, DynArray)) and a.type.maximum is None)]
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
            out += [
                "    size_t mh_k = 0; /* handles taken */",
                "    if (mh_fds == NULL && mh_nfds > 0) goto mh_bad;",
            ]
        for a in fixed:
            n, t = c_name(a.name), a.type
            lv = n if isinstance(t, Array) else f"*{n}"
            out += self.dec_value(t, lv, "    ")
        for _k, a in enumerate(dyn):
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
            if is_bytes_elem(t.element):
                out += [
                    "        if (mh_n > 0) memcpy(mh_a, mh_p, (size_t)mh_n);",
                    "        mh_p += mh_n;",
                ]
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

        out = [
            f"int {self.fn(m, 'send')}({self.sig(params)})",
            "{",
            "    if (mh_b == NULL || mh_b->ch == NULL) return MH_E_INVALID;",
        ]
        if caps:
            out += [
                "    int mh_fds[MH_MAX_HANDLES];",
                "    size_t mh_nfds = 0;",
                "    uint64_t mh_give = 0;",
            ]
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
