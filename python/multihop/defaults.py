"""The runtime's defaults, defined once: every other Python module reads them from here.

The engine (the Rust core) has the same values for the calls it implements (``Dispatcher.bind``'s
``window`` and ``timeout``, ``monitor_status``'s ``timeout``); ``tests/package/test_defaults.py`` checks that the
extension's signatures agree with these.
"""

from __future__ import annotations

__all__ = ["DEFAULT_TIMEOUT", "DEFAULT_WINDOW", "DRAIN_BATCH"]

DEFAULT_WINDOW = 16
"""A channel's credit window: messages a sender may have unacknowledged per direction of a multi-hop channel
(TN-006 2.10), and a multicast group's credits per tree edge, when the caller names none. A monitor buffers at
most this many messages per channel direction."""

DEFAULT_TIMEOUT = 5.0
"""Seconds a control call waits when the caller names no timeout: a bind (the reply along the path), an attach
to a runtime that is still starting, a monitor's status or shutdown, a peer's status."""

DRAIN_BATCH = 256
"""Most messages a serving loop takes from one channel in one turn before it looks at its other channels
(``recv_batch(DRAIN_BATCH, timeout=0)``): the live GES broker, the news peers and relays, the benchmarks'
testbeds. Large enough to amortise the call, small enough that one busy channel does not starve the others."""
