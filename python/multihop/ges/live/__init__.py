"""Live GES brokers: each broker a dispatcher process on a runtime, gateways multi-hop channels.

* :mod:`~multihop.ges.live.ges_broker_if`: the generated stubs of ``flounder-idl/ges_broker.if``
  (regenerate with ``multihop stubgen flounder-idl/ges_broker.if --lang python -o
  python/multihop/ges/live/ges_broker_if.py``; a test checks they are current), and their typed
  stubs ``ges_broker_if.pyi`` that mypy reads instead (regenerate with ``python -m multihop.idl.pyi
  flounder-idl/ges_broker.if -o python/multihop/ges/live/ges_broker_if.pyi``; checked current too);
* :mod:`~multihop.ges.live.wire`: protocol messages to and from those stubs;
* :mod:`~multihop.ges.live.broker`: the broker process (``python -m multihop.ges.live.broker``),
  the driver that feeds channel messages to the sans-IO :class:`~multihop.ges.broker.BrokerCore`;
* :mod:`~multihop.ges.live.control`: the control connection the tools use;
* :mod:`~multihop.ges.live.system`: start, inspect and stop a live system
  (:class:`LiveSystem`; the ``multihop ges`` command uses it).
"""

from __future__ import annotations

from multihop.ges.live.system import LiveSystem

__all__ = ["LiveSystem"]
