"""The one exception hierarchy of multihop.

Every error the runtime raises is a :class:`MultihopError`.  Each class also
subclasses the standard-library error a caller would already catch where one
fits, so ``except TimeoutError`` catches :class:`Timeout` and ``except
ValueError`` catches :class:`MessageTooLarge`.

The Rust extension raises these very classes: ``multihop._core`` maps its one
error enum onto them by name (see ``core-rs/src/python.rs``), so there is no
second hierarchy to keep in step.
"""

from __future__ import annotations

__all__ = [
    "MultihopError",
    "RuntimeNotFound",
    "RuntimeExists",
    "MonitorError",
    "ExportError",
    "BindError",
    "ChannelClosed",
    "TxBusy",
    "Timeout",
    "MessageTooLarge",
    "CapSendError",
    "HeldLost",
    "ProtocolError",
    "RoutingError",
    "IdlError",
]


class MultihopError(Exception):
    """Base class of every error raised by multihop."""


class RuntimeNotFound(MultihopError, FileNotFoundError):
    """No runtime of that name exists (or its monitors are gone)."""


class RuntimeExists(MultihopError, FileExistsError):
    """A live runtime of that name already exists."""


class MonitorError(MultihopError, OSError):
    """A monitor failed to start, died, or answered something unexpected."""


class ExportError(MultihopError, ValueError):
    """A service could not be exported (for example, the name is taken)."""


class BindError(MultihopError, ConnectionError):
    """A bind failed: unknown service, refused by the service, or no answer."""


class ChannelClosed(MultihopError, ConnectionError):
    """The channel was closed by either end, or its peer died."""


class TxBusy(MultihopError, BlockingIOError):
    """A non-blocking send found no room (ring full or credit window used up)."""


class Timeout(MultihopError, TimeoutError):
    """A blocking call reached its timeout."""


class MessageTooLarge(MultihopError, ValueError):
    """A message is longer than the channel's maximum message size."""


class CapSendError(MultihopError, OSError):
    """Handles sent with a message were refused, and nothing was sent (TN-006 2.7's cap reply).

    ``reason`` says why: ``"runtime_owned"`` (one of the runtime's own
    descriptors, known by identity, duplicates included: a ring segment,
    doorbell, control socket, the pidfds it watches its peers with, its
    async doorbell; a user's memfd named ``multihop:...`` is not one),
    ``"not_open"``, ``"too_many"`` (more than ``multihop.MAX_HANDLES`` on
    one message), ``"no_room"`` (the receiver keeps too many handles for
    messages it has not received, or its descriptor table is full),
    ``"closed"`` (the receiving end is gone), ``"bridged"`` (the channel
    crosses a fabric to another machine: handles cannot leave a machine) or
    ``"unsupported"`` (an io_uring instance, which the kernel does not pass,
    or an end that cannot carry handles); ``index`` is the position of the handle at fault in
    ``handles``, when one is.  The channel is left as it was.
    """

    reason: str = ""
    index: int | None = None


class HeldLost(MultihopError):
    """``Channel.close`` could not hand messages its multi-hop end held to its monitor in time: they are lost.

    A blocking ``send`` with no credit free holds the message for the next
    credit and returns (see ``Channel.send``); ``close`` sends what is held
    first, waiting up to its ``timeout`` for room on the link to the
    monitor.  A monitor that takes nothing for that long (stopped, or
    starved of CPU) leaves them behind: ``count`` says how many accepted
    messages never left this process.  The channel is closed all the same.
    """

    count: int = 0


class ProtocolError(MultihopError, ValueError):
    """A peer sent something that does not follow the wire or control protocol."""


class RoutingError(MultihopError, ValueError):
    """A routing mode, topology or core is not valid."""


class IdlError(MultihopError, ValueError):
    """A Flounder interface file is malformed or cannot be generated."""
