"""Every generated file the repository keeps, listed once, and the one gate that checks them.

The Flounder compiler writes these from the interface files in ``flounder-idl/``; they are committed so
that a checkout imports without running the compiler, and mypy reads the ``.pyi`` stubs instead of the
generated modules. :data:`GENERATED` is the list; nothing else names them.

* ``multihop stubgen --check`` (run by ``.ci/test``) regenerates each in memory and compares: it exits 1
  naming every file that differs from what the compiler makes today;
* ``multihop stubgen --all`` rewrites every one of them (after a change of an interface file or of a back
  end), and prints the files it changed.

Paths are relative to the repository's root (``--root``; by default the checkout this package is in).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from multihop.idl.cgen import generate_c
from multihop.idl.checker import check
from multihop.idl.parser import parse_text
from multihop.idl.pygen import generate_python
from multihop.idl.pyi import generate_pyi
from multihop.idl.source import decode_source
from multihop.idl.syntax import FileDecl

__all__ = ["GENERATED", "Generated", "KINDS", "default_root", "expected", "stale", "write_all"]

KINDS: tuple[str, ...] = ("python", "pyi", "c-header", "c-source")
"""What a generated file can be: a Python binding module, its typed stub, a C header or a C source."""


@dataclass(frozen=True)
class Generated:
    """One generated file: where it is, what kind, from which interface (and import) files, all relative to the root."""

    path: str
    kind: str
    interface: str
    imports: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        """The command that writes this file alone (``multihop stubgen --all`` writes them all)."""
        imports = "".join(f" -I {i}" for i in self.imports)
        if self.kind == "python":
            return f"multihop stubgen {self.interface}{imports} --lang python -o {self.path}"
        if self.kind == "pyi":
            return f"python -m multihop.idl.pyi {self.interface}{imports} -o {self.path}"
        return f"multihop stubgen {self.interface}{imports} --lang c -o {Path(self.path).parent}"


GENERATED: tuple[Generated, ...] = (
    Generated("python/multihop/ges/live/ges_broker_if.py", "python", "flounder-idl/ges_broker.if"),
    Generated("python/multihop/ges/live/ges_broker_if.pyi", "pyi", "flounder-idl/ges_broker.if"),
    Generated("python/multihop/ges/live/ges_client_if.py", "python", "flounder-idl/ges_client.if"),
    Generated("python/multihop/ges/live/ges_client_if.pyi", "pyi", "flounder-idl/ges_client.if"),
    Generated("python/multihop/news/dispatch_if.py", "python", "flounder-idl/dispatch.if"),
    Generated("python/multihop/news/dispatch_if.pyi", "pyi", "flounder-idl/dispatch.if"),
)
"""Every generated file the repository keeps (paths relative to the root)."""


def default_root() -> Path:
    """The repository this package is in (``python/multihop/idl/`` lies three levels below it)."""
    return Path(__file__).resolve().parents[3]


def _read(root: Path, rel: str, import_file: bool) -> FileDecl:
    data = (root / rel).read_bytes()
    return parse_text(decode_source(data, rel), rel, import_file)


def expected(entry: Generated, root: Path) -> str:
    """The text ``entry`` should have: what the compiler makes of its interface file under ``root`` today.

    The interface is read under its relative name, so the text (which names its source) is the same from
    any working directory.
    """
    if entry.kind not in KINDS:
        raise ValueError(f"{entry.path}: unknown kind {entry.kind!r} (expected one of {', '.join(KINDS)})")
    imports = [_read(root, i, True) for i in entry.imports]
    iface = check(_read(root, entry.interface, False), imports)
    if entry.kind == "python":
        return generate_python(iface)
    if entry.kind == "pyi":
        return generate_pyi(iface)
    header, source = generate_c(iface)
    return header if entry.kind == "c-header" else source


def stale(root: Path, entries: Sequence[Generated] = GENERATED) -> list[Generated]:
    """The entries whose file under ``root`` is missing or differs from :func:`expected`."""
    out = []
    for e in entries:
        path = root / e.path
        if not path.is_file() or path.read_text(encoding="utf-8") != expected(e, root):
            out.append(e)
    return out


def write_all(root: Path, entries: Sequence[Generated] = GENERATED) -> list[Path]:
    """Regenerate every entry under ``root``; return the files whose text changed (written)."""
    written = []
    for e in entries:
        path = root / e.path
        text = expected(e, root)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written
