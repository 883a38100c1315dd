"""Flounder parser and checker: shipped files, real Barrelfish files, malformed files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import multihop
import multihop.idl as idl
from multihop.idl.model import Array, Builtin, DynArray, Enum, String, Struct

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "flounder-idl"
DATA = Path(__file__).resolve().parents[1] / "idl_data"
BARRELFISH = DATA / "barrelfish"
MALFORMED = DATA / "malformed"
MALFORMED_IMPORTS = DATA / "malformed_imports"

TYPES_IF = SHIPPED / "types.if"
BF_IMPORTS = [BARRELFISH / "types.if", BARRELFISH / "platform_x86_32.if", BARRELFISH / "arch_x86_64.if"]
BF_IMPORT_ONLY = {p.name for p in BF_IMPORTS}

#: An interface that uses nothing, to check import files through.
USES_NOTHING = 'interface uses "" { message a(uint8 x); };'


# -- shipped interfaces ---------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("*.if")), ids=lambda p: p.name)
def test_every_shipped_file_parses(path: Path) -> None:
    if path.name == "types.if":
        iface = idl.parse(USES_NOTHING, imports=[path])  # an import file is valid as an import
        assert iface.aliases["coreid"] == Builtin("uint16", "uint", 2, "H", 0, 65535)
        with pytest.raises(idl.IdlSyntaxError, match="is an import file: pass it as an import"):
            idl.parse(path)
    else:
        iface = idl.parse(path, imports=[TYPES_IF])
        assert iface.name == path.stem
        assert iface.description
        assert iface.messages


def test_shipped_set_is_complete() -> None:
    names = {p.name for p in SHIPPED.glob("*.if")}
    assert {"echo.if", "bench.if", "kvstore.if", "ges_broker.if", "types.if"} <= names
    assert (SHIPPED / "WIRE.md").is_file()


def test_bench_needs_its_import() -> None:
    with pytest.raises(idl.IdlCheckError, match="unknown type 'coreid'"):
        idl.parse(SHIPPED / "bench.if")
    iface = idl.parse(SHIPPED / "bench.if", imports=[TYPES_IF])
    start = iface.message("start")
    assert [a.name for a in start.args] == ["run", "count", "size", "from_core"]
    assert start.args[3].type.name == "uint16"  # the alias is resolved


def test_kvstore_model() -> None:
    iface = idl.parse(SHIPPED / "kvstore.if")
    status = iface.types["status"]
    assert isinstance(status, Enum) and status.values == ("KV_OK", "KV_NOT_FOUND", "KV_EXISTS", "KV_FULL")
    stats = iface.types["stats"]
    assert isinstance(stats, Struct) and [f.name for f in stats.fields] == ["keys", "bytes", "gets", "puts", "misses"]
    put = iface.rpc("put")
    assert [a.name for a in put.in_args] == ["key", "value", "overwrite"]
    assert [a.name for a in put.out_args] == ["st"]
    assert put.call.number == 1 and put.response.number == 2
    assert put.call.name == "put_call" and put.response.name == "put_response"
    assert put.in_args[0].type == String(256)
    assert put.in_args[1].type == DynArray(Builtin("uint8", "uint", 1, "B", 0, 255), "vlen", 8192)
    assert iface.message("invalidate").number == 11


# -- real Barrelfish files ------------------------------------------------------------


def test_barrelfish_files_name_their_origin() -> None:
    for p in BARRELFISH.glob("*.if"):
        head = p.read_text().splitlines()[0]
        assert head.startswith("// origin: BarrelfishOS/barrelfish if/"), p.name


def test_barrelfish_set_includes_caps_in_structs() -> None:
    names = {p.name for p in BARRELFISH.glob("*.if")}
    assert {"omap_sdma.if", "bulk_ctrl.if"} <= names and BF_IMPORT_ONLY <= names


@pytest.mark.parametrize("path", sorted(BARRELFISH.glob("*.if")), ids=lambda p: p.name)
def test_real_barrelfish_files_parse_and_check(path: Path) -> None:
    """Every file of the folder: interfaces parse and check (with the import files); import files
    check as imports and are refused as interfaces."""
    if path.name in BF_IMPORT_ONLY:
        others = [p for p in BF_IMPORTS if p != path]
        iface = idl.parse(USES_NOTHING, imports=[*others, path])
        assert iface.aliases, f"{path.name} declares no alias"
        with pytest.raises(idl.IdlSyntaxError, match="no interface declared"):
            idl.parse(path, imports=others)
    else:
        iface = idl.parse(path, imports=BF_IMPORTS)
        assert iface.name == path.stem and (iface.messages or iface.rpcs)


def test_barrelfish_intermon_details() -> None:
    """call/response, typedef struct, fixed-array typedef, alias, old `[len]` arrays, imports."""
    iface = idl.parse(BARRELFISH / "intermon.if", imports=BF_IMPORTS)
    assert iface.name == "intermon"
    # interface's own `typedef uint64 coremask[4]` shadows types.if's `alias coremask uint64`
    assert iface.types["coremask"] == Array("coremask", Builtin("uint64", "uint", 8, "Q", 0, 2**64 - 1), 4)
    caprep = iface.types["caprep"]
    assert isinstance(caprep, Struct) and [f.name for f in caprep.fields] == ["w0", "w1", "w2", "w3"]
    captx = iface.types["captx"]
    assert isinstance(captx, Struct) and captx.fields[1].type.name == "uint8"  # capbits -> uint8
    m = iface.message("bind_monitor_request")
    assert m.kind == "call" and iface.message("bind_monitor_reply").kind == "response"
    grow = iface.message("multihop_routing_table_grow")
    assert grow.args[1].type == DynArray(Builtin("uint8", "uint", 1, "B", 0, 255), "len", None)
    base = iface.message("spawnd_image_reply").args[0]
    assert base.name == "base" and base.type.name == "uint64"  # genpaddr from platform_x86_32.if
    assert iface.message("mem_serv_iref_reply").args[0].type.name == "iref"  # builtin wins over `alias iref uint32`


def test_barrelfish_octopus_and_e10k() -> None:
    oct_ = idl.parse(BARRELFISH / "octopus.if", imports=BF_IMPORTS)
    assert isinstance(oct_.types["binding_type"], Enum)
    trig = oct_.types["trigger"]
    assert isinstance(trig, Struct) and trig.fields[1].type == oct_.types["binding_type"]
    assert oct_.message("trigger").kind == "message"  # a message may share a type's name
    assert oct_.rpc("del").in_args[0].type == String(4096)
    e10k = idl.parse(BARRELFISH / "e10k.if", imports=BF_IMPORTS)
    assert e10k.types["port_type"] == Enum("port_type", ("PORT_TCP", "PORT_UDP"))
    assert e10k.message("register_port_filter").args[3].type == e10k.types["port_type"]


def test_barrelfish_monitor_blocking_old_spellings() -> None:
    """`string manifest` (old string), `int` (old int32), rpcs with caps parse."""
    iface = idl.parse(BARRELFISH / "monitor_blocking.if", imports=BF_IMPORTS)
    manifest = iface.rpc("rsrc_manifest").in_args[1]
    assert manifest.name == "manifest" and manifest.type == String(None)
    dcn = iface.rpc("remote_cap_retype").in_args[-1]
    assert dcn.name == "dcn_vbits" and dcn.type.name == "int32"
    assert iface.rpc("get_bootinfo").out_args[1].type.kind == "cap"


def test_barrelfish_annotations_are_kept() -> None:
    iface = idl.parse(BARRELFISH / "ata_rw28.if")
    read = iface.rpc("read_dma")
    assert read.annotations[0].name == "ata"
    assert dict(read.annotations[0].params)["command"] == 0xC8
    assert dict(read.annotations[0].params)["dma_arg"] == "buffer"


def test_alias_only_import_file() -> None:
    types = idl.parse(USES_NOTHING, imports=[BARRELFISH / "platform_x86_32.if"])
    assert types.name == "uses" and set(types.aliases) == {"genpaddr", "genvaddr", "rsrcid"}
    arch = idl.parse(USES_NOTHING, imports=[BARRELFISH / "arch_x86_64.if"])
    assert "errval" not in arch.aliases  # a builtin name: Flounder's builtin wins
    assert arch.aliases["cycles"].name == "uint64"


# -- malformed files ----------------------------------------------------------------------

_EXPECT = re.compile(r"// expect: (syntax|check) (\d+):(\d+): (.*)")


@pytest.mark.parametrize("path", sorted(MALFORMED.glob("*.if")), ids=lambda p: p.stem)
def test_malformed_file_reports_position(path: Path) -> None:
    m = _EXPECT.match(path.read_text().splitlines()[0])
    assert m, f"{path.name} lacks an '// expect:' header"
    kind, line, col, text = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4).replace("{dir}", str(path.parent))
    cls = idl.IdlSyntaxError if kind == "syntax" else idl.IdlCheckError
    with pytest.raises(cls) as info:
        idl.parse(path)
    e = info.value
    assert isinstance(e, multihop.IdlError) and isinstance(e, multihop.MultihopError)
    assert (e.file, e.line, e.column) == (str(path), line, col)
    assert e.text == text
    assert str(e) == f"{path}:{line}:{col}: {text}"


def test_malformed_set_covers_both_kinds() -> None:
    kinds = [p.name.split("_")[0] for p in MALFORMED.glob("*.if")]
    assert kinds.count("syntax") >= 10 and kinds.count("check") >= 10
    kinds = [p.name.split("_")[1] for p in MALFORMED_IMPORTS.glob("*.if")]
    assert kinds.count("syntax") >= 4 and kinds.count("check") >= 4


@pytest.mark.parametrize("path", sorted(MALFORMED_IMPORTS.glob("*.if")), ids=lambda p: p.stem)
def test_error_inside_an_import_names_the_import_file(path: Path, tmp_path: Path) -> None:
    """A malformed import file (second of two imports): the error names it, with line and column."""
    m = _EXPECT.match(path.read_text().splitlines()[0])
    assert m, f"{path.name} lacks an '// expect:' header"
    kind, line, col, text = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
    main = tmp_path / "main.if"
    main.write_text('interface main "uses coreid" {\n    message a(coreid c);\n};\n')
    cls = idl.IdlSyntaxError if kind == "syntax" else idl.IdlCheckError
    for source in (main, main.read_text()):  # a path or the text itself: the import is named either way
        with pytest.raises(cls) as info:
            idl.parse(source, imports=[TYPES_IF, path])
        e = info.value
        assert (e.file, e.line, e.column, e.text) == (str(path), line, col, text)
        assert str(e) == f"{path}:{line}:{col}: {text}"


def test_error_in_the_interface_after_good_imports_names_the_interface(tmp_path: Path) -> None:
    main = tmp_path / "main.if"
    main.write_text('interface main "" {\n    message a(coreid c, nosuch d);\n};\n')
    with pytest.raises(idl.IdlCheckError) as info:
        idl.parse(main, imports=[TYPES_IF, BARRELFISH / "platform_x86_32.if"])
    assert (info.value.file, info.value.line, info.value.column) == (str(main), 2, 25)
    assert info.value.text.startswith("unknown type 'nosuch'; if an import file declares it, pass that file with --import")


# -- error messages that say what belongs where ---------------------------------------------


@pytest.mark.parametrize(
    "src, line, col, text",
    [
        ('interface m "" {\n  message a(uint8 b[-1]);\n};', 2, 21, "the size of array 'b' must be a non-negative integer, found -1"),
        (
            'interface m "" {\n  rpc r(in uint8 b[n, -2], out uint8 c);\n};',
            2,
            23,
            "the maximum length of array 'b' must be a non-negative integer, found -2",
        ),
        ('interface m "" { typedef int32 t[ -7 ]; };', 1, 35, "the length of array type 't' must be a non-negative integer, found -7"),
        (
            'interface m "" {\n  message a(in uint8 b);\n};',
            2,
            13,
            "'in' belongs only in an rpc's arguments; message 'a' takes plain arguments (TYPE NAME)",
        ),
        (
            'interface m "" { call c(uint8 x, out uint8 y); };',
            1,
            34,
            "'out' belongs only in an rpc's arguments; call 'c' takes plain arguments (TYPE NAME)",
        ),
        ('interface m "" { message a(uint8 b[-x]); };', 1, 36, "expected a length name or a number, found character '-'"),
        ('interface m "" { message a(uint8 b) @; };', 1, 37, "expected ';', found '@'"),
        ('interface m "" { message a(uint8 b, uint8 c+); };', 1, 44, "expected ',' or ')', found character '+'"),
    ],
)
def test_errors_say_what_belongs_there(src: str, line: int, col: int, text: str) -> None:
    with pytest.raises(idl.IdlSyntaxError) as info:
        idl.parse(src)
    assert (info.value.line, info.value.column, info.value.text) == (line, col, text)
    assert "a token" not in str(info.value)


def test_direction_words_still_work_in_rpcs() -> None:
    iface = idl.parse('interface m "" { rpc r(in uint8 b, out uint8 c); };')
    assert [(a.name, a.direction) for a in iface.rpc("r").args] == [("b", "in"), ("c", "out")]


# -- input that declares no interface ---------------------------------------------------


@pytest.mark.parametrize(
    "src, line, col",
    [("", 1, 1), ("   \n\t\n", 3, 1), ("// just a comment", 1, 18), ("/* one */\n// two\n", 3, 1)],
)
def test_input_without_an_interface_is_an_error(src: str, line: int, col: int) -> None:
    with pytest.raises(idl.IdlSyntaxError) as info:
        idl.parse(src)
    e = info.value
    assert (e.file, e.line, e.column) == ("<string>", line, col)
    assert e.text == "no interface declared: the input is empty or holds only comments"
    with pytest.raises(idl.IdlSyntaxError):
        idl.load(src)


def test_comment_only_and_alias_only_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.if"
    empty.write_text("// nothing\n")
    with pytest.raises(idl.IdlSyntaxError) as info:
        idl.parse(empty)
    assert (info.value.file, info.value.line, info.value.column) == (str(empty), 2, 1)
    aliases = tmp_path / "aliases.if"
    aliases.write_text("alias coreid uint16;\n")
    with pytest.raises(idl.IdlSyntaxError, match=r"aliases.if:2:1: no interface declared: .*is an import file"):
        idl.parse(aliases)
    # as imports, both are fine (an empty import adds nothing)
    iface = idl.parse('interface m "" { message a(coreid c); };', imports=[empty, aliases])
    assert iface.message("a").args[0].type.name == "uint16"


def test_syntax_error_says_expected_and_found() -> None:
    with pytest.raises(idl.IdlSyntaxError) as info:
        idl.parse('interface m "x" {\n  message a(uint8 x,);\n};\n')
    e = info.value
    assert (e.file, e.line, e.column) == ("<string>", 2, 21)
    assert e.expected == "an argument type" and e.found == "')'"
    assert str(e) == "<string>:2:21: expected an argument type, found ')'"


# -- checker ------------------------------------------------------------------------------


def _check_error(src: str) -> idl.IdlCheckError:
    with pytest.raises(idl.IdlCheckError) as info:
        idl.parse(src)
    return info.value


def test_checker_unknown_type_names_it() -> None:
    e = _check_error('interface m "" { message a(uint8 x, frob y); };')
    assert e.text.startswith("unknown type 'frob'") and (e.line, e.column) == (1, 37)


def test_checker_duplicates() -> None:
    assert "duplicate type 't'" in _check_error('interface m "" { alias t uint8; alias t uint16; message a(t x); };').text
    assert "duplicate name 'a'" in _check_error('interface m "" { message a(); rpc a(in uint8 x); };').text
    assert "duplicate argument 'x'" in _check_error('interface m "" { message a(uint8 x, uint8 x); };').text
    assert "duplicate argument 'y'" in _check_error('interface m "" { rpc r(in uint8 y, out uint8 y); };').text
    assert "duplicate field 'f'" in _check_error('interface m "" { typedef struct { uint8 f; uint8 f; } s; message a(s v); };').text


def test_checker_length_name_clashes() -> None:
    e = _check_error('interface m "" { message a(uint8 b[n, 4], uint32 n); };')
    assert e.text == "length name 'n' of array 'b' clashes with argument 'n' in message 'a'"
    e = _check_error('interface m "" { rpc r(in uint8 b[n, 4], out uint8 c[n, 4]); };')
    assert "length name 'n' of array 'c' is already the length of array 'b' in rpc 'r'" == e.text
    # the same length name in different messages is fine
    idl.parse('interface m "" { message a(uint8 b[n, 4]); message c(uint8 d[n]); };')


def test_checker_no_fixed_size_where_needed() -> None:
    assert "cannot be a string" in _check_error('interface m "" { typedef String s[4]; message a(s x); };').text
    assert "at least 1" in _check_error('interface m "" { message a(uint8 b[n, 0]); };').text


def test_caps_parse_and_check_anywhere() -> None:
    """Capabilities are valid wherever a scalar is: argument, struct field (nested), array element."""
    iface = idl.parse(
        'interface m "" {\n'
        "    typedef struct { uint8 a; cap c; give_away_cap g[2]; } holder;\n"
        "    typedef struct { holder h; uint32 n; } outer;\n"
        "    typedef cap caps[3];\n"
        "    alias frame cap;\n"
        "    message a(cap x, holder y, outer z, caps w, frame f, cap d[n, 4], holder e[2]);\n"
        "    rpc r(in outer o, out give_away_cap back);\n"
        "};\n"
    )
    holder = iface.types["holder"]
    assert isinstance(holder, Struct) and [f.type.name for f in holder.fields[:2]] == ["uint8", "cap"]
    assert holder.fields[2].type == Array(None, Builtin("give_away_cap", "cap", 0, ""), 2)
    assert (holder.fields[1].pos.line, holder.fields[1].pos.column) == (2, 35)  # the field's own position
    assert iface.types["caps"] == Array("caps", Builtin("cap", "cap", 0, ""), 3)
    args = {a.name: a.type for a in iface.message("a").args}
    assert args["x"].kind == "cap" and args["f"].kind == "cap"  # the alias resolves to cap
    assert args["d"] == DynArray(Builtin("cap", "cap", 0, ""), "n", 4)
    assert args["e"] == Array(None, holder, 2)
    assert iface.rpc("r").out_args[0].type.kind == "cap"


def test_barrelfish_caps_in_structs() -> None:
    """omap_sdma.if and bulk_ctrl.if put caps inside typedef structs (a field even named 'cap')."""
    omap = idl.parse(BARRELFISH / "omap_sdma.if", imports=BF_IMPORTS)
    addr = omap.types["addr_2d"]
    assert isinstance(addr, Struct) and (addr.fields[0].name, addr.fields[0].type.kind) == ("cap", "cap")
    assert [a.name for a in omap.rpc("mem_copy_2d").in_args] == ["dst", "src", "count", "transparent", "color"]
    assert omap.rpc("mem_copy_2d").in_args[-1].type.name == "uint32"  # alias uint24 uint32
    bulk = idl.parse(BARRELFISH / "bulk_ctrl.if", imports=BF_IMPORTS)
    pool = bulk.types["pool"]
    assert isinstance(pool, Struct) and [f.name for f in pool.fields][-2:] == ["num_buffers", "cap"]
    assert pool.fields[3].type == bulk.types["trust"]  # a field named like its type
    assert [a.name for a in bulk.message("move_untrusted_call").args] == ["poolid", "bufferid", "tid", "cap", "meta"]


def test_imports_and_shadowing() -> None:
    src = 'interface m "" { alias coreid uint64; message a(coreid c, domainid d); };'
    iface = idl.parse(src, imports=[TYPES_IF])
    a = iface.message("a")
    assert a.args[0].type.name == "uint64"  # the interface's alias shadows types.if's uint16
    assert a.args[1].type.name == "uint32"
    with pytest.raises(idl.IdlCheckError, match="import file may hold only"):
        idl.parse(src, imports=[SHIPPED / "echo.if"])


def test_types_used_before_declaration_and_alias_chains() -> None:
    iface = idl.parse('interface m "" { message a(p x); typedef struct { c y; } p; alias c b; alias b uint16; };')
    p = iface.types["p"]
    assert isinstance(p, Struct) and p.fields[0].type.name == "uint16"


def test_message_numbering() -> None:
    iface = idl.parse('interface m "" { message a(); rpc r(in uint8 x, out uint8 y); call c(); response d(); };')
    assert [(m.name, m.number, m.kind) for m in iface.messages] == [
        ("a", 1, "message"),
        ("r_call", 2, "rpc_call"),
        ("r_response", 3, "rpc_response"),
        ("c", 4, "call"),
        ("d", 5, "response"),
    ]


def test_argument_shapes() -> None:
    iface = idl.parse('interface m "" { message a(uint32 f[3], uint8 d[n, 9], uint8 o[k], String s[5], string t, char c); };')
    t = [a.type for a in iface.message("a").args]
    assert isinstance(t[0], Array) and t[0].name is None and t[0].length == 3
    assert t[1] == DynArray(t[1].element, "n", 9)
    assert t[2] == DynArray(t[2].element, "k", None)
    assert t[3] == String(5) and t[4] == String(None)
    assert t[5].name == "char"


def test_parse_accepts_text_path_and_pathlike(tmp_path: Path) -> None:
    src = 'interface tiny "t" { message a(); };\n'
    p = tmp_path / "tiny.if"
    p.write_text(src)
    assert idl.parse(src).name == "tiny"
    assert idl.parse(str(p)).file == str(p)
    assert idl.parse(p).name == "tiny"
    with pytest.raises(FileNotFoundError):
        idl.parse(str(tmp_path / "missing.if"))


@pytest.mark.parametrize("missing", ["flounder-idl/echo", "echo", "no/such/dir/x.if", "my interface"])
def test_a_path_that_does_not_exist_names_itself(missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(FileNotFoundError) as info:
        idl.parse(missing)
    assert info.value.filename == missing and repr(missing) in str(info.value)
    with pytest.raises(FileNotFoundError, match=missing.replace("/", ".")):
        idl.parse(Path(missing))
    with pytest.raises(FileNotFoundError, match=missing.replace("/", ".")):
        idl.parse(SHIPPED / "echo.if", imports=[missing])


def test_source_text_is_told_from_a_path() -> None:
    assert idl.parse('interface one "on one line" { message a(); };').name == "one"
    assert idl.parse('\ninterface two "" { message a(); };').name == "two"
    assert idl.parse(str(SHIPPED / "echo.if")).name == "echo"  # an existing path
    with pytest.raises(TypeError, match="expected a path or Flounder source text, got int"):
        idl.parse(3)  # type: ignore[arg-type]


# -- bounds: what a message can carry (issue 26 §4) -----------------------------------------------


@pytest.mark.parametrize(
    "src, needle",
    [
        ('interface m "" {\n  message a(uint8 b[n, 100000000000000000000000]);\n};', "maximum 100,000,000,000,000,000,000,000"),
        ('interface m "" {\n  message a(uint8 b[100000000000000000000000]);\n};', "length 100,000,000,000,000,000,000,000"),
        ('interface m "" {\n  message a(string s[4294967296]);\n};', "maximum length 4,294,967,296"),
        ('interface m "" {\n  typedef uint8 big[4294967296];\n  message a(big b);\n};', "length 4,294,967,296"),
        ('interface m "" {\n  typedef struct { uint8 f[4294967296]; } s;\n  message a(s v);\n};', "length 4,294,967,296"),
        ('interface m "" {\n  message a(uint64 b[n, 1000000000]);\n};', "8,000,000,000 bytes"),
        ('interface m "" {\n  typedef uint64 w[1000000000];\n  message a(w b);\n};', "8,000,000,000 bytes"),
    ],
    ids=["dyn-max", "fixed-arg", "string-max", "typedef", "struct-field", "dyn-bytes", "fixed-bytes"],
)
def test_bounds_beyond_what_a_message_carries_are_refused(src: str, needle: str) -> None:
    e = _check_error(src)
    assert e.line == 2 and needle in e.text and "4,294,967,295" in e.text, e.text


def test_bounds_up_to_what_a_message_carries_are_accepted() -> None:
    iface = idl.parse('interface m "" { message a(uint8 b[n, 4294967295], string s[4294967295], uint8 c[65536]); };')
    assert iface.messages[0].name == "a"


def test_a_number_too_long_to_read_is_one_clear_error() -> None:
    with pytest.raises(idl.IdlSyntaxError) as info:
        idl.parse('interface m "" { message a(uint8 b[' + "9" * 5000 + "]); };")
    assert "a number of 5000 digits" in info.value.text and len(str(info.value)) < 300


# -- an unknown type says where it may come from ---------------------------------------------------


def test_an_unknown_type_suggests_import_and_names_the_file_beside_that_declares_it() -> None:
    e = _check_error_path(SHIPPED / "bench.if")
    assert e.text.startswith("unknown type 'coreid'") and (e.line, e.column) == (8, 58)
    assert f"--import {SHIPPED / 'types.if'}" in e.text, e.text


def test_an_unknown_type_says_to_pass_its_file_with_import() -> None:
    e = _check_error('interface m "" { message a(uint8 x, frob y); };')
    assert e.text.startswith("unknown type 'frob'") and "--import" in e.text and "imports=" in e.text, e.text


def test_a_misspelt_builtin_is_named() -> None:
    assert "did you mean 'uint32'?" in _check_error('interface m "" { message a(unit32 x); };').text


def _check_error_path(path: Path) -> idl.IdlCheckError:
    with pytest.raises(idl.IdlCheckError) as info:
        idl.parse(path)
    return info.value
