"""Deprecated alias of :mod:`multihop.flounder.binding` (run-time support of generated code moved out of the compiler).

``import multihop.idl.binding`` gives the module :mod:`multihop.flounder.binding` itself, with a
``DeprecationWarning``; this alias goes in the next release (:mod:`multihop.deprecation`).
"""

from __future__ import annotations

import sys

from multihop.deprecation import moved
from multihop.flounder import binding as _moved
from multihop.flounder.binding import *  # noqa: F403  (the names type checkers see here; at run time the module is replaced)
from multihop.flounder.binding import __all__ as __all__

moved(__name__, "multihop.flounder.binding")
sys.modules[__name__] = _moved
