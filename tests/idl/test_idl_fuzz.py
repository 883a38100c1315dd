"""Fuzzing the Flounder tool chain: any input gives an interface or an IdlError, any bytes a record or a DecodeError.

* The parser, checker and both back ends over mutated interface files (the
  shipped ones and the real Barrelfish ones: bytes replaced, inserted,
  deleted, the file cut short) and over arbitrary bytes: the only exception
  that may come out is :class:`~multihop.errors.IdlError`, and a located one
  names a file, a line and a column inside the input.
* Files that are not UTF-8 (issue 17 §7: 143,707 of 332,345 mutated files of
  an outside fuzz run raised ``UnicodeDecodeError`` with no file name): an
  IdlSyntaxError at the first bad byte, through the API and ``multihop stubgen``.
* The generated decoders of every shipped interface and :mod:`multihop.flounder.wire`'s
  ``message_number`` over arbitrary bytes and over mutated valid encodings:
  a record (that encodes to bytes decoding to it again) or a DecodeError, never
  anything else.

Hypothesis draws the inputs (``--hypothesis-seed`` replays a run); every
property has a bounded example count, so the whole module takes seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import multihop as mh
import multihop.idl as idl
from multihop.flounder import wire
from multihop.idl.errors import DecodeError, IdlError, IdlSyntaxError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "flounder-idl"
BARRELFISH = Path(__file__).resolve().parents[1] / "idl_data" / "barrelfish"
TYPES_IF = SHIPPED / "types.if"

CORPUS = sorted(SHIPPED.glob("*.if")) + sorted(BARRELFISH.glob("*.if"))
SEEDS = [p.read_bytes() for p in CORPUS]
FUZZ = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(source: bytes, imports: list[Path]) -> str:
    """Parse, check and generate both back ends; return how far it got. Only IdlError may escape."""
    try:
        iface = idl.parse(source, imports)
    except IdlError as e:
        _check_located(e, source)
        return "rejected"
    for gen in (idl.generate_python, idl.generate_c):
        try:
            gen(iface)
        except IdlError as e:
            _check_located(e, source)
    return "accepted"


def _check_located(e: IdlError, source: bytes) -> None:
    """A located error points inside the input (or one past its end) and says so in its text."""
    if not hasattr(e, "line"):
        return
    assert e.file in ("<bytes>",) or e.file.endswith(".if"), e.file
    if e.file != "<bytes>":
        return  # an import file's position
    lines = source.split(b"\n")
    assert 1 <= e.line <= len(lines), (e.line, len(lines))
    assert e.column >= 1
    assert str(e).startswith(f"<bytes>:{e.line}:{e.column}: ")


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A corpus file with a few bytes replaced, inserted or deleted, or cut short."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 6))):
        what = draw(st.sampled_from(["replace", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if what == "replace" and data:
            data[at] = draw(st.integers(0, 255))
        elif what == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif what == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        else:
            data = data[:at]
    return bytes(data)


@FUZZ
@given(source=mutated())
def test_mutated_interface_files_give_an_interface_or_an_idl_error(source: bytes) -> None:
    _outcome(source, [TYPES_IF])


@FUZZ
@given(source=st.binary(max_size=400))
def test_arbitrary_bytes_give_an_idl_error(source: bytes) -> None:
    assert _outcome(source, []) in ("accepted", "rejected")


@settings(max_examples=150, deadline=None)
@given(source=st.text(max_size=300))
def test_arbitrary_text_gives_an_interface_or_an_idl_error(source: str) -> None:
    # A str with a newline or { } ; ( ) is source text; anything else would be a path.
    try:
        idl.parse(source + "\n")
    except IdlError:
        pass


def test_not_utf8_names_file_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.if"
    # Line 3, after four characters: a tab (one column), "ü" (two bytes, one column) and "ab".
    bad.write_bytes(b'// one\n// two\n\t\xc3\xbcab\xff\xfe rest\ninterface x "" { message m(); };\n')
    with pytest.raises(IdlSyntaxError) as info:
        idl.parse(bad)
    e = info.value
    assert (e.file, e.line, e.column) == (str(bad), 3, 5)
    assert isinstance(e, mh.IdlError) and not isinstance(e, UnicodeDecodeError)
    assert str(e).startswith(f"{bad}:3:5: file is not UTF-8: byte 0xff cannot be decoded")
    # The same through bytes, through an import, and for a truncated multi-byte sequence at the end.
    with pytest.raises(IdlSyntaxError, match=r"^<bytes>:1:3: file is not UTF-8: bytes 0xe2 0x82 cannot be decoded \(unexpected end of data\)"):
        idl.parse(b"ab\xe2\x82")
    imp = tmp_path / "imp.if"
    imp.write_bytes(b"alias a uint8;\nalias \x80b uint8;\n")
    with pytest.raises(IdlSyntaxError, match=r"imp\.if:2:7: file is not UTF-8: byte 0x80"):
        idl.parse('interface x "" { message m(); };', [imp])


def test_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    f = tmp_path / "bom.if"
    f.write_bytes(b'\xef\xbb\xbfinterface x "" { message m(uint8 a); };\n')
    assert idl.parse(f).name == "x"
    f.write_bytes(b'\xef\xbb\xbfinterface x "" { message m(uint8 a) };\n')
    with pytest.raises(IdlSyntaxError) as info:
        idl.parse(f)
    assert (info.value.line, info.value.column) == (1, 37)  # counted from after the mark


def test_stubgen_of_a_file_that_is_not_utf8_is_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.if"
    bad.write_bytes('interface caf\xe9 "" { message m(); };\n'.encode("latin-1"))
    r = subprocess.run(
        [sys.executable, "-m", "multihop.cli", "stubgen", str(bad), "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("multihop stubgen: IdlSyntaxError: ")
    assert f"{bad}:1:14: file is not UTF-8: byte 0xe9 cannot be decoded" in r.stderr
    assert "UnicodeDecodeError" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


# -- decoders ---------------------------------------------------------------------------------

MODULES = {
    "echo": idl.load(SHIPPED / "echo.if"),
    "kvstore": idl.load(SHIPPED / "kvstore.if"),
    # structs, enums and arrays of structs: the first draft of ges_broker.if, kept for the codec tests
    "composite_types": idl.load(ROOT / "tests" / "idl_data" / "composite_types.if"),
    "ges_broker": idl.load(SHIPPED / "ges_broker.if"),
    "ges_client": idl.load(SHIPPED / "ges_client.if"),
    "dispatch": idl.load(SHIPPED / "dispatch.if"),
    "bench": idl.load(SHIPPED / "bench.if", [TYPES_IF]),
}

SAMPLES: list[tuple[str, bytes]] = [
    ("echo", MODULES["echo"].encode("ping", seq=7, data=b"hello")),
    ("echo", MODULES["echo"].encode("say_call", text="hi there")),
    ("echo", MODULES["echo"].encode("bye")),
    ("kvstore", MODULES["kvstore"].encode("put_call", key="k", value=b"v" * 40, overwrite=True)),
    ("kvstore", MODULES["kvstore"].encode("list_response", count=2, names=b"a\0b\0")),
    ("kvstore", MODULES["kvstore"].encode("get_stats_response", s=(1, 2, 3, 4, 5))),
    (
        "composite_types",
        MODULES["composite_types"].encode(
            "event", id=((1, 2, 3, 4), 5, 6, 7), lvl=1, visited=[(0, 0, 0, 1), (0, 0, 1, 0)], topic="t/x", body=b"payload"
        ),
    ),
    ("composite_types", MODULES["composite_types"].encode("add_node_response", status=0, assigned=(1, 1, 1, 1))),
    ("bench", MODULES["bench"].encode("resp", seq=1, t_send=2, t_recv=3, payload=b"\0" * 64)),
    ("bench", MODULES["bench"].encode("three", a=1, b=2, c=3)),
]


def _decode(name: str, data: bytes) -> Any:
    """Decode with the generated decoder; a record must encode to bytes that decode to it again.

    (Byte for byte only up to bools: WIRE.md has decoders read any non-zero byte as true.)
    """
    mod = MODULES[name]
    try:
        rec = mod.decode(data)
    except DecodeError as e:
        assert e.interface == name and e.data == bytes(data)
        return None
    again = mod.encode(rec.name, **rec._asdict())
    assert len(again) == len(data) and mod.decode(again) == rec, (rec, data, again)
    return rec


@FUZZ
@given(name=st.sampled_from(sorted(MODULES)), data=st.binary(max_size=200))
def test_decoders_take_any_bytes(name: str, data: bytes) -> None:
    _decode(name, data)
    try:
        n = wire.message_number(data)
    except DecodeError:
        assert len(data) < 2
    else:
        assert 0 <= n < 65536 and len(data) >= 2


@FUZZ
@given(sample=st.sampled_from(SAMPLES), data=st.data())
def test_decoders_take_mutated_messages(sample: tuple[str, bytes], data: st.DataObject) -> None:
    name, msg = sample
    assert _decode(name, msg) is not None  # the unmutated message decodes
    buf = bytearray(msg)
    for _ in range(data.draw(st.integers(1, 4))):
        what = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate", "extend"]))
        at = data.draw(st.integers(0, max(0, len(buf) - 1)))
        if what == "flip" and buf:
            buf[at] ^= 1 << data.draw(st.integers(0, 7))
        elif what == "insert":
            buf[at:at] = data.draw(st.binary(min_size=1, max_size=9))
        elif what == "delete":
            del buf[at : at + data.draw(st.integers(1, 9))]
        elif what == "truncate":
            buf = buf[:at]
        else:
            buf += data.draw(st.binary(min_size=1, max_size=9))
    _decode(name, bytes(buf))
