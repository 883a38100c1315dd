"""Flounder tokens: identifiers, numbers, string literals and punctuation.

Comments (``//`` to end of line and ``/* ... */``) and white space are
skipped.  Lines and columns are 1-based; a column counts characters, so a tab
is one column.  Keywords are not special here: the parser decides by context
whether ``message`` is a keyword or a name, as Flounder's grammar needs.

A character no token starts with (``-``, ``$``, ...) becomes a ``char`` token:
no grammar rule accepts one, so the parser reports it, saying what it expected
at that place (``uint8 b[-1]``: the array size must be a non-negative integer).
"""

from __future__ import annotations

from dataclasses import dataclass

from multihop.idl.errors import IdlSyntaxError

__all__ = ["Token", "tokenize", "KEYWORDS", "describe"]

IDENT = "ident"
INT = "int"
STRING = "string"
PUNCT = "punct"
CHAR = "char"
EOF = "eof"

PUNCTUATION = frozenset("{}()[];,=@")

#: Words with a meaning in Flounder's grammar (used only to describe tokens in errors).
KEYWORDS = frozenset({"interface", "message", "call", "response", "rpc", "in", "out", "typedef", "struct", "enum", "alias"})


@dataclass(frozen=True, slots=True)
class Token:
    """One token: its kind, its text (a number's value for ``int``) and where it starts."""

    kind: str
    value: str | int
    line: int
    column: int


def describe(tok: Token) -> str:
    """Say what a token is, for the ``found ...`` half of an error message."""
    if tok.kind == EOF:
        return "end of file"
    if tok.kind == IDENT:
        kind = "keyword" if tok.value in KEYWORDS else "identifier"
        return f"{kind} '{tok.value}'"
    if tok.kind == INT:
        return f"number {tok.value}"
    if tok.kind == STRING:
        return f'string "{tok.value}"'
    if tok.kind == CHAR:
        return f"character {tok.value!r}"
    return f"'{tok.value}'"


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def tokenize(text: str, file: str) -> list[Token]:
    """Split Flounder source into tokens, ending with one ``eof`` token.

    Raises :class:`IdlSyntaxError` for an unterminated comment or string, or
    a malformed number.  Any other character becomes a ``char`` token.
    """
    toks: list[Token] = []
    i, n = 0, len(text)
    line, line_start = 1, 0

    def err(at: int, at_line: int, at_start: int, expected: str, found: str) -> IdlSyntaxError:
        """A syntax error at offset ``at`` of the line starting at ``at_start``."""
        return IdlSyntaxError(file, at_line, at - at_start + 1, expected, found)

    while i < n:
        c = text[i]
        if c == "\n":
            i += 1
            line, line_start = line + 1, i
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise err(i, line, line_start, "'*/' to close this comment", "end of file")
            chunk = text[i:j]
            nl = chunk.count("\n")
            if nl:
                line += nl
                line_start = i + chunk.rfind("\n") + 1
            i = j + 2
            continue
        col = i - line_start + 1
        if c.isascii() and (c.isalpha() or c == "_"):
            j = i + 1
            while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
                j += 1
            toks.append(Token(IDENT, text[i:j], line, col))
            i = j
            continue
        if c.isascii() and c.isdigit():
            j = i + 1
            while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            try:
                value = int(word, 0)
            except ValueError:
                found = f"a number of {len(word)} digits" if word.isdigit() else f"'{word[:40]}{'...' if len(word) > 40 else ''}'"
                raise err(i, line, line_start, "a number", found) from None
            toks.append(Token(INT, value, line, col))
            i = j
            continue
        if c == '"':
            j = i + 1
            out: list[str] = []
            while True:
                if j >= n or text[j] == "\n":
                    raise err(i, line, line_start, "'\"' to close this string", "end of line")
                ch = text[j]
                if ch == '"':
                    break
                if ch == "\\" and j + 1 < n:
                    out.append(_ESCAPES.get(text[j + 1], text[j + 1]))
                    j += 2
                    continue
                out.append(ch)
                j += 1
            toks.append(Token(STRING, "".join(out), line, col))
            i = j + 1
            continue
        if c in PUNCTUATION:
            toks.append(Token(PUNCT, c, line, col))
            i += 1
            continue
        toks.append(Token(CHAR, c, line, col))
        i += 1
    toks.append(Token(EOF, "", line, i - line_start + 1))
    return toks
