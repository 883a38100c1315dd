"""Flounder IDL: parse interface files, check them, generate Python and C bindings.

::

    iface = multihop.idl.parse("flounder-idl/echo.if")          # the checked model
    mod = multihop.idl.load("flounder-idl/echo.if")             # generated module, imported
    b = mod.EchoBinding.bind(dispatcher, "echo", transport="auto")   # or mod.EchoBinding(channel)
    server = mod.EchoBinding.export(dispatcher, "echo", handler)     # serves every client
    b.tx.ping(seq=1, data=b"hi"); msg = b.rx.next(timeout=1.0)
    header, source = multihop.idl.generate_c(iface)
    multihop.idl.stubgen("flounder-idl/echo.if", "c", "out/")  # writes echo.h, echo.c
    # shell: multihop stubgen flounder-idl/echo.if --lang c -o out/   (multihop.idl.command)

The compiler's pieces, one per module: :mod:`~multihop.idl.lexer`, :mod:`~multihop.idl.parser`
(syntax tree in :mod:`~multihop.idl.syntax`), :mod:`~multihop.idl.checker`
(model in :mod:`~multihop.idl.model`), :mod:`~multihop.idl.pygen`, :mod:`~multihop.idl.pyi` and
:mod:`~multihop.idl.cgen` (back ends, with the name checks of
:mod:`~multihop.idl.pycheck` and :mod:`~multihop.idl.ccheck`),
:mod:`~multihop.idl.source` (bytes to text, with located errors),
:mod:`~multihop.idl.command` (``multihop stubgen``) and :mod:`~multihop.idl.generated`
(every generated file the repository keeps, and the gate that checks them).
What generated code imports at run time is not here but in the core, :mod:`multihop.flounder`
(binding, server, wire, connect; the old paths ``multihop.idl.binding`` etc. are
deprecated aliases for one release).
The wire format is written down in ``flounder-idl/WIRE.md``.
"""

from __future__ import annotations

import difflib
import errno
import os
import re
import types
from pathlib import Path
from typing import Iterable, Union

from multihop.idl.cgen import generate_c
from multihop.idl.checker import check
from multihop.idl.errors import (
    DecodeError,
    IdlCheckError,
    IdlCodegenError,
    IdlError,
    IdlFileTooLarge,
    IdlSyntaxError,
    UnhandledMessage,
)
from multihop.idl.model import BUILTINS, Interface
from multihop.idl.parser import parse_text
from multihop.idl.pygen import generate_python
from multihop.idl.source import decode_source
from multihop.idl.syntax import FileDecl

__all__ = [
    "parse",
    "load",
    "generate_python",
    "generate_c",
    "stubgen",
    "Interface",
    "IdlError",
    "IdlSyntaxError",
    "IdlCheckError",
    "IdlCodegenError",
    "IdlFileTooLarge",
    "DecodeError",
    "MAX_SOURCE_BYTES",
    "UnhandledMessage",
]

PathOrText = Union[str, bytes, "os.PathLike[str]"]

#: The most a Flounder file (interface or import) may be: files are read no further (real ones are a few KiB;
#: ``multihop stubgen /dev/zero`` would otherwise read without end).
MAX_SOURCE_BYTES = 4 << 20


#: Characters every Flounder declaration uses and a file path (almost) never does.
_SOURCE_MARKS = frozenset("{};()")


def _is_source_text(s: str) -> bool:
    """True if the ``str`` ``s`` is Flounder source text rather than a path.

    Source text has a newline or one of ``{ } ; ( )``, starts a comment, or is
    blank; anything else (``flounder-idl/echo.if``, ``echo``) is a path.
    """
    return "\n" in s or not s.strip() or s.lstrip().startswith(("//", "/*")) or any(c in _SOURCE_MARKS for c in s)


def _read(source: PathOrText) -> tuple[str, str]:
    """(text, file name) of a path or of Flounder source text (``str``, or ``bytes`` in UTF-8).

    Raises FileNotFoundError naming a path that does not exist, :class:`IdlFileTooLarge` for a file
    longer than :data:`MAX_SOURCE_BYTES` (read no further), and :class:`IdlSyntaxError` (file, line,
    column) for bytes that are not UTF-8.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return decode_source(bytes(source), "<bytes>"), "<bytes>"
    if isinstance(source, os.PathLike):
        path = str(source)
    elif isinstance(source, str):
        if _is_source_text(source):
            return source, "<string>"
        path = source
    else:
        raise TypeError(f"expected a path or Flounder source text, got {type(source).__name__}")
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(errno.ENOENT, "no such Flounder interface file", path)
    with open(p, "rb") as f:  # at most the cap and one byte more, whatever the file is (a device, a pipe)
        data = f.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        raise IdlFileTooLarge(path, MAX_SOURCE_BYTES)
    return decode_source(data, path), path


def _parse_file(source: PathOrText, import_file: bool) -> FileDecl:
    """Read and parse one file (an interface file, or an import file)."""
    text, name = _read(source)
    return parse_text(text, name, import_file)


def parse(source: PathOrText, imports: Iterable[PathOrText] = ()) -> Interface:
    """Parse and check a Flounder interface file (a path, or the source text itself).

    ``imports`` are import files (``alias``/``typedef`` lines only, such as
    ``flounder-idl/types.if``) whose types the interface may use; an import
    file is valid only as an import.  ``source`` must declare an interface:
    empty input, input of only comments and an import file given as
    ``source`` raise :class:`IdlSyntaxError` saying so.

    A ``str`` is source text if it has a newline or one of ``{ } ; ( )``, or
    starts with a comment; otherwise it is a path, and a path that does not
    exist raises FileNotFoundError naming it.  ``bytes`` are source text in
    UTF-8.  A file (or ``bytes``) that is not UTF-8 raises
    :class:`IdlSyntaxError` at the first byte that does not decode (see
    :mod:`multihop.idl.source`).

    Raises :class:`IdlSyntaxError` / :class:`IdlCheckError` (both
    :class:`~multihop.errors.IdlError`) with ``.file``, ``.line``, ``.column``
    (an error inside an import file names that file).
    """
    imps = [_parse_file(i, import_file=True) for i in imports]
    decl = _parse_file(source, import_file=False)
    try:
        return check(decl, imps)
    except IdlCheckError as e:
        hint = _unknown_type_hint(e, decl, imps)
        if hint is None:
            raise
        raise IdlCheckError(e.file, e.line, e.column, e.text + hint) from None


_UNKNOWN_TYPE = re.compile(r"unknown type '([^']+)'")
_MAX_SIBLINGS = 64  # import files beside an interface looked at for a type it lacks


def _unknown_type_hint(e: IdlCheckError, decl: FileDecl, imports: list[FileDecl]) -> str | None:
    """What to add to an ``unknown type`` error: a builtin or declared type of a close spelling, else where the
    type may come from (an import file beside the interface that declares it, or any: ``--import``)."""
    m = _UNKNOWN_TYPE.fullmatch(e.text)
    if m is None:
        return None
    name = m.group(1)
    known = [*BUILTINS, "String", *(d.name for f in (decl, *imports) for d in f.types)]
    if decl.interface is not None:
        known += [d.name for d in decl.interface.types]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    if close:
        return f"; did you mean '{close[0]}'?"
    where = _declared_beside(name, decl.file, {f.file for f in imports})
    if where is not None:
        return f"; {where} declares it: pass it with --import {where} (imports=[...] in Python)"
    return "; if an import file declares it, pass that file with --import FILE.if (imports=[...] in Python)"


def _declared_beside(name: str, file: str, given: set[str]) -> str | None:
    """An import file in the directory of interface file ``file`` (not one of ``given``) that declares ``name``."""
    here = Path(file)
    if file.startswith("<") or not here.is_file():
        return None  # source text: no directory to look in
    for other in sorted(here.parent.glob("*.if"))[:_MAX_SIBLINGS]:
        if other == here or str(other) in given or not other.is_file():
            continue
        try:
            found = _parse_file(other, import_file=True)
        except (IdlError, OSError, ValueError):
            continue
        if found.interface is None and any(d.name == name for d in found.types):
            return str(other)
    return None


def load(source: PathOrText | Interface, imports: Iterable[PathOrText] = (), module_name: str | None = None) -> types.ModuleType:
    """Generate the Python binding of an interface and execute it as a fresh module.

    ``source`` is a path, source text, or an already parsed :class:`Interface`.
    The module is not added to ``sys.modules``; its name is
    ``multihop.idl.generated.<interface>`` unless ``module_name`` is given.
    """
    iface = source if isinstance(source, Interface) else parse(source, imports)
    code = generate_python(iface)
    name = module_name or f"multihop.idl.generated.{iface.name}"
    mod = types.ModuleType(name)
    mod.__file__ = f"<flounder {iface.file}>"
    exec(compile(code, mod.__file__, "exec"), mod.__dict__)
    return mod


def stubgen(path: PathOrText, lang: str, out: PathOrText, imports: Iterable[PathOrText] = ()) -> list[Path]:
    """Generate stubs for the interface in ``path`` and write them; return the files written.

    ``lang`` is ``"python"`` (one ``NAME.py``) or ``"c"`` (``NAME.h`` and
    ``NAME.c``).  ``out`` is a directory (created if missing) or, for Python,
    a ``.py`` file path.  The command line ``multihop stubgen`` runs this
    (see :mod:`multihop.idl.command`).
    """
    if lang not in ("python", "c"):
        raise ValueError(f"unknown stub language {lang!r} (expected 'python' or 'c')")
    outp = Path(os.fsdecode(out))
    if lang == "c" and outp.suffix in (".py", ".h", ".c"):
        raise ValueError(f"the C back end writes NAME.h and NAME.c into a directory; {str(outp)!r} looks like a file name")
    iface = parse(path, imports)
    if lang == "python":
        code = generate_python(iface)
        target = outp if outp.suffix == ".py" else outp / f"{iface.name}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code, encoding="utf-8")
        return [target]
    if lang == "c":
        header, source = generate_c(iface)
        outp.mkdir(parents=True, exist_ok=True)
        h, c = outp / f"{iface.name}.h", outp / f"{iface.name}.c"
        h.write_text(header, encoding="utf-8")
        c.write_text(source, encoding="utf-8")
        return [h, c]
    raise AssertionError(lang)  # checked above
