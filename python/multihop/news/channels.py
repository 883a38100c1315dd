"""The channels of a live dispatch node: which node each leads to, and what waits to be written.

Shared by the peer driver and the clients.  A channel belongs to a node once
its first message names it (``client_hello`` / ``peer_hello``), or at once
when we bound it to a known node.  Two peers that bind to each other at once
have two channels: both are read, the older one is written (so each direction
keeps its order), and the node is gone only when its last channel closes.  Writes never block the loop: each node has
an outbox, written with ``try_send`` until the channel is busy; the rest waits
for the next round (the machines bound what they queue: delivery windows,
cumulative acks).  A closed channel is closed on our side too (``poll`` would
report it for ever otherwise).
"""

from __future__ import annotations

from collections import deque
from typing import Iterator

import multihop as mh
from multihop.news.ids import Nid
from multihop.news.wire import Record, encode

__all__ = ["ChannelTable", "drain"]


def drain(ch: mh.Channel, most: int = 256) -> list[bytes]:
    """What ``ch`` holds now, up to ``most`` messages, without waiting.

    ``try_recv`` costs ~50 ns on an empty channel, where ``poll(0)`` or an
    empty ``recv_batch(n, 0)`` cost 1-5 us: a client looking at its few
    channels reads them directly.
    """
    out: list[bytes] = []
    while len(out) < most:
        data = ch.try_recv()
        if data is None:
            break
        out.append(data)
    return out


class ChannelTable:
    """Channels by node, nodes by channel, and per-node outboxes."""

    def __init__(self) -> None:
        self.by_node: dict[Nid, list[mh.Channel]] = {}  # oldest first: the one we write on
        self.node_of: dict[int, Nid] = {}  # id(channel) -> node
        self.fresh: dict[int, mh.Channel] = {}  # accepted, not named yet
        self.outbox: dict[Nid, deque[bytes]] = {}
        self.dropped = 0  # messages for a node with no channel
        self.busy_rounds = 0
        self._encoded: dict[int, tuple[Record, bytes]] = {}  # id(record) -> (record, its bytes)

    def add_fresh(self, ch: mh.Channel) -> None:
        """An accepted channel whose node its first message will name."""
        self.fresh[id(ch)] = ch

    def name(self, ch: mh.Channel, node: Nid) -> None:
        """``ch`` leads to ``node``."""
        self.fresh.pop(id(ch), None)
        self.node_of[id(ch)] = node
        chans = self.by_node.setdefault(node, [])
        if ch not in chans:
            chans.append(ch)

    def node(self, ch: mh.Channel) -> Nid | None:
        """The node ``ch`` leads to, if known."""
        return self.node_of.get(id(ch))

    def channel(self, node: Nid) -> mh.Channel | None:
        """The channel we write to ``node`` on, or None."""
        chans = self.by_node.get(node)
        return chans[0] if chans else None

    def forget(self, ch: mh.Channel) -> Nid | None:
        """Close ``ch`` and forget it; return its node if that was the node's last channel."""
        self.fresh.pop(id(ch), None)
        node = self.node_of.pop(id(ch), None)
        try:
            ch.close()
        except Exception:
            pass
        if node is None:
            return None
        chans = self.by_node.get(node, [])
        if ch in chans:
            chans.remove(ch)
        if chans:
            return None
        self.by_node.pop(node, None)
        self.outbox.pop(node, None)
        return node

    def queue(self, node: Nid, rec: Record) -> None:
        """Encode ``rec`` and queue it for ``node`` (dropped, and counted, if we have no channel to it).

        The same record object sent to many nodes (a news to many sinks) is encoded once.
        """
        if node not in self.by_node:
            self.dropped += 1
            return
        hit = self._encoded.get(id(rec))
        if hit is not None and hit[0] is rec:
            data = hit[1]
        else:
            data = encode(rec)
            if len(self._encoded) >= 4096:
                self._encoded.clear()
            self._encoded[id(rec)] = (rec, data)
        self.outbox.setdefault(node, deque()).append(data)

    def flush(self) -> None:
        """Write what the channels take now.

        A channel found closed keeps what it still holds for us: the read side
        drains it, then sees the closure and forgets it; what we had for it is dropped.
        """
        for node, box in list(self.outbox.items()):
            ch = self.channel(node)
            if ch is None:
                self.outbox.pop(node, None)
                continue
            try:
                while box:
                    ch.try_send(box[0])
                    box.popleft()
            except mh.TxBusy:
                self.busy_rounds += 1
            except mh.ChannelClosed:
                box.clear()
            if not box:
                self.outbox.pop(node, None)

    def flush_node(self, node: Nid, timeout: float | None) -> None:
        """Write everything queued for ``node``, waiting up to ``timeout`` for room (raises Timeout, ChannelClosed)."""
        box = self.outbox.get(node)
        ch = self.channel(node)
        if not box or ch is None:
            return
        while box:
            ch.send(box[0], timeout)
            box.popleft()
        self.outbox.pop(node, None)

    @property
    def backlog(self) -> int:
        """Messages waiting in outboxes."""
        return sum(len(b) for b in self.outbox.values())

    def channels(self) -> Iterator[mh.Channel]:
        """Every channel (named or fresh)."""
        for chans in self.by_node.values():
            yield from chans
        yield from self.fresh.values()

    def close_all(self) -> None:
        """Close every channel."""
        for ch in list(self.channels()):
            try:
                ch.close()
            except Exception:
                pass
        self.by_node.clear()
        self.node_of.clear()
        self.fresh.clear()
        self.outbox.clear()
