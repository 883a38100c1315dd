"""Live GES brokers: each broker a dispatcher process on a runtime, gateways multi-hop channels.

* :mod:`~multihop.ges.live.ges_broker_if` and :mod:`~multihop.ges.live.ges_client_if`: the generated
  stubs of ``flounder-idl/ges_broker.if`` and ``ges_client.if``, with the typed stubs (``.pyi``) that
  mypy reads instead; generated files, listed in :mod:`multihop.idl.generated_files` (``multihop
  stubgen --all`` regenerates them, ``multihop stubgen --check`` checks them);
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
