"""Deprecated alias of :mod:`multihop.flounder.wire` (run-time support of generated code moved out of the compiler).

``import multihop.idl.wire`` gives the module :mod:`multihop.flounder.wire` itself, with a
``DeprecationWarning``; this alias goes in the next release (:mod:`multihop.deprecation`).
"""

from __future__ import annotations

import sys

from multihop.deprecation import moved
from multihop.flounder import wire as _moved
from multihop.flounder.wire import *  # noqa: F403  (the names type checkers see here; at run time the module is replaced)
from multihop.flounder.wire import __all__ as __all__

moved(__name__, "multihop.flounder.wire")
sys.modules[__name__] = _moved
