"""The errors of the Flounder tool chain.

Every class here subclasses one of :mod:`multihop.errors`, so callers catch
them as :class:`~multihop.errors.IdlError` (a bad interface file or a back end
that cannot generate it).  The errors of generated code at run time,
:class:`DecodeError` and :class:`UnhandledMessage` (both
:class:`~multihop.errors.ProtocolError`), live with the runtime support in
:mod:`multihop.flounder.errors` and are re-exported here.

Errors about an interface file carry ``file``, ``line`` and ``column`` (1-based)
and their text starts with ``file:line:col:``, the way compilers say it.
"""

from __future__ import annotations

from multihop.errors import IdlError
from multihop.flounder.errors import DecodeError, UnhandledMessage

__all__ = [
    "IdlError",
    "IdlSyntaxError",
    "IdlCheckError",
    "IdlCodegenError",
    "IdlFileTooLarge",
    "DecodeError",
    "UnhandledMessage",
]


class _Located(IdlError):
    """An :class:`IdlError` that points at one place of an interface file."""

    def __init__(self, file: str, line: int, column: int, text: str) -> None:
        self.file = file
        self.line = line
        self.column = column
        self.text = text
        super().__init__(f"{file}:{line}:{column}: {text}")


class IdlSyntaxError(_Located):
    """The file does not follow Flounder's grammar.

    ``expected`` and ``found`` say what the parser wanted and what it saw; the
    text is ``expected X, found Y`` unless ``text`` explains the problem better
    (``array size must be a non-negative integer, found -1``).
    """

    def __init__(self, file: str, line: int, column: int, expected: str, found: str, text: str | None = None) -> None:
        self.expected = expected
        self.found = found
        super().__init__(file, line, column, text if text is not None else f"expected {expected}, found {found}")


class IdlCheckError(_Located):
    """The file parses but is not a valid interface (unknown type, duplicate name, ...)."""


class IdlCodegenError(_Located):
    """A back end cannot generate code for a valid interface (for example a ``cap`` argument)."""


class IdlFileTooLarge(IdlError):
    """An input file longer than the most a Flounder file may be (``limit`` bytes): read no further.

    A real interface file is a few KiB; this guards against reading ``/dev/zero`` or a wrong, huge file
    without end. ``file`` names it.
    """

    def __init__(self, file: str, limit: int) -> None:
        self.file = file
        self.limit = limit
        super().__init__(f"{file}: longer than {limit // (1 << 20)} MiB, the most a Flounder file may be (read no further: is it the right file?)")
