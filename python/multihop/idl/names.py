"""How Flounder names become Python and C identifiers.

A Flounder name is kept as it is unless the target language cannot take it:
then one ``_`` is appended (``rpc del`` -> ``b.rpc.del_``).  Names starting
with ``_mh`` are reserved for generated Python code; in C, names starting with
``mh_`` get a ``u_`` prefix.  Whether the mapped names of a whole interface
still fit together (no two the same, nothing Python refuses) is checked by
:mod:`multihop.idl.pycheck` and :mod:`multihop.idl.ccheck`.
"""

from __future__ import annotations

import builtins
import keyword

__all__ = [
    "py_name",
    "py_arg",
    "py_type",
    "py_binding_class",
    "c_name",
    "PY_ARG_RESERVED",
    "PY_MODULE_RESERVED",
    "C_KEYWORDS",
]

#: Argument names that would clash with a generated method's own parameters
#: (``self``, ``timeout``) or a record's fixed attributes and methods
#: (``name``, ``number``, ``_fields``, ``_values``, ``_asdict``).
PY_ARG_RESERVED = frozenset({"self", "timeout", "name", "number", "_fields", "_values", "_asdict"})

#: Module-level names every generated Python module defines.
PY_MODULE_RESERVED = frozenset({"INTERFACE", "DESCRIPTION", "MESSAGE_NUMBERS", "messages", "results", "encode", "decode", "Binding"})

C_KEYWORDS = frozenset(
    """auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union
    unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary
    _Noreturn _Static_assert _Thread_local bool true false NULL errno assert
    int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t intptr_t uintptr_t
    memcpy memset memchr malloc free strlen offsetof SIZE_MAX""".split()
)


def py_name(name: str) -> str:
    """A Flounder name as a Python identifier (method, attribute): keywords get a trailing ``_``."""
    if keyword.iskeyword(name):
        return name + "_"
    return name


def py_arg(name: str) -> str:
    """An argument or record-field name as a Python identifier (see :data:`PY_ARG_RESERVED`)."""
    if name in PY_ARG_RESERVED:
        return name + "_"
    return py_name(name)


_BUILTINS = frozenset(dir(builtins))


def py_type(name: str, binding_class: str) -> str:
    """A type's module-level name: not a keyword, a builtin, or a name the module defines itself."""
    n = py_name(name)
    if n in PY_MODULE_RESERVED or n == binding_class or n in _BUILTINS:
        return n + "_"
    return n


def py_binding_class(iface: str) -> str:
    """``ges_broker`` -> ``GesBrokerBinding``."""
    parts = [p for p in iface.split("_") if p]
    return "".join(p[:1].upper() + p[1:] for p in parts) + "Binding"


def c_name(name: str) -> str:
    """A Flounder name as a C identifier.

    C keywords and common library names get a trailing ``_``; names in the
    generated code's own ``mh_`` space get a ``u_`` prefix.
    """
    if name in C_KEYWORDS:
        return name + "_"
    if name.startswith(("mh_", "MH_", "mhidl_")):
        return "u_" + name
    return name
