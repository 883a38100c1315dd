"""Errors of the GES hierarchy, part of the one :class:`~multihop.errors.MultihopError` tree.

Each also subclasses the standard error a caller would already catch:
``except ValueError`` catches a malformed address or topology file.
"""

from __future__ import annotations

from multihop.errors import MultihopError

__all__ = ["GesError", "AddressError", "TopologyError", "GesStateError", "StorageError", "StoreWriteError", "ResumeRefused", "ClientIdInUse"]


class GesError(MultihopError):
    """Base class of every GES error."""


class AddressError(GesError, ValueError):
    """A malformed address, unit or level (a part beyond the block limit, the wrong number of parts, ...)."""


class TopologyError(GesError, ValueError):
    """A topology (or topology file) that cannot be used; the message names the line or the broker."""


class GesStateError(GesError, RuntimeError):
    """An operation that does not fit the current state (an unknown broker, a gateway that is not up, ...)."""


class StorageError(GesError, RuntimeError):
    """A storage file that cannot be used (corrupt, foreign, another broker's); the message names the file."""


class ResumeRefused(GesError, RuntimeError):
    """A client's resume was refused (unknown client id, a position it was never given): the message says why."""


class StoreWriteError(StorageError):
    """A store could not write its batch now (a full disk, an I/O error): the batch is kept, nothing it vouches
    for was sent, and it is committed again later; the message names the file and the cause."""


class ClientIdInUse(GesError, RuntimeError):
    """A durable client id that is taken: its home store holds state for it, or it is connected.

    A plain connect never takes over (nor resets) an id in use; its owner resumes it with
    ``resume=True`` and its credential (:attr:`multihop.ges.LiveClient.credential`)."""
