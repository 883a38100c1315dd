"""Group frames as bytes (the layout is ``core-rs/src/group/frame.rs``'s, docs/groups.md §4).

:func:`encode_data` and :func:`encode_submit` turn the member machine's
:class:`~multihop.groups.messages.Data` and :class:`~multihop.groups.messages.Submit`
into link frames that follow the tree of ``(group_id, view, dest, root_core)``;
:func:`decode` reads any group frame back (:class:`Frame`).

A SUBMIT travels to the stream's sequencer: its ``dest`` field is the
sequencer's node id (the tree it follows) and its ``stamp`` field the
stream's destination.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from multihop.errors import ProtocolError
from multihop.groups.messages import Data, Submit

__all__ = ["Frame", "KIND_DATA", "KIND_SUBMIT", "KIND_REPLY", "HEADER", "encode_data", "encode_submit", "encode_reply", "decode"]

KIND_DATA = 4
KIND_CREDIT = 5
KIND_SUBMIT = 6
KIND_REPLY = 7
FLAG_STAMPED = 1
FLAG_CONVERGECAST = 2

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
    head = _HDR.pack(0, 0, kind, flags, 0, gid, view, dest, root, sender, seq, stamp, len(vc), request)
    if vc:
        head += struct.pack(f"<{len(vc)}I", *vc)
    return head + payload


def encode_data(f: Data, group_id: int, root_core: int, *, convergecast: bool = False) -> bytes:
    """A DATA frame of ``f`` on the tree of ``f.dest`` rooted at ``root_core``."""
    flags = (FLAG_STAMPED if f.stamp else 0) | (FLAG_CONVERGECAST if convergecast else 0)
    return _pack(KIND_DATA, flags, group_id, f.view, f.dest, root_core, f.sender, f.seq, f.stamp, f.vc, 0, f.payload)


def encode_submit(s: Submit, group_id: int, sequencer: int, root_core: int) -> bytes:
    """A SUBMIT frame of ``s`` toward node ``sequencer`` (the stream's destination in the stamp field)."""
    return _pack(KIND_SUBMIT, 0, group_id, s.view, sequencer, root_core, s.sender, s.seq, s.dest, (), 0, s.payload)


def encode_reply(group_id: int, view: int, to_node: int, root_core: int, sender: int, request: int, payload: bytes) -> bytes:
    """A convergecast REPLY frame from ``sender`` to node ``to_node``."""
    return _pack(KIND_REPLY, 0, group_id, view, to_node, root_core, sender, 0, 0, (), request, payload)


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
