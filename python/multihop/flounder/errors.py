"""The errors a generated binding raises at run time: a message that does not decode, or that nobody handles.

Both subclass :class:`~multihop.errors.ProtocolError`.  The compiler's errors (a bad interface file)
are in :mod:`multihop.idl.errors`, which also re-exports these two.
"""

from __future__ import annotations

from multihop.errors import ProtocolError

__all__ = ["DecodeError", "UnhandledMessage"]


class DecodeError(ProtocolError):
    """A received message does not decode under the interface.

    Only that message is lost: decoding keeps no state between messages, so
    the next message on the channel decodes normally.  ``data`` holds the bytes
    that failed.
    """

    def __init__(self, interface: str, text: str, data: bytes = b"") -> None:
        self.interface = interface
        self.data = bytes(data)
        super().__init__(f"{interface}: cannot decode message: {text}")


class UnhandledMessage(ProtocolError):
    """A message arrived for which no handler is registered; ``.message`` holds it."""

    def __init__(self, interface: str, message: object) -> None:
        self.message = message
        name = getattr(message, "name", "?")
        super().__init__(f"{interface}: no handler for message '{name}'")
