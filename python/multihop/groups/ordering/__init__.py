"""Receiver-side ordering machines, one per stream (a destination id of one view).

Each takes frames in arrival order (:meth:`offer`) and returns the frames
that may now be delivered, in delivery order; none does I/O or reads a clock.

* :class:`FifoReceiver`: per sender, in ``seq`` order (single-source FIFO);
* :class:`CausalReceiver`: vector clocks; a frame waits for every frame it
  causally depends on (:class:`CausalClock` stamps the sending side);
* :class:`TotalReceiver` with :class:`Sequencer`: the stream's sequencer
  stamps every frame, receivers deliver in stamp order.

The checkers in :mod:`multihop.groups.checkers` verify the result without
using any of this code.
"""

from __future__ import annotations

from multihop.groups.ordering.causal import CausalClock, CausalReceiver
from multihop.groups.ordering.fifo import FifoReceiver
from multihop.groups.ordering.total import Sequencer, TotalReceiver

__all__ = ["FifoReceiver", "CausalReceiver", "CausalClock", "TotalReceiver", "Sequencer"]
