"""Runtime base of generated Python bindings: receive side, dispatch, rpc waiting, serving.

A generated module defines ``<Name>Binding(Binding)`` with three sides:

* ``b.tx.<message>(args..., timeout=None)`` sends (generated, straight-line);
* ``b.rx`` receives: :meth:`Rx.next`, :meth:`Rx.try_next`, and handlers
  registered with :meth:`Rx.on` that :meth:`Binding.dispatch` calls;
* ``b.rpc.<rpc>(in args..., timeout=None)`` calls and returns the ``out`` values;
* asyncio: ``await b.rx.next_async()`` and ``await b.rpc_async.<rpc>(in args...)``
  (over the channel's ``recv_async`` / ``send_async``, :mod:`multihop.aio`).

:meth:`Binding.serve` answers rpc calls with a handler object.

Making bindings: ``EchoBinding(channel)`` wraps a channel bound by hand;
``EchoBinding.bind(d, name, transport="auto")`` binds and wraps (transport
``"ump"``, ``"multihop"``, or ``"auto"``: see :mod:`multihop.flounder.connect`);
``EchoBinding.export(d, name, handler)`` exports the service and serves every
client that binds (see :mod:`multihop.flounder.server`).

The binding wraps any channel with ``send(data, timeout=None)``,
``recv(timeout=None) -> bytes`` and ``try_recv() -> bytes | None``.  It keeps
no state between messages except a backlog of messages that arrived while an
rpc waited for its response; they are handed out first, in order.  An rpc
call waits for *its* response only: a message that does not decode while it
waits raises :class:`~multihop.flounder.errors.DecodeError` from the call (the
response, if it comes, stays on the channel for ``rx``).

A binding is meant for one thread, like the channel under it: use one binding
per thread, or a lock around it.

Capabilities: in an interface that has them, ``cap`` and ``give_away_cap``
arguments are OS handles (an int descriptor, a :class:`multihop.Handle`, or
any object with ``fileno()``; None for none). They travel with their message
(``Channel.send(..., handles=)``): a ``cap`` is duplicated, a
``give_away_cap`` is closed here once sent. Received ones are
:class:`multihop.Handle` objects, owned by the receiver (closed when
collected unless detached). Such a binding receives with
``channel.recv_with_handles``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, Callable, ClassVar, Self

from multihop import aio
from multihop.defaults import DEFAULT_TIMEOUT, DEFAULT_WINDOW
from multihop.errors import Timeout
from multihop.flounder.connect import bind_channel
from multihop.flounder.errors import UnhandledMessage
from multihop.flounder.server import Server
from multihop.flounder.wire import Record

__all__ = ["Binding", "Rx"]


class Rx:
    """The receive side of a binding: typed records in arrival order, and handlers."""

    __slots__ = ("_binding", "_recv", "_try_recv", "_decode", "_backlog", "_handlers", "_caps")

    def __init__(self, binding: "Binding") -> None:
        self._binding = binding
        self._caps = binding._mh_caps
        if self._caps:
            self._recv = binding.channel.recv_with_handles
            self._try_recv = binding.channel.try_recv_with_handles
        else:
            self._recv = binding.channel.recv
            self._try_recv = binding.channel.try_recv
        self._decode = binding._mh_decode
        self._backlog: deque[Record] = deque()
        self._handlers: dict[str, Callable[[Record], Any]] = {}

    def _take(self, got: Any) -> Record:
        """Decode what the channel gave: bytes, or (bytes, handles) for an interface with capabilities."""
        if self._caps:
            return self._decode(got[0], got[1])
        return self._decode(got)

    def next(self, timeout: float | None = None) -> Record:
        """Receive and decode the next message (waits up to ``timeout`` seconds; None waits forever).

        Raises the channel's errors (``Timeout``, ``ChannelClosed``) and
        :class:`~multihop.flounder.errors.DecodeError` for a message that does not
        decode; the channel stays usable after either.
        """
        if self._backlog:
            return self._backlog.popleft()
        if self._caps:
            return self._take(self._recv(timeout))
        return self._decode(self._recv(timeout))

    async def next_async(self, timeout: float | None = None) -> Record:
        """:meth:`next` without blocking the event loop (the channel's ``recv_async``).

        Cancelled while it waits, it has taken nothing off the channel.  An
        interface with capabilities receives its handles with the blocking
        ``recv_with_handles`` once a message is there (a look, no wait).
        """
        if self._backlog:
            return self._backlog.popleft()
        return await self._binding._mh_recv_async(timeout)

    def try_next(self) -> Record | None:
        """The next message if one is waiting, else None (never blocks)."""
        if self._backlog:
            return self._backlog.popleft()
        data = self._try_recv()
        return None if data is None else self._take(data)

    def on(self, name: str, handler: Callable[[Record], Any]) -> None:
        """Call ``handler(record)`` for each message ``name`` that :meth:`Binding.dispatch` receives."""
        if name not in self._binding.MESSAGE_NUMBERS:
            known = ", ".join(sorted(self._binding.MESSAGE_NUMBERS))
            raise ValueError(f"{self._binding.INTERFACE} has no message '{name}' (it has: {known})")
        self._handlers[name] = handler

    def off(self, name: str) -> None:
        """Remove the handler of message ``name`` (if any)."""
        self._handlers.pop(name, None)

    def handler(self, name: str) -> Callable[[Record], Any] | None:
        """The handler registered for message ``name``, or None."""
        return self._handlers.get(name)


class Binding:
    """Base class of generated bindings; see the module docstring for the shape."""

    INTERFACE: ClassVar[str] = ""
    MESSAGE_NUMBERS: ClassVar[dict[str, int]] = {}
    #: bytes -> Record; for an interface with capabilities (bytes, handles) -> Record
    _mh_decode: Callable[..., Record]
    #: call message number -> (rpc's Python method name, function(method, record) -> response bytes)
    _mh_calls: ClassVar[dict[int, tuple[str, Callable[[Callable[..., Any], Record], bytes]]]] = {}
    _mh_Tx: ClassVar[type] = object
    _mh_Rpc: ClassVar[type] = object
    _mh_RpcAsync: ClassVar[type] = object
    #: Whether the interface has capabilities (its messages may carry handles).
    _mh_caps: ClassVar[bool] = False

    def __init__(self, channel: Any, *, dispatcher: Any = None) -> None:
        """Wrap ``channel`` (anything with ``send``, ``recv`` and ``try_recv``).

        ``dispatcher``, if given, is kept as long as the binding: a multi-hop
        channel lives on its dispatcher's link with the monitor, which ends
        when the dispatcher is dropped (:meth:`bind` passes its own).
        """
        self.channel = channel
        self.dispatcher = dispatcher
        self.tx = self._mh_Tx(channel)
        self.rx = Rx(self)
        self.rpc = self._mh_Rpc(self)
        self.rpc_async = self._mh_RpcAsync(self)

    @classmethod
    def bind(
        cls,
        d: Any,
        name: str | int,
        transport: str = "auto",
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        window: int = DEFAULT_WINDOW,
        max_message: int | None = None,
    ) -> Self:
        """Bind dispatcher ``d`` to the service ``name`` (or an iref) and return a binding over the channel.

        ``transport`` is ``"ump"``, ``"multihop"`` or ``"auto"``: UMP when the
        runtime's routing table links the two cores directly, multi-hop
        otherwise (:func:`multihop.flounder.connect.choose_transport`).
        ``timeout``, ``window`` and ``max_message`` are those of
        :meth:`multihop.Dispatcher.bind`.  The binding keeps ``d`` (as
        ``.dispatcher``), so ``bind(rt.dispatcher(0), ...)`` stays usable.

        Raises:
            ValueError: an unknown transport.
            BindError: the service is not exported, or it refused.
            Timeout: the service did not take the bind within ``timeout`` seconds.
        """
        return cls(bind_channel(d, name, transport, timeout=timeout, window=window, max_message=max_message), dispatcher=d)

    @classmethod
    def export(cls, d: Any, name: str, handler: Any = None, **export_options: Any) -> Server[Self]:
        """Export ``name`` through dispatcher ``d`` and serve its clients with ``handler``; return the :class:`Server`.

        ``handler`` is an object serving every client, a class instantiated
        per client as ``handler(binding)``, or None to take clients with
        :meth:`Server.accept` (see :mod:`multihop.flounder.server`).
        ``export_options`` go to :meth:`multihop.Dispatcher.export` (``on_connect``, ``backlog``, and
        ``fabric=True`` to serve the runtime's fabric: clients on other machines bind ``name@RUNTIME``).

        Raises:
            ExportError: the name is taken or invalid.
        """
        return Server(cls, d.export(name, **export_options), handler)

    def dispatch(self, timeout: float | None = None) -> Record:
        """Receive one message and call its handler (registered with ``rx.on``); return the message.

        Raises :class:`~multihop.flounder.errors.UnhandledMessage` (holding the
        message) if no handler is registered for it.
        """
        msg = self.rx.next(timeout)
        fn = self.rx._handlers.get(msg.name)
        if fn is None:
            raise UnhandledMessage(self.INTERFACE, msg)
        fn(msg)
        return msg

    def serve(self, handler: Any, timeout: float | None = None) -> Record:
        """Receive one message and serve it; return it.

        An rpc call runs ``handler.<rpc>(in args...)`` and sends the response
        made of its return value (None for no ``out`` argument, the value for
        one, a tuple in declaration order for several).  Any other message goes
        to its ``rx.on`` handler, else to ``handler.<message>(fields...)``.
        Raises :class:`~multihop.flounder.errors.UnhandledMessage` if neither exists.
        If the handler raises, no response is sent and the exception propagates.
        """
        msg = self.rx.next(timeout)
        entry = self._mh_calls.get(msg.number)
        if entry is not None:
            meth = getattr(handler, entry[0], None)
            if meth is None:
                raise UnhandledMessage(self.INTERFACE, msg)
            self._mh_send(entry[1](meth, msg), timeout)
            return msg
        fn = self.rx._handlers.get(msg.name)
        if fn is not None:
            fn(msg)
            return msg
        meth = getattr(handler, type(msg).__name__, None)
        if meth is None:
            raise UnhandledMessage(self.INTERFACE, msg)
        meth(*msg._values())
        return msg

    def _mh_send(self, data: Any, timeout: float | None) -> None:
        """Send an encoded message: bytes, or (bytes, handles, give_away) from a message with capabilities."""
        if type(data) is tuple:
            self.channel.send(data[0], timeout, handles=data[1], give_away=data[2])
        else:
            self.channel.send(data, timeout)

    async def _mh_send_async(self, data: Any, timeout: float | None) -> None:
        """:meth:`_mh_send` without blocking the loop; a message with handles waits for room on
        the loop, then goes with the blocking send (its handles' control-plane round trip)."""
        if type(data) is tuple:
            await aio.wait_writable(self.channel, len(data[0]), timeout)
            self.channel.send(data[0], timeout, handles=data[1], give_away=data[2])
        else:
            await self.channel.send_async(data, timeout)

    async def _mh_recv_async(self, timeout: float | None) -> Record:
        """Receive and decode one message from the channel without blocking the loop."""
        if not self._mh_caps:
            return self._mh_decode(await self.channel.recv_async(timeout))
        got = self.channel.try_recv_with_handles()
        if got is None:
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            while got is None:
                await aio.wait_readable(self.channel, None if deadline is None else max(0.0, deadline - loop.time()))
                got = self.channel.try_recv_with_handles()
        return self.rx._take(got)

    async def _mh_call_async(self, data: Any, response_number: int, timeout: float | None) -> Record:
        """:meth:`_mh_call` without blocking the event loop (``b.rpc_async``)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        await self._mh_send_async(data, timeout)
        while True:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            msg = await self._mh_recv_async(left)
            if msg.number == response_number:
                return msg
            self.rx._backlog.append(msg)
            if deadline is not None and loop.time() >= deadline:
                raise Timeout(f"{self.INTERFACE}: no rpc response within {timeout} s")

    def _mh_call(self, data: Any, response_number: int, timeout: float | None) -> Record:
        """Send an rpc call and wait for its response; other messages go to the backlog."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._mh_send(data, timeout)
        recv = self.rx._recv
        take = self.rx._take
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            msg = take(recv(left))
            if msg.number == response_number:
                return msg
            self.rx._backlog.append(msg)
            if deadline is not None and time.monotonic() >= deadline:
                raise Timeout(f"{self.INTERFACE}: no rpc response within {timeout} s")
