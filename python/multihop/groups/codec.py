"""The group service's conversation as JSON objects tagged by ``op`` (the control-plane convention).

:func:`encode` and :func:`decode` turn the values of :mod:`multihop.groups.messages`
(requests, replies, Prepare, Flushed, Install) into one JSON text and back.
Besides them a member sends ``hello`` (its endpoint) first, and the service
adds ``group_id`` and ``window`` to every Install (what the data plane needs).
A text that is not one of these raises :class:`~multihop.errors.ProtocolError`.
"""

from __future__ import annotations

import json
from typing import Any

from multihop.errors import ProtocolError
from multihop.groups.messages import (
    CreateGroup,
    CreateMulticast,
    Flushed,
    Install,
    Join,
    JoinMulticast,
    Leave,
    LeaveMulticast,
    Prepare,
    Reply,
    Request,
    StreamMark,
)
from multihop.groups.view import Endpoint, View

__all__ = ["encode", "decode", "view_to_dict", "view_from_dict"]

_REQUESTS: dict[str, type[Request]] = {
    "create_group": CreateGroup,
    "join": Join,
    "leave": Leave,
    "create_multicast": CreateMulticast,
    "join_multicast": JoinMulticast,
    "leave_multicast": LeaveMulticast,
}
_REQUEST_OPS = {cls: op for op, cls in _REQUESTS.items()}


def view_to_dict(v: View) -> dict[str, Any]:
    """A view as plain JSON values."""
    return {
        "group": v.group,
        "view_id": v.view_id,
        "order": v.order,
        "tree": v.tree,
        "members": [[n, e.core, e.dispatcher] for n, e in v.members],
        "multicast": [[m, sorted(nodes)] for m, nodes in v.multicast],
    }


def view_from_dict(d: dict[str, Any]) -> View:
    """The view :func:`view_to_dict` made."""
    return View.make(
        d["group"],
        int(d["view_id"]),
        d["order"],
        d["tree"],
        {int(n): Endpoint(int(c), int(p)) for n, c, p in d["members"]},
        {int(m): [int(x) for x in nodes] for m, nodes in d["multicast"]},
    )


def _mark(m: StreamMark) -> list[Any]:
    return [m.dest, m.sender, m.seq, [list(s) for s in m.submitted]]


def _unmark(x: list[Any]) -> StreamMark:
    return StreamMark(int(x[0]), int(x[1]), int(x[2]), tuple((int(a), int(b)) for a, b in x[3]))


def encode(msg: object, **extra: Any) -> bytes:
    """One message as a JSON text (``extra`` fields are added as they are)."""
    d: dict[str, Any]
    if isinstance(msg, Request):
        d = {"op": _REQUEST_OPS[type(msg)], "req": msg.req, "core": msg.endpoint.core, "dispatcher": msg.endpoint.dispatcher, "group": msg.group}
        if isinstance(msg, CreateGroup):
            d |= {"order": msg.order, "tree": msg.tree}
        if isinstance(msg, (JoinMulticast, LeaveMulticast)):
            d["mcast"] = msg.mcast
    elif isinstance(msg, Reply):
        d = {"op": "reply", "req": msg.req, "group": msg.group, "value": msg.value, "error": msg.error}
    elif isinstance(msg, Prepare):
        d = {"op": "prepare", "group": msg.group, "view": msg.view}
    elif isinstance(msg, Flushed):
        d = {"op": "flushed", "group": msg.group, "view": msg.view, "node": msg.node, "marks": [_mark(m) for m in msg.marks]}
    elif isinstance(msg, Install):
        d = {
            "op": "install",
            "view": view_to_dict(msg.view),
            "closing": [_mark(m) for m in msg.closing],
            "joined": list(msg.joined),
            "left": list(msg.left),
            "died": list(msg.died),
        }
    else:
        raise ProtocolError(f"no JSON encoding for {type(msg).__name__}")
    d |= extra
    return json.dumps(d, separators=(",", ":")).encode()


def decode(text: bytes) -> tuple[object, dict[str, Any]]:
    """The message in ``text`` and the whole object (for the extra fields).

    Raises:
        ProtocolError: not JSON, an unknown ``op``, or a missing field.
    """
    try:
        d = json.loads(text)
        op = d["op"]
        if op in _REQUESTS:
            cls = _REQUESTS[op]
            ep = Endpoint(int(d["core"]), int(d["dispatcher"]))
            kw: dict[str, Any] = {}
            if cls is CreateGroup:
                kw = {"order": d["order"], "tree": d["tree"]}
            if cls in (JoinMulticast, LeaveMulticast):
                kw = {"mcast": int(d["mcast"])}
            return cls(int(d["req"]), ep, d["group"], **kw), d
        if op == "reply":
            return Reply(int(d["req"]), d["group"], int(d["value"]), d["error"]), d
        if op == "prepare":
            return Prepare(d["group"], int(d["view"])), d
        if op == "flushed":
            return Flushed(d["group"], int(d["view"]), int(d["node"]), tuple(_unmark(m) for m in d["marks"])), d
        if op == "install":
            return Install(
                view_from_dict(d["view"]), tuple(_unmark(m) for m in d["closing"]), tuple(d["joined"]), tuple(d["left"]), tuple(d["died"])
            ), d
        if op in ("hello", "info", "info_reply", "closed"):
            return None, d
    except (ValueError, KeyError, TypeError) as e:
        raise ProtocolError(f"bad group service message {text[:200]!r}: {e}") from None
    raise ProtocolError(f"unknown group service message op {op!r}")
