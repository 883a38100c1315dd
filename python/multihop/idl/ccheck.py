"""Which Flounder names the C back end can take.

:func:`check_c_names` runs before :mod:`multihop.idl.cgen` writes any code:
a valid interface whose C names would collide fails with an
:class:`~multihop.idl.errors.IdlCodegenError` at the offending name, instead
of generating C that does not compile.  Collisions come from the mapping of
:func:`multihop.idl.names.c_name` (a C keyword gets a ``_``: ``int`` and
``int_`` collide) and from the generated identifiers sharing one prefix (enum
value ``recv`` of interface ``N`` is the constant ``N_recv``, which is also the
receive function).  Checked namespaces: the parameters of each message
(arguments and length names), the fields of each struct, the members of the
handler table, and every global identifier the generated header and source
declare (:func:`generated_globals` lists them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from multihop.idl.model import Array, Builtin, DynArray, Enum, Interface, String, Struct
from multihop.idl.names import C_KEYWORDS, c_name
from multihop.idl.namespace import Namespace
from multihop.idl.syntax import Pos

__all__ = ["check_c_names", "generated_globals", "BACKLOG_MAX"]

#: Messages the C binding keeps while an rpc waits for its response (see cgen's header text).
BACKLOG_MAX = 64


def _why(name: str, mapped: str) -> str:
    """Why ``name`` became ``mapped`` in C ('' if it did not change)."""
    if name == mapped:
        return ""
    if name in C_KEYWORDS:
        return f" ('{name}' is a C keyword or library name, so it gets a trailing '_')"
    return f" ('{name}' is in the generated code's mh_ space, so it gets a 'u_' prefix)"


def _Names(kind: str, fallback: Pos) -> Namespace:
    """One C namespace: which Flounder item took each C identifier."""
    return Namespace(kind, fallback, "C back end", "C", _why)


def generated_globals(iface: Interface) -> list[tuple[str, str, Pos | None]]:
    """Every global identifier (functions, types, constants, macros) the C back end declares for ``iface``.

    Each entry is ``(identifier, what it is, position of the Flounder item or None)``,
    the library's own first, then per type, per message and per rpc.
    """
    p = iface.name
    assert p is not None
    out: list[tuple[str, str, Pos | None]] = []
    for suffix, what in [
        ("msgnum", "function"),
        ("msg_name", "function"),
        ("dispatch", "function"),
        ("recv", "function"),
        ("reencode", "function"),
        ("rx_handlers", "type"),
        ("binding", "type"),
        ("binding_init", "function"),
        ("binding_destroy", "function"),
        ("backlog_count", "function"),
        ("BACKLOG_MAX", "macro"),
        ("mh_reencode", "struct"),
        ("mh_recv_msg", "function"),
        ("mh_backlog_push", "function"),
        ("bind", "function"),
        ("export", "function"),
        ("accept", "function"),
    ]:
        out.append((f"{p}_{suffix}", f"the generated {what} '{p}_{suffix}'", None))
    for name, t in iface.aliases.items():
        if (isinstance(t, Builtin) and t.kind != "cap") or isinstance(t, (Enum, Struct)) or (isinstance(t, Array) and t.name is not None):
            out.append((f"{p}_{name}_t", f"alias '{name}'", None))
    for t in iface.types.values():
        kind = "struct" if isinstance(t, Struct) else "enum" if isinstance(t, Enum) else "array type"
        pos = getattr(t, "pos", None)
        out.append((f"{p}_{t.name}_t", f"{kind} '{t.name}'", pos))
        if isinstance(t, Enum):
            out.append((f"{p}_{t.name}_COUNT", f"the value count of enum '{t.name}'", pos))
            for i, v in enumerate(t.values):
                out.append((f"{p}_{v}", f"value '{v}' of enum '{t.name}'", t.value_pos(i)))
    for m in iface.messages:
        what = f"{m.kind} '{m.name}'" if m.rpc is None else f"the {m.kind.removeprefix('rpc_')} message of rpc '{m.rpc}'"
        out.append((f"{p}_{m.name}_MSGNUM", f"the message number of {what}", m.pos))
        for fn in ("encode", "decode", "send"):
            out.append((f"{p}_{m.name}_{fn}", f"the {fn} function of {what}", m.pos))
        out.append((f"{p}_mh_re_{m.number}", f"the re-encoder of {what}", m.pos))
        for a in m.args:
            if isinstance(a.type, (String, DynArray)) and a.type.maximum is not None:
                out.append((f"{p}_{m.name}_{a.name}_MAX", f"the maximum of argument '{a.name}' of {what}", a.pos))
    for r in iface.rpcs:
        out.append((f"{p}_{r.name}_rpc", f"the rpc function of rpc '{r.name}'", r.pos))
    return out


def check_c_names(iface: Interface) -> None:
    """Raise :class:`IdlCodegenError` at the first name of ``iface`` whose C identifier collides."""
    fallback = iface.pos or Pos(iface.file, 1, 1)
    glob = _Names("among the generated C globals", fallback)
    for ident, what, pos in generated_globals(iface):
        glob.add(ident, ident, what, pos)
    for t in iface.types.values():
        if isinstance(t, Struct):
            fields = _Names(f"of struct '{t.name}'", fallback)
            for f in t.fields:
                fields.add(c_name(f.name), f.name, f"field '{f.name}'", f.pos)
    handlers = _Names("among the members of the rx_handlers table", fallback)
    for m in iface.messages:
        what = f"{m.kind} '{m.name}'" if m.rpc is None else f"the {m.kind.removeprefix('rpc_')} message of rpc '{m.rpc}'"
        handlers.add(c_name(m.name), m.name, what, m.pos)
        where = f"{m.kind} '{m.name}'" if m.rpc is None else f"rpc '{m.rpc}'"
        _check_params(_Names(f"among the C parameters of {where}", fallback), m.args, lambda a: "argument")
    for r in iface.rpcs:
        params = _Names(f"among the C parameters of {p_rpc(iface, r.name)}", fallback)
        _check_params(params, r.args, lambda a: f"{a.direction} argument")


def _check_params(params: Namespace, args: Sequence[Any], kind: Callable[[Any], str]) -> None:
    """Claim the C parameters of ``args`` in ``params``: each argument, and each
    dynamic array's length (``kind(arg)`` says what an argument is called)."""
    for a in args:
        params.add(c_name(a.name), a.name, f"{kind(a)} '{a.name}'", a.pos)
        if isinstance(a.type, DynArray):
            params.add(c_name(a.type.length_name), a.type.length_name, f"length '{a.type.length_name}' of argument '{a.name}'", a.pos)


def p_rpc(iface: Interface, rpc: str) -> str:
    """The C function of rpc ``rpc``: ``<interface>_<rpc>_rpc``."""
    return f"{iface.name}_{rpc}_rpc"
