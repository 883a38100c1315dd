"""multihop.groups exports what it lists. (Its public API's docstrings and annotations: tests/docs/test_api_docs.py.)"""

from __future__ import annotations

import multihop.groups


def test_the_package_exports_what_it_lists() -> None:
    for name in multihop.groups.__all__:
        assert getattr(multihop.groups, name) is not None
