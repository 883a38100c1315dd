"""Partitions and load sharing: which peer serves which sink.

The sinks of a domain are divided into ``partitions`` partitions; each sink
belongs to exactly one, chosen when it joins, and never changes.  Each
partition is served by one active peer, chosen by rendezvous hashing over the
active peers: every peer computes the same map from the same set of active
peers, and when a peer dies or leaves only its own partitions move (to the
survivors, spread evenly), when one becomes active only about 1/n move to it.

Load sharing (the contact peer's choice for a new sink): the active peer
serving the fewest sinks, and among its partitions the one with the fewest
sinks, ties broken by a draw seeded with the sink's id (a statistical choice
that still is the same at every peer for the same tables).
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

from multihop.news.ids import Nid

__all__ = ["owner_map", "choose_partition", "NO_PARTITION"]

NO_PARTITION = 0xFFFFFFFF
"""The partition of a sink that has not joined yet (a JOIN request)."""


def _score(partition: int, peer: Nid) -> int:
    data = partition.to_bytes(4, "little") + peer.hi.to_bytes(8, "little") + peer.lo.to_bytes(8, "little")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def owner_map(partitions: int, active: Sequence[Nid]) -> list[Nid | None]:
    """The serving peer of each partition (None for all when no peer is active)."""
    if not active:
        return [None] * partitions
    return [max(active, key=lambda peer: (_score(p, peer), peer)) for p in range(partitions)]


def choose_partition(sink: Nid, owners: Sequence[Nid | None], sinks_per_partition: Mapping[int, int]) -> int:
    """The partition for a new sink: the least-loaded active peer's least-loaded partition.

    Raises:
        ValueError: no peer is active.
    """
    load: dict[Nid, int] = {}
    for p, owner in enumerate(owners):
        if owner is not None:
            load[owner] = load.get(owner, 0) + sinks_per_partition.get(p, 0)
    if not load:
        raise ValueError("no active peer serves a partition")
    peer = min(load, key=lambda k: (load[k], k))
    mine = [p for p, owner in enumerate(owners) if owner == peer]
    least = min(sinks_per_partition.get(p, 0) for p in mine)
    candidates = [p for p in mine if sinks_per_partition.get(p, 0) == least]
    draw = (sink.hi ^ sink.lo) % len(candidates)
    return candidates[draw]
