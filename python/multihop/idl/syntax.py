"""The syntax tree of a Flounder file, as written (names not yet resolved).

The parser builds these nodes; the checker turns them into the resolved
:mod:`multihop.idl.model`.  Every node keeps the position of its name so the
checker can point at it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Pos",
    "TypeRef",
    "AliasDecl",
    "FieldDecl",
    "StructDecl",
    "EnumDecl",
    "ArrayDecl",
    "TypeDecl",
    "Dims",
    "ArgDecl",
    "Annotation",
    "MessageDecl",
    "RpcDecl",
    "InterfaceDecl",
    "FileDecl",
]


@dataclass(frozen=True, slots=True)
class Pos:
    """A place in a file: 1-based line and column."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True, slots=True)
class TypeRef:
    """A type named at a use site."""

    name: str
    pos: Pos


@dataclass(frozen=True, slots=True)
class AliasDecl:
    """``alias NAME TYPE;`` or ``typedef TYPE NAME;`` (``form`` says which)."""

    name: str
    target: TypeRef
    pos: Pos
    form: str


@dataclass(frozen=True, slots=True)
class FieldDecl:
    """One ``TYPE NAME;`` (or ``TYPE NAME[N];``, a fixed array) line of a struct."""

    type: TypeRef
    name: str
    pos: Pos
    size: int | None = None


@dataclass(frozen=True, slots=True)
class StructDecl:
    """``typedef struct { fields } NAME;``"""

    name: str
    fields: tuple[FieldDecl, ...]
    pos: Pos


@dataclass(frozen=True, slots=True)
class EnumDecl:
    """``typedef enum { A, B, ... } NAME;`` (values numbered from 0)."""

    name: str
    values: tuple[tuple[str, Pos], ...]
    pos: Pos


@dataclass(frozen=True, slots=True)
class ArrayDecl:
    """``typedef TYPE NAME[LENGTH];``: a fixed-size array type."""

    name: str
    element: TypeRef
    length: int
    pos: Pos


TypeDecl = AliasDecl | StructDecl | EnumDecl | ArrayDecl


@dataclass(frozen=True, slots=True)
class Dims:
    """What follows an argument's name in brackets.

    ``[len]`` and ``[len, MAX]`` give ``length_name`` (and ``maximum``);
    ``[N]`` gives ``size`` (a string's maximum, or a fixed array's length).
    """

    pos: Pos
    length_name: str | None = None
    length_pos: Pos | None = None
    maximum: int | None = None
    size: int | None = None


@dataclass(frozen=True, slots=True)
class ArgDecl:
    """One argument: ``TYPE NAME``, maybe with ``Dims``; ``direction`` is ``in``/``out`` in an rpc."""

    type: TypeRef
    name: str
    pos: Pos
    dims: Dims | None = None
    direction: str | None = None


@dataclass(frozen=True, slots=True)
class Annotation:
    """A back-end annotation such as ``@ata(command=0xC8, dma_arg=buffer)``; kept, not used."""

    name: str
    params: tuple[tuple[str, int | str], ...]
    pos: Pos


@dataclass(frozen=True, slots=True)
class MessageDecl:
    """``message``, ``call`` or ``response`` (the ``kind``) with its arguments."""

    kind: str
    name: str
    args: tuple[ArgDecl, ...]
    pos: Pos
    annotations: tuple[Annotation, ...] = ()


@dataclass(frozen=True, slots=True)
class RpcDecl:
    """``rpc NAME(in ..., out ...);``"""

    name: str
    args: tuple[ArgDecl, ...]
    pos: Pos
    annotations: tuple[Annotation, ...] = ()


@dataclass(frozen=True, slots=True)
class InterfaceDecl:
    """``interface NAME "description" { ... };``"""

    name: str
    description: str | None
    pos: Pos
    types: tuple[TypeDecl, ...] = ()
    messages: tuple[MessageDecl | RpcDecl, ...] = ()


@dataclass(frozen=True, slots=True)
class FileDecl:
    """A whole file: one interface, or only type declarations (an import file); ``end`` is where it ends."""

    file: str
    interface: InterfaceDecl | None
    types: tuple[TypeDecl, ...] = field(default=())
    end: Pos | None = None
