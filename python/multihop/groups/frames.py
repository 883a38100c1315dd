"""Group frames as bytes (the layout is ``core-rs/base/src/wire/multicast.rs``'s, docs/groups.md §4).

:func:`encode_data` and :func:`encode_submit` turn the member machine's
:class:`~multihop.groups.messages.Data` and :class:`~multihop.groups.messages.Submit`
into link frames that follow the tree of ``(group_id, view, dest, root_core)``;
:func:`decode` reads any group frame back (:class:`Frame`).

A SUBMIT travels to the stream's sequencer: its ``dest`` field is the
sequencer's node id (the tree it follows) and its ``stamp`` field the
stream's destination.

Convergecast (docs/groups.md §8): a payload that starts with the tag
:data:`CC_AGGREGATED` (then ``u16 request, u32 timeout_ms``: :data:`CC_TAG`)
is a request the monitors aggregate: :func:`encode_data` flags it and copies
the request number and the timeout into the header, whoever encodes it (the
sender, or a total-order stream's sequencer).  Each recipient answers with
:func:`encode_up_reply` toward its own monitor; the result comes back as a
merged REPLY whose payload :func:`decode_partial` reads.  The tag
:data:`CC_DIRECT` is the flat baseline: each recipient answers the sender
directly (:func:`encode_reply`).
"""

from __future__ import annotations

import struct
from collections.abc import Hashable
from dataclasses import dataclass

from multihop.errors import ProtocolError
from multihop.groups.convergecast import Partial
from multihop.groups.messages import Data, Submit

__all__ = [
    "Frame",
    "KIND_DATA",
    "KIND_SUBMIT",
    "KIND_REPLY",
    "FLAG_CONVERGECAST",
    "FLAG_UP",
    "FLAG_MERGED",
    "FLAG_GAVE_UP",
    "HEADER",
    "CC_TAG",
    "CC_PLAIN",
    "CC_AGGREGATED",
    "CC_DIRECT",
    "encode_data",
    "encode_submit",
    "encode_reply",
    "encode_up_reply",
    "decode",
    "decode_partial",
]

KIND_DATA = 4
KIND_CREDIT = 5
KIND_SUBMIT = 6
KIND_REPLY = 7
FLAG_STAMPED = 1
FLAG_CONVERGECAST = 2
FLAG_UP = 4  # REPLY: up to the monitor (seq: the requester's node id); takes no credit
FLAG_MERGED = 8  # REPLY: the payload is a merged partial (without FLAG_UP: the result)
FLAG_GAVE_UP = 16  # merged REPLY: some monitor stopped waiting (time ran out, or too many requests)

CC_PLAIN = 0  # payload tag: a plain message
CC_AGGREGATED = 1  # payload tag: a convergecast request the monitors aggregate
CC_DIRECT = 2  # payload tag: a convergecast request answered directly to the sender (the flat baseline)
CC_TAG = struct.Struct("<BHI")  # tag, request number, timeout in ms (0: none)

_HDR = struct.Struct("<QBBHIIIIIIIIHH")
HEADER = _HDR.size  # 48


@dataclass(frozen=True)
class Frame:
    """A decoded group frame."""

    kind: int
    flags: int
    group_id: int
    view: int
    dest: int
    root_core: int
    sender: int
    seq: int
    stamp: int
    request: int
    vc: tuple[int, ...]
    payload: bytes


def _pack(
    kind: int,
    flags: int,
    credit: int,
    gid: int,
    view: int,
    dest: int,
    root: int,
    sender: int,
    seq: int,
    stamp: int,
    vc: tuple[int, ...],
    request: int,
    payload: bytes,
) -> bytes:
    head = _HDR.pack(0, 0, kind, flags, credit, gid, view, dest, root, sender, seq, stamp, len(vc), request)
    if vc:
        head += struct.pack(f"<{len(vc)}I", *vc)
    return head + payload


def encode_data(f: Data, group_id: int, root_core: int) -> bytes:
    """A DATA frame of ``f`` on the tree of ``f.dest`` rooted at ``root_core`` (flagged when its payload is an
    aggregated convergecast request)."""
    flags = FLAG_STAMPED if f.stamp else 0
    request = timeout_ms = 0
    if f.payload[:1] == bytes([CC_AGGREGATED]) and len(f.payload) >= CC_TAG.size:
        _, request, timeout_ms = CC_TAG.unpack_from(f.payload)
        flags |= FLAG_CONVERGECAST
    return _pack(KIND_DATA, flags, timeout_ms, group_id, f.view, f.dest, root_core, f.sender, f.seq, f.stamp, f.vc, request, f.payload)


def encode_submit(s: Submit, group_id: int, sequencer: int, root_core: int) -> bytes:
    """A SUBMIT frame of ``s`` toward node ``sequencer`` (the stream's destination in the stamp field)."""
    return _pack(KIND_SUBMIT, 0, 0, group_id, s.view, sequencer, root_core, s.sender, s.seq, s.dest, (), 0, s.payload)


def encode_reply(group_id: int, view: int, to_node: int, root_core: int, sender: int, request: int, payload: bytes) -> bytes:
    """A direct convergecast REPLY frame from ``sender`` to node ``to_node`` (the flat baseline)."""
    return _pack(KIND_REPLY, 0, 0, group_id, view, to_node, root_core, sender, 0, 0, (), request, payload)


def encode_up_reply(group_id: int, view: int, dest: int, root_core: int, sender: int, requester: int, request: int, payload: bytes) -> bytes:
    """Member ``sender``'s reply to request ``request`` of node ``requester``, up to its monitor on the request's
    tree (``dest`` rooted at ``root_core``)."""
    return _pack(KIND_REPLY, FLAG_UP, 0, group_id, view, dest, root_core, sender, requester, 0, (), request, payload)


def decode_partial(b: bytes) -> Partial:
    """A merged partial (``u32 n, (u32 node, u32 len, bytes) * n, u32 m, u32 node * m``); ProtocolError if malformed."""
    try:
        (n,) = struct.unpack_from("<I", b, 0)
        at = 4
        replies: dict[Hashable, object] = {}
        for _ in range(n):
            node, size = struct.unpack_from("<II", b, at)
            at += 8
            if at + size > len(b):
                raise ProtocolError(f"reply of node {node} ({size} bytes) runs past the partial's {len(b)} bytes")
            replies[node] = bytes(b[at : at + size])
            at += size
        (m,) = struct.unpack_from("<I", b, at)
        missing = struct.unpack_from(f"<{m}I", b, at + 4)
        at += 4 + 4 * m
    except struct.error:
        raise ProtocolError(f"convergecast partial of {len(b)} bytes is cut short") from None
    if at != len(b):
        raise ProtocolError(f"convergecast partial has {len(b) - at} bytes left over")
    return Partial(replies, frozenset(missing))


def decode(b: bytes) -> Frame:
    """Read a group frame; ProtocolError if it is short or not a group frame."""
    if len(b) < HEADER:
        raise ProtocolError(f"group frame of {len(b)} bytes is shorter than its {HEADER}-byte header")
    _, _, kind, flags, _, gid, view, dest, root, sender, seq, stamp, vc_len, request = _HDR.unpack_from(b)
    if kind not in (KIND_DATA, KIND_SUBMIT, KIND_REPLY):
        raise ProtocolError(f"kind {kind} is not a group data frame")
    end = HEADER + 4 * vc_len
    if len(b) < end:
        raise ProtocolError(f"group frame of {len(b)} bytes is too short for its {vc_len}-entry clock")
    vc = struct.unpack_from(f"<{vc_len}I", b, HEADER) if vc_len else ()
    return Frame(kind, flags, gid, view, dest, root, sender, seq, stamp, request, tuple(vc), bytes(b[end:]))
