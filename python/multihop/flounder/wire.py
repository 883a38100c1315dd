"""Runtime support for generated Python stubs: the wire codec's shared pieces.

Generated modules do the common work in straight-line code with precompiled
:class:`struct.Struct` objects (see :mod:`multihop.idl.pygen`, the compiler's Python back end).  This module
holds what they share:

* :class:`Record`, the base of the message classes ``rx`` returns;
* :func:`explain`, the slow path taken only after a fast-path encode failed:
  it re-checks every argument against its type descriptor and raises a
  ``ValueError`` (or ``TypeError``) naming the argument;
* :func:`decode_error`, which turns whatever a decoder tripped on into one
  :class:`~multihop.flounder.errors.DecodeError`;
* packers for arrays whose length is only known at run time.

Type descriptors are small tuples written into the generated code:

=========================================  =======================================
``("int", tname, lo, hi)``                 integer scalar (also size, iref, errval)
``("bool",)`` / ``("char",)``               bool (any value, truth-tested) / 1-byte bytes
``("enum", tname, count)``                 enum: an int in ``0 .. count-1``
``("struct", tname, ((f, desc), ...))``    struct: a tuple of the fields, in order
``("array", desc, n, is_bytes)``           fixed array of exactly n elements
``("dyn", desc, maximum, is_bytes)``       dynamic array (maximum None: unbounded)
``("str", maximum)``                       string: str, at most maximum UTF-8 bytes, no NUL
``("cap", give_away)``                     capability: a handle (int, ``Handle`` or object with
                                           ``fileno()``) or None; ``give_away`` for give_away_cap
=========================================  =======================================

Messages that carry capabilities are encoded and decoded by :func:`encode_caps` and
:func:`decode_caps`, which walk these descriptors (such a message costs a trip of its handles
through the monitors anyway, so its codec need not be straight-line).  On the wire a capability
is one byte, 1 when a handle travels with the message for it (the next one of the message's
handle list, in the order the bytes are laid out), 0 for None.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable, NoReturn, Sequence

from multihop import _core
from multihop.flounder.errors import DecodeError

__all__ = [
    "INT_FORMATS",
    "FixedLayout",
    "U16",
    "U64",
    "Bad",
    "ENCODE_ERRORS",
    "DECODE_ERRORS",
    "Record",
    "explain",
    "validate",
    "decode_error",
    "pack_array",
    "unpack_array",
    "check_enums",
    "message_number",
    "encode_caps",
    "decode_caps",
]

#: Flounder's integer types as they travel: the :mod:`struct` format letter of each (little-endian,
#: no padding).  The compiler's model (:data:`multihop.idl.model.BUILTINS`) takes its formats and
#: sizes from here.  ``int`` is Flounder's legacy spelling of ``int32``.
INT_FORMATS: dict[str, str] = {
    "uint8": "B",
    "uint16": "H",
    "uint32": "I",
    "uint64": "Q",
    "uintptr": "Q",
    "size": "Q",
    "iref": "Q",
    "errval": "Q",
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "intptr": "q",
    "int": "i",
}

FixedLayout = _core.FixedLayout
"""The wire layout of a message of scalars, handed to a channel's native send (a generated stub's fast path)."""

U16 = struct.Struct("<H")
U64 = struct.Struct("<Q")

_BYTES_LIKE = (bytes, bytearray, memoryview)


class Bad(Exception):
    """Raised inside generated code by a failed fast-path check; never escapes it."""


#: What a fast-path encode can raise on a bad argument (then :func:`explain` runs).
ENCODE_ERRORS = (struct.error, TypeError, ValueError, OverflowError, AttributeError, IndexError, KeyError, Bad)

#: What a decoder can raise on a malformed message (then :func:`decode_error` runs).
DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, Bad)


class Record:
    """Base of generated message classes: ``.name``, ``.number`` and the fields as attributes."""

    __slots__ = ()
    name: str = ""
    number: int = 0
    _fields: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        """The field values in declaration order."""
        return tuple(getattr(self, f) for f in self._fields)

    def _asdict(self) -> dict[str, Any]:
        """The fields as a dict, in declaration order."""
        return {f: getattr(self, f) for f in self._fields}

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Record)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((self.number, self._values()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{self.name}({inner})"


def _fail(path: str, text: str, kind: type[Exception] = ValueError) -> NoReturn:
    raise kind(f"argument '{path}': {text}")


def validate(desc: tuple[Any, ...], value: Any, path: str) -> None:
    """Check ``value`` against a type descriptor; raise ValueError/TypeError naming ``path``."""
    tag = desc[0]
    if tag == "int":
        _, tname, lo, hi = desc
        if not isinstance(value, int):
            _fail(path, f"expected an int for {tname}, got {type(value).__name__}", TypeError)
        if not lo <= value <= hi:
            _fail(path, f"value {value} out of range for {tname} ({lo}..{hi})")
    elif tag == "bool":
        return
    elif tag == "char":
        if not isinstance(value, (bytes, bytearray)):
            _fail(path, f"expected a bytes object of length 1 for char, got {type(value).__name__}", TypeError)
        if len(value) != 1:
            _fail(path, f"a char must be exactly 1 byte, got {len(value)}")
    elif tag == "enum":
        _, tname, count = desc
        if not isinstance(value, int):
            _fail(path, f"expected an int (or {tname} member), got {type(value).__name__}", TypeError)
        if not 0 <= value < count:
            _fail(path, f"value {value} out of range for enum {tname} (0..{count - 1})")
    elif tag == "struct":
        _, tname, fields = desc
        if isinstance(value, (str, bytes, bytearray, memoryview)) or not isinstance(value, Sequence):
            _fail(path, f"expected a {tname} (a tuple of {len(fields)} fields), got {type(value).__name__}", TypeError)
        if len(value) != len(fields):
            _fail(path, f"struct {tname} has {len(fields)} fields, got {len(value)} values")
        for (fname, fdesc), v in zip(fields, value, strict=True):
            validate(fdesc, v, f"{path}.{fname}")
    elif tag == "array":
        _, edesc, n, is_bytes = desc
        _check_seq(path, value, is_bytes)
        if len(value) != n:
            _fail(path, f"array must have exactly {n} elements, got {len(value)}")
        if not is_bytes:
            for i, v in enumerate(value):
                validate(edesc, v, f"{path}[{i}]")
    elif tag == "dyn":
        _, edesc, maximum, is_bytes = desc
        _check_seq(path, value, is_bytes)
        if maximum is not None and len(value) > maximum:
            _fail(path, f"array has {len(value)} elements, more than its maximum {maximum}")
        if not is_bytes:
            for i, v in enumerate(value):
                validate(edesc, v, f"{path}[{i}]")
    elif tag == "cap":
        if value is None:
            return
        if isinstance(value, bool) or not (isinstance(value, int) or hasattr(value, "fileno")):
            _fail(path, f"expected a handle (an int descriptor, a Handle or an object with fileno()) or None, got {type(value).__name__}", TypeError)
        if isinstance(value, int) and value < 0:
            _fail(path, f"a descriptor is >= 0, got {value}")
    elif tag == "str":
        maximum = desc[1]
        if not isinstance(value, str):
            _fail(path, f"expected a str, got {type(value).__name__}", TypeError)
        try:
            n = len(value.encode("utf-8"))
        except UnicodeEncodeError as e:
            _fail(path, f"string cannot be encoded as UTF-8 ({e.reason})")
        if maximum is not None and n > maximum:
            _fail(path, f"string is {n} UTF-8 bytes, more than its maximum {maximum}")
        if "\0" in value:
            _fail(path, "string contains a NUL character")
    else:  # pragma: no cover - descriptors come from our own generator
        raise AssertionError(f"unknown descriptor {desc!r}")


def _check_seq(path: str, value: Any, is_bytes: bool) -> None:
    if is_bytes:
        if not isinstance(value, _BYTES_LIKE):
            _fail(path, f"expected bytes, got {type(value).__name__}", TypeError)
    elif isinstance(value, (str, bytes, bytearray, memoryview)) or not isinstance(value, Sequence):
        _fail(path, f"expected a list or tuple, got {type(value).__name__}", TypeError)


def explain(iface: str, message: str, descs: tuple[tuple[str, tuple[Any, ...]], ...], values: Iterable[Any]) -> None:
    """Find the argument that made an encode fail and raise an error naming it.

    Returns normally only if every argument checks out (the caller then
    re-raises the original exception).
    """
    for (aname, desc), value in zip(descs, values, strict=False):
        try:
            validate(desc, value, aname)
        except (ValueError, TypeError) as e:
            raise type(e)(f"{iface}.{message}: {e}") from None


def decode_error(iface: str, message: str, data: bytes, exc: BaseException) -> DecodeError:
    """Describe why ``data`` (a ``message``) did not decode, as a :class:`DecodeError`."""
    if isinstance(exc, Bad):
        why = str(exc)
    elif isinstance(exc, struct.error):
        why = f"message is truncated ({len(data)} bytes)"
    elif isinstance(exc, UnicodeDecodeError):
        why = "a string is not valid UTF-8"
    elif isinstance(exc, IndexError):
        why = "an enum value is out of range"
    else:
        why = f"{type(exc).__name__}: {exc}"
    return DecodeError(iface, f"{message}: {why}", data)


def pack_array(fmt: str, values: Sequence[Any]) -> bytes:
    """Pack a run-time-length array of scalars (``fmt`` is one struct letter)."""
    return struct.pack(f"<{len(values)}{fmt}", *values)


def unpack_array(fmt: str, count: int, data: bytes, offset: int) -> tuple[Any, ...]:
    """Unpack ``count`` scalars of struct letter ``fmt`` from ``data`` at ``offset``."""
    return struct.unpack_from(f"<{count}{fmt}", data, offset)


def check_enums(values: Iterable[Any], count: int) -> None:
    """Raise :class:`Bad` unless every value is an int in ``0 .. count-1`` (encode fast path)."""
    for v in values:
        if not 0 <= v < count:
            raise Bad()


def message_number(data: bytes) -> int:
    """The message number of an encoded message (its first two bytes, little-endian)."""
    if len(data) < 2:
        raise DecodeError("?", f"message is {len(data)} bytes, shorter than its 2-byte message number", data)
    return int(data[0]) | (int(data[1]) << 8)


def _is_dynamic(desc: tuple[Any, ...]) -> bool:
    return desc[0] in ("dyn", "str")


def _int_fmt(tname: str) -> str:
    return "<" + INT_FORMATS[tname]


def _put(desc: tuple[Any, ...], v: Any, out: bytearray, handles: list[Any], give: list[bool]) -> None:
    tag = desc[0]
    if tag == "int":
        out += struct.pack(_int_fmt(desc[1]), v)
    elif tag == "bool":
        out.append(1 if v else 0)
    elif tag == "char":
        out += bytes(v)
    elif tag == "enum":
        out += struct.pack("<I", v)
    elif tag == "struct":
        for (_, fdesc), x in zip(desc[2], v, strict=True):
            _put(fdesc, x, out, handles, give)
    elif tag in ("array", "dyn"):
        if tag == "dyn":
            out += U64.pack(len(v))
        if desc[3]:
            out += bytes(v)
        else:
            for x in v:
                _put(desc[1], x, out, handles, give)
    elif tag == "str":
        b = v.encode()
        out += U64.pack(len(b)) + b
    elif tag == "cap":
        if v is None:
            out.append(0)
        else:
            out.append(1)
            handles.append(v)
            give.append(bool(desc[1]))
    else:  # pragma: no cover - descriptors come from our own generator
        raise AssertionError(f"unknown descriptor {desc!r}")


def encode_caps(
    iface: str, message: str, number: int, descs: tuple[tuple[str, tuple[Any, ...]], ...], values: Sequence[Any]
) -> tuple[bytes, list[Any], list[bool]]:
    """Encode a message that carries capabilities: ``(bytes, handles, give_away flags)``.

    Every argument is checked first (an error names it, as :func:`explain` does); the bytes
    are laid out as for any message (fixed-size arguments, then dynamic ones), and each
    capability adds its handle to the list in that order.
    """
    explain(iface, message, descs, values)
    out = bytearray(U16.pack(number))
    handles: list[Any] = []
    give: list[bool] = []
    later = []
    for (_, desc), v in zip(descs, values, strict=False):
        if _is_dynamic(desc):
            later.append((desc, v))
        else:
            _put(desc, v, out, handles, give)
    for desc, v in later:
        _put(desc, v, out, handles, give)
    return bytes(out), handles, give


class _Reader:
    """Reads one capability-carrying message: bytes in order, handles in order."""

    def __init__(self, data: bytes, handles: Sequence[Any], types: dict[str, Any]) -> None:
        self.data, self.pos, self.handles, self.taken, self.types = data, 2, handles, 0, types

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise Bad(f"message is truncated ({len(self.data)} bytes)")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def get(self, desc: tuple[Any, ...], path: str) -> Any:
        tag = desc[0]
        if tag == "int":
            fmt = _int_fmt(desc[1])
            return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        if tag == "bool":
            return self.take(1) != b"\0"
        if tag == "char":
            return self.take(1)
        if tag == "enum":
            v = struct.unpack("<I", self.take(4))[0]
            if v >= desc[2]:
                raise Bad(f"argument '{path}': enum value {v} out of range")
            return self.types[desc[1]](v)
        if tag == "struct":
            return self.types[desc[1]](*[self.get(fd, f"{path}.{f}") for f, fd in desc[2]])
        if tag in ("array", "dyn"):
            if tag == "dyn":
                n = U64.unpack(self.take(8))[0]
                if desc[2] is not None and n > desc[2]:
                    raise Bad(f"argument '{path}' has {n} elements, more than its maximum {desc[2]}")
                if n > len(self.data):
                    raise Bad(f"argument '{path}' runs past the end of the message")
            else:
                n = desc[2]
            if desc[3]:
                return self.take(n)
            return tuple(self.get(desc[1], f"{path}[{i}]") for i in range(n))
        if tag == "str":
            n = U64.unpack(self.take(8))[0]
            if desc[1] is not None and n > desc[1]:
                raise Bad(f"argument '{path}' has {n} bytes, more than its maximum {desc[1]}")
            s = self.take(n).decode()
            if "\0" in s:
                raise Bad(f"string argument '{path}' contains a NUL byte")
            return s
        if tag == "cap":
            flag = self.take(1)[0]
            if flag > 1:
                raise Bad(f"argument '{path}': capability byte {flag} is neither 0 nor 1")
            if not flag:
                return None
            if self.taken >= len(self.handles):
                raise Bad(f"argument '{path}': the message came with {len(self.handles)} handles, fewer than its capabilities")
            h = self.handles[self.taken]
            self.taken += 1
            return h
        raise AssertionError(f"unknown descriptor {desc!r}")  # pragma: no cover


def decode_caps(
    iface: str,
    message: str,
    descs: tuple[tuple[str, tuple[Any, ...]], ...],
    data: bytes,
    handles: Sequence[Any],
    types: dict[str, Any],
    record: Any,
) -> Any:
    """Decode a message that carries capabilities into ``record``, each capability taking the
    next of ``handles`` (None for a 0 byte); DecodeError if the bytes or the number of handles
    do not fit the message."""
    r = _Reader(data, handles, types)
    try:
        vals: dict[str, Any] = {}
        later = []
        for name, desc in descs:
            if _is_dynamic(desc):
                later.append((name, desc))
            else:
                vals[name] = r.get(desc, name)
        for name, desc in later:
            vals[name] = r.get(desc, name)
        if r.pos != len(data):
            raise Bad(f"{len(data) - r.pos} bytes after the last argument")
        if r.taken != len(handles):
            raise Bad(f"the message came with {len(handles)} handles, more than its {r.taken} capabilities")
        return record(*[vals[name] for name, _ in descs])
    except DECODE_ERRORS as e:
        raise decode_error(iface, message, data, e) from None
