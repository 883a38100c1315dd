"""Deprecated alias of :mod:`multihop.flounder.server` (run-time support of generated code moved out of the compiler).

``import multihop.idl.server`` gives the module :mod:`multihop.flounder.server` itself, with a
``DeprecationWarning``; this alias goes in the next release (:mod:`multihop.deprecation`).
"""

from __future__ import annotations

import sys

from multihop.deprecation import moved
from multihop.flounder import server as _moved
from multihop.flounder.server import *  # noqa: F403  (the names type checkers see here; at run time the module is replaced)
from multihop.flounder.server import __all__ as __all__

moved(__name__, "multihop.flounder.server")
sys.modules[__name__] = _moved
