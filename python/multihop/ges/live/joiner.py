"""The newcomer's side of NAP on a live system: ask a member for an address, follow the answers.

A broker that is not yet part of the system has no address and no gateway,
so it asks over a channel of its own: it binds the entry member's service,
says ``hello`` with kind ``KIND_JOINER``, and sends the
:class:`~multihop.ges.nap.Joiner` machine's requests.  The member (or the
member it forwards to, or a neighbouring cluster's, through level-1
gatekeepers) answers with ``join_reply``, which comes back along the
request's path to the entry member and out on this channel.  The machine
decides the next request from each reply (sans-IO); this module only moves
its messages.
"""

from __future__ import annotations

import time
from typing import Any

import multihop as mh
from multihop.ges.address import Address
from multihop.ges.errors import GesStateError
from multihop.ges.live import wire
from multihop.ges.live.wire import KIND_JOINER
from multihop.ges.messages import JoinReply
from multihop.ges.nap import Joiner

__all__ = ["ask_to_join"]

#: the newcomer's temporary id in its own requests (the entry member replaces it with its channel's id)
NEWCOMER = -1


def ask_to_join(dispatcher: Any, system: str, via: Address, level: int = 0, timeout: float = 10.0) -> JoinReply:
    """Run NAP for a new node through broker ``via`` of ``system``; the final reply (accepted or refused).

    Raises GesStateError when no answer comes within ``timeout`` seconds or the
    entry member closes the channel (it refused the request).
    """
    ch = dispatcher.bind(wire.service_name(system, str(via)), transport="multihop", timeout=timeout, max_message=wire.MAX_MESSAGE)
    try:
        ch.send(wire.stub.encode("hello", kind=KIND_JOINER, address=0, incarnation=0, cost=0, system=system), timeout=timeout)
        joiner = Joiner(NEWCOMER, level, via.code, via.unit_id(1))
        deadline = time.monotonic() + timeout
        while True:
            for _first, req in joiner.take():  # every request goes to the entry member, which routes it
                for data in wire.encode(req):
                    ch.send(data, timeout=max(0.0, deadline - time.monotonic()))
            if joiner.done:
                assert joiner.result is not None
                return joiner.result
            left = deadline - time.monotonic()
            if left <= 0:
                raise GesStateError(f"no answer to the join request through broker {via} within {timeout} s")
            try:
                data = ch.recv(timeout=left)
            except mh.Timeout:
                continue  # the deadline check above ends the loop
            except mh.ChannelClosed:
                raise GesStateError(f"broker {via} closed the joining channel (the request was refused)") from None
            msg = wire.decode_protocol(wire.decode(data))
            if isinstance(msg, JoinReply):
                joiner.on_reply(msg)
    finally:
        ch.close()
