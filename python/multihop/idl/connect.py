"""Deprecated alias of :mod:`multihop.flounder.connect` (run-time support of generated code moved out of the compiler).

``import multihop.idl.connect`` gives the module :mod:`multihop.flounder.connect` itself, with a
``DeprecationWarning``; this alias goes in the next release (:mod:`multihop.deprecation`).
"""

from __future__ import annotations

import sys

from multihop.deprecation import moved
from multihop.flounder import connect as _moved
from multihop.flounder.connect import *  # noqa: F403  (the names type checkers see here; at run time the module is replaced)
from multihop.flounder.connect import __all__ as __all__

moved(__name__, "multihop.flounder.connect")
sys.modules[__name__] = _moved
