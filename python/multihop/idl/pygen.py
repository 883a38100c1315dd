"""Python back end: an interface model in, the source of a binding module out.

The generated code is straight-line: each message gets one precompiled
:class:`struct.Struct` for its fixed part (message number, fixed-size
arguments flattened in order, and the first dynamic argument's length), an
encoder that packs it in one call, and a decoder that unpacks it in one call.
Nothing is looked up by name at run time.  Checks that ``struct`` does not make
itself (enum ranges, array lengths and maxima, NUL in strings) are inline
comparisons; only when a fast-path encode fails does
:func:`multihop.flounder.wire.explain` walk the arguments to name the bad one.

The module defines (``X`` = message, ``R`` = rpc; names as in
:mod:`multihop.idl.names`):

* ``INTERFACE``, ``DESCRIPTION``, ``MESSAGE_NUMBERS`` (name -> number);
* one class per struct (a namedtuple) and enum (an ``IntEnum``);
* ``messages.X``: the record class of message ``X`` (``R_call``/``R_response`` for rpcs);
* ``results.R``: the namedtuple an rpc with several ``out`` arguments returns;
* ``encode(name, **args) -> bytes`` and ``decode(data) -> record``;
* ``<Name>Binding`` (also ``Binding``): see :mod:`multihop.flounder.binding`.

A message that carries capabilities (``cap``, ``give_away_cap``, also inside structs and
arrays) is encoded and decoded by :func:`multihop.flounder.wire.encode_caps` /
:func:`~multihop.flounder.wire.decode_caps` over its descriptors instead: its encoder returns
``(bytes, handles, give_away)`` and its decoder takes the handles that came with the bytes.
Its send method passes the handles to ``channel.send(..., handles=, give_away=)``; a binding of
an interface with capabilities receives with ``channel.recv_with_handles``.
"""

from __future__ import annotations

import struct

from multihop.idl.checker import check_generatable
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
    arg_text,
    fixed_size,
    has_caps,
    type_name,
)
from multihop.idl.names import py_arg, py_binding_class, py_name, py_type
from multihop.idl.pycheck import check_python_names

__all__ = ["generate_python"]

_ENUM_FMT = "I"


def _is_bytes_elem(t: Type) -> bool:
    return isinstance(t, Builtin) and t.name in ("uint8", "char")


def _plain(t: Type) -> bool:
    """A struct of scalar fields only: its values pack as they are (``S.pack(*v)``) and unpacked
    tuples become its namedtuple without a rebuild (``tuple.__new__``), no flatten helper needed."""
    return isinstance(t, Struct) and all(isinstance(f.type, Builtin) for f in t.fields)


def _items(t: Type) -> int:
    """How many ``struct`` items the flattened type takes."""
    if isinstance(t, (Builtin, Enum)):
        return 1
    if isinstance(t, Struct):
        return sum(_items(f.type) for f in t.fields)
    assert isinstance(t, Array)
    if _is_bytes_elem(t.element):
        return 1
    return t.length * _items(t.element)


def _fmt(t: Type) -> str:
    """The ``struct`` format of the flattened type (no byte-order prefix)."""
    if isinstance(t, Builtin):
        return t.fmt
    if isinstance(t, Enum):
        return _ENUM_FMT
    if isinstance(t, Struct):
        return "".join(_fmt(f.type) for f in t.fields)
    assert isinstance(t, Array)
    if _is_bytes_elem(t.element):
        return f"{t.length}s"
    inner = _fmt(t.element)
    if len(inner) == 1:
        return f"{t.length}{inner}"
    return inner * t.length


def _desc(t: Type) -> tuple[object, ...]:
    """The :mod:`multihop.flounder.wire` descriptor of a type (used only to explain errors)."""
    if isinstance(t, Builtin):
        if t.kind in ("int", "uint"):
            return ("int", t.name, t.lo, t.hi)
        if t.kind == "cap":
            return ("cap", t.name == "give_away_cap")
        return (t.kind,)
    if isinstance(t, Enum):
        return ("enum", t.name, len(t.values))
    if isinstance(t, Struct):
        return ("struct", t.name, tuple((py_name(f.name), _desc(f.type)) for f in t.fields))
    if isinstance(t, Array):
        return ("array", _desc(t.element), t.length, _is_bytes_elem(t.element))
    if isinstance(t, DynArray):
        return ("dyn", _desc(t.element), t.maximum, _is_bytes_elem(t.element))
    assert isinstance(t, String)
    return ("str", t.maximum)


def _fixed_fields(m: Message) -> list[tuple[str, int]] | None:
    """The ``_core.FixedLayout`` fields of a message of integer, bool and enum
    arguments only (the stubs' native fast path), else None."""
    fields: list[tuple[str, int]] = []
    size = 2
    for a in m.args:
        t = a.type
        if isinstance(t, Builtin) and t.kind in ("uint", "int"):
            fields.append(("u" if t.kind == "uint" else "i", t.size))
        elif isinstance(t, Builtin) and t.kind == "bool":
            fields.append(("bool", 0))
        elif isinstance(t, Enum):
            fields.append(("enum", len(t.values)))
        else:
            return None
        size += 4 if isinstance(t, Enum) else t.size
    if not fields or len(fields) > 64 or size > 512:
        return None
    return fields


class _Flat:
    """Accumulates the code that flattens values into one ``struct.pack`` call."""

    def __init__(self, counter: list[int]) -> None:
        self.fmt = ""
        self.stmts: list[str] = []
        self.exprs: list[str] = []
        self.counter = counter

    def temp(self) -> str:
        """A fresh local variable name."""
        self.counter[0] += 1
        return f"_mh{self.counter[0]}"

    def add(self, t: Type, var: str) -> None:
        """Add the code flattening ``var`` (of type ``t``) into the pack arguments."""
        if isinstance(t, Builtin):
            self.fmt += t.fmt
            self.exprs.append(var)
        elif isinstance(t, Enum):
            self.fmt += _ENUM_FMT
            self.stmts.append(f"if not 0 <= {var} < {len(t.values)}: raise _mh_Bad")
            self.exprs.append(var)
        elif isinstance(t, Struct):
            temps = [self.temp() for _ in t.fields]
            self.stmts.append(f"({', '.join(temps)},) = {var}")
            for f, tv in zip(t.fields, temps, strict=True):
                self.add(f.type, tv)
        else:
            assert isinstance(t, Array)
            self.fmt += _fmt(t)
            self.stmts.append(f"if _mh_len({var}) != {t.length}: raise _mh_Bad")
            e = t.element
            if _is_bytes_elem(e):
                self.exprs.append(var)
            elif isinstance(e, Builtin):
                self.exprs.append(f"*{var}")
            elif isinstance(e, Enum):
                self.stmts.append(f"_mh_check_enums({var}, {len(e.values)})")
                self.exprs.append(f"*{var}")
            else:
                self.exprs.append(f"*[_mhx for _mhe in {var} for _mhx in _mhflat_{e.name}(_mhe)]")


def _idx(base: str | None, off: int) -> str:
    if base is None:
        return str(off)
    return base if off == 0 else f"{base} + {off}"


def _build(t: Type, tv: str, base: str | None, off: int) -> str:
    """Expression rebuilding a value of type ``t`` from flat tuple ``tv`` at index base+off."""
    if isinstance(t, Builtin):
        return f"{tv}[{_idx(base, off)}]"
    if isinstance(t, Enum):
        return f"_mhE_{t.name}[{tv}[{_idx(base, off)}]]"
    if isinstance(t, Struct):
        parts = []
        for f in t.fields:
            parts.append(_build(f.type, tv, base, off))
            off += _items(f.type)
        return f"_mhT_{t.name}({', '.join(parts)})"
    assert isinstance(t, Array)
    e = t.element
    if _is_bytes_elem(e):
        return f"{tv}[{_idx(base, off)}]"
    lo, hi = _idx(base, off), _idx(base, off + t.length * _items(e))
    if isinstance(e, Builtin):
        return f"{tv}[{lo}:{hi}]"
    if isinstance(e, Enum):
        return f"tuple([_mhE_{e.name}[_mhx] for _mhx in {tv}[{lo}:{hi}]])"
    step = _items(e)
    return f"tuple([_mhbuild_{e.name}({tv}, {lo} + _mhk * {step}) for _mhk in range({t.length})])"


class _Gen:
    def __init__(self, iface: Interface) -> None:
        self.iface = iface
        self.lines: list[str] = []
        self.cls = py_binding_class(iface.name or "")
        self.counter = [0]

    def w(self, *lines: str) -> None:
        """Append lines of generated code."""
        self.lines.extend(lines)

    # -- types ---------------------------------------------------------------

    def gen_types(self) -> None:
        """Enum and struct classes, plus flatten/build helpers for arrays of composite types."""
        for name, t in self.iface.types.items():  # named types: the key is the type's name
            pub = py_type(name, self.cls)
            if isinstance(t, Enum):
                # the functional API: no name mangling of member names in a class body
                members = ", ".join(f"({py_name(v)!r}, {i})" for i, v in enumerate(t.values))
                self.w(
                    f"{pub} = _mh_enum.IntEnum({py_name(t.name)!r}, [{members}], module=__name__, qualname={pub!r})",
                    f"{pub}.__doc__ = {'enum ' + t.name!r}",
                )
                self.w("", f"_mhT_{t.name} = {pub}", f"_mhE_{t.name} = tuple({pub})", "")
                continue
            if isinstance(t, Struct):
                fields = ", ".join(repr(py_name(f.name)) for f in t.fields)
                doc = f"struct {t.name} {{ " + "".join(f"{type_name(f.type)} {f.name}; " for f in t.fields) + "}"
                self.w(
                    f"{pub} = _mh_namedtuple({py_name(t.name)!r}, [{fields}])",
                    f"{pub}.__doc__ = {doc!r}",
                    f"_mhT_{t.name} = {pub}",
                )
            if has_caps(t):
                continue  # only capability-carrying messages use it: no straight-line helpers
            # structs and named arrays: helpers for arrays of them
            flat = _Flat(self.counter)
            flat.add(t, "v")
            self.w(f"_mhS_{t.name} = _mh_Struct({'<' + _fmt(t)!r})", f"def _mhflat_{t.name}(v):")
            for s in flat.stmts:
                self.w(f"    {s}")
            self.w(f"    return ({', '.join(flat.exprs)},)", f"def _mhbuild_{t.name}(t, i):")
            self.w(f"    return {_build(t, 't', 'i', 0)}", "")

    # -- messages ------------------------------------------------------------

    def encode_parts(self, m: Message) -> tuple[list[str], str, str]:
        """Statements, result expression, and struct format of a message's encoder."""
        flat = _Flat(self.counter)
        flat.fmt = "<H"
        flat.exprs.append(str(m.number))
        dyn: list[Arg] = []
        for a in m.args:
            if fixed_size(a.type) is None:
                dyn.append(a)
            else:
                flat.add(a.type, py_arg(a.name))
        payloads: list[tuple[str, str]] = []  # (length var, payload expr)
        for k, a in enumerate(dyn):
            v = py_arg(a.name)
            n = f"_mhn{k}"
            t = a.type
            if isinstance(t, String):
                sv = f"_mhs{k}"
                flat.stmts.append(f"{sv} = {v}.encode()")
                flat.stmts.append(f"{n} = _mh_len({sv})")
                cond = f"b'\\0' in {sv}"
                if t.maximum is not None:
                    cond = f"{n} > {t.maximum} or " + cond
                flat.stmts.append(f"if {cond}: raise _mh_Bad")
                payloads.append((n, sv))
                continue
            assert isinstance(t, DynArray)
            flat.stmts.append(f"{n} = _mh_len({v})")
            if t.maximum is not None:
                flat.stmts.append(f"if {n} > {t.maximum}: raise _mh_Bad")
            e = t.element
            if _is_bytes_elem(e):
                payloads.append((n, v))
            elif isinstance(e, Builtin):
                payloads.append((n, f"_mh_pack_array({e.fmt!r}, {v})"))
            elif isinstance(e, Enum):
                flat.stmts.append(f"_mh_check_enums({v}, {len(e.values)})")
                payloads.append((n, f"_mh_pack_array({_ENUM_FMT!r}, {v})"))
            else:
                flat_e = "_mhe" if _plain(e) else f"_mhflat_{e.name}(_mhe)"
                payloads.append((n, f"b''.join([_mhS_{e.name}.pack(*{flat_e}) for _mhe in {v}])"))
        fmt = flat.fmt
        exprs = list(flat.exprs)
        if payloads:
            fmt += "Q"
            exprs.append(payloads[0][0])
        head = f"_mhP_{m.number}({', '.join(exprs)})"
        if not payloads:
            result = head
        elif len(payloads) == 1:
            result = f"{head} + {payloads[0][1]}"
        else:
            parts = [head, payloads[0][1]]
            for n, p in payloads[1:]:
                parts += [f"_mh_U64.pack({n})", p]
            result = f"b''.join(({', '.join(parts)}))"
        return flat.stmts, result, fmt

    def gen_message(self, m: Message) -> None:
        """The record class, descriptors, Struct, encoder and decoder of one message."""
        names = [py_arg(a.name) for a in m.args]
        caps = any(has_caps(a.type) for a in m.args)
        rec = f"_mhR_{m.number}"
        sig = ", ".join(arg_text(a) for a in m.args)
        # record class
        self.w(f"class {rec}(_mh_Record):", f'    """{m.kind} {m.name}({sig})"""')
        self.w(f"    __slots__ = ({''.join(repr(n) + ', ' for n in names)})")
        self.w(f"    name = {m.name!r}", f"    number = {m.number}", f"    _fields = ({''.join(repr(n) + ', ' for n in names)})")
        self.w(f"    def __init__(self{''.join(', ' + n for n in names)}):")
        if not names:
            self.w("        pass")
        for n in names:
            self.w(f"        self.{n} = {n}")
        self.w(f"{rec}.__name__ = {rec}.__qualname__ = {py_name(m.name)!r}")
        # descriptors, struct, encoder
        self.w(f"_mhD_{m.number} = {tuple((n, _desc(a.type)) for n, a in zip(names, m.args, strict=True))!r}")
        if caps:
            params = ", ".join(names)
            self.w(
                f"def _mhenc_{m.number}({params}):",
                f'    """Encode {m.name}: (bytes, handles, give_away flags)."""',
                f"    return _mh_encode_caps(_mh_IFACE, {m.name!r}, {m.number}, _mhD_{m.number}, ({params}{',' if len(names) == 1 else ''}))",
                f"def _mhdec_{m.number}(_mhb, _mhh=()):",
                f"    return _mh_decode_caps(INTERFACE, {m.name!r}, _mhD_{m.number}, _mhb, _mhh, _mhTYPES, _mhR_{m.number})",
                "",
            )
            self._caps.add(m.number)
            return
        stmts, result, fmt = self.encode_parts(m)
        self.w(f"_mhS_{m.number} = _mh_Struct({fmt!r})")
        fields = _fixed_fields(m)
        if fields is not None:
            self.w(f"_mhL_{m.number} = _mh_FixedLayout({m.number}, {fields!r})")
        self.w(f"_mhP_{m.number} = _mhS_{m.number}.pack", f"_mhU_{m.number} = _mhS_{m.number}.unpack_from")
        if not m.args:
            self.w(f"_mhB_{m.number} = _mhS_{m.number}.pack({m.number})")
        params = ", ".join(names)
        self.w(f"def _mhenc_{m.number}({params}):")
        if not m.args:
            self.w(f"    return _mhB_{m.number}")
        else:
            self.w("    try:")
            for s in stmts:
                self.w(f"        {s}")
            self.w(f"        return {result}")
            self.w("    except _mh_ENCODE_ERRORS:")
            self.w(f"        _mh_explain(_mh_IFACE, {m.name!r}, _mhD_{m.number}, ({params},))")
            self.w("        raise")
        self.gen_decoder(m, fmt)
        self.w("")
        self._tx_parts[m.number] = (stmts, result)

    def gen_decoder(self, m: Message, fmt: str) -> None:
        """``_mhdec_N(b)``: one unpack for the fixed part, then the dynamic arguments in order."""
        size = struct.calcsize(fmt)
        dyn = [a for a in m.args if fixed_size(a.type) is None]
        fixed = [a for a in m.args if fixed_size(a.type) is not None]
        self.w(f"def _mhdec_{m.number}(_mhb):", "    try:")
        ind = "        "
        if not dyn:
            self.w(f"{ind}if len(_mhb) != {size}: raise _mh_Bad(f'message is {{len(_mhb)}} bytes, expected {size}')")
        self.w(f"{ind}_mht = _mhU_{m.number}(_mhb)")
        # fixed args: indices after the header item
        built: dict[str, str] = {}
        off = 1
        for a in fixed:
            built[a.name] = _build(a.type, "_mht", None, off)
            off += _items(a.type)
        if dyn:
            self.w(f"{ind}_mho = {size}", f"{ind}_mhn = _mht[{off}]")
        for k, a in enumerate(dyn):
            t = a.type
            assert isinstance(t, (String, DynArray))
            if k > 0:
                self.w(f"{ind}_mhn = _mh_U64.unpack_from(_mhb, _mho)[0]", f"{ind}_mho += 8")
            if t.maximum is not None:
                what = "bytes" if isinstance(t, String) else "elements"
                self.w(f"{ind}if _mhn > {t.maximum}: raise _mh_Bad(f\"argument '{a.name}' has {{_mhn}} {what}, more than its maximum {t.maximum}\")")
            esize = 1 if isinstance(t, String) else fixed_size(t.element)
            end = "_mho + _mhn" if esize == 1 else f"_mho + _mhn * {esize}"
            self.w(f"{ind}_mhe = {end}")
            self.w(f"{ind}if _mhe > len(_mhb): raise _mh_Bad(\"argument '{a.name}' runs past the end of the message\")")
            v = f"_mhv{k}"
            if isinstance(t, String):
                self.w(f"{ind}{v} = _mhb[_mho:_mhe].decode()")
                self.w(f"{ind}if '\\0' in {v}: raise _mh_Bad(\"string argument '{a.name}' contains a NUL byte\")")
            else:
                assert isinstance(t, DynArray)
                e = t.element
                if _is_bytes_elem(e):
                    self.w(f"{ind}{v} = _mhb[_mho:_mhe]")
                elif isinstance(e, Builtin):
                    self.w(f"{ind}{v} = _mh_unpack_array({e.fmt!r}, _mhn, _mhb, _mho)")
                elif isinstance(e, Enum):
                    self.w(f"{ind}{v} = tuple([_mhE_{e.name}[_mhx] for _mhx in _mh_unpack_array({_ENUM_FMT!r}, _mhn, _mhb, _mho)])")
                else:
                    make = f"_mh_tnew(_mhT_{e.name}, _mhx)" if _plain(e) else f"_mhbuild_{e.name}(_mhx, 0)"
                    self.w(f"{ind}{v} = tuple([{make} for _mhx in _mhS_{e.name}.iter_unpack(_mhb[_mho:_mhe])])")
            self.w(f"{ind}_mho = _mhe")
            built[a.name] = v
        if dyn:
            self.w(f"{ind}if _mho != len(_mhb): raise _mh_Bad(f'{{len(_mhb) - _mho}} bytes after the last argument')")
        self.w(f"{ind}return _mhR_{m.number}({', '.join(built[a.name] for a in m.args)})")
        self.w("    except _mh_DECODE_ERRORS as _mhx:")
        self.w(f"        raise _mh_decode_error(INTERFACE, {m.name!r}, _mhb, _mhx) from None")

    # -- binding ---------------------------------------------------------------

    def gen_tx(self) -> None:
        """The send side: one straight-line method per message.

        A message of scalars (:func:`_fixed_fields`) is sent by a native
        callable of the channel (``Channel._fast_sender``: vectorcall, encoded
        in Rust onto the ring); it hands any call it is not sure of to the
        message's Python encoder (``_mhslow_N``), which keeps every error.
        """
        fast = [m for m in self.iface.messages if _fixed_fields(m) is not None]
        for m in fast:
            names = [py_arg(a.name) for a in m.args]
            sig = ", ".join(arg_text(a) for a in m.args)
            self.w(f"def _mhslow_{m.number}(_mhsend, {', '.join(names)}, *, timeout=None):", f'    """Send {m.name}({sig})."""')
            self._tx_body(m, names, "_mhsend", "    ")
        slots = ["_mh_send"] + [py_name(m.name) for m in fast]
        self.w("class _mhTx:", '    """Send side: one method per message."""', f"    __slots__ = ({''.join(repr(n) + ', ' for n in slots)})")
        self.w("    def __init__(self, channel):", "        self._mh_send = channel.send")
        if fast:
            self.w("        _mhmake = getattr(channel, '_fast_sender', None)")
        for m in fast:
            arg_names = tuple(py_arg(a.name) for a in m.args)
            self.w(f"        self.{py_name(m.name)} = _mh_fast(_mhmake, channel.send, _mhL_{m.number}, {arg_names!r}, _mhslow_{m.number})")
        for m in self.iface.messages:
            if _fixed_fields(m) is not None:
                continue
            names = [py_arg(a.name) for a in m.args]
            sig = ", ".join(arg_text(a) for a in m.args)
            self.w(f"    def {py_name(m.name)}(self{''.join(', ' + n for n in names)}, *, timeout=None):")
            self.w(f'        """Send {m.name}({sig})."""')
            if m.number in self._caps:
                self.w(
                    f"        _mhd, _mhh, _mhg = _mhenc_{m.number}({', '.join(names)})",
                    "        self._mh_send(_mhd, timeout, handles=_mhh, give_away=_mhg)",
                )
                continue
            if not m.args:
                self.w(f"        self._mh_send(_mhB_{m.number}, timeout)")
                continue
            self._tx_body(m, names, "self._mh_send", "        ")
        self.w("")

    def _tx_body(self, m: Message, names: list[str], send: str, ind: str) -> None:
        """Encode message ``m`` from ``names`` (explaining a bad value) and send it with ``send``."""
        stmts, result = self._tx_parts[m.number]
        self.w(f"{ind}try:")
        for st in stmts:
            self.w(f"{ind}    {st}")
        self.w(f"{ind}    _mhd = {result}")
        self.w(f"{ind}except _mh_ENCODE_ERRORS:")
        self.w(f"{ind}    _mh_explain(_mh_IFACE, {m.name!r}, _mhD_{m.number}, ({', '.join(names)},))")
        self.w(f"{ind}    raise")
        self.w(f"{ind}{send}(_mhd, timeout)")

    def gen_rpc(self) -> None:
        """Rpc client methods, result tuples and the serve functions."""
        iface = self.iface
        for r in iface.rpcs:
            outs = [py_arg(a.name) for a in r.out_args]
            if len(outs) > 1:
                self.w(f"_mhO_{r.name} = _mh_namedtuple({py_name(r.name)!r}, {outs!r})")
        self.w("class results:", '    """The named tuples returned by rpcs with several out arguments."""')
        multi = [r for r in iface.rpcs if len(r.out_args) > 1]
        for r in multi:
            self.w(f"    {py_name(r.name)} = _mhO_{r.name}")
        if not multi:
            self.w("    pass")
        self.w("")
        self.w("class _mhRpc:", '    """Rpc client side: one method per rpc; returns the out values."""')
        self.w("    __slots__ = ('_mh_b',)", "    def __init__(self, binding):", "        self._mh_b = binding")
        for r in iface.rpcs:
            ins = [py_arg(a.name) for a in r.in_args]
            outs = [py_arg(a.name) for a in r.out_args]
            sig = ", ".join(arg_text(a) for a in r.args)
            self.w(f"    def {py_name(r.name)}(self{''.join(', ' + n for n in ins)}, *, timeout=None):")
            self.w(f'        """Call rpc {r.name}({sig}); wait up to timeout seconds for the response."""')
            self.w(f"        _mhm = self._mh_b._mh_call(_mhenc_{r.call.number}({', '.join(ins)}), {r.response.number}, timeout)")
            if not outs:
                self.w("        return None")
            elif len(outs) == 1:
                self.w(f"        return _mhm.{outs[0]}")
            else:
                self.w(f"        return _mhO_{r.name}({', '.join('_mhm.' + o for o in outs)})")
        self.w("")
        self.w("class _mhRpcAsync:", '    """Rpc client side for asyncio: ``await b.rpc_async.R(...)`` returns the out values."""')
        self.w("    __slots__ = ('_mh_b',)", "    def __init__(self, binding):", "        self._mh_b = binding")
        for r in iface.rpcs:
            ins = [py_arg(a.name) for a in r.in_args]
            outs = [py_arg(a.name) for a in r.out_args]
            sig = ", ".join(arg_text(a) for a in r.args)
            self.w(f"    async def {py_name(r.name)}(self{''.join(', ' + n for n in ins)}, *, timeout=None):")
            self.w(f'        """Call rpc {r.name}({sig}) without blocking the event loop; wait up to timeout seconds."""')
            self.w(f"        _mhm = await self._mh_b._mh_call_async(_mhenc_{r.call.number}({', '.join(ins)}), {r.response.number}, timeout)")
            if not outs:
                self.w("        return None")
            elif len(outs) == 1:
                self.w(f"        return _mhm.{outs[0]}")
            else:
                self.w(f"        return _mhO_{r.name}({', '.join('_mhm.' + o for o in outs)})")
        self.w("")
        # serving
        for r in iface.rpcs:
            ins = [py_arg(a.name) for a in r.in_args]
            outs = [py_arg(a.name) for a in r.out_args]
            call = f"_mhf({', '.join('_mhm.' + n for n in ins)})"
            self.w(f"def _mhsrv_{r.call.number}(_mhf, _mhm):")
            if not outs:
                self.w(f"    {call}", f"    return _mhenc_{r.response.number}()")
            elif len(outs) == 1:
                self.w(f"    return _mhenc_{r.response.number}({call})")
            else:
                temps = [f"_mho{i}" for i in range(len(outs))]
                self.w(f"    _mhr = {call}", "    try:", f"        ({', '.join(temps)},) = _mhr")
                self.w("    except (TypeError, ValueError):")
                self.w(
                    f"        raise TypeError('{iface.name}: the handler of rpc {r.name} must return "
                    f"{len(outs)} values ({', '.join(outs)}), got %r' % (_mhr,)) from None"
                )
                self.w(f"    return _mhenc_{r.response.number}({', '.join(temps)})")
        self.w("")

    def gen(self) -> str:
        """The whole module source."""
        iface = self.iface
        assert iface.name is not None
        self._tx_parts: dict[int, tuple[list[str], str]] = {}
        doc = f"Binding of Flounder interface {iface.name}: {iface.description or ''}\n\n"
        doc += f"Generated by multihop.idl from {iface.file}; do not edit.\n"
        self.w(
            repr(doc),  # the module docstring: repr() keeps any description or path valid Python
            "",
            "import enum as _mh_enum",
            "from collections import namedtuple as _mh_namedtuple",
            "from functools import partial as _mh_partial",
            "from struct import Struct as _mh_Struct",
            "",
            "from multihop.flounder.binding import Binding as _mh_Binding",
            "from multihop.flounder.errors import DecodeError as _mh_DecodeError",
            "from multihop.flounder.wire import (",
            "    DECODE_ERRORS as _mh_DECODE_ERRORS,",
            "    FixedLayout as _mh_FixedLayout,",
            "    ENCODE_ERRORS as _mh_ENCODE_ERRORS,",
            "    U64 as _mh_U64,",
            "    Bad as _mh_Bad,",
            "    Record as _mh_Record,",
            "    check_enums as _mh_check_enums,",
            "    decode_error as _mh_decode_error,",
            "    explain as _mh_explain,",
            "    pack_array as _mh_pack_array,",
            "    unpack_array as _mh_unpack_array,",
            "    encode_caps as _mh_encode_caps,",
            "    decode_caps as _mh_decode_caps,",
            ")",
            "",
            "_mh_len = len  # generated functions with user-named parameters use these names only",
            "_mh_tnew = tuple.__new__  # a plain struct's namedtuple from its unpacked fields, no rebuild",
            "",
            "def _mh_fast(make, send, layout, names, slow):",
            '    """A message\'s send callable: the channel\'s native one over ``slow``, or ``slow`` alone."""',
            "    fallback = _mh_partial(slow, send)",
            "    return fallback if make is None else make(layout, list(names), fallback)",
            f"INTERFACE = _mh_IFACE = {iface.name!r}",
            f"DESCRIPTION = {iface.description!r}",
            f"MESSAGE_NUMBERS = {{{', '.join(f'{m.name!r}: {m.number}' for m in iface.messages)}}}",
            "",
        )
        self._caps: set[int] = set()
        self.gen_types()
        named = [t for t in iface.types.values() if isinstance(t, (Enum, Struct))]
        self.w("_mhTYPES = {" + ", ".join(f"{t.name!r}: _mhT_{t.name}" for t in named) + "}", "")
        for m in iface.messages:
            self.gen_message(m)
        self.w("class messages:", '    """The record classes of the messages, by name."""')
        for m in iface.messages:
            self.w(f"    {py_name(m.name)} = _mhR_{m.number}")
        if not iface.messages:
            self.w("    pass")
        top = iface.messages[-1].number if iface.messages else 0
        table = ["None"] * (top + 1)
        for m in iface.messages:
            table[m.number] = f"_mhdec_{m.number}"
        self.w("", f"_mhDEC = ({', '.join(table)},)")
        tail = ["    return _mhf(data)"]
        if self._caps:
            self.w(f"_mhCAPS = frozenset({sorted(self._caps)!r})")
            tail = [
                "    if (data[0] | (data[1] << 8)) in _mhCAPS:",
                "        return _mhf(data, handles)",
                "    if handles:",
                "        _mhn = {_v: _k for _k, _v in MESSAGE_NUMBERS.items()}[data[0] | (data[1] << 8)]",
                "        raise _mh_DecodeError(INTERFACE, f'message {_mhn} carries no capabilities, but {len(handles)} handles came with it', data)",
                "    return _mhf(data)",
            ]
        self.w(
            "",
            "def decode(data, handles=()):",
            '    """Decode one received message (and the handles that came with it) into its record; raises DecodeError if it does not decode."""',
            "    if type(data) is not bytes:",
            "        data = bytes(data)",
            "    try:",
            "        _mhf = _mhDEC[data[0] | (data[1] << 8)]",
            "    except IndexError:",
            "        _mhf = None",
            "    if _mhf is None:",
            "        if len(data) < 2:",
            "            raise _mh_DecodeError(INTERFACE, f'message is {len(data)} bytes, shorter than its message number', data)",
            "        raise _mh_DecodeError(INTERFACE, f'unknown message number {data[0] | (data[1] << 8)}', data)",
            *tail,
            "",
        )
        self.w("_mhENC = {" + ", ".join(f"{m.name!r}: _mhenc_{m.number}" for m in iface.messages) + "}")
        self.w(
            "",
            "def encode(name, **args):",
            '    """Encode message ``name`` (for an rpc: NAME_call / NAME_response) from keyword arguments."""',
            "    try:",
            "        _mhf = _mhENC[name]",
            "    except KeyError:",
            "        raise ValueError(f'{INTERFACE} has no message {name!r}') from None",
            "    return _mhf(**args)",
            "",
        )
        self.gen_tx()
        self.gen_rpc()
        calls = ", ".join(f"{r.call.number}: ({py_name(r.name)!r}, _mhsrv_{r.call.number})" for r in iface.rpcs)
        self.w(
            f"class {self.cls}(_mh_Binding):",
            f'    """Binding of interface {iface.name} over a channel: .tx, .rx, .rpc, .rpc_async, dispatch(), serve()."""',
            "    INTERFACE = INTERFACE",
            "    MESSAGE_NUMBERS = MESSAGE_NUMBERS",
            "    _mh_decode = staticmethod(decode)",
            f"    _mh_calls = {{{calls}}}",
            "    _mh_Tx = _mhTx",
            "    _mh_Rpc = _mhRpc",
            "    _mh_RpcAsync = _mhRpcAsync",
            f"    _mh_caps = {bool(self._caps)}",
            "",
            f"Binding = {self.cls}",
            "",
        )
        return "\n".join(self.lines)


def generate_python(iface: Interface) -> str:
    """Generate the source of a Python binding module for ``iface``.

    Raises :class:`~multihop.idl.errors.IdlCodegenError` for interfaces the
    back end cannot generate: import-only models, and names Python cannot
    take (see :mod:`multihop.idl.pycheck`).
    """
    check_generatable(iface, "Python")
    check_python_names(iface)
    return _Gen(iface).gen()
