"""Incarnations a durable broker gives its restarts and the gateways it dials again, never the same twice.

A gateway's id is its two brokers and an incarnation (:class:`~multihop.ges.connection.GatewayId`), and a
lost gateway's connections are kept as tombstones: dead is final. A gateway that comes back with an
incarnation its pair had before is therefore dead from birth in every table that holds the tombstone
(and a restarted broker's profile versions, ``epoch << 32``, must start above its last life's, or its
neighbours take its updates for old ones). So the broker that picks an incarnation (the restarted one for
its own start and the gateways it dials, the lower address of a gateway when it dials a restarted
neighbour again) takes it from one :class:`IncarnationSource`: the seconds since 2023 (so a broker whose
file was lost still starts above what it had, unless its restarts come faster than one a second), and
always above the last one it gave, which it keeps in a file beside the system's stores, so that a
restart within the same second as the last one, or a gateway dialled again and refused within a
second, still gets a new one.

The file holds one decimal number; it is written (temporary file, then rename) before the incarnation
is used. A file that does not hold a number is refused at start with an error that names it (the broker
cannot promise new incarnations without it); one that cannot be written later is reported and the
broker goes on with the incarnations it keeps in memory (new within this process).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

from multihop.ges.errors import StorageError

__all__ = ["IncarnationSource", "EPOCH_2023", "MAX_INCARNATION"]

#: the Unix time of 2023-01-01T00:00:00Z: incarnations count seconds from there (they fit the wire's uint32
#: until 2159)
EPOCH_2023 = 1_672_531_200
#: incarnations travel as uint32 (the hello): a file at or above this is refused as corrupt
MAX_INCARNATION = 1 << 32


class IncarnationSource:
    """Strictly increasing incarnations for one broker, kept in ``path`` across its restarts (see the module
    docstring); ``clock`` gives the Unix time (injected by tests)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.clock = clock
        self.last = 0
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return
        except OSError as e:
            raise StorageError(f"GES incarnation file {self.path} cannot be read: {e}") from None
        try:
            self.last = int(text.strip())
        except ValueError:
            raise StorageError(f"GES incarnation file {self.path} is corrupt: it must hold one decimal number, it holds {text[:40]!r}") from None
        if not 0 <= self.last < MAX_INCARNATION:
            raise StorageError(f"GES incarnation file {self.path} is corrupt: it holds {self.last}, outside 0..{MAX_INCARNATION - 1}")

    def next(self) -> int:
        """A new incarnation: above every one this broker gave before (in this life and the ones before) and not
        below the seconds since 2023; saved before it is returned."""
        inc = max(1, int(self.clock()) - EPOCH_2023, self.last + 1)
        self.last = inc
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(f"{inc}\n")
            os.replace(tmp, self.path)
        except OSError as e:  # (a full disk: still new within this process)
            print(
                f"GES incarnation file {self.path} could not be written ({e}): incarnation {inc} is kept in memory only", file=sys.stderr, flush=True
            )
        return inc
