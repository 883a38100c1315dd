"""Total order (TN-006 4.2.3): a sequencer per stream stamps every frame.

A sender submits its frame to the stream's sequencer (:class:`Sequencer`:
the lowest node id of the stream's members in the view), which stamps it
1, 2, 3 ... and sends the stamped copy down its tree; every member delivers
in stamp order (:class:`TotalReceiver`).  The sender gets its own frame back
that way too, so its delivery takes its place in the order.

**Sequencer failure (our rule).**  The sequencer is a member; when it dies
the membership service makes the next view without it, and:

1. every frame the dead sequencer stamped *and wrote to its link* reaches
   every surviving member: its monitor forwards what it wrote before it
   handles the death and reports the last stamp (``Died``), which closes the
   old view's stream at exactly that stamp;
2. every submission it did not stamp is submitted again by its sender, in
   the next view, to the next view's sequencer (the lowest surviving node
   id), in the sender's original order, before any newer frame of that
   sender; the ``Install`` tells each sender how far its submissions were
   stamped, so nothing is delivered twice and nothing is lost;
3. a total-order message is therefore *sent* (for the view rule) in the view
   in which it is stamped.

The same re-submission happens at every view change (a sequencer that is
alive stops stamping on ``Prepare``); only a sender that dies loses its own
unstamped submissions.
"""

from __future__ import annotations

from multihop.errors import ProtocolError
from multihop.groups.messages import Data, Submit

__all__ = ["Sequencer", "TotalReceiver"]


class Sequencer:
    """Stamps the submissions of one stream, per sender in ``seq`` order.

    A submission that arrives ahead of its sender's earlier one waits for it
    (submissions travel over one FIFO path, so this is defensive); a
    duplicate raises :class:`~multihop.ProtocolError`.  After :meth:`close`
    (the view is being flushed) nothing more is stamped: :meth:`submit`
    returns [] and the submission is left for its sender to submit again.
    """

    def __init__(self, group: str, view: int, dest: int) -> None:
        self.group, self.view, self.dest = group, view, dest
        self._stamp = 0
        self._stamped: dict[int, int] = {}
        self._waiting: dict[int, dict[int, Submit]] = {}
        self._closed = False

    def submit(self, sub: Submit) -> list[Data]:
        """Take one submission; return the stamped frames to send down the tree, in stamp order."""
        if (sub.group, sub.view, sub.dest) != (self.group, self.view, self.dest):
            raise ProtocolError(
                f"submission for {sub.group!r} view {sub.view} dest {sub.dest} reached the sequencer "
                f"of {self.group!r} view {self.view} dest {self.dest}"
            )
        if self._closed:
            return []
        done = self._stamped.get(sub.sender, 0)
        if sub.seq <= done or sub.seq in self._waiting.get(sub.sender, {}):
            raise ProtocolError(f"duplicate submission {sub.seq} from node {sub.sender}")
        waiting = self._waiting.setdefault(sub.sender, {})
        waiting[sub.seq] = sub
        out: list[Data] = []
        while done + 1 in waiting:  # bounded by the submissions waiting
            s = waiting.pop(done + 1)
            done += 1
            self._stamp += 1
            out.append(Data(s.group, s.view, s.dest, s.sender, s.seq, s.payload, stamp=self._stamp))
        self._stamped[sub.sender] = done
        return out

    def close(self) -> None:
        """Stop stamping (the view is closing); later submissions are submitted again next view."""
        self._closed = True

    @property
    def last_stamp(self) -> int:
        """The last stamp given (0 before the first)."""
        return self._stamp

    def stamped(self) -> dict[int, int]:
        """Per original sender, the last of its submissions that got a stamp."""
        return {s: n for s, n in self._stamped.items() if n}


class TotalReceiver:
    """Delivers one stream's stamped frames in stamp order 1, 2, 3 ..."""

    def __init__(self) -> None:
        self._next = 1
        self._waiting: dict[int, Data] = {}

    def offer(self, frame: Data) -> list[Data]:
        """Take one stamped frame; return the frames now deliverable, in stamp order.

        Raises:
            ProtocolError: an unstamped frame, or a stamp already delivered
                or waiting (the machine is left as it was).
        """
        if frame.stamp < 1:
            raise ProtocolError(f"total-order frame {frame.seq} from node {frame.sender} has no stamp")
        if frame.stamp < self._next or frame.stamp in self._waiting:
            raise ProtocolError(f"duplicate stamp {frame.stamp} (next expected {self._next})")
        self._waiting[frame.stamp] = frame
        out: list[Data] = []
        while self._next in self._waiting:  # bounded by the frames waiting
            out.append(self._waiting.pop(self._next))
            self._next += 1
        return out

    @property
    def delivered(self) -> int:
        """The last stamp delivered."""
        return self._next - 1

    @property
    def waiting(self) -> int:
        """Frames held back for a missing stamp."""
        return len(self._waiting)
