"""The C binding: its declaration and source, receiving with the rpc backlog, and one function per rpc."""

from __future__ import annotations

from multihop.idl.ccheck import BACKLOG_MAX
from multihop.idl.cgen.base import CBase
from multihop.idl.model import (
    DynArray,
    Rpc,
)
from multihop.idl.names import c_name


class Binding(CBase):
    """``N_binding``, ``N_bind`` / ``N_export`` / ``N_accept``, ``N_recv`` and ``N_R_rpc``."""

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
            *(
                [
                    f"    int *mh_fds[{p}_BACKLOG_MAX]; /* the handles that came with each (malloc'd) */",
                    f"    size_t mh_nfds[{p}_BACKLOG_MAX];",
                ]
                if self.has_caps
                else []
            ),
            "    size_t mh_head, mh_count;",
            f"}} {p}_binding;",
            f"void {p}_binding_init({p}_binding *mh_b, mh_channel *mh_ch);",
            f"void {p}_binding_destroy({p}_binding *mh_b);",
            f"size_t {p}_backlog_count(const {p}_binding *mh_b);",
            "",
            "/* ---- binding and exporting ----",
            f" * {p}_bind: bind to the service `name` (mh_bind) and wrap the channel in *b. `transport` is",
            ' * "ump", "multihop" or "auto" (UMP when the routing table links the two cores directly,',
            ' * multi-hop otherwise; NULL means "auto"). On failure b->ch is NULL.',
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
            *(
                [
                    f"    for (size_t mh_i = 0; mh_i < {p}_BACKLOG_MAX; mh_i++) {{ /* handles nobody took: closed */",
                    "        mhidl_close_all(mh_b->mh_fds[mh_i], mh_b->mh_nfds[mh_i]);",
                    "        free(mh_b->mh_fds[mh_i]);",
                    "    }",
                ]
                if self.has_caps
                else []
            ),
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
            *(
                [
                    "    int *mh_kfds = NULL;",
                    "    if (mh_nfds > 0) {",
                    "        mh_kfds = (int *)malloc(mh_nfds * sizeof(int));",
                    "        if (mh_kfds == NULL) { if (mh_keep != mh_m) free(mh_keep); return MH_E_INVALID; }",
                    "        memcpy(mh_kfds, mh_fds, mh_nfds * sizeof(int));",
                    "    }",
                    "    mh_b->mh_fds[mh_i] = mh_kfds;",
                    "    mh_b->mh_nfds[mh_i] = mh_nfds;",
                ]
                if self.has_caps
                else []
            ),
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
            + ("mh_fds, &mh_nfds, " if caps else "")
            + "mhidl_left(mh_deadline));",
            "        if (mh_rc != MH_OK) return mh_rc;",
            f"        if (mh_n >= 2 && mhidl_get_u16(mh_m) == {r.response.number}) {{",
            *(["            if (mh_nfds > 0) { mhidl_close_all(mh_fds, mh_nfds); mh_rc = MH_E_PROTOCOL; } else"] if caps and not resp_fds else []),
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
