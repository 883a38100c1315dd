"""Causal order (TN-006 4.2.2) with vector clocks, per stream.

The clock of a stream has one entry per member of the view, in node-id
order; entry j counts the frames of member j to this stream.  A sender
stamps its frame with what it has delivered of the stream and its own count
(:class:`CausalClock`); a receiver delivers a frame from j when it is j's
next one and every frame it had seen from the others has been delivered here
(:class:`CausalReceiver`, the classic Birman-Schiper-Stephenson rule).

Scope (our decision, documented in ``docs/groups.md``): causality is tracked
within a stream.  Messages to different destinations (the broadcast id, each
multicast group) are not ordered against each other; a causal chain that
passes through another stream is not seen.
"""

from __future__ import annotations

from collections.abc import Sequence

from multihop.errors import ProtocolError
from multihop.groups.messages import Data

__all__ = ["CausalClock", "CausalReceiver"]


class CausalReceiver:
    """Delivers a stream's frames in causal order.

    Args:
        members: the view's node ids, ascending (the clock's entries).
    """

    def __init__(self, members: Sequence[int]) -> None:
        self._index = {n: i for i, n in enumerate(members)}
        self._delivered = [0] * len(members)
        self._waiting: dict[int, dict[int, Data]] = {}

    @property
    def members(self) -> tuple[int, ...]:
        """The node ids of the clock's entries, in order."""
        return tuple(self._index)

    def _check(self, frame: Data) -> int:
        j = self._index.get(frame.sender)
        if j is None:
            raise ProtocolError(f"causal frame from node {frame.sender}, which is not in the view {self.members}")
        if len(frame.vc) != len(self._delivered):
            raise ProtocolError(
                f"causal frame from node {frame.sender} has a clock of {len(frame.vc)} entries; the view has {len(self._delivered)} members"
            )
        if frame.vc[j] != frame.seq:
            raise ProtocolError(f"causal frame {frame.seq} from node {frame.sender} counts {frame.vc[j]} for its sender")
        if frame.seq <= self._delivered[j] or frame.seq in self._waiting.get(frame.sender, {}):
            raise ProtocolError(f"duplicate causal frame {frame.seq} from node {frame.sender}")
        return j

    def _ready(self, frame: Data, j: int) -> bool:
        if frame.seq != self._delivered[j] + 1:
            return False
        return all(v <= self._delivered[k] for k, v in enumerate(frame.vc) if k != j)

    def offer(self, frame: Data) -> list[Data]:
        """Take one arriving frame; return the frames now deliverable, in causal order.

        Raises:
            ProtocolError: a sender outside the view, a clock of the wrong
                size or inconsistent with ``seq``, or a duplicate (the
                machine is left as it was).
        """
        self._check(frame)
        self._waiting.setdefault(frame.sender, {})[frame.seq] = frame
        out: list[Data] = []
        progress = True
        while progress:  # each round delivers at least one frame or stops
            progress = False
            for sender, waiting in self._waiting.items():
                j = self._index[sender]
                head = waiting.get(self._delivered[j] + 1)
                if head is not None and self._ready(head, j):
                    del waiting[head.seq]
                    self._delivered[j] += 1
                    out.append(head)
                    progress = True
        return out

    def note_own(self, node: int) -> None:
        """Count a frame this member sent to the stream and delivered to itself at once."""
        self._delivered[self._index[node]] += 1

    def delivered(self, sender: int) -> int:
        """How many frames of ``sender`` this stream has delivered."""
        return self._delivered[self._index[sender]]

    def clock(self) -> tuple[int, ...]:
        """The delivered counts, one per member in node-id order."""
        return tuple(self._delivered)

    @property
    def waiting(self) -> int:
        """Frames held back for a missing causal predecessor."""
        return sum(len(w) for w in self._waiting.values())


class CausalClock:
    """The sending side of one member on one stream: stamps its frames.

    The stamp is the receiver's delivered counts with this member's entry set
    to its own frame count, so every frame it delivered before sending is a
    causal predecessor of the new frame.
    """

    def __init__(self, receiver: CausalReceiver, me: int) -> None:
        self._receiver = receiver
        self._me = me
        self._index = receiver.members.index(me)
        self._sent = 0

    def stamp(self) -> tuple[int, tuple[int, ...]]:
        """The next frame's ``(seq, vc)``; counts it as sent."""
        self._sent += 1
        vc = list(self._receiver.clock())
        vc[self._index] = self._sent
        return self._sent, tuple(vc)

    @property
    def sent(self) -> int:
        """Frames stamped so far."""
        return self._sent
