"""Administration of a live domain: ask each peer for its status, or tell it to leave.

An administrator is a client of kind ``CLIENT_ADMIN``: it binds to a peer,
says hello, and sends ``status_request`` or ``shutdown``.  Used by
``multihop news status|down`` and by :class:`multihop.news.System`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import multihop as mh
from multihop.defaults import DEFAULT_TIMEOUT
from multihop.news.errors import DispatchError
from multihop.news.ids import Nid, domain_id, hex_id, new_identity
from multihop.news.naming import check_system, listed_peers, peer_service
from multihop.news.wire import DecodeError, M, decode, encode

__all__ = ["peer_status", "domain_status", "shutdown_peer"]


def _session(rt: mh.Runtime, system: str, peer: Nid, core: int | None, timeout: float) -> tuple[mh.Dispatcher, mh.Channel]:
    d = rt.dispatcher(rt.cores[0] if core is None else core)
    try:
        ch = d.bind(peer_service(system, peer), timeout=timeout)
        me, secret = new_identity("admin")
        ch.send(encode(M.messages.client_hello(M.client_kind.CLIENT_ADMIN, me, domain_id(rt.name, system), secret)), timeout)
    except BaseException:
        d.detach()
        raise
    return d, ch


def peer_status(rt: mh.Runtime, system: str, peer: Nid, timeout: float = DEFAULT_TIMEOUT, core: int | None = None) -> dict[str, Any]:
    """The status of one peer (its ``status_reply``, as a dict).

    Raises BindError (the peer is gone, or refused us), Timeout (it did not answer),
    DispatchError (its answer is not a JSON object).
    """
    d, ch = _session(rt, system, peer, core, timeout)
    try:
        ch.send(encode(M.messages.status_request(1)), timeout)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise mh.Timeout(f"peer {hex_id(peer)} did not answer its status within {timeout} s")
            try:
                rec = decode(ch.recv(left))
            except DecodeError:
                continue
            if isinstance(rec, M.messages.status_reply):
                try:
                    st = json.loads(rec.json)
                except ValueError as e:
                    raise DispatchError(f"peer {hex_id(peer)} answered a status that is not JSON: {e}") from None
                if not isinstance(st, dict):
                    raise DispatchError(f"peer {hex_id(peer)} answered a status that is not a JSON object")
                return st
            if isinstance(rec, M.messages.refused):
                raise mh.BindError(f"peer {hex_id(peer)} refused: {rec.reason}")
    finally:
        ch.close()
        d.detach()


def domain_status(runtime: str, system: str, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """Every listed peer's status (or the error reaching it), by peer id."""
    rt = mh.Runtime.attach(runtime)
    check_system(system)
    out: dict[str, Any] = {}
    for peer, entry in sorted(listed_peers(rt, system).items()):
        try:
            st = peer_status(rt, system, peer, timeout)
        except (mh.MultihopError, OSError) as e:
            st = {"error": f"{type(e).__name__}: {e}"}
        st["pid"] = entry.get("pid")
        st["core"] = entry.get("core")
        out[hex_id(peer)] = st
    return out


def shutdown_peer(rt: mh.Runtime, system: str, peer: Nid, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Tell a peer to leave gracefully (it exits once it has)."""
    d, ch = _session(rt, system, peer, None, timeout)
    try:
        ch.send(encode(M.messages.shutdown(int(timeout * 1000))), timeout)
        # wait for the peer to close the channel (it leaves), so the caller sees it gone
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ch.recv(max(0.0, deadline - time.monotonic()))
            except mh.ChannelClosed:
                return
            except mh.Timeout:
                return
    finally:
        ch.close()
        d.detach()
