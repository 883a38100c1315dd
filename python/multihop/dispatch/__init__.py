"""Deprecated: the QoS news dispatching application is :mod:`multihop.news` (renamed: it clashed with the core's
``Dispatcher``).

``import multihop.dispatch`` and ``multihop.dispatch.X`` (``.client``, ``.system``, ...) keep working for one
release, with a ``DeprecationWarning``: each ``multihop.dispatch.X`` is the module ``multihop.news.X``
itself, and this package re-exports the names of ``multihop.news`` (:mod:`multihop.deprecation`).
"""

from __future__ import annotations

from multihop.deprecation import alias_package, moved
from multihop.news import *  # noqa: F403  (the names of multihop.news, under the old path)
from multihop.news import __all__ as __all__

moved(__name__, "multihop.news")
alias_package(__name__, "multihop.news")
