"""Profiles: chains of constraints on successive attributes (routing paper 3.3.2).

A profile is a list of ``(attribute, value or "*")`` pairs in signature order: it
constrains the first k attributes of an event, each to a value or to anything
(``"*"``, the weakest constraint; ``"*"`` is always the wildcard, never the
string ``"*"``).  An event matches when its first k attribute names are the
profile's and each value satisfies its constraint; later attributes are free.
A profile is kept as a *chain*: a tuple of ``(attribute, canonical value or "*")``.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from multihop.ges.event import canonical, check_attribute

__all__ = ["WILDCARD", "Chain", "make_chain", "chain_text", "parse_chain", "chain_matches"]

WILDCARD = "*"
Chain = tuple[tuple[str, str], ...]
_PAIR, _NEXT = "\x1d", "\x1e"


def make_chain(profile: Iterable[Any]) -> Chain:
    """The chain of a profile given as ``[(attribute, value or "*"), ...]``; raises ValueError/TypeError naming the bad pair."""
    if isinstance(profile, (str, bytes)) or not isinstance(profile, (list, tuple)):
        raise TypeError(f"a profile is a list of (attribute, value or '*') pairs, got {profile!r}")
    out = []
    for i, pair in enumerate(profile):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"profile item {i} must be an (attribute, value) pair, got {pair!r}")
        name, value = pair
        check_attribute(name)
        out.append((name, WILDCARD if isinstance(value, str) and value == WILDCARD else canonical(value, name)))
    if not out:
        raise ValueError("a profile constrains at least one attribute")
    return tuple(out)


def chain_text(chain: Chain) -> str:
    """A chain as one string (for the wire)."""
    return _NEXT.join(f"{a}{_PAIR}{v}" for a, v in chain)


def parse_chain(text: str) -> Chain:
    """The chain of :func:`chain_text`; raises ValueError on malformed text."""
    out = []
    for part in text.split(_NEXT):
        a, sep, v = part.partition(_PAIR)
        if not sep or not a or not v:
            raise ValueError(f"malformed profile chain {text!r}")
        out.append((a, v))
    return tuple(out)


def chain_matches(chain: Chain, names: Sequence[str], values: Sequence[str]) -> bool:
    """Reference matcher: does an event with these attribute names and canonical values match the chain."""
    if len(chain) > len(names):
        return False
    for (a, v), n, x in zip(chain, names, values, strict=False):
        if a != n or (v != WILDCARD and v != x):
            return False
    return True
