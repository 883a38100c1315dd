"""GES addresses, units and contexts.

A system has ``levels`` = N (default 3): units at level 0 (a broker node), 1
(cluster), 2 (super-cluster), ..., N (for N = 3, super-super-cluster); the
whole system is the one unit at level N + 1.  A broker's logical address has
N + 1 dot-separated parts, ``SSC.SC.C.n`` for N = 3, each below the block limit
64.  A unit is named by its address prefix: ``"1.2"`` is the super-cluster 2 of
super-super-cluster 1, and the system is ``""``.

Inside the protocols every unit is one interned integer (:func:`unit_id`): the
address packed 6 bits per part (most significant part first), its parts below
the unit's level cleared, and the level in the top 4 bits.  A broker is its
level-0 unit id.  So "is broker b in unit u" is one mask and compare, and
graphs, caches and messages hold small ints, never strings.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Union

from multihop.ges.errors import AddressError

__all__ = [
    "BLOCK_LIMIT",
    "MAX_LEVELS",
    "Address",
    "AddressLike",
    "gateway_level",
    "unit_id",
    "unit_level",
    "unit_str",
    "parse_unit",
    "contains",
    "ancestor",
    "child_toward",
    "level_of_difference",
]

#: Parts of an address are integers 0 <= part < BLOCK_LIMIT (6 bits).
BLOCK_LIMIT = 64
_BITS = 6
#: The most levels an address can have (N <= 9: ten parts of 6 bits fit under the 4-bit level tag).
MAX_LEVELS = 9
_LEVEL_SHIFT = 60
_CODE_MASK = (1 << _LEVEL_SHIFT) - 1


def _parse_parts(text: str, what: str) -> tuple[int, ...]:
    if not isinstance(text, str):
        raise AddressError(f"{what} must be a string like '1.2.3.4', got {type(text).__name__} {text!r}")
    if text == "":
        return ()
    parts = []
    for i, piece in enumerate(text.split(".")):
        piece = piece.strip()
        if not piece.isdigit():
            raise AddressError(f"{what} {text!r}: part {i + 1} ({piece!r}) is not a non-negative integer")
        value = int(piece)
        if value >= BLOCK_LIMIT:
            raise AddressError(f"{what} {text!r}: part {i + 1} is {value}, beyond the block limit (each part must be below {BLOCK_LIMIT})")
        parts.append(value)
    return tuple(parts)


def _check_levels(levels: int) -> int:
    if not isinstance(levels, int) or isinstance(levels, bool) or not 1 <= levels <= MAX_LEVELS:
        raise AddressError(f"levels must be an integer from 1 to {MAX_LEVELS}, got {levels!r}")
    return levels


class Address:
    """The logical address of a broker: N + 1 parts, ``SSC.SC.C.n`` for N = 3.

    ``Address("1.2.3.4")``; ``Address("1.2.3.4", levels=3)`` also checks the part
    count.  ``str()`` gives the text back; ``.code`` is the interned unit id
    of the broker (its level-0 unit); addresses compare and hash by value.
    """

    __slots__ = ("parts", "code")

    def __init__(self, text: Union[str, "Address"], levels: int | None = None) -> None:
        if isinstance(text, Address):
            parts = text.parts
        else:
            parts = _parse_parts(text, "address")
        if len(parts) < 2:
            raise AddressError(f"address {text!r} has {len(parts)} part(s); a broker address has at least 2 (levels + 1)")
        if len(parts) - 1 > MAX_LEVELS:
            raise AddressError(f"address {text!r} has {len(parts)} parts; at most {MAX_LEVELS + 1} (levels <= {MAX_LEVELS})")
        if levels is not None and len(parts) != _check_levels(levels) + 1:
            raise AddressError(f"address {text!r} has {len(parts)} parts; a system of {levels} levels needs {levels + 1} (SSC.SC.C.n for 3)")
        self.parts: tuple[int, ...] = parts
        code = 0
        for p in parts:
            code = (code << _BITS) | p
        self.code: int = code

    @property
    def levels(self) -> int:
        """N, the level of the highest unit below the system (parts - 1)."""
        return len(self.parts) - 1

    def unit(self, level: int) -> str:
        """The address prefix naming this broker's level-``level`` unit (``level`` 0 is the broker itself).

        ``Address("1.2.3.4").unit(2) == "1.2"``; level N + 1 is the whole system, ``""``.
        """
        n = self.levels
        if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= n + 1:
            raise AddressError(f"level must be an integer from 0 to {n + 1} for address {self}, got {level!r}")
        return ".".join(str(p) for p in self.parts[: n + 1 - level])

    def unit_id(self, level: int) -> int:
        """The interned id of this broker's level-``level`` unit (see :func:`unit_id`)."""
        return unit_id(self.code, level, self.levels)

    @classmethod
    def from_code(cls, code: int, levels: int) -> "Address":
        """The address of an interned broker id (a level-0 unit id)."""
        return cls(unit_str(code, levels), levels)

    def __str__(self) -> str:
        return ".".join(str(p) for p in self.parts)

    def __repr__(self) -> str:
        return f"Address({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Address):
            return self.parts == other.parts
        if isinstance(other, str):
            return str(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.parts)

    def __lt__(self, other: "Address") -> bool:
        return self.parts < other.parts


AddressLike = Union[str, Address]


def _addr(a: AddressLike, levels: int | None = None) -> Address:
    return a if isinstance(a, Address) and levels in (None, a.levels) else Address(a, levels)


def gateway_level(a: AddressLike, b: AddressLike) -> int:
    """The level of a gateway between brokers ``a`` and ``b``: the highest level at which their contexts differ.

    Two nodes of one cluster are joined by a level-0 link; nodes of two
    clusters of one super-cluster by a level-1 gateway; and so on.  Raises
    :class:`AddressError` for equal addresses or addresses of different systems.
    """
    x, y = _addr(a), _addr(b)
    if x.levels != y.levels:
        raise AddressError(f"addresses {x} and {y} have different numbers of parts ({x.levels + 1} and {y.levels + 1})")
    for i, (p, q) in enumerate(zip(x.parts, y.parts, strict=True)):
        if p != q:
            return x.levels - i
    raise AddressError(f"a gateway joins two different brokers; both are {x}")


# ---- interned unit ids ------------------------------------------------------


def unit_id(code: int, level: int, levels: int) -> int:
    """The id of the level-``level`` unit containing broker ``code`` in a system of ``levels`` levels."""
    if level == 0:
        return code
    if level > levels:
        return (levels + 1) << _LEVEL_SHIFT  # the system
    return (level << _LEVEL_SHIFT) | (code & ~((1 << (_BITS * level)) - 1))


def unit_level(uid: int) -> int:
    """The level of a unit id."""
    return uid >> _LEVEL_SHIFT


def contains(uid: int, code: int) -> bool:
    """Whether broker ``code`` lies in unit ``uid`` (the system, at level N + 1, contains every broker)."""
    level = uid >> _LEVEL_SHIFT
    return (code & ~((1 << (_BITS * level)) - 1)) == (uid & _CODE_MASK)


def ancestor(uid: int, level: int, levels: int) -> int:
    """The level-``level`` unit containing unit ``uid`` (``level`` >= its own)."""
    return unit_id(uid & _CODE_MASK, level, levels)


def level_of_difference(a: int, b: int, levels: int) -> int:
    """For two broker codes: the highest level at which they differ (-1 if equal)."""
    x = a ^ b
    if x == 0:
        return -1
    return (x.bit_length() - 1) // _BITS


def child_toward(container_level: int, code: int, levels: int) -> int:
    """The level ``container_level - 1`` unit containing broker ``code``."""
    return unit_id(code, container_level - 1, levels)


@lru_cache(maxsize=1 << 16)
def unit_str(uid: int, levels: int) -> str:
    """The address prefix of a unit id (``""`` for the system)."""
    level = uid >> _LEVEL_SHIFT
    if level > levels:
        return ""
    code = uid & _CODE_MASK
    parts = [(code >> (_BITS * i)) & (BLOCK_LIMIT - 1) for i in range(levels, level - 1, -1)]
    return ".".join(str(p) for p in parts)


def parse_unit(text: str, levels: int) -> int:
    """The unit id of an address prefix (``"1.2"``: a super-cluster when levels = 3; ``""``: the system)."""
    parts = _parse_parts(text, "unit")
    n = len(parts)
    if n > levels + 1:
        raise AddressError(f"unit {text!r} has {n} parts; a system of {levels} levels has at most {levels + 1}")
    level = levels + 1 - n
    code = 0
    for p in parts:
        code = (code << _BITS) | p
    code <<= _BITS * level
    return unit_id(code, level, levels) if level <= levels else (levels + 1) << _LEVEL_SHIFT
