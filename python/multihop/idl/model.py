"""The checked model of an interface: resolved types, numbered messages, rpcs.

This is what :func:`multihop.idl.parse` returns and what the back ends read.
Aliases are resolved away (an argument of type ``coreid`` has the type
``uint8``); :attr:`Interface.aliases` keeps the names for documentation.

Wire sizes are fixed here for every back end (see ``flounder-idl/WIRE.md``); the integer
formats come from the run-time codec (:data:`multihop.flounder.wire.INT_FORMATS`), which
decodes what the back ends encode.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from multihop.flounder.wire import INT_FORMATS
from multihop.idl.syntax import Annotation, Pos

__all__ = [
    "Type",
    "Builtin",
    "Enum",
    "Field",
    "Struct",
    "Array",
    "DynArray",
    "String",
    "BUILTINS",
    "ENUM_WIRE",
    "Arg",
    "Message",
    "Rpc",
    "Interface",
    "fixed_size",
    "is_fixed",
    "has_fixed_layout",
    "cap_inside",
    "has_caps",
    "CAP_WIRE",
    "type_name",
    "arg_text",
]


class Type:
    """Base of all resolved types (an anonymous array argument's type has no name)."""

    name: str | None


@dataclass(frozen=True)
class Builtin(Type):
    """A builtin scalar (or ``cap``): its wire ``size`` in bytes and ``struct`` format letter.

    ``kind`` is ``uint``, ``int``, ``bool``, ``char`` or ``cap``; ``lo``..``hi``
    is the range of integer kinds.
    """

    name: str
    kind: str
    size: int
    fmt: str
    lo: int = 0
    hi: int = 0


def _u(name: str) -> Builtin:
    fmt = INT_FORMATS[name]
    size = struct.calcsize("<" + fmt)
    return Builtin(name, "uint", size, fmt, 0, (1 << (8 * size)) - 1)


def _s(name: str) -> Builtin:
    fmt = INT_FORMATS[name]
    size = struct.calcsize("<" + fmt)
    return Builtin(name, "int", size, fmt, -(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1)


#: Builtin scalar types by Flounder name.  ``int`` is Flounder's legacy spelling of int32.
BUILTINS: dict[str, Builtin] = {
    "uint8": _u("uint8"),
    "uint16": _u("uint16"),
    "uint32": _u("uint32"),
    "uint64": _u("uint64"),
    "uintptr": _u("uintptr"),
    "size": _u("size"),
    "iref": _u("iref"),
    "errval": _u("errval"),
    "int8": _s("int8"),
    "int16": _s("int16"),
    "int32": _s("int32"),
    "int64": _s("int64"),
    "intptr": _s("intptr"),
    "int": _s("int32"),
    "bool": Builtin("bool", "bool", 1, "?", 0, 1),
    "char": Builtin("char", "char", 1, "c", 0, 255),
    "cap": Builtin("cap", "cap", 0, ""),
    "give_away_cap": Builtin("give_away_cap", "cap", 0, ""),
}

#: Names that denote a string (``String s[256]``, or the older ``string s``).
STRING_NAMES = frozenset({"String", "string"})

#: Enums travel as this builtin (uint32, little-endian), whatever their number of values.
ENUM_WIRE = BUILTINS["uint32"]

#: Bytes a capability takes in a message: 1 if a handle travels with it (the next one in the
#: message's handle list, out of band), 0 for none.  The handle itself never is in the bytes.
CAP_WIRE = 1


@dataclass(frozen=True)
class Enum(Type):
    """``typedef enum { ... } name``: values numbered 0, 1, ... in order.

    ``pos`` is where the enum is declared and ``positions`` where each value is
    (both None/empty for a hand-made model; they take no part in equality).
    """

    name: str
    values: tuple[str, ...]
    pos: Pos | None = field(default=None, compare=False, repr=False)
    positions: tuple[Pos, ...] = field(default=(), compare=False, repr=False)

    def value_pos(self, i: int) -> Pos | None:
        """Where value number ``i`` is declared, if known."""
        return self.positions[i] if i < len(self.positions) else self.pos


@dataclass(frozen=True)
class Field:
    """One field of a struct (``pos``: where it is declared, if known)."""

    name: str
    type: Type
    pos: Pos | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Struct(Type):
    """``typedef struct { ... } name``: fields packed in order, no padding."""

    name: str
    fields: tuple[Field, ...]
    pos: Pos | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Array(Type):
    """A fixed-size array: ``typedef T name[N]`` (named) or an argument ``T a[N]`` (``name`` None)."""

    name: str | None
    element: Type
    length: int
    pos: Pos | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DynArray(Type):
    """A dynamic array argument ``T a[len, MAX]`` (``maximum`` None for the older ``T a[len]``)."""

    element: Type
    length_name: str
    maximum: int | None

    @property
    def name(self) -> str:  # type: ignore[override]
        """How the type reads in messages: ``uint8[len, 64]`` (``uint8[len]`` without a maximum)."""
        return f"{type_name(self.element)}[{self.length_name}{'' if self.maximum is None else f', {self.maximum}'}]"


@dataclass(frozen=True)
class String(Type):
    """A string argument ``String s[MAX]`` (UTF-8 bytes, at most MAX), or ``string s`` (no maximum)."""

    maximum: int | None

    @property
    def name(self) -> str:  # type: ignore[override]
        """How the type reads in messages: ``String[MAX]``, or ``String`` without a maximum."""
        return "String" if self.maximum is None else f"String[{self.maximum}]"


def type_name(t: Type) -> str:
    """A short human name for a type, as used in error messages."""
    if t.name is None:  # only an anonymous array argument's type has no name
        assert isinstance(t, Array)
        return f"{type_name(t.element)}[{t.length}]"
    return t.name


def fixed_size(t: Type) -> int | None:
    """Wire size in bytes of a fixed-size type; None for strings and dynamic arrays.

    A capability is fixed-size: its presence byte (:data:`CAP_WIRE`); the handle travels beside
    the message bytes.
    """
    if isinstance(t, Builtin):
        return CAP_WIRE if t.kind == "cap" else t.size
    if isinstance(t, Enum):
        return ENUM_WIRE.size
    if isinstance(t, Struct):
        total = 0
        for f in t.fields:
            s = fixed_size(f.type)
            if s is None:
                return None
            total += s
        return total
    if isinstance(t, Array):
        s = fixed_size(t.element)
        return None if s is None else s * t.length
    return None


def is_fixed(t: Type) -> bool:
    """True if the type has a fixed wire size (travels in a message's fixed part)."""
    return fixed_size(t) is not None


def has_fixed_layout(t: Type) -> bool:
    """True if the type may sit in a struct or a fixed array: a scalar, an enum, a capability,
    or a struct / fixed array of those.  Strings and dynamic arrays have no fixed layout.

    Capabilities count as fixed here (Flounder puts them in structs, as Barrelfish's
    ``omap_sdma.if`` does): one presence byte each on the wire, the handle out of band.
    """
    if isinstance(t, (Builtin, Enum)):
        return True
    if isinstance(t, Struct):
        return all(has_fixed_layout(f.type) for f in t.fields)
    if isinstance(t, Array):
        return has_fixed_layout(t.element)
    return False


def cap_inside(t: Type) -> tuple[str, Builtin] | None:
    """Where a capability sits in ``t``, or None if it holds none.

    Returns ``(path, cap_type)``: ``path`` is ``""`` for a capability itself,
    ``".f"`` / ``".f.g"`` for (nested) struct fields and ``"[]"`` for array
    elements, combined in order (``"[].cap"``: the ``cap`` field of each element).
    """
    if isinstance(t, Builtin):
        return ("", t) if t.kind == "cap" else None
    if isinstance(t, Struct):
        for f in t.fields:
            inner = cap_inside(f.type)
            if inner is not None:
                return (f".{f.name}{inner[0]}", inner[1])
        return None
    if isinstance(t, (Array, DynArray)):
        inner = cap_inside(t.element)
        return None if inner is None else ("[]" + inner[0], inner[1])
    return None


def has_caps(t: Type) -> bool:
    """True if a value of type ``t`` can carry handles (it is or holds a capability)."""
    return cap_inside(t) is not None


@dataclass(frozen=True)
class Arg:
    """An argument of a message (``direction`` is ``in``/``out`` for an rpc's arguments)."""

    name: str
    type: Type
    pos: Pos
    direction: str | None = None


@dataclass(frozen=True)
class Message:
    """One message on the wire, with its number.

    ``kind`` is ``message``, ``call`` or ``response`` as declared, or
    ``rpc_call`` / ``rpc_response`` for the two halves of an rpc (then ``rpc``
    names it).
    """

    name: str
    number: int
    kind: str
    args: tuple[Arg, ...]
    pos: Pos
    rpc: str | None = None
    annotations: tuple[Annotation, ...] = ()


@dataclass(frozen=True)
class Rpc:
    """``rpc name(in ..., out ...)``: travels as ``call`` (in args) then ``response`` (out args)."""

    name: str
    args: tuple[Arg, ...]
    pos: Pos
    call: Message
    response: Message
    annotations: tuple[Annotation, ...] = ()

    @property
    def in_args(self) -> tuple[Arg, ...]:
        """The ``in`` arguments, in order (the call message's arguments)."""
        return self.call.args

    @property
    def out_args(self) -> tuple[Arg, ...]:
        """The ``out`` arguments, in order (the response message's arguments)."""
        return self.response.args


@dataclass(frozen=True)
class Interface:
    """A checked interface.

    :func:`multihop.idl.parse` always returns one with a ``name``; a hand-made
    model with ``name`` None stands for an import file (types only), which the
    back ends refuse.
    """

    name: str | None
    description: str | None
    file: str
    pos: Pos | None
    types: dict[str, Type] = field(default_factory=dict)
    aliases: dict[str, Type] = field(default_factory=dict)
    messages: tuple[Message, ...] = ()
    rpcs: tuple[Rpc, ...] = ()

    @property
    def is_types_only(self) -> bool:
        """True for a model of an import file (aliases and typedefs, no interface)."""
        return self.name is None

    def message(self, name: str) -> Message:
        """The wire message called ``name`` (an rpc's halves are ``NAME_call`` / ``NAME_response``)."""
        for m in self.messages:
            if m.name == name:
                return m
        raise KeyError(name)

    def rpc(self, name: str) -> Rpc:
        """The rpc called ``name``."""
        for r in self.rpcs:
            if r.name == name:
                return r
        raise KeyError(name)


def arg_text(a: Arg) -> str:
    """An argument as Flounder spells it, e.g. ``uint8 data[len, 2048]`` or ``in uint32 x``."""
    t = a.type
    prefix = "" if a.direction is None else a.direction + " "
    if isinstance(t, String):
        return f"{prefix}String {a.name}" + ("" if t.maximum is None else f"[{t.maximum}]")
    if isinstance(t, DynArray):
        tail = t.length_name if t.maximum is None else f"{t.length_name}, {t.maximum}"
        return f"{prefix}{type_name(t.element)} {a.name}[{tail}]"
    if isinstance(t, Array) and t.name is None:
        return f"{prefix}{type_name(t.element)} {a.name}[{t.length}]"
    return f"{prefix}{type_name(t)} {a.name}"
