"""A reliable, ordered link over a lossy one: the simulator's link layer when it drops messages.

Sans-IO, one object per direction of a link.  The sender numbers frames and
keeps them until acknowledged; the receiver delivers in order, keeps frames
that overtake a lost one, and acknowledges cumulatively.  The driver sends
what :meth:`ReliableSender.send` / :meth:`ReliableSender.expire` return and
asks :meth:`ReliableSender.expire` again when a retransmission timer fires.

Live gateways are multi-hop channels, which never drop (they block, or close),
so the live broker does not use this layer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReliableSender", "ReliableReceiver"]


class ReliableSender:
    """The sending half: sequence numbers, the unacknowledged frames, retransmission."""

    __slots__ = ("next_seq", "unacked", "retransmitted")

    def __init__(self) -> None:
        self.next_seq = 0
        self.unacked: dict[int, Any] = {}
        self.retransmitted = 0

    def send(self, payload: Any) -> tuple[int, Any]:
        """Number a payload; returns the frame ``(seq, payload)`` to put on the wire."""
        seq = self.next_seq
        self.next_seq += 1
        self.unacked[seq] = payload
        return (seq, payload)

    def ack(self, upto: int) -> None:
        """Every frame below ``upto`` arrived."""
        for seq in [s for s in self.unacked if s < upto]:
            del self.unacked[seq]

    def expire(self) -> list[tuple[int, Any]]:
        """The retransmission timer fired: every unacknowledged frame, in order, to send again."""
        frames = sorted(self.unacked.items())
        self.retransmitted += len(frames)
        return frames


class ReliableReceiver:
    """The receiving half: in-order delivery and a cumulative acknowledgement."""

    __slots__ = ("expected", "held", "duplicates")

    def __init__(self) -> None:
        self.expected = 0
        self.held: dict[int, Any] = {}
        self.duplicates = 0

    def receive(self, frame: tuple[int, Any]) -> tuple[list[Any], int]:
        """A frame arrived: the payloads now deliverable (in order) and the ack to send (next expected)."""
        seq, payload = frame
        if seq < self.expected or seq in self.held:
            self.duplicates += 1
            return [], self.expected
        self.held[seq] = payload
        out = []
        while self.expected in self.held:
            out.append(self.held.pop(self.expected))
            self.expected += 1
        return out, self.expected
