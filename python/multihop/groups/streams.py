"""One member's data plane for one view of one group: its streams, sends and deliveries (sans-IO).

A :class:`ViewStreams` lives exactly as long as its view at this member.  It
numbers this member's sends per stream, stamps causal clocks, runs the
stream sequencers this member holds (it is the lowest node id of the
stream's members), feeds arriving frames to the ordering machines, and at
the end of the view reports its marks and checks the closing marks of the
next view's :class:`~multihop.groups.messages.Install`.

Unicasts (to a node id) are FIFO whatever the group's ordering: one
receiver has nothing to agree on with anybody.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from multihop.errors import ProtocolError
from multihop.groups.events import Delivered, Multicast, Sent, Transmit, Unicast
from multihop.groups.ids import is_node
from multihop.groups.messages import Data, StreamMark, Submit
from multihop.groups.ordering import CausalClock, CausalReceiver, FifoReceiver, Sequencer, TotalReceiver
from multihop.groups.view import View

__all__ = ["ViewStreams"]

Out = tuple[list[Transmit], list[object]]


@dataclass
class _Stream:
    """This member's state of one destination in one view."""

    kind: str  # unicast | fifo | causal | total
    sent: int = 0
    fifo: FifoReceiver | None = None
    causal: CausalReceiver | None = None
    clock: CausalClock | None = None
    total: TotalReceiver | None = None
    sequencer: Sequencer | None = None
    unstamped: list[tuple[int, bytes]] = field(default_factory=list)  # my submissions not yet back stamped


class ViewStreams:
    """The streams of member ``me`` in ``view`` (``me`` must be a member)."""

    def __init__(self, view: View, me: int) -> None:
        view.endpoint(me)
        self.view = view
        self.me = me
        self._streams: dict[int, _Stream] = {}
        self.closed = False

    def _stream(self, dest: int) -> _Stream:
        st = self._streams.get(dest)
        if st is not None:
            return st
        self.view.destinations(dest)  # GroupError for an unknown destination
        kind = "unicast" if is_node(dest) else self.view.order
        st = _Stream(kind)
        if kind in ("unicast", "fifo"):
            st.fifo = FifoReceiver()
        elif kind == "causal":
            st.causal = CausalReceiver(self.view.nodes)
            st.clock = CausalClock(st.causal, self.me)
        else:
            st.total = TotalReceiver()
            if self.view.sequencer(dest) == self.me:
                st.sequencer = Sequencer(self.view.group, self.view.view_id, dest)
                if self.closed:
                    st.sequencer.close()  # first used after the flush: it must not stamp either
        self._streams[dest] = st
        return st

    def _deliver(self, f: Data) -> Delivered:
        return Delivered(self.view.group, self.view.view_id, f.dest, f.sender, f.payload)

    # ---- sending -------------------------------------------------------------

    def send(self, dest: int, payload: bytes) -> Out:
        """Send ``payload`` to ``dest`` in this view: the transmits and the local events (Sent, Delivered).

        Raises:
            GroupError: ``dest`` is not a destination of this view, a
                total-order destination with no member, or (total order) a
                multicast group this member is not in.
        """
        view = self.view
        recipients = view.destinations(dest)
        if not recipients:
            from multihop.groups.errors import GroupError

            raise GroupError(f"destination {dest} of group {view.group!r} has no member in view {view.view_id}")
        if view.order == "total" and not is_node(dest) and self.me not in recipients:
            from multihop.groups.errors import GroupError

            raise GroupError(
                f"node {self.me} is not in multicast group {dest} of total-order group {view.group!r}: "
                f"a total-order sender must be among the recipients (its stamped copy is its receipt)"
            )
        st = self._stream(dest)
        sent = Sent(view.group, view.view_id, dest, payload, tuple(view.endpoint(n) for n in recipients))
        tx: list[Transmit] = []
        ev: list[object] = [sent]
        mine = self.me in recipients
        if st.kind == "total":
            st.sent += 1
            st.unstamped.append((st.sent, payload))
            sub = Submit(view.group, view.view_id, dest, self.me, st.sent, payload)
            if st.sequencer is not None:
                more_tx, more_ev = self.submit(sub)
                return tx + more_tx, ev + more_ev
            return [Unicast(view.sequencer(dest), sub)], ev
        if st.kind == "causal":
            assert st.clock is not None and st.causal is not None
            seq, vc = st.clock.stamp()
            st.causal.note_own(self.me)
            frame = Data(view.group, view.view_id, dest, self.me, seq, payload, vc=vc)
        else:
            st.sent += 1
            frame = Data(view.group, view.view_id, dest, self.me, st.sent, payload)
        st.sent = frame.seq
        if mine:
            ev.append(self._deliver(frame))
        if st.kind == "unicast":
            if dest != self.me:
                tx.append(Unicast(dest, frame))
        elif len(recipients) > int(mine):
            tx.append(Multicast(frame, self.me))
        return tx, ev

    # ---- receiving -----------------------------------------------------------

    def submit(self, sub: Submit) -> Out:
        """A submission reached this member as the stream's sequencer: stamp it, send it down, deliver it here."""
        st = self._stream(sub.dest)
        if st.sequencer is None:
            raise ProtocolError(f"node {self.me} is not the sequencer of {sub.dest} in view {self.view.view_id}")
        tx: list[Transmit] = []
        ev: list[object] = []
        for stamped in st.sequencer.submit(sub):
            if len(self.view.destinations(sub.dest)) > 1:
                tx.append(Multicast(stamped, self.me))
            ev += self.receive(stamped)
        return tx, ev

    def receive(self, frame: Data) -> list[object]:
        """A frame of this view arrived: the Delivered events it releases, in order."""
        if not (is_node(frame.dest) and frame.dest == self.me) and self.me not in self.view.destinations(frame.dest):
            raise ProtocolError(f"node {self.me} got a frame for {frame.dest}, which it is not in")
        st = self._stream(frame.dest)
        if st.kind == "total":
            assert st.total is not None
            ready = st.total.offer(frame)
            for f in ready:
                if f.sender == self.me:
                    if not st.unstamped or st.unstamped[0][0] != f.seq:
                        raise ProtocolError(f"stamped frame {f.seq} of node {self.me} came back out of order")
                    st.unstamped.pop(0)
        elif st.kind == "causal":
            assert st.causal is not None
            ready = st.causal.offer(frame)
        else:
            assert st.fifo is not None
            ready = st.fifo.offer(frame)
        return [self._deliver(f) for f in ready]

    # ---- closing -------------------------------------------------------------

    def close(self) -> tuple[StreamMark, ...]:
        """Stop (the view is being flushed): close my sequencers and report how far my streams went."""
        self.closed = True
        marks: list[StreamMark] = []
        for dest, st in sorted(self._streams.items()):
            if st.sequencer is not None:
                st.sequencer.close()
                marks.append(StreamMark(dest, self.me, st.sequencer.last_stamp, tuple(sorted(st.sequencer.stamped().items()))))
            elif st.kind != "total" and st.sent:
                marks.append(StreamMark(dest, self.me, st.sent))
        return tuple(marks)

    def satisfied(self, closing: tuple[StreamMark, ...]) -> bool:
        """Whether every message of this view up to ``closing`` that was addressed here has been delivered."""
        for m in closing:
            if is_node(m.dest):
                if m.dest != self.me or m.sender == self.me:
                    continue
            elif self.me not in self.view.destinations(m.dest):
                continue
            st = self._stream(m.dest)
            if st.kind == "total":
                assert st.total is not None
                if st.total.delivered < m.seq:
                    return False
            elif st.kind == "causal":
                assert st.causal is not None
                if st.causal.delivered(m.sender) < m.seq:
                    return False
            elif m.sender != self.me:
                assert st.fifo is not None
                if st.fifo.delivered(m.sender) < m.seq:
                    return False
        return True

    def unstamped(self, closing: tuple[StreamMark, ...]) -> list[tuple[int, bytes]]:
        """My total-order submissions the closing marks say were not stamped, as (dest, payload), oldest first."""
        out: list[tuple[int, bytes]] = []
        for dest, st in sorted(self._streams.items()):
            if st.kind != "total" or not st.unstamped:
                continue
            mark = next((m for m in closing if m.dest == dest and m.sender == self.view.sequencer(dest)), None)
            upto = dict(mark.submitted).get(self.me, 0) if mark is not None else 0
            if any(seq <= upto for seq, _ in st.unstamped):
                raise ProtocolError(f"node {self.me}: a stamped submission to {dest} never came back")
            out += [(dest, payload) for _, payload in st.unstamped]
        return out

    def unstamped_count(self) -> int:
        """My total-order submissions not yet back stamped."""
        return sum(len(st.unstamped) for st in self._streams.values())

    def waiting(self) -> int:
        """Frames held back by the ordering machines of this view."""
        n = 0
        for st in self._streams.values():
            for machine in (st.fifo, st.causal, st.total):
                if machine is not None:
                    n += machine.waiting
        return n
