"""128-bit node ids and news ids.

Every node (peer, source, sink, relay) has a 128-bit id made, as RE.VE.N.GE.
does, by hashing random node-dependent data with MD5 (host, pid, clock,
16 bytes from the OS, a counter).  On the wire an id is the Flounder struct
``nid {hi, lo}``; in the machines it is that same namedtuple (hashable, so a
dict key).  A domain's id is the MD5 of its runtime and system names, so every
process computes the same one.  A news is named by ``(source id, seq)``.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import socket
import time

from multihop.dispatch.dispatch_if import nid

__all__ = ["Nid", "NewsKey", "ZERO", "new_id", "domain_id", "from_bytes", "hex_id", "parse_hex", "short"]

Nid = nid
"""A node id: the generated ``nid(hi, lo)`` namedtuple."""

NewsKey = tuple[nid, int]
"""A news id: (source id, sequence number)."""

ZERO = nid(0, 0)
"""The null id (never drawn: :func:`new_id` redraws it)."""

_counter = itertools.count()


def from_bytes(digest: bytes) -> nid:
    """The id made of the first 16 bytes of ``digest`` (big-endian hi, lo)."""
    return nid(int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:16], "big"))


def new_id(kind: str = "node") -> nid:
    """A fresh id: MD5 of random node-dependent data (never :data:`ZERO`)."""
    while True:
        data = f"{kind}|{socket.gethostname()}|{os.getpid()}|{time.time_ns()}|{next(_counter)}|".encode() + os.urandom(16)
        n = from_bytes(hashlib.md5(data).digest())
        if n != ZERO:
            return n


def domain_id(runtime: str, system: str) -> nid:
    """The id of the dispatch domain ``system`` on runtime ``runtime`` (the same in every process)."""
    return from_bytes(hashlib.md5(f"domain|{runtime}|{system}".encode()).digest())


def hex_id(n: nid) -> str:
    """The 32 hex digits of an id."""
    return f"{n.hi:016x}{n.lo:016x}"


def parse_hex(text: str) -> nid:
    """The id written as 32 hex digits; ValueError otherwise."""
    if len(text) != 32:
        raise ValueError(f"a node id is 32 hex digits, got {text!r}")
    value = int(text, 16)
    return nid(value >> 64, value & ((1 << 64) - 1))


def short(n: nid) -> str:
    """The first 8 hex digits of an id (for logs and status)."""
    return f"{n.hi:016x}"[:8]
