"""Single-source FIFO (TN-006 4.2.1): each sender's frames of a stream in ``seq`` order."""

from __future__ import annotations

from multihop.errors import ProtocolError
from multihop.groups.messages import Data

__all__ = ["FifoReceiver"]


class FifoReceiver:
    """Delivers each sender's frames of one stream in ``seq`` order, 1, 2, 3 ...

    A frame that arrives early waits for the ones before it (the tree keeps
    a sender's frames in order, so this only happens when a path changed);
    a frame whose ``seq`` was already delivered or is already waiting is a
    duplicate and raises :class:`~multihop.ProtocolError`, leaving the
    machine as it was.
    """

    def __init__(self) -> None:
        self._next: dict[int, int] = {}
        self._waiting: dict[int, dict[int, Data]] = {}

    def offer(self, frame: Data) -> list[Data]:
        """Take one arriving frame; return the frames now deliverable, in order."""
        if frame.seq < 1:
            raise ProtocolError(f"frame seq {frame.seq} from node {frame.sender}: seqs start at 1")
        expected = self._next.get(frame.sender, 1)
        if frame.seq < expected or frame.seq in self._waiting.get(frame.sender, {}):
            raise ProtocolError(f"duplicate frame {frame.seq} from node {frame.sender} to {frame.dest} (next expected {expected})")
        waiting = self._waiting.setdefault(frame.sender, {})
        waiting[frame.seq] = frame
        out: list[Data] = []
        while expected in waiting:  # bounded by the frames waiting
            out.append(waiting.pop(expected))
            expected += 1
        self._next[frame.sender] = expected
        return out

    def delivered(self, sender: int) -> int:
        """How many frames of ``sender`` this stream has delivered (its last delivered seq)."""
        return self._next.get(sender, 1) - 1

    @property
    def waiting(self) -> int:
        """Frames held back for a missing predecessor."""
        return sum(len(w) for w in self._waiting.values())
