"""Recursive-descent parser for Flounder, as Barrelfish's interface files use it.

Grammar (``*`` many, ``?`` optional)::

    file       := 'interface' NAME STRING? '{' (typedecl | msgdecl)* '}' ';' EOF
                | typedecl* EOF                               -- an import file
    typedecl   := 'alias' NAME TYPE ';'
                | 'typedef' 'struct' '{' (TYPE NAME ('[' INT ']')? ';')+ '}' NAME ';'
                | 'typedef' 'enum' '{' NAME (',' NAME)* ','? '}' NAME ';'
                | 'typedef' TYPE NAME '[' INT ']' ';'
                | 'typedef' TYPE NAME ';'
    msgdecl    := annotation* ('message' | 'call' | 'response') NAME '(' args? ')' ';'
                | annotation* 'rpc' NAME '(' rpcargs? ')' ';'
    args       := arg (',' arg)*
    rpcargs    := ('in' | 'out') arg (',' ('in' | 'out') arg)*
    arg        := TYPE NAME ('[' (NAME (',' INT)? | INT) ']')?
    annotation := '@' NAME '(' (NAME '=' (INT | NAME) (',' NAME '=' (INT | NAME))*)? ')'

The parser only checks the shape; names are resolved by :mod:`multihop.idl.checker`.
A syntax error raises :class:`IdlSyntaxError` saying ``expected X, found Y`` at
the token that does not fit, or saying what is wrong where that is clearer: a
negative array size, ``in``/``out`` outside an rpc, a file with no interface.

An interface file must declare its interface; only an import file
(``import_file=True``) may hold nothing but type declarations (or nothing).
"""

from __future__ import annotations

from multihop.idl import lexer
from multihop.idl.errors import IdlSyntaxError
from multihop.idl.lexer import Token, describe
from multihop.idl.syntax import (
    AliasDecl,
    Annotation,
    ArgDecl,
    ArrayDecl,
    Dims,
    EnumDecl,
    FieldDecl,
    FileDecl,
    InterfaceDecl,
    MessageDecl,
    Pos,
    RpcDecl,
    StructDecl,
    TypeDecl,
    TypeRef,
)

__all__ = ["parse_text"]

_MSG_KINDS = ("message", "call", "response")


def parse_text(text: str, file: str = "<string>", import_file: bool = False) -> FileDecl:
    """Parse Flounder source into a syntax tree; ``file`` names it in errors.

    Unless ``import_file``, the source must declare an interface: empty input,
    input of only comments, or only ``alias``/``typedef`` lines (an import
    file) raise :class:`IdlSyntaxError` at the end of the input, saying so.
    """
    decl = _Parser(lexer.tokenize(text, file), file).parse_file()
    if decl.interface is None and not import_file:
        end = decl.end or Pos(file, 1, 1)
        if decl.types:
            why = "a file of only 'alias' and 'typedef' lines is an import file: pass it as an import (imports=[...], or --import)"
        else:
            why = "the input is empty or holds only comments"
        raise IdlSyntaxError(
            end.file, end.line, end.column, "an interface ('interface NAME \"...\" { ... };')", "end of file", f"no interface declared: {why}"
        )
    return decl


class _Parser:
    def __init__(self, toks: list[Token], file: str) -> None:
        self.toks = toks
        self.i = 0
        self.file = file

    # -- token helpers -------------------------------------------------------

    @property
    def tok(self) -> Token:
        """The current token."""
        return self.toks[self.i]

    def pos(self, tok: Token | None = None) -> Pos:
        """The position of ``tok`` (default: the current token)."""
        t = self.tok if tok is None else tok
        return Pos(self.file, t.line, t.column)

    def fail(self, expected: str, tok: Token | None = None) -> IdlSyntaxError:
        """A syntax error at ``tok``: expected ``expected``, found that token."""
        t = self.tok if tok is None else tok
        return IdlSyntaxError(self.file, t.line, t.column, expected, describe(t))

    def advance(self) -> Token:
        """Consume and return the current token (never past end of file)."""
        t = self.toks[self.i]
        if t.kind != lexer.EOF:
            self.i += 1
        return t

    def is_punct(self, ch: str) -> bool:
        """True if the current token is the punctuation ``ch``."""
        return self.tok.kind == lexer.PUNCT and self.tok.value == ch

    def is_word(self, *words: str) -> bool:
        """True if the current token is one of these identifiers."""
        return self.tok.kind == lexer.IDENT and self.tok.value in words

    def punct(self, ch: str, expected: str | None = None) -> Token:
        """Consume the punctuation ``ch`` or fail saying ``expected``."""
        if not self.is_punct(ch):
            raise self.fail(expected or f"'{ch}'")
        return self.advance()

    def word(self, w: str) -> Token:
        """Consume the keyword ``w`` or fail."""
        if not self.is_word(w):
            raise self.fail(f"'{w}'")
        return self.advance()

    def ident(self, what: str) -> Token:
        """Consume an identifier or fail saying ``what`` was expected."""
        if self.tok.kind != lexer.IDENT:
            raise self.fail(what)
        return self.advance()

    def integer(self, what: str, noun: str) -> Token:
        """Consume a non-negative number or fail saying ``what`` was expected.

        A minus sign before a number fails saying ``noun`` (e.g. "array size")
        must be a non-negative integer.
        """
        if self.tok.kind != lexer.INT:
            raise self.negative(noun) or self.fail(what)
        return self.advance()

    def negative(self, noun: str) -> IdlSyntaxError | None:
        """If a minus sign and a number are next: the error saying ``noun`` must be non-negative."""
        t = self.tok
        if t.kind == lexer.CHAR and t.value == "-" and self.toks[self.i + 1].kind == lexer.INT:
            value = f"-{self.toks[self.i + 1].value}"
            return IdlSyntaxError(
                self.file, t.line, t.column, "a non-negative integer", f"'{value}'", f"{noun} must be a non-negative integer, found {value}"
            )
        return None

    # -- file ----------------------------------------------------------------

    def parse_file(self) -> FileDecl:
        """file := interface | typedecl* (an import file)."""
        if self.is_word("interface"):
            iface = self.interface()
            if self.tok.kind != lexer.EOF:
                raise self.fail("end of file")
            return FileDecl(self.file, iface, end=self.pos())
        types: list[TypeDecl] = []
        while self.tok.kind != lexer.EOF:
            if not self.is_word("alias", "typedef"):
                if types:
                    raise self.fail("'alias', 'typedef' or end of file")
                raise self.fail("'interface', 'alias' or 'typedef'")
            types.append(self.typedecl())
        return FileDecl(self.file, None, tuple(types), end=self.pos())

    def interface(self) -> InterfaceDecl:
        """'interface' NAME STRING? '{' (typedecl | msgdecl)* '}' ';'"""
        self.word("interface")
        name_tok = self.ident("an interface name")
        description = None
        if self.tok.kind == lexer.STRING:
            description = str(self.advance().value)
        self.punct("{", "'{'" if description is not None else "a description string or '{'")
        types: list[TypeDecl] = []
        msgs: list[MessageDecl | RpcDecl] = []
        while not self.is_punct("}"):
            if self.is_word("alias", "typedef"):
                types.append(self.typedecl())
            elif self.is_word("rpc", *_MSG_KINDS) or self.is_punct("@"):
                msgs.append(self.msgdecl())
            else:
                raise self.fail("'message', 'rpc', 'call', 'response', 'typedef', 'alias' or '}'")
        self.advance()
        self.punct(";", f"';' after the closing '}}' of interface {name_tok.value}")
        return InterfaceDecl(str(name_tok.value), description, self.pos(name_tok), tuple(types), tuple(msgs))

    # -- types ---------------------------------------------------------------

    def typeref(self, what: str = "a type name") -> TypeRef:
        """A type name at a use site."""
        t = self.ident(what)
        return TypeRef(str(t.value), self.pos(t))

    def typedecl(self) -> TypeDecl:
        """'alias' NAME TYPE ';' | 'typedef' (struct | enum | TYPE NAME ('[' INT ']')?) ';'"""
        if self.is_word("alias"):
            self.advance()
            name = self.ident("the new type's name")
            target = self.typeref("the aliased type")
            self.punct(";")
            return AliasDecl(str(name.value), target, self.pos(name), "alias")
        self.word("typedef")
        if self.is_word("struct"):
            return self.struct()
        if self.is_word("enum"):
            return self.enum()
        target = self.typeref("'struct', 'enum' or a type name")
        name = self.ident("the new type's name")
        if self.is_punct("["):
            self.advance()
            length = self.integer("the array length (a number)", f"the length of array type '{name.value}'")
            self.punct("]")
            self.punct(";")
            return ArrayDecl(str(name.value), target, int(length.value), self.pos(name))
        self.punct(";", "'[' or ';'")
        return AliasDecl(str(name.value), target, self.pos(name), "typedef")

    def struct(self) -> StructDecl:
        """'struct' '{' (TYPE NAME ('[' INT ']')? ';')+ '}' NAME ';'"""
        self.word("struct")
        self.punct("{")
        fields: list[FieldDecl] = []
        while True:
            ftype = self.typeref("a field type" if not fields else "a field type or '}'")
            fname = self.ident("a field name")
            size = None
            if self.is_punct("["):
                self.advance()
                size = int(self.integer("the array length (a number)", f"the length of array field '{fname.value}'").value)
                self.punct("]")
                self.punct(";")
            else:
                self.punct(";", "'[' or ';'")
            fields.append(FieldDecl(ftype, str(fname.value), self.pos(fname), size))
            if self.is_punct("}"):
                break
        self.advance()
        name = self.ident("the struct's name")
        self.punct(";")
        return StructDecl(str(name.value), tuple(fields), self.pos(name))

    def enum(self) -> EnumDecl:
        """'enum' '{' NAME (',' NAME)* ','? '}' NAME ';'"""
        self.word("enum")
        self.punct("{")
        values: list[tuple[str, Pos]] = []
        while True:
            v = self.ident("an enum value name")
            values.append((str(v.value), self.pos(v)))
            if self.is_punct(","):
                self.advance()
                if self.is_punct("}"):
                    break
                continue
            if not self.is_punct("}"):
                raise self.fail("',' or '}'")
            break
        self.advance()
        name = self.ident("the enum's name")
        self.punct(";")
        return EnumDecl(str(name.value), tuple(values), self.pos(name))

    # -- messages ------------------------------------------------------------

    def annotation(self) -> Annotation:
        """'@' NAME '(' (NAME '=' (INT | NAME)) , ... ')'"""
        at = self.punct("@")
        name = self.ident("an annotation name")
        self.punct("(")
        params: list[tuple[str, int | str]] = []
        if not self.is_punct(")"):
            while True:
                key = self.ident("a parameter name")
                self.punct("=")
                if self.tok.kind in (lexer.INT, lexer.IDENT):
                    params.append((str(key.value), self.advance().value))
                else:
                    raise self.fail("a number or a name")
                if self.is_punct(","):
                    self.advance()
                    continue
                break
        self.punct(")", "',' or ')'")
        return Annotation(str(name.value), tuple(params), self.pos(at))

    def msgdecl(self) -> MessageDecl | RpcDecl:
        """annotation* ('message' | 'call' | 'response' | 'rpc') NAME '(' args ')' ';'"""
        annotations: list[Annotation] = []
        while self.is_punct("@"):
            annotations.append(self.annotation())
        if self.is_word("rpc"):
            self.advance()
            name = self.ident("the rpc's name")
            args = self.arglist(str(name.value), f"rpc '{name.value}'")
            return RpcDecl(str(name.value), args, self.pos(name), tuple(annotations))
        if not self.is_word(*_MSG_KINDS):
            raise self.fail("'message', 'rpc', 'call' or 'response'")
        kind = str(self.advance().value)
        name = self.ident(f"the {kind}'s name")
        args = self.arglist(None, f"{kind} '{name.value}'")
        return MessageDecl(kind, str(name.value), args, self.pos(name), tuple(annotations))

    def arglist(self, rpc: str | None, where: str) -> tuple[ArgDecl, ...]:
        """'(' (arg (',' arg)*)? ')' ';' -- ``rpc`` names the rpc (None for a message), ``where`` says what it is."""
        self.punct("(")
        args: list[ArgDecl] = []
        if not self.is_punct(")"):
            while True:
                args.append(self.arg(rpc is not None, not args, where))
                if self.is_punct(","):
                    self.advance()
                    continue
                break
        self.punct(")", "',' or ')'")
        self.punct(";")
        return tuple(args)

    def arg(self, rpc: bool, first: bool, where: str) -> ArgDecl:
        """('in' | 'out')? TYPE NAME ('[' (NAME (',' INT)? | INT) ']')?"""
        direction = None
        if rpc:
            if not self.is_word("in", "out"):
                raise self.fail("'in', 'out' or ')'" if first else "'in' or 'out'")
            direction = str(self.advance().value)
            atype = self.typeref("an argument type")
        else:
            expected = "an argument type or ')'" if first else "an argument type"
            if self.is_word("in", "out"):
                t = self.tok
                raise IdlSyntaxError(
                    self.file,
                    t.line,
                    t.column,
                    expected,
                    describe(t),
                    f"'{t.value}' belongs only in an rpc's arguments; {where} takes plain arguments (TYPE NAME)",
                )
            atype = self.typeref(expected)
        name = self.ident("an argument name")
        dims = None
        if self.is_punct("["):
            open_tok = self.advance()
            if self.tok.kind == lexer.INT:
                size = int(self.advance().value)
                dims = Dims(self.pos(open_tok), size=size)
            elif self.tok.kind == lexer.IDENT:
                ln = self.advance()
                maximum = None
                if self.is_punct(","):
                    self.advance()
                    maximum = int(self.integer("the array's maximum length (a number)", f"the maximum length of array '{name.value}'").value)
                dims = Dims(self.pos(open_tok), length_name=str(ln.value), length_pos=self.pos(ln), maximum=maximum)
            else:
                raise self.negative(f"the size of array '{name.value}'") or self.fail("a length name or a number")
            self.punct("]", "']'" if dims.length_name is None or dims.maximum is not None else "',' or ']'")
        return ArgDecl(atype, str(name.value), self.pos(name), dims, direction)
