"""The export side of a generated binding: a service whose clients get bindings, served by a handler.

``server = mod.EchoBinding.export(d, "echo", handler)`` exports the name
through dispatcher ``d`` and returns a :class:`Server`.  What it does with
the clients that bind depends on ``handler``:

* an **object**: every binding is served with it, as
  :meth:`~multihop.flounder.binding.Binding.serve` serves (``handler.<rpc>(in
  args...)`` returns the ``out`` values; ``handler.<message>(fields...)``
  takes a message).  One object serves every client, from one thread per
  client, so it must be safe to call from several threads at once;
* a **class**: one instance per client, made as ``handler(binding)``, so a
  handler can keep per-client state and send on its own binding (answer a
  ``ping`` with ``self.binding.tx.pong(...)``), the way Python's
  ``socketserver`` makes one request handler per connection;
* **None**: nothing is served; the program takes each client's binding with
  :meth:`Server.accept` and uses it as it likes.

With a handler, the server accepts clients in a thread of its own and serves
each in a thread of its own (blocking calls release the GIL; an idle client
costs a parked thread, no CPU).  A client's thread ends when the client
closes its end (or dies).  A handler that raises, or a message that has no
handler, ends that client only: its channel is closed (the client sees
``ChannelClosed``), the exception is kept in :attr:`Server.errors` and logged
on the ``multihop.flounder.server`` logger; every other client carries on.  A
message that does not decode (a :class:`~multihop.flounder.errors.DecodeError`) is
kept and logged the same way, and only that message is lost.

:meth:`Server.close` (or leaving the ``with`` block) stops accepting, closes
every client's channel and joins the threads, within about
:data:`STOP_SLICE` seconds.  The exported name is released when the
dispatcher detaches (the runtime has no unexport yet).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

from multihop import _core
from multihop.errors import ChannelClosed, Timeout
from multihop.flounder.errors import DecodeError

__all__ = ["STOP_SLICE", "Server", "ServedBinding"]

STOP_SLICE = 0.2
"""Seconds a serving thread waits in one blocking call before it looks whether the server is closing."""

_log = logging.getLogger("multihop.flounder.server")


class ServedBinding(Protocol):
    """What a :class:`Server` needs of the bindings it makes (a generated binding,
    :class:`multihop.flounder.binding.Binding`, is one): its channel, and serving one message."""

    @property
    def channel(self) -> Any:
        """The channel under the binding (the server closes it)."""
        ...

    def serve(self, handler: Any, timeout: float | None = None) -> object:
        """Receive one message and serve it with ``handler``."""
        ...


B = TypeVar("B", bound=ServedBinding)


class Server(Generic[B]):
    """An exported interface: its service, the bindings of its clients and, with a handler, their serving.

    ``binding_class`` makes a client's binding from its channel (a generated ``<Name>Binding`` class).
    """

    def __init__(self, binding_class: Callable[[_core.Channel], B], service: _core.Service, handler: Any) -> None:
        """Wrap ``service``; start accepting and serving if ``handler`` is not None (use ``Binding.export``)."""
        self.binding_class = binding_class
        self.service = service
        self.handler = handler
        self.bindings: list[B] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        if handler is not None:
            self._spawn(self._accept_loop, f"{service.name}-accept")

    @property
    def name(self) -> str:
        """The exported service name."""
        return self.service.name

    @property
    def iref(self) -> int:
        """The service's iref (a client may bind to it instead of the name)."""
        return self.service.iref

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._stop.is_set()

    def accept(self, timeout: float | None = None) -> B:
        """Take the next client's binding (a server made with ``handler=None`` only).

        Raises:
            RuntimeError: this server serves its clients itself (it has a handler), or is closed.
            Timeout: no client came within ``timeout`` seconds.
        """
        if self.handler is not None:
            raise RuntimeError(f"server {self.name!r} accepts and serves its clients itself (it has a handler)")
        if self.closed:
            raise RuntimeError(f"server {self.name!r} is closed")
        b = self.binding_class(self.service.accept(timeout))
        with self._lock:
            self.bindings.append(b)
        return b

    def close(self) -> None:
        """Stop accepting, close every client's channel, join the serving threads. Idempotent."""
        self._stop.set()
        while True:  # the accept thread may start one last client thread as it stops
            with self._lock:
                pending = [t for t in self._threads if t.is_alive() and t is not threading.current_thread()]
            if not pending:
                break
            for t in pending:
                t.join()
        with self._lock:
            bindings, self.bindings = self.bindings, []
        for b in bindings:
            b.channel.close()

    def __enter__(self) -> Server[B]:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.bindings)} client(s)"
        return f"<{getattr(self.binding_class, '__name__', 'binding')} server {self.name!r} iref {self.iref:#x}: {state}>"

    # -- threads ------------------------------------------------------------

    def _spawn(self, target: Any, name: str, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                ch = self.service.accept(STOP_SLICE)
            except Timeout:
                continue
            except Exception as e:  # the dispatcher detached, the monitor died: nothing more will come
                self._failed(None, e)
                return
            b = self.binding_class(ch)
            try:
                handler = self.handler(b) if isinstance(self.handler, type) else self.handler
            except Exception as e:  # the handler class refused this client
                self._failed(b, e)
                ch.close()
                continue
            with self._lock:
                self.bindings.append(b)
            self._spawn(self._serve_loop, f"{self.name}-client-{ch.id:#x}", b, handler)

    def _serve_loop(self, b: B, handler: Any) -> None:
        try:
            while not self._stop.is_set():
                try:
                    b.serve(handler, STOP_SLICE)
                except Timeout:
                    continue
                except DecodeError as e:
                    self._failed(b, e)  # only that message is lost
        except ChannelClosed:
            pass  # the client went away
        except Exception as e:
            self._failed(b, e)
            b.channel.close()
        finally:
            if not self._stop.is_set():
                with self._lock:
                    if b in self.bindings:
                        self.bindings.remove(b)

    def _failed(self, b: B | None, e: BaseException) -> None:
        with self._lock:
            self.errors.append(e)
        who = f"client channel {b.channel.id:#x}" if b is not None else "accepting"
        _log.error("server %r, %s: %s: %s", self.name, who, type(e).__name__, e)
