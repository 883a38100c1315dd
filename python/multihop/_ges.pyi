"""Types of ``multihop._ges``, the GES native engine (crate ``core-rs/ges``, registered by ``multihop._core``).

Kept true by ``tests/test_ges_native_stubs.py`` (names, members and parameters against the module).
"""

from typing import Any, Iterable

def decode_events(data: bytes, id_cls: type[Any], event_cls: type[Any], copy_cls: type[Any]) -> tuple[int, tuple[Any, ...]]: ...
def encode_events(first_seq: int, copies: Iterable[Any], batch_text: int) -> list[bytes]: ...
def encode_deliver(events: Iterable[Any], batch_text: int) -> list[bytes]: ...
