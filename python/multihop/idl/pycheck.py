"""Which Flounder names the Python back end can take.

:func:`check_python_names` runs before :mod:`multihop.idl.pygen` writes any
code, so a valid interface that Python cannot express fails with an
:class:`~multihop.idl.errors.IdlCodegenError` at the offending name (its
message, argument, type, struct field or enum value), saying why, instead of
the generated module failing to compile or import.  Refused:

* names the generated code keeps for itself: anything starting with ``_mh``;
  message, rpc, argument and type names starting with ``__`` (Python mangles
  them inside a class, or they are module attributes such as ``__name__``);
* struct fields starting with ``_``, and the ``out`` arguments of an rpc with
  several of them: both become field names of a named tuple;
* enum values that Python's ``IntEnum`` refuses or would not make a member
  (``mro``, ``_sunder_`` and ``__dunder__`` names, ...); this is asked of
  ``IntEnum`` itself, so it holds for the running Python version;
* two names that become the same Python name once a keyword or reserved name
  gets its ``_`` (``from`` and ``from_``), in one namespace: the arguments of a
  message, the fields of a struct, the values of an enum, the message methods
  of ``tx``, the rpc methods of ``rpc``, the module's types.
"""

from __future__ import annotations

import builtins
import enum
import keyword

from multihop.idl.errors import IdlCodegenError
from multihop.idl.model import Enum, Interface, Struct
from multihop.idl.names import PY_ARG_RESERVED, PY_MODULE_RESERVED, py_arg, py_binding_class, py_name, py_type
from multihop.idl.namespace import Namespace, codegen_error
from multihop.idl.syntax import Pos

__all__ = ["check_python_names"]

_PREFIX = "Python back end"


def _fail(pos: Pos | None, fallback: Pos, text: str) -> IdlCodegenError:
    """A code generation error at ``pos`` (or ``fallback`` when the model has no position)."""
    return codegen_error(pos, fallback, _PREFIX, text)


def _why_renamed(name: str, mapped: str) -> str:
    """Why ``name`` became ``mapped`` in Python ('' if it did not change)."""
    if name == mapped:
        return ""
    if keyword.iskeyword(name):
        why = "is a Python keyword"
    elif name in PY_ARG_RESERVED:
        why = "is a name the binding uses itself"
    elif name in PY_MODULE_RESERVED:
        why = "is a name the generated module defines"
    elif name in dir(builtins):
        why = "is a Python builtin"
    else:
        why = "is taken"
    return f"'{name}' {why}, so it gets a trailing '_'"


def _why_suffix(name: str, mapped: str) -> str:
    """:func:`_why_renamed` as the suffix of a clash error (``""`` if ``name`` did not change)."""
    why = _why_renamed(name, mapped)
    return f" ({why})" if why else ""


def _Namespace(kind: str, fallback: Pos) -> Namespace:
    """One Python namespace: which Flounder name took each Python name."""
    return Namespace(kind, fallback, _PREFIX, "Python", _why_suffix)


_MANGLED = "Python mangles names starting with '__' inside a class"
_DUNDER = "names starting with '__' are Python's own at module level (such as __name__ and __doc__)"


def _reserved(name: str, what: str, pos: Pos | None, fallback: Pos, dunder: str | None = _MANGLED) -> None:
    """Refuse a name the generated code keeps for itself (``_mh...``; ``__...`` too, for reason ``dunder``)."""
    if name.startswith("_mh"):
        raise _fail(pos, fallback, f"{what}: names starting with '_mh' are reserved for the generated code")
    if dunder is not None and name.startswith("__"):
        raise _fail(pos, fallback, f"{what}: {dunder}")


def _enum_member_problem(member: str) -> str | None:
    """Why ``IntEnum`` cannot take ``member`` as a member name, or None if it can (asked of IntEnum itself)."""
    try:
        probe = enum.IntEnum("probe", [(member, 0)])  # type: ignore[misc]  # mypy wants literal names; the member is the point
    except (ValueError, TypeError) as e:
        return f"Python's IntEnum refuses it ({e})"
    if member not in probe.__members__:
        return "Python's IntEnum reserves it (it would not become a member)"
    return None


def _check_enum(t: Enum, fallback: Pos) -> None:
    values = _Namespace(f"of enum '{t.name}'", fallback)
    for i, v in enumerate(t.values):
        pos = t.value_pos(i)
        what = f"value '{v}' of enum '{t.name}'"
        _reserved(v, what, pos, fallback, dunder=None)
        py = py_name(v)
        problem = _enum_member_problem(py)
        if problem is not None:
            raise _fail(pos, fallback, f"{what} cannot be a Python enum member: {problem}")
        values.add(py, v, f"value '{v}'", pos)


def _check_struct(t: Struct, fallback: Pos) -> None:
    fields = _Namespace(f"of struct '{t.name}'", fallback)
    for f in t.fields:
        what = f"field '{f.name}' of struct '{t.name}'"
        if f.name.startswith("_"):
            raise _fail(f.pos, fallback, f"{what} cannot start with '_': a struct is a Python named tuple, whose field names cannot start with '_'")
        fields.add(py_name(f.name), f.name, f"field '{f.name}'", f.pos)


def check_python_names(iface: Interface) -> None:
    """Raise :class:`IdlCodegenError` at the first name of ``iface`` the Python back end cannot use."""
    fallback = iface.pos or Pos(iface.file, 1, 1)
    module = _Namespace("at module level", fallback)
    for reserved in sorted(PY_MODULE_RESERVED):
        module.add(reserved, reserved, f"the module's own '{reserved}'", None)
    cls = py_binding_class(iface.name or "")
    module.add(cls, cls, f"the binding class '{cls}'", None)
    for name, t in iface.types.items():  # named types: the key is the type's name
        kind = "struct" if isinstance(t, Struct) else "enum" if isinstance(t, Enum) else "array type"
        what = f"{kind} '{name}'"
        pos = getattr(t, "pos", None)
        _reserved(name, what, pos, fallback, _DUNDER)
        module.add(py_type(name, cls), name, what, pos)
        if isinstance(t, Enum):
            _check_enum(t, fallback)
        elif isinstance(t, Struct):
            _check_struct(t, fallback)

    rpcs = _Namespace("among the methods of b.rpc", fallback)
    handlers = _Namespace("among the methods of a serve() handler", fallback)
    for r in iface.rpcs:
        what = f"rpc '{r.name}'"
        _reserved(r.name, what, r.pos, fallback)
        rpcs.add(py_name(r.name), r.name, what, r.pos)
        handlers.add(py_name(r.name), r.name, what, r.pos)
        if len(r.out_args) > 1:
            for a in r.out_args:
                if py_arg(a.name).startswith("_"):
                    raise _fail(
                        a.pos,
                        fallback,
                        f"out argument '{a.name}' of rpc '{r.name}' cannot start with '_': "
                        "an rpc with several out arguments returns a Python named tuple, "
                        "whose field names cannot start with '_'",
                    )

    methods = _Namespace("among the methods of b.tx", fallback)
    for m in iface.messages:
        what = f"{m.kind} '{m.name}'" if m.rpc is None else f"the {m.kind.removeprefix('rpc_')} message of rpc '{m.rpc}'"
        _reserved(m.name, what, m.pos, fallback)
        methods.add(py_name(m.name), m.name, what, m.pos)
        if m.rpc is None:
            handlers.add(py_name(m.name), m.name, what, m.pos)
        where = f"{m.kind} '{m.name}'" if m.rpc is None else f"rpc '{m.rpc}'"
        args = _Namespace(f"of {where}", fallback)
        for a in m.args:
            awhat = f"argument '{a.name}' of {where}"
            _reserved(a.name, awhat, a.pos, fallback)
            args.add(py_arg(a.name), a.name, f"argument '{a.name}'", a.pos)
