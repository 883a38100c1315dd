"""128-bit node ids and news ids, and the secrets that prove them.

Every node (peer, source, sink, relay) has a 128-bit id made, as RE.VE.N.GE.
does, by hashing random node-dependent data with MD5 (host, pid, clock,
16 bytes from the OS, a counter).  That data is the node's *secret*: the node
keeps it and shows it in its hello (``proof``), and whoever it talks to checks
that its MD5 is the id claimed (:func:`proves`).  Nobody else can show it, so
no other process can speak under a node's id, whether the node is connected,
gone, or was never seen by that peer (:func:`new_identity`).  On the wire an id
is the Flounder struct ``nid {hi, lo}``; in the machines it is that same
namedtuple (hashable, so a dict key).  A domain's id is the MD5 of its runtime
and system names, so every process computes the same one.  A news is named by
``(source id, seq)``.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import socket
import time

from multihop.news.dispatch_if import nid

__all__ = [
    "Nid",
    "NewsKey",
    "ZERO",
    "MAX_SECRET",
    "new_id",
    "new_identity",
    "identity_of",
    "proves",
    "domain_id",
    "from_bytes",
    "hex_id",
    "parse_hex",
    "short",
]

Nid = nid
"""A node id: the generated ``nid(hi, lo)`` namedtuple."""

NewsKey = tuple[nid, int]
"""A news id: (source id, sequence number)."""

ZERO = nid(0, 0)
"""The null id (never drawn: :func:`new_id` redraws it)."""

MAX_SECRET = 256
"""The longest secret (bytes) a hello may show (the Flounder bound of ``proof``)."""

_counter = itertools.count()


def from_bytes(digest: bytes) -> nid:
    """The id made of the first 16 bytes of ``digest`` (big-endian hi, lo)."""
    return nid(int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:16], "big"))


def new_identity(kind: str = "node") -> tuple[nid, bytes]:
    """A fresh ``(id, secret)``: the secret is random node-dependent data, the id its MD5 (never :data:`ZERO`)."""
    while True:
        host = socket.gethostname()[:64]
        data = f"{kind[:32]}|{host}|{os.getpid()}|{time.time_ns()}|{next(_counter)}|".encode() + os.urandom(16)
        n = from_bytes(hashlib.md5(data).digest())
        if n != ZERO:
            return n, data


def new_id(kind: str = "node") -> nid:
    """A fresh id (its secret dropped: for nodes that never need to prove it, as in tests)."""
    return new_identity(kind)[0]


def identity_of(secret: bytes) -> nid:
    """The id a secret proves (its MD5); ValueError for a secret that is empty or longer than :data:`MAX_SECRET`."""
    if not 0 < len(secret) <= MAX_SECRET:
        raise ValueError(f"a node secret is 1..{MAX_SECRET} bytes, got {len(secret)}")
    return from_bytes(hashlib.md5(bytes(secret)).digest())


def proves(node: nid, secret: bytes) -> bool:
    """Whether ``secret`` is the data whose MD5 is ``node`` (a hello's proof of the id it claims)."""
    return 0 < len(secret) <= MAX_SECRET and node != ZERO and identity_of(secret) == node


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
