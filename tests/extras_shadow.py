"""An environment without the extras (tests/conftest.py's ``without_extras`` fixture; tests/package/test_extras.py).

The extras are made unimportable for real, in a fresh interpreter: a directory first on ``PYTHONPATH`` holds a
package of each extra's name whose import raises ImportError, exactly what ``import pyarrow`` does where it is
not installed.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the packages of the extras, none of which the base install has
NOT_BASE = ("pyarrow", "pyspark", "matplotlib", "zmq", "cffi")


def shadowed_extras(tmp_path: Path) -> dict[str, str]:
    """An environment in which every package of an extra fails to import (its shadows under ``tmp_path``)."""
    shadow = tmp_path / "shadow"
    for name in NOT_BASE:
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(f'raise ImportError("No module named {name!r} (shadowed)")\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(shadow), *filter(None, [env.get("PYTHONPATH")])])
    return env
