"""One namespace of a back end's generated names, shared by the Python and C name checks.

A :class:`Namespace` remembers which Flounder item took each generated name,
so that a second item mapping to the same name fails with an
:class:`~multihop.idl.errors.IdlCodegenError` at its position, naming both
items and why a name changed on its way into the target language.
"""

from __future__ import annotations

from typing import Callable

from multihop.idl.errors import IdlCodegenError
from multihop.idl.syntax import Pos

__all__ = ["Namespace", "codegen_error"]


def codegen_error(pos: Pos | None, fallback: Pos, back_end: str, text: str) -> IdlCodegenError:
    """A code generation error of ``back_end`` at ``pos`` (``fallback`` when the model has no position)."""
    p = pos or fallback
    return IdlCodegenError(p.file, p.line, p.column, f"{back_end}: {text}")


class Namespace:
    """One namespace of generated names (``kind`` says which, e.g. ``"of struct 's'"``).

    ``why(name, generated)`` says, as a suffix of the error (``""`` when
    ``name`` did not change), why Flounder ``name`` became ``generated``.
    """

    def __init__(self, kind: str, fallback: Pos, back_end: str, language: str, why: Callable[[str, str], str]) -> None:
        self.kind = kind
        self.fallback = fallback
        self.back_end = back_end
        self.language = language
        self.why = why
        self.taken: dict[str, tuple[str, str]] = {}

    def add(self, generated: str, name: str, what: str, pos: Pos | None) -> None:
        """Claim ``generated`` for ``what`` (Flounder ``name``), or fail naming the earlier claim."""
        first = self.taken.get(generated)
        if first is not None:
            other_what, other_name = first
            why = self.why(name, generated) or self.why(other_name, generated)
            raise codegen_error(
                pos, self.fallback, self.back_end, f"{what} clashes with {other_what} {self.kind}: both are '{generated}' in {self.language}{why}"
            )
        self.taken[generated] = (what, name)
