"""Interface source as text: bytes are decoded here, and bytes that are not text are a located error.

Flounder files are UTF-8 (ASCII in practice).  A file that is not valid
UTF-8 raises :class:`~multihop.idl.errors.IdlSyntaxError` at the first byte
that does not decode, with the file, the 1-based line, and the column
counted in characters as the lexer counts them (a tab is one column), so
``multihop stubgen`` says ``bad.if:3:14: file is not UTF-8: byte 0xff ...``
like every other malformed input, instead of Python's ``UnicodeDecodeError``
without a file name.  A leading UTF-8 byte-order mark is dropped (editors on
some systems write one); columns on the first line count from after it.
"""

from __future__ import annotations

import codecs

from multihop.idl.errors import IdlSyntaxError

__all__ = ["decode_source"]


def decode_source(data: bytes, file: str) -> str:
    """The text of interface source ``data`` (UTF-8, an optional BOM dropped).

    Raises:
        IdlSyntaxError: ``data`` is not valid UTF-8; ``.line`` and ``.column``
            point at the first byte that does not decode (``.found`` names it).
    """
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8(data, file, e) from None


def _not_utf8(data: bytes, file: str, e: UnicodeDecodeError) -> IdlSyntaxError:
    """The located error for the first undecodable byte of ``data``."""
    start = e.start
    line_start = data.rfind(b"\n", 0, start) + 1
    line = data.count(b"\n", 0, start) + 1
    # Everything before `start` decodes (the codec stops at the first error),
    # so the column is the number of characters on this line before it, plus one.
    column = len(data[line_start:start].decode("utf-8")) + 1
    bad = data[start : e.end]
    found = "byte" + ("s " if len(bad) > 1 else " ") + " ".join(f"0x{b:02x}" for b in bad)
    text = f"file is not UTF-8: {found} cannot be decoded ({e.reason}); Flounder files are UTF-8 text"
    return IdlSyntaxError(file, line, column, "UTF-8 text", found, text)
