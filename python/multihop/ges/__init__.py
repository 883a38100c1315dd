"""GES: the Grid Event Service broker hierarchy, on the multihop runtime.

Brokers are organised in units (node, cluster, super-cluster, ...), addressed
``SSC.SC.C.n``; gateways join them; every broker builds its own connectivity
graph and routing cache from the connections disseminated by the gateway
propagation protocol.  The protocols are sans-IO state machines
(:mod:`multihop.ges.broker`) run by the :class:`Simulator` or by live broker
processes (``multihop ges up``)::

    from multihop import ges
    topo = ges.Topology.example("paper_fig5")
    sim = ges.Simulator(topo, seed=0)
    sim.run_until_quiet()
    g = sim.graph("1.1.3.6")
    g.cost("2"), g.best_hop("2")          # (5.0, '1.1.3.4')

One module per concept: :mod:`~multihop.ges.address`, :mod:`~multihop.ges.topology`,
:mod:`~multihop.ges.connection`, :mod:`~multihop.ges.costs`, :mod:`~multihop.ges.graph`,
:mod:`~multihop.ges.routing_cache`, :mod:`~multihop.ges.gpp`, :mod:`~multihop.ges.nap`,
:mod:`~multihop.ges.broker`, :mod:`~multihop.ges.simulator`, :mod:`~multihop.ges.reliable`,
:mod:`~multihop.ges.scenarios`, :mod:`~multihop.ges.live` (broker processes),
:mod:`~multihop.ges.picture` and :mod:`~multihop.ges.command` (``multihop ges``); durability:
:mod:`~multihop.ges.storage`, :mod:`~multihop.ges.storage_sqlite`, :mod:`~multihop.ges.durability`,
:mod:`~multihop.ges.durable_scenarios`.  The live testbed, its floor and the NATS peer
comparison are the benchmarks': :mod:`multihop.bench.ges`.
"""

from __future__ import annotations

from multihop.deprecation import alias_modules
from multihop.ges.address import BLOCK_LIMIT, Address, gateway_level
from multihop.ges.costs import CostMatrix
from multihop.ges.delivery import DeliveryReport, History, check_delivery
from multihop.ges.errors import AddressError, ClientIdInUse, GesError, GesStateError, ResumeRefused, StorageError, StoreWriteError, TopologyError
from multihop.ges.event import Event, EventId
from multihop.ges.graph import ConnectivityGraph
from multihop.ges.live.client import LiveClient, connect
from multihop.ges.scenarios import random_topology
from multihop.ges.simulator import NotQuiet, SimClient, Simulator
from multihop.ges.storage import MemoryStorage, Storage
from multihop.ges.storage_sqlite import SqliteStorage
from multihop.ges.topology import Topology

__all__ = [
    "BLOCK_LIMIT",
    "Address",
    "AddressError",
    "ClientIdInUse",
    "ConnectivityGraph",
    "CostMatrix",
    "DeliveryReport",
    "Event",
    "EventId",
    "History",
    "SimClient",
    "check_delivery",
    "connect",
    "LiveClient",
    "GesError",
    "GesStateError",
    "NotQuiet",
    "MemoryStorage",
    "ResumeRefused",
    "SqliteStorage",
    "Storage",
    "StorageError",
    "StoreWriteError",
    "Simulator",
    "Topology",
    "TopologyError",
    "gateway_level",
    "random_topology",
]

# Moved to the benchmarks (issue 25); the old names work one release, with a DeprecationWarning.
alias_modules({f"multihop.ges.{m}": f"multihop.bench.ges.{m}" for m in ("testbed", "floor", "nats_peer")})
