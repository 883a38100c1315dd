"""The names renamed by issue 25 (multihop.deprecation): each old one still works for one release, with a
DeprecationWarning that names the new one."""

from __future__ import annotations

import importlib
import sys

import pytest


@pytest.mark.parametrize("name", ["binding", "server", "wire", "connect"])
def test_the_old_idl_runtime_modules_are_the_flounder_ones_with_a_warning(name: str) -> None:
    new = importlib.import_module(f"multihop.flounder.{name}")
    sys.modules.pop(f"multihop.idl.{name}", None)
    with pytest.warns(DeprecationWarning, match=rf"multihop\.idl\.{name} moved to multihop\.flounder\.{name}"):
        old = importlib.import_module(f"multihop.idl.{name}")
    assert old is new
    import multihop.idl

    assert getattr(multihop.idl, name) is new


def test_old_generated_code_still_imports_what_it_did() -> None:
    """A stub generated before the move imports these names from the old paths."""
    for name in ("binding", "wire"):
        sys.modules.pop(f"multihop.idl.{name}", None)
    with pytest.warns(DeprecationWarning):
        from multihop.idl.binding import Binding
        from multihop.idl.errors import DecodeError
        from multihop.idl.wire import DECODE_ERRORS, U64, Record, decode_caps, encode_caps, explain, pack_array
    import multihop.flounder as fl

    assert (Binding, DecodeError, Record) == (fl.Binding, fl.DecodeError, fl.Record)
    assert all((DECODE_ERRORS, U64, decode_caps, encode_caps, explain, pack_array))


def test_the_warning_points_at_the_importer() -> None:
    sys.modules.pop("multihop.idl.server", None)
    with pytest.warns(DeprecationWarning) as got:
        import multihop.idl.server  # noqa: F401
    assert got[0].filename == __file__


def _forget_dispatch() -> None:
    for name in [n for n in sys.modules if n == "multihop.dispatch" or n.startswith("multihop.dispatch.")]:
        del sys.modules[name]


def test_multihop_dispatch_is_multihop_news_with_a_warning() -> None:
    import multihop.news

    _forget_dispatch()
    with pytest.warns(DeprecationWarning, match=r"multihop\.dispatch moved to multihop\.news"):
        import multihop.dispatch as old
    assert set(old.__all__) == set(multihop.news.__all__)
    assert old.start is multihop.news.start and old.SourceQoS is multihop.news.SourceQoS


@pytest.mark.parametrize("sub", ["client", "system", "wire", "dispatch_if", "command"])
def test_every_old_submodule_is_the_new_module_itself(sub: str) -> None:
    new = importlib.import_module(f"multihop.news.{sub}")
    _forget_dispatch()
    with pytest.warns(DeprecationWarning) as got:
        old = importlib.import_module(f"multihop.dispatch.{sub}")
    assert old is new
    assert any(f"multihop.dispatch.{sub} moved to multihop.news.{sub}" in str(w.message) for w in got)


def test_from_the_old_package_import_a_submodule() -> None:
    _forget_dispatch()
    with pytest.warns(DeprecationWarning):
        from multihop.dispatch.qos import SinkQoS
    from multihop.news.qos import SinkQoS as new

    assert SinkQoS is new
    _forget_dispatch()
    with pytest.warns(DeprecationWarning) as got:
        from multihop.dispatch import store  # a submodule as a name of the old package
    assert any("multihop.dispatch.store moved" in str(w.message) for w in got)
    assert store is sys.modules["multihop.news.store"]


@pytest.mark.parametrize(
    "old, new",
    [
        ("multihop.groups.calibrate", "multihop.bench.groups.calibrate"),
        ("multihop.groups.shootdown", "multihop.bench.groups.shootdown"),
        ("multihop.groups.probe", "multihop.bench.groups.probe"),
        ("multihop.ges.testbed", "multihop.bench.ges.testbed"),
        ("multihop.ges.nats_peer", "multihop.bench.ges.nats_peer"),
        ("multihop.news.measure", "multihop.bench.news.measure"),
    ],
)
def test_measurements_moved_to_the_bench_layer_keep_their_old_names(old: str, new: str) -> None:
    importlib.import_module(old.rsplit(".", 1)[0])  # the application, which names its moved modules
    module = importlib.import_module(new)
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new}"):
        assert importlib.import_module(old) is module


def test_the_stored_model_names_stay_with_the_groups_application() -> None:
    from multihop.bench.groups import calibrate
    from multihop.groups import stored

    assert (calibrate.stored_model, calibrate.stored_path, calibrate.STORED_NAME) == (stored.stored_model, stored.stored_path, stored.STORED_NAME)


def test_runtime_group_is_multihop_groups_group_with_a_warning(rt: object) -> None:
    import multihop.groups as groups

    with pytest.warns(
        DeprecationWarning, match=r"Runtime.group\(name, \.\.\.\) is deprecated: call multihop.groups.group\(rt, name, \.\.\.\)"
    ) as got:
        info = rt.group("renamed", order="fifo", tree="flat")  # type: ignore[attr-defined]
    assert got[0].filename == __file__
    assert info == groups.group(rt, "renamed", order="fifo", tree="flat")  # type: ignore[arg-type]
