"""From syntax tree to checked model: resolve names, number messages, reject bad interfaces.

Scoping follows Flounder: builtin names resolve first (so an import file's
``alias iref uint32;`` or ``alias errval uint64;`` has no effect, as in
Barrelfish); then the interface's own declarations; then the import files,
the later one first.  A name declared twice in one file is an error; a name
declared in the interface may shadow one from an import.  Types may be used
before their declaration inside a file.

The checker rejects, with the position of the offending name:

* unknown types, and a type that contains itself;
* duplicate type, enum value, struct field, message/rpc and argument names;
* a dynamic array's length name that clashes with an argument or another length name;
* strings and dynamic arrays inside structs and fixed arrays;
* array lengths and maxima below 1; more than 65535 message numbers;
* bounds beyond what a message can carry (:data:`MAX_BOUND`): an array length, a dynamic array's or a
  string's maximum, or a fixed-size type, argument or message of more bytes than that.

Capabilities (``cap``, ``give_away_cap``) are valid anywhere a scalar is: as
arguments, struct fields and array elements, as in Barrelfish's own files.
Both back ends generate them: each becomes an OS handle (a file descriptor)
that travels with its message, out of band (``flounder-idl/WIRE.md``).
:func:`check_generatable` (run by both back ends) refuses import files.
"""

from __future__ import annotations

from multihop.idl.errors import IdlCheckError, IdlCodegenError
from multihop.idl.model import (
    BUILTINS,
    STRING_NAMES,
    Arg,
    Array,
    DynArray,
    Enum,
    Field,
    Interface,
    Message,
    Rpc,
    String,
    Struct,
    Type,
    fixed_size,
    has_fixed_layout,
    type_name,
)
from multihop.idl.syntax import (
    AliasDecl,
    ArgDecl,
    ArrayDecl,
    EnumDecl,
    FileDecl,
    MessageDecl,
    Pos,
    RpcDecl,
    StructDecl,
    TypeDecl,
    TypeRef,
)

__all__ = ["check", "check_generatable", "MAX_MESSAGE_NUMBER", "MAX_BOUND"]

#: Message numbers are a uint16 on the wire; 0 is never used.
MAX_MESSAGE_NUMBER = 0xFFFF

#: The largest bound (elements, or bytes) a declaration may have: a message is at most 2**32 - 1 bytes on the
#: wire (a ring slot's 32-bit length; channels carry at most 64 MiB), so nothing longer can ever be sent, and
#: every bound up to it fits the wire's 8-byte lengths and C's ``size_t`` (the C back end writes them as
#: ``u`` literals: a larger one would be truncated).
MAX_BOUND = 0xFFFF_FFFF

_STRING = object()  # marker: a name that denotes a string type


def _err(pos: Pos, text: str) -> IdlCheckError:
    return IdlCheckError(pos.file, pos.line, pos.column, text)


def _bound(pos: Pos, value: int, what: str) -> None:
    """Refuse a bound (``what`` names it: "the length of ...") beyond :data:`MAX_BOUND`."""
    if value > MAX_BOUND:
        raise _err(pos, f"{what} {value:,} is beyond what a message can carry: at most {MAX_BOUND:,} (a message is at most 4 GiB - 1 bytes)")


def _fits(pos: Pos, t: Type, what: str) -> Type:
    """Refuse a fixed-size type (``what`` names it) of more than :data:`MAX_BOUND` bytes; return it."""
    size = fixed_size(t)
    if size is not None and size > MAX_BOUND:
        raise _err(pos, f"{what} takes {size:,} bytes, beyond what a message can carry: at most {MAX_BOUND:,}")
    return t


class _Scope:
    """The type declarations of one file, resolved lazily against the scopes it can see."""

    def __init__(self, decls: tuple[TypeDecl, ...], parent: "_Scope | None") -> None:
        self.parent = parent
        self.decls: dict[str, TypeDecl] = {}
        self.resolved: dict[str, Type | object] = {}
        self.resolving: set[str] = set()
        for d in decls:
            if isinstance(d, AliasDecl) and d.form == "alias" and (d.name in BUILTINS or d.name in STRING_NAMES):
                continue  # Flounder resolves builtins first: such an alias never applies
            if d.name in BUILTINS or d.name in STRING_NAMES:
                raise _err(d.pos, f"'{d.name}' is a builtin type and cannot be redefined")
            first = self.decls.get(d.name)
            if first is not None:
                raise _err(d.pos, f"duplicate type '{d.name}' (first declared at line {first.pos.line})")
            self.decls[d.name] = d

    def find(self, name: str) -> "_Scope | None":
        """The scope (this or an enclosing one) that declares ``name``, or None."""
        s: _Scope | None = self
        while s is not None:
            if name in s.decls:
                return s
            s = s.parent
        return None

    def lookup(self, ref: TypeRef) -> Type | object:
        """Resolve a type name seen at ``ref.pos``: a Type, or the string marker."""
        if ref.name in BUILTINS:
            return BUILTINS[ref.name]
        if ref.name in STRING_NAMES:
            return _STRING
        owner = self.find(ref.name)
        if owner is None:
            raise _err(ref.pos, f"unknown type '{ref.name}'")
        return owner.resolve(ref.name)

    def resolve(self, name: str) -> Type | object:
        """The type declared as ``name`` in this scope, built once (cycles are errors)."""
        done = self.resolved.get(name)
        if done is not None:
            return done
        decl = self.decls[name]
        if name in self.resolving:
            raise _err(decl.pos, f"type '{name}' contains itself")
        self.resolving.add(name)
        try:
            t = self._build(decl)
        finally:
            self.resolving.discard(name)
        self.resolved[name] = t
        return t

    def _fixed_member(self, ref: TypeRef, what: str) -> Type:
        """The type of a struct field or array element: it must have a fixed layout."""
        t = self.lookup(ref)
        if t is _STRING:
            raise _err(ref.pos, f"{what} cannot be a string (it has no fixed size)")
        assert isinstance(t, Type)
        if not has_fixed_layout(t):
            raise _err(ref.pos, f"{what} has type {type_name(t)}, which has no fixed size")
        return t

    def _build(self, d: TypeDecl) -> Type | object:
        if isinstance(d, AliasDecl):
            return self.lookup(d.target)
        if isinstance(d, EnumDecl):
            seen: dict[str, Pos] = {}
            for v, pos in d.values:
                if v in seen:
                    raise _err(pos, f"duplicate value '{v}' in enum '{d.name}'")
                seen[v] = pos
            return Enum(d.name, tuple(v for v, _ in d.values), d.pos, tuple(p for _, p in d.values))
        if isinstance(d, StructDecl):
            fields: list[Field] = []
            names: dict[str, Pos] = {}
            for f in d.fields:
                if f.name in names:
                    raise _err(f.pos, f"duplicate field '{f.name}' in struct '{d.name}'")
                names[f.name] = f.pos
                ft = self._fixed_member(f.type, f"field '{f.name}' of struct '{d.name}'")
                if f.size is not None:
                    if f.size < 1:
                        raise _err(f.pos, f"array field '{f.name}' of struct '{d.name}' must have a length of at least 1")
                    _bound(f.pos, f.size, f"array field '{f.name}' of struct '{d.name}': length")
                    ft = _fits(f.pos, Array(None, ft, f.size), f"array field '{f.name}' of struct '{d.name}'")
                fields.append(Field(f.name, ft, f.pos))
            return _fits(d.pos, Struct(d.name, tuple(fields), d.pos), f"struct '{d.name}'")
        assert isinstance(d, ArrayDecl)
        if d.length < 1:
            raise _err(d.pos, f"array type '{d.name}' must have a length of at least 1")
        _bound(d.pos, d.length, f"array type '{d.name}': length")
        elem = self._fixed_member(d.element, f"the element type of array '{d.name}'")
        return _fits(d.pos, Array(d.name, elem, d.length, d.pos), f"array type '{d.name}'")


def _collect_named(t: Type, out: dict[str, Type], pos: Pos) -> None:
    """Add the named composite types ``t`` uses (itself included) to ``out``, dependencies first."""
    if isinstance(t, Struct):
        for f in t.fields:
            _collect_named(f.type, out, pos)
    elif isinstance(t, (Array, DynArray)):
        _collect_named(t.element, out, pos)
    if (isinstance(t, (Struct, Enum)) or isinstance(t, Array)) and t.name is not None:
        have = out.get(t.name)
        if have is None:
            out[t.name] = t
        elif have != t:
            raise _err(pos, f"two different types named '{t.name}' are in use (one shadows an imported one)")


def _arg(scope: _Scope, a: ArgDecl, where: str) -> Arg:
    t = scope.lookup(a.type)
    d = a.dims
    if t is _STRING:
        if d is not None and d.length_name is not None:
            raise _err(d.pos, f"string argument '{a.name}' of {where} takes a maximum length '[N]', not '[len, ...]'")
        if d is not None and d.size is not None and d.size < 1:
            raise _err(d.pos, f"string argument '{a.name}' of {where} must allow at least 1 byte")
        if d is not None and d.size is not None:
            _bound(d.pos, d.size, f"string argument '{a.name}' of {where}: maximum length")
        return Arg(a.name, String(None if d is None else d.size), a.pos, a.direction)
    assert isinstance(t, Type)
    if d is None:
        if not has_fixed_layout(t):
            raise _err(a.type.pos, f"argument '{a.name}' of {where} has type {type_name(t)}, which cannot be used here")
        return Arg(a.name, t, a.pos, a.direction)
    what = f"the element type of array argument '{a.name}' of {where}"
    elem = scope._fixed_member(a.type, what)
    if d.size is not None:
        if d.size < 1:
            raise _err(d.pos, f"array argument '{a.name}' of {where} must have a length of at least 1")
        _bound(d.pos, d.size, f"array argument '{a.name}' of {where}: length")
        return Arg(a.name, _fits(d.pos, Array(None, elem, d.size), f"array argument '{a.name}' of {where}"), a.pos, a.direction)
    if d.maximum is not None and d.maximum < 1:
        raise _err(d.pos, f"array argument '{a.name}' of {where} must have a maximum of at least 1")
    if d.maximum is not None:
        _bound(d.pos, d.maximum, f"array argument '{a.name}' of {where}: maximum")
        esize = fixed_size(elem) or 1
        if d.maximum * esize > MAX_BOUND:
            raise _err(
                d.pos,
                f"array argument '{a.name}' of {where}: a maximum of {d.maximum:,} elements of {esize} bytes takes"
                f" {d.maximum * esize:,} bytes, beyond what a message can carry: at most {MAX_BOUND:,}",
            )
    assert d.length_name is not None
    return Arg(a.name, DynArray(elem, d.length_name, d.maximum), a.pos, a.direction)


def _check_arg_names(args: tuple[ArgDecl, ...], where: str) -> None:
    names: dict[str, Pos] = {}
    for a in args:
        if a.name in names:
            raise _err(a.pos, f"duplicate argument '{a.name}' in {where}")
        names[a.name] = a.pos
    lengths: dict[str, str] = {}
    for a in args:
        d = a.dims
        if d is None or d.length_name is None:
            continue
        assert d.length_pos is not None
        if d.length_name in names:
            raise _err(
                d.length_pos,
                f"length name '{d.length_name}' of array '{a.name}' clashes with argument '{d.length_name}' in {where}",
            )
        if d.length_name in lengths:
            raise _err(
                d.length_pos,
                f"length name '{d.length_name}' of array '{a.name}' is already the length of array '{lengths[d.length_name]}' in {where}",
            )
        lengths[d.length_name] = a.name


def check(decl: FileDecl, imports: list[FileDecl] | tuple[FileDecl, ...] = ()) -> Interface:
    """Resolve and check a parsed file against its import files; return the model.

    Raises :class:`IdlCheckError` at the first problem, in file order.
    """
    scope: _Scope | None = None
    for imp in imports:
        if imp.interface is not None:
            p = imp.interface.pos
            raise _err(p, f"an import file may hold only 'alias' and 'typedef' lines, not interface '{imp.interface.name}'")
        scope = _Scope(imp.types, scope)
    iface = decl.interface
    if iface is None:
        raise _err(decl.end or Pos(decl.file, 1, 1), "no interface declared (an import file can only be used as an import)")
    own = _Scope(iface.types, scope)

    # Resolve every declaration (errors in unused types surface too).  The model's
    # types are the visible named structs, enums and arrays, dependencies first,
    # imports before the interface's own; aliases are kept by name.
    chain: list[_Scope] = []
    s: _Scope | None = own
    while s is not None:
        chain.append(s)
        s = s.parent
    ordered: dict[str, Type] = {}
    aliases: dict[str, Type] = {}
    for sc in reversed(chain):
        for name, d in sc.decls.items():
            t = sc.resolve(name)
            if own.find(name) is not sc:
                continue  # shadowed by a later file
            if isinstance(d, AliasDecl):
                aliases[name] = String(None) if t is _STRING else t  # type: ignore[assignment]
            else:
                assert isinstance(t, Type)
                _collect_named(t, ordered, d.pos)
    # Enum values share one namespace per interface (they become C constants).
    values: dict[str, str] = {}
    for sc in reversed(chain):
        for name, d in sc.decls.items():
            if isinstance(d, EnumDecl) and own.find(name) is sc:
                for v, pos in d.values:
                    if v in values and values[v] != name:
                        raise _err(pos, f"enum value '{v}' of enum '{name}' is already a value of enum '{values[v]}'")
                    values[v] = name

    messages: list[Message] = []
    rpcs: list[Rpc] = []
    seen: dict[str, tuple[str, Pos]] = {}

    def claim(name: str, what: str, pos: Pos) -> None:
        """Reserve a message-level name, or fail naming the earlier declaration."""
        if name in seen:
            other, opos = seen[name]
            raise _err(pos, f"duplicate name '{name}': {what} clashes with {other} declared at line {opos.line}")
        seen[name] = (what, pos)

    number = 1
    for m in iface.messages:
        if isinstance(m, MessageDecl):
            where = f"{m.kind} '{m.name}'"
            claim(m.name, where, m.pos)
            _check_arg_names(m.args, where)
            args = tuple(_arg(own, a, where) for a in m.args)
            for a in args:
                _collect_named(a.type, ordered, a.pos)
            messages.append(Message(m.name, number, m.kind, args, m.pos, None, m.annotations))
            number += 1
        else:
            assert isinstance(m, RpcDecl)
            where = f"rpc '{m.name}'"
            claim(m.name, where, m.pos)
            claim(f"{m.name}_call", f"the call message of rpc '{m.name}'", m.pos)
            claim(f"{m.name}_response", f"the response message of rpc '{m.name}'", m.pos)
            _check_arg_names(m.args, where)
            args = tuple(_arg(own, a, where) for a in m.args)
            for a in args:
                _collect_named(a.type, ordered, a.pos)
            ins = tuple(a for a in args if a.direction == "in")
            outs = tuple(a for a in args if a.direction == "out")
            call = Message(f"{m.name}_call", number, "rpc_call", ins, m.pos, m.name, m.annotations)
            resp = Message(f"{m.name}_response", number + 1, "rpc_response", outs, m.pos, m.name, m.annotations)
            messages += [call, resp]
            rpcs.append(Rpc(m.name, args, m.pos, call, resp, m.annotations))
            number += 2
        for msg in messages[-2:]:
            fixed = sum(fixed_size(a.type) or 0 for a in msg.args)
            if fixed > MAX_BOUND:
                raise _err(
                    m.pos,
                    f"{msg.kind} '{msg.name}': its fixed-size arguments take {fixed:,} bytes, beyond what a message can carry: at most {MAX_BOUND:,}",
                )
        if number - 1 > MAX_MESSAGE_NUMBER:
            raise _err(m.pos, f"too many messages: at most {MAX_MESSAGE_NUMBER} fit a uint16 message number")

    return Interface(iface.name, iface.description, decl.file, iface.pos, ordered, aliases, tuple(messages), tuple(rpcs))


def check_generatable(iface: Interface, backend: str) -> None:
    """Raise :class:`IdlCodegenError` if a back end cannot generate ``iface``: an import file
    (no interface).  Capabilities are generated (they travel as handles)."""
    if iface.name is None:
        raise IdlCodegenError(iface.file, 1, 1, f"{backend} back end: this file declares no interface (it is an import file)")
