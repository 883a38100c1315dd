"""The GES testbed's floor (multihop.bench.ges.floor): relays that flood each event along the tree and deliver it
to every subscriber, real processes, real multi-hop channels (benches/bench_ges_testbed.py prints it)."""

from __future__ import annotations

import numpy as np

from multihop.bench.ges.floor import Floor
from multihop.ges.topology import Topology
from session import unique_name


def test_every_subscriber_gets_every_event_and_the_measuring_client_times_them() -> None:
    # A chain of four brokers with a branch: 1.1.1.1 - 1.1.1.2 - 1.1.1.3 - 1.1.1.4, and 1.1.1.5 off 1.1.1.2.
    topo = Topology.from_edges(
        ["1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4", "1.1.1.5"],
        [("1.1.1.1", "1.1.1.2"), ("1.1.1.2", "1.1.1.3"), ("1.1.1.3", "1.1.1.4"), ("1.1.1.2", "1.1.1.5")],
    )
    with Floor(unique_name("floor"), topo, publisher="1.1.1.1", measuring="1.1.1.4", per_broker=2) as f:
        lat = f.latency(40, 200.0)  # raises unless every subscriber got all 40
        assert len(lat) == 40 and bool(np.all(lat > 0)) and bool(np.all(lat < 10_000))
        again = f.latency(10, 200.0)  # a second case on the same relays
        assert len(again) == 10
    # The same clients, a process per core instead of one per relay.
    with Floor(unique_name("floor"), topo, publisher="1.1.1.1", measuring="1.1.1.4", per_broker=2, grouped=True) as f:
        assert len(f.latency(20, 200.0)) == 20
