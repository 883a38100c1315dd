"""Generated Python bindings and C code: shape, value checks, decode errors, cap refusal, stubgen.

Every binding here runs over the runtime's real channels: a module-wide runtime
of two cores, and a fresh channel pair per binding pair (tests/chanpair.py),
over UMP and over a multi-hop channel (client on core 0, service on core 1).
The C stubs are linked against the real libmultihop_core.so and talk over a
real channel too.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import multihop
import multihop as mh
import multihop.idl as idl
from chanpair import channel_pair

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "flounder-idl"
DATA = Path(__file__).resolve().parents[1] / "idl_data"
BARRELFISH = DATA / "barrelfish"
TYPES_IF = SHIPPED / "types.if"
BF_IMPORTS = [BARRELFISH / "types.if", BARRELFISH / "platform_x86_32.if", BARRELFISH / "arch_x86_64.if"]

INCLUDE = ROOT / "core-rs" / "include"
GCC = shutil.which("gcc")
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror"]


@pytest.fixture(scope="module")
def echo():
    return idl.load(SHIPPED / "echo.if")


@pytest.fixture(scope="module")
def kv():
    return idl.load(SHIPPED / "kvstore.if")


@pytest.fixture(scope="module")
def ges():
    return idl.load(DATA / "composite_types.if")  # the first draft of ges_broker.if: structs, enums, struct arrays


@pytest.fixture(scope="module")
def runtime() -> Iterator[mh.Runtime]:
    """One two-core runtime for the module, stopped even if a test fails."""
    from session import unique_name

    rt = mh.Runtime.start(unique_name("idl-codec"), cores=[0, 1])
    try:
        yield rt
    finally:
        rt.stop()


Pair = Callable[[Any], tuple[Any, Any, mh.Channel, mh.Channel]]


@pytest.fixture(params=["ump", "multihop"])
def pair(request: pytest.FixtureRequest, runtime: mh.Runtime) -> Iterator[Pair]:
    """``pair(mod)`` -> (client binding, service binding, client channel, service channel) over a
    fresh real channel of the parametrized transport; every channel made is closed after the test."""
    with ExitStack() as stack:

        def make(mod: Any) -> tuple[Any, Any, mh.Channel, mh.Channel]:
            a, b = stack.enter_context(channel_pair(runtime, request.param))
            if request.param == "multihop":
                assert a.stats()["hops"] >= 2
            return mod.Binding(a), mod.Binding(b), a, b

        yield make


# -- binding shape ----------------------------------------------------------------------


def test_tx_rx_record_shape(pair, echo) -> None:
    cli, srv, _, _ = pair(echo)
    assert type(cli) is echo.EchoBinding and echo.Binding is echo.EchoBinding
    cli.tx.ping(seq=1, data=b"hello")
    cli.tx.bye()
    msg = srv.rx.next(timeout=1.0)
    assert msg.name == "ping" and msg.number == 1
    assert (msg.seq, msg.data) == (1, b"hello")
    assert type(msg).__slots__ == ("seq", "data") and not hasattr(msg, "__dict__")
    assert msg == echo.messages.ping(1, b"hello") and repr(msg) == "ping(seq=1, data=b'hello')"
    assert msg._asdict() == {"seq": 1, "data": b"hello"}
    assert srv.rx.next(timeout=1.0).name == "bye"
    assert srv.rx.try_next() is None
    with pytest.raises(multihop.Timeout):
        srv.rx.next(timeout=0.01)


def test_module_surface(echo) -> None:
    assert echo.INTERFACE == "echo" and echo.DESCRIPTION.startswith("Echo service")
    assert echo.MESSAGE_NUMBERS == {
        "ping": 1,
        "pong": 2,
        "echo_call": 3,
        "echo_response": 4,
        "say_call": 5,
        "say_response": 6,
        "bye": 7,
    }
    data = echo.encode("pong", seq=9, data=b"x")
    assert echo.decode(data) == echo.messages.pong(9, b"x")
    assert echo.decode(bytearray(data)) == echo.decode(memoryview(data))
    with pytest.raises(ValueError, match="has no message 'pung'"):
        echo.encode("pung", seq=1)


def test_wire_examples_of_wire_md(echo, kv) -> None:
    """The byte examples written in flounder-idl/WIRE.md."""
    assert echo.encode("ping", seq=1, data=b"hi").hex(" ") == "01 00 01 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00 68 69"
    assert echo.encode("bye") == b"\x07\x00"
    assert echo.encode("say_call", text="héllo").hex(" ") == "05 00 06 00 00 00 00 00 00 00 68 c3 a9 6c 6c 6f"
    assert kv.encode("put_call", key="a", value=b"xyz", overwrite=True).hex(" ") == (
        "01 00 01 01 00 00 00 00 00 00 00 61 03 00 00 00 00 00 00 00 78 79 7a"
    )


def test_types_enum_struct(kv, ges) -> None:
    assert int(kv.status.KV_NOT_FOUND) == 1
    s = kv.stats(keys=1, bytes=2, gets=3, puts=4, misses=5)
    rec = kv.decode(kv.encode("get_stats_response", s=s))
    assert rec.s == s and type(rec.s) is kv.stats
    ev = ges.event_id(ges.address(1, 2, 3, 4), 10, 11, 12)
    data = ges.encode(
        "event",
        id=ev,
        lvl=ges.level.LEVEL_CLUSTER,
        visited=[(1, 2, 3, 4), ges.address(5, 6, 7, 8)],
        topic="t/1",
        body=b"payload",
    )
    out = ges.decode(data)
    assert out.id == ev and out.lvl is ges.level.LEVEL_CLUSTER
    assert out.visited == (ges.address(1, 2, 3, 4), ges.address(5, 6, 7, 8))
    assert (out.topic, out.body) == ("t/1", b"payload")


def test_handlers_and_dispatch(pair, echo) -> None:
    cli, srv, _, _ = pair(echo)
    seen = []
    srv.rx.on("ping", seen.append)
    cli.tx.ping(seq=5, data=b"")
    assert srv.dispatch(timeout=1.0).seq == 5 and seen[0].seq == 5
    with pytest.raises(ValueError, match="has no message 'nope'"):
        srv.rx.on("nope", print)
    cli.tx.pong(seq=6, data=b"z")
    with pytest.raises(idl.UnhandledMessage) as info:
        srv.dispatch(timeout=1.0)
    assert info.value.message.seq == 6 and isinstance(info.value, multihop.ProtocolError)
    srv.rx.off("ping")
    assert srv.rx.handler("ping") is None


def test_handlers_dispatch_many_messages_in_order(pair, echo) -> None:
    """rx.on for several messages (an rpc half too); dispatch calls each in arrival order; a
    message that arrived while an rpc waited is dispatched first."""
    cli, srv, _, srv_ch = pair(echo)
    log: list[tuple[str, object]] = []
    srv.rx.on("ping", lambda m: log.append(("ping", m.seq)))
    srv.rx.on("bye", lambda m: log.append(("bye", None)))
    srv.rx.on("say_call", lambda m: log.append(("say", m.text)))
    n = 200  # more than a multi-hop window: acks have to flow while dispatch runs
    for i in range(n):
        cli.tx.ping(seq=i, data=bytes([i % 256]) * (i % 50))
        if i % 10 == 9:
            for _ in range(10):
                srv.dispatch(timeout=5.0)
    cli.tx.say_call(text="hé")
    cli.tx.bye()
    for _ in range(2):
        srv.dispatch(timeout=5.0)
    assert log == [("ping", i) for i in range(n)] + [("say", "hé"), ("bye", None)]
    # the service answers an rpc with a ping first: the client keeps the ping for dispatch
    cli_log: list[int] = []
    cli.rx.on("ping", lambda m: cli_log.append(m.seq))
    srv_ch.send(echo.encode("ping", seq=99, data=b"early"))
    srv_ch.send(echo.encode("echo_response", reply=b"back"))
    assert cli.rpc.echo(request=b"x", timeout=5.0) == b"back"
    assert cli.dispatch(timeout=5.0) == echo.messages.ping(99, b"early") and cli_log == [99]
    assert srv.rx.next(timeout=5.0) == echo.messages.echo_call(b"x")
    assert cli.rx.try_next() is None and srv.rx.try_next() is None


class KvHandler:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put(self, key, value, overwrite):
        if key in self.data and not overwrite:
            return 2  # KV_EXISTS
        self.data[key] = bytes(value)
        return 0

    def get(self, key):
        if key not in self.data:
            return (1, b"")
        return (0, self.data[key])

    def remove(self, key):
        return 0 if self.data.pop(key, None) is not None else 1

    def list(self, prefix, max):
        names = sorted(k for k in self.data if k.startswith(prefix))[:max]
        return len(names), b"\0".join(n.encode() for n in names)

    def get_stats(self):
        return (len(self.data), sum(map(len, self.data.values())), 0, 0, 0)

    def invalidate(self, key):
        self.invalidated = key


def serve_n(binding, handler, n: int) -> threading.Thread:
    def run() -> None:
        for _ in range(n):
            binding.serve(handler, timeout=5.0)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_rpc_client_and_serve(pair, kv) -> None:
    cli, srv, _, _ = pair(kv)
    h = KvHandler()
    t = serve_n(srv, h, 7)
    assert cli.rpc.put("a", b"1", True, timeout=5.0) == kv.status.KV_OK
    assert cli.rpc.put(key="a", value=b"2", overwrite=False, timeout=5.0) == kv.status.KV_EXISTS
    got = cli.rpc.get("a", timeout=5.0)
    assert got == (kv.status.KV_OK, b"1") and got.st == kv.status.KV_OK and got.value == b"1"
    assert type(got) is kv.results.get
    assert cli.rpc.list("", 10, timeout=5.0) == (1, b"a")
    assert cli.rpc.get_stats(timeout=5.0) == kv.stats(1, 1, 0, 0, 0)
    assert cli.rpc.remove("a", timeout=5.0) == 0
    cli.tx.invalidate(key="k")
    t.join(5.0)
    assert not t.is_alive() and h.invalidated == "k"


def test_rpc_with_no_out_and_keyword_names(pair) -> None:
    mod = idl.load(
        'interface kw "Python keywords as names" {\n'
        "  rpc del(in uint32 from, in String name[16]);\n"
        "  message class(uint8 self, uint8 timeout, uint8 number, uint8 lambda);\n"
        "};\n"
    )
    cli, srv, _, _ = pair(mod)

    class H:
        def del_(self, from_, name_):
            self.got = (from_, name_)

    h = H()
    t = serve_n(srv, h, 1)
    assert cli.rpc.del_(from_=3, name_="x", timeout=5.0) is None
    t.join(5.0)
    assert h.got == (3, "x")
    cli.tx.class_(self_=1, timeout_=2, number_=3, lambda_=4)
    msg = srv.rx.next(timeout=1.0)
    assert msg.name == "class" and (msg.self_, msg.timeout_, msg.number_, msg.lambda_) == (1, 2, 3, 4)


def test_rpc_keeps_other_messages_for_rx(pair, echo) -> None:
    cli, _, _, peer = pair(echo)
    # the peer sends an unrelated message before the response
    peer.send(echo.encode("pong", seq=1, data=b"early"))
    peer.send(echo.encode("say_response", answer="ok"))
    assert cli.rpc.say("hi", timeout=1.0) == "ok"
    assert echo.decode(peer.recv(timeout=1.0)) == echo.messages.say_call("hi")
    assert cli.rx.next(timeout=1.0) == echo.messages.pong(1, b"early")


def test_rpc_timeout(pair, echo) -> None:
    cli, _, _, _ = pair(echo)
    with pytest.raises(multihop.Timeout):
        cli.rpc.say("anyone?", timeout=0.05)


def test_serve_errors(pair, kv) -> None:
    cli, srv, a, _ = pair(kv)
    a.send(kv.encode("get_stats_call"))
    with pytest.raises(idl.UnhandledMessage):
        srv.serve(object(), timeout=1.0)

    class Bad:
        def get(self, key):
            return 1  # two out values expected

    a.send(kv.encode("get_call", key="x"))
    with pytest.raises(TypeError, match="rpc get must return 2 values"):
        srv.serve(Bad(), timeout=1.0)


# -- values checked before sending -------------------------------------------------------------


@pytest.mark.parametrize(
    "message, args, exc, text",
    [
        ("ping", dict(seq=-1, data=b""), ValueError, "echo.ping: argument 'seq': value -1 out of range for uint64"),
        ("ping", dict(seq=2**64, data=b""), ValueError, "argument 'seq': value 18446744073709551616 out of range"),
        ("ping", dict(seq=1, data=b"x" * 4097), ValueError, "argument 'data': array has 4097 elements, more than its maximum 4096"),
        ("ping", dict(seq=1, data="text"), TypeError, "argument 'data': expected bytes, got str"),
        ("ping", dict(seq=1.5, data=b""), TypeError, "argument 'seq': expected an int for uint64, got float"),
        ("say_call", dict(text="é" * 513), ValueError, "argument 'text': string is 1026 UTF-8 bytes, more than its maximum 1024"),
        ("say_call", dict(text="a\0b"), ValueError, "argument 'text': string contains a NUL character"),
        ("say_call", dict(text=b"bytes"), TypeError, "argument 'text': expected a str, got bytes"),
    ],
)
def test_bad_values_raise_before_sending(pair, echo, message, args, exc, text) -> None:
    cli, _, _, peer = pair(echo)
    with pytest.raises(exc, match=text.replace("(", r"\(").replace(")", r"\)")):
        getattr(cli.tx, message)(**args)
    assert peer.try_recv() is None  # nothing was sent
    with pytest.raises(exc):
        echo.encode(message, **args)


def test_bad_values_in_composite_types(pair, ges, kv) -> None:
    cli, _, _, peer = pair(ges)
    with pytest.raises(ValueError, match=r"composite_types.gateway_up: argument 'src.c': value 4294967296 out of range for uint32"):
        cli.tx.gateway_up(src=(0, 0, 2**32, 0), dst=(0, 0, 0, 0), lvl=0, cost=1)
    with pytest.raises(ValueError, match=r"argument 'lvl': value 4 out of range for enum level \(0..3\)"):
        cli.tx.gateway_down(src=(0, 0, 0, 0), dst=(0, 0, 0, 0), lvl=4)
    with pytest.raises(ValueError, match=r"argument 'src': struct address has 4 fields, got 3 values"):
        cli.tx.gateway_down(src=(0, 0, 0), dst=(0, 0, 0, 0), lvl=0)
    with pytest.raises(ValueError, match=r"argument 'visited\[1\].ssc': value -1 out of range for uint32"):
        cli.tx.event(id=((0, 0, 0, 0), 0, 0, 0), lvl=0, visited=[(0, 0, 0, 0), (-1, 0, 0, 0)], topic="", body=b"")
    with pytest.raises(ValueError, match=r"argument 'visited': array has 65 elements, more than its maximum 64"):
        cli.tx.event(id=((0, 0, 0, 0), 0, 0, 0), lvl=0, visited=[(0, 0, 0, 0)] * 65, topic="", body=b"")
    assert peer.try_recv() is None
    with pytest.raises(ValueError, match=r"kvstore.put_response: argument 'st': value 9 out of range for enum status"):
        kv.encode("put_response", st=9)


def test_fixed_arrays_and_small_ints() -> None:
    mod = idl.load('interface fa "" { typedef uint8 mac[6]; typedef int16 pair[2];\n  message m(mac a, pair p, int8 s, char c, bool b); };')
    rec = mod.decode(mod.encode("m", a=b"abcdef", p=(-1, 1), s=-128, c=b"z", b=True))
    assert (rec.a, rec.p, rec.s, rec.c, rec.b) == (b"abcdef", (-1, 1), -128, b"z", True)
    with pytest.raises(ValueError, match="argument 'a': array must have exactly 6 elements, got 5"):
        mod.encode("m", a=b"abcde", p=(0, 0), s=0, c=b"z", b=False)
    with pytest.raises(ValueError, match=r"argument 'p\[0\]': value 32768 out of range for int16"):
        mod.encode("m", a=b"abcdef", p=(2**15, 0), s=0, c=b"z", b=False)
    with pytest.raises(ValueError, match="argument 's': value -129 out of range for int8"):
        mod.encode("m", a=b"abcdef", p=(0, 0), s=-129, c=b"z", b=False)
    with pytest.raises(ValueError, match="argument 'c': a char must be exactly 1 byte, got 2"):
        mod.encode("m", a=b"abcdef", p=(0, 0), s=0, c=b"zz", b=False)


# -- received messages that do not decode ------------------------------------------------------


def _corruptions(echo, kv) -> list[tuple[object, bytes, bytes, str]]:
    """(module, corrupt message, a good message, expected error text)."""
    ping = echo.encode("ping", seq=1, data=b"abc")
    say = echo.encode("say_response", answer="ok")
    good_echo = echo.encode("ping", seq=2, data=b"ok")
    good_kv = kv.encode("put_response", st=1)
    cases = [
        (echo, b"", "shorter than its message number"),
        (echo, b"\x01", "shorter than its message number"),
        (echo, b"\x63\x00", "unknown message number 99"),
        (echo, b"\x00\x00", "unknown message number 0"),
        (echo, ping[:10], "truncated"),
        (echo, ping + b"!", "1 bytes after the last argument"),
        (echo, ping[:10] + (5000).to_bytes(8, "little") + b"abc", "has 5000 elements, more than its maximum 4096"),
        (echo, ping[:10] + (4).to_bytes(8, "little") + b"abc", "runs past the end"),
        (echo, say[:-2] + b"\xff\xfe", "not valid UTF-8"),
        (echo, say[:-2] + b"o\x00", "contains a NUL byte"),
        (echo, echo.encode("bye") + b"\x00", "expected 2"),
        (kv, kv.encode("put_response", st=0)[:2] + (4).to_bytes(4, "little"), "enum value is out of range"),
    ]
    return [(mod, bad, good_echo if mod is echo else good_kv, text) for mod, bad, text in cases]


def test_corrupt_messages_raise_and_the_next_decodes(pair, echo, kv) -> None:
    for mod, bad, good, text in _corruptions(echo, kv):
        _, srv, a, _ = pair(mod)
        a.send(bad)
        a.send(good)
        with pytest.raises(idl.DecodeError, match=text) as info:
            srv.rx.next(timeout=1.0)
        assert isinstance(info.value, multihop.ProtocolError) and info.value.data == bad
        assert srv.rx.next(timeout=1.0) == mod.decode(good)


# -- code generation ---------------------------------------------------------------------------


CAP_CASES = [
    # nested struct holding a cap, as an rpc's in argument
    'interface n "" { typedef struct { uint8 a; cap c; } in_; typedef struct { in_ i; } out_;\n  rpc r(in uint8 k, in out_ o, out uint8 z); };',
    # a dynamic array of structs holding a cap
    'interface n "" { typedef struct { uint8 a; cap c; } s;\n  message m(uint8 k, s items[n, 4]); };',
    # an array typedef of caps, through an alias
    'interface n "" { typedef cap cs[3]; alias more cs;\n  call m(more w); };',
    # a declared struct no message uses
    'interface n "" {\n  typedef struct { uint8 a; cap f[2]; } unused;\n  message m(uint8 k); };',
    'interface g "" { message a(uint8 x); message b(uint8 y, give_away_cap frame); };',
]


@pytest.mark.parametrize("src", CAP_CASES)
def test_caps_anywhere_generate_on_both_back_ends(src: str, tmp_path: Path) -> None:
    """Capabilities as arguments, struct fields and (dynamic) array elements are handles: both back
    ends generate them (they used to refuse them), and the C compiles."""
    iface = idl.parse(src)
    mod = idl.load(src)
    assert isinstance(idl.generate_python(iface), str) and mod.INTERFACE == iface.name
    idl.stubgen(src, "c", tmp_path)
    r = subprocess.run(
        [GCC, *CFLAGS, "-fsyntax-only", "-I", str(INCLUDE), "-I", str(tmp_path), str(tmp_path / f"{iface.name}.c")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr


_KW = "is a Python keyword, so it gets a trailing '_'"


@pytest.mark.parametrize(
    "src, line, col, text",
    [
        # renamed keywords that clash with a name as written
        (
            'interface x "" {\n  message m(uint8 from, uint8 from_);\n};',
            2,
            31,
            f"argument 'from_' clashes with argument 'from' of message 'm': both are 'from_' in Python ('from' {_KW})",
        ),
        (
            'interface x "" {\n  rpc r(in uint8 timeout_, in uint8 timeout, out uint8 z);\n};',
            2,
            37,
            "argument 'timeout' clashes with argument 'timeout_' of rpc 'r': both are 'timeout_' in Python "
            "('timeout' is a name the binding uses itself, so it gets a trailing '_')",
        ),
        (
            'interface x "" {\n  typedef struct { uint8 class; uint8 class_; } s;\n  message m(s v);\n};',
            2,
            39,
            f"field 'class_' clashes with field 'class' of struct 's': both are 'class_' in Python ('class' {_KW})",
        ),
        (
            'interface x "" {\n  typedef enum { None, None_ } e;\n  message m(e v);\n};',
            2,
            24,
            f"value 'None_' clashes with value 'None' of enum 'e': both are 'None_' in Python ('None' {_KW})",
        ),
        (
            'interface x "" {\n  message while(uint8 a);\n  message while_(uint8 b);\n};',
            3,
            11,
            f"message 'while_' clashes with message 'while' among the methods of b.tx: both are 'while_' in Python ('while' {_KW})",
        ),
        (
            'interface x "" {\n  rpc pass(in uint8 a);\n  message pass_(uint8 b);\n};',
            3,
            11,
            f"message 'pass_' clashes with rpc 'pass' among the methods of a serve() handler: both are 'pass_' in Python ('pass' {_KW})",
        ),
        (
            'interface x "" {\n  typedef struct { uint8 a; } list;\n  typedef struct { uint8 b; } list_;\n  message m(list p, list_ q);\n};',
            3,
            31,
            "struct 'list_' clashes with struct 'list' at module level: both are 'list_' in Python "
            "('list' is a Python builtin, so it gets a trailing '_')",
        ),
        # enum members IntEnum refuses or swallows
        (
            'interface x "" {\n  typedef enum { A, mro } e;\n  message m(e v);\n};',
            2,
            21,
            "value 'mro' of enum 'e' cannot be a Python enum member: Python's IntEnum refuses it (invalid enum member name(s) 'mro')",
        ),
        (
            'interface x "" {\n  typedef enum { A,\n      _missing_ } e;\n  message m(e v);\n};',
            3,
            7,
            "value '_missing_' of enum 'e' cannot be a Python enum member: Python's IntEnum reserves it (it would not become a member)",
        ),
        (
            'interface x "" {\n  typedef enum { __init__ } e;\n  message m(e v);\n};',
            2,
            18,
            "value '__init__' of enum 'e' cannot be a Python enum member: Python's IntEnum reserves it (it would not become a member)",
        ),
        # '_' names: at the field or argument, with the real reason
        (
            'interface x "" {\n  typedef struct {\n    uint8 ok;\n    uint8 _hidden;\n  } s;\n  message m(s v);\n};',
            4,
            11,
            "field '_hidden' of struct 's' cannot start with '_': a struct is a Python named tuple, whose field names cannot start with '_'",
        ),
        (
            'interface x "" {\n  rpc r(in uint8 a, out uint8 _b, out uint8 c);\n};',
            2,
            31,
            "out argument '_b' of rpc 'r' cannot start with '_': an rpc with several out arguments returns a Python "
            "named tuple, whose field names cannot start with '_'",
        ),
        (
            'interface x "" {\n  message m(uint8 ok, uint8 __x);\n};',
            2,
            29,
            "argument '__x' of message 'm': Python mangles names starting with '__' inside a class",
        ),
        (
            'interface x "" {\n  typedef struct { uint8 q; } __name__;\n  message m(__name__ a);\n};',
            2,
            31,
            "struct '__name__': names starting with '__' are Python's own at module level (such as __name__ and __doc__)",
        ),
        (
            'interface x "" {\n  message m(uint8 _mh1);\n};',
            2,
            19,
            "argument '_mh1' of message 'm': names starting with '_mh' are reserved for the generated code",
        ),
        ('interface x "" {\n  rpc _mhcall(in uint8 a);\n};', 2, 7, "rpc '_mhcall': names starting with '_mh' are reserved for the generated code"),
    ],
)
def test_python_back_end_refuses_names_it_cannot_use(src: str, line: int, col: int, text: str) -> None:
    iface = idl.parse(src)  # valid Flounder
    with pytest.raises(idl.IdlCodegenError) as info:
        idl.generate_python(iface)
    e = info.value
    assert (e.line, e.column, e.text) == (line, col, f"Python back end: {text}")
    with pytest.raises(idl.IdlCodegenError):
        idl.load(iface)


def test_python_back_end_takes_awkward_but_valid_names(pair) -> None:
    """Names Python can take after all: they generate, import and travel over a real channel."""
    mod = idl.load(
        'interface awk "C:\\\\names with \\"\\"\\" and \\\\N{x}" {\n'
        "  typedef enum { __x, _y, name, value, count, None } e;\n"
        "  typedef struct { uint8 index; uint8 count; uint8 as; } s;\n"
        "  message m(e v, s w, uint8 _fields, uint8 _values, uint8 name, uint8 self, uint8 len);\n"
        "  rpc r(in uint8 _a, out uint8 _only);\n"
        "};\n"
    )
    assert mod.DESCRIPTION == 'C:\\names with """ and \\N{x}' and mod.__doc__.startswith("Binding of Flounder interface awk")
    assert list(mod.e.__members__) == ["__x", "_y", "name", "value", "count", "None_"]
    cli, srv, _, _ = pair(mod)
    cli.tx.m(v=mod.e["__x"], w=mod.s(1, 2, 3), _fields_=4, _values_=5, name_=6, self_=7, len=8, timeout=5.0)
    got = srv.rx.next(timeout=5.0)
    assert got._asdict() == dict(v=mod.e["__x"], w=(1, 2, 3), _fields_=4, _values_=5, name_=6, self_=7, len=8)
    assert got.v is mod.e["__x"] and got.w.as_ == 3

    class H:
        def r(self, _a: int) -> int:
            return _a + 1

    t = serve_n(srv, H(), 1)
    assert cli.rpc.r(_a=41, timeout=5.0) == 42
    t.join(5.0)


@pytest.mark.parametrize(
    "src, line, col, text",
    [
        (
            'interface x "" {\n  message m(uint8 int, uint8 int_);\n};',
            2,
            30,
            "argument 'int_' clashes with argument 'int' among the C parameters of message 'm': both are 'int_' in C "
            "('int' is a C keyword or library name, so it gets a trailing '_')",
        ),
        (
            'interface x "" {\n  rpc r(in uint8 for, out uint8 for_);\n};',
            2,
            33,
            "out argument 'for_' clashes with in argument 'for' among the C parameters of x_r_rpc: both are 'for_' in C "
            "('for' is a C keyword or library name, so it gets a trailing '_')",
        ),
        (
            'interface x "" {\n  message m(uint8 b[free, 4], uint8 free_);\n};',
            2,
            37,
            "argument 'free_' clashes with length 'free' of argument 'b' among the C parameters of message 'm': both are "
            "'free_' in C ('free' is a C keyword or library name, so it gets a trailing '_')",
        ),
        (
            'interface x "" {\n  typedef struct { uint8 mh_x; uint8 u_mh_x; } s;\n  message m(s v);\n};',
            2,
            38,
            "field 'u_mh_x' clashes with field 'mh_x' of struct 's': both are 'u_mh_x' in C "
            "('mh_x' is in the generated code's mh_ space, so it gets a 'u_' prefix)",
        ),
        (
            'interface x "" {\n  typedef enum { recv, OTHER } e;\n  message m(e v);\n};',
            2,
            18,
            "value 'recv' of enum 'e' clashes with the generated function 'x_recv' among the generated C globals: both are 'x_recv' in C",
        ),
        (
            'interface x "" {\n  typedef enum { A, m_send } e;\n  message m(e v);\n};',
            3,
            11,
            "the send function of message 'm' clashes with value 'm_send' of enum 'e' among the generated C globals: both are 'x_m_send' in C",
        ),
        (
            'interface x "" {\n  message switch(uint8 a);\n  message switch_(uint8 b);\n};',
            3,
            11,
            "message 'switch_' clashes with message 'switch' among the members of the rx_handlers table: both are "
            "'switch_' in C ('switch' is a C keyword or library name, so it gets a trailing '_')",
        ),
    ],
)
def test_c_back_end_refuses_names_that_collide(src: str, line: int, col: int, text: str) -> None:
    with pytest.raises(idl.IdlCodegenError) as info:
        idl.generate_c(idl.parse(src))
    assert (info.value.line, info.value.column, info.value.text) == (line, col, f"C back end: {text}")


def test_c_comments_survive_any_description() -> None:
    header, source = idl.generate_c(idl.parse('interface x "ends a comment */ early" { message m(); };'))
    assert "*/ early" not in header and "* / early" in header


def test_import_files_do_not_generate() -> None:
    with pytest.raises(idl.IdlSyntaxError, match="no interface declared: .* is an import file"):
        idl.load(TYPES_IF)
    hand_made = idl.Interface(None, None, "types.if", None)  # a model without an interface
    for gen in (idl.generate_python, idl.generate_c):
        with pytest.raises(idl.IdlCodegenError, match="declares no interface"):
            gen(hand_made)


def test_fast_path_is_straight_line(echo) -> None:
    """A three-scalar message is sent by the channel's native sender over its layout; the
    Python encoder behind it is one precompiled pack and one send."""
    src = idl.generate_python(idl.parse(SHIPPED / "bench.if", imports=[TYPES_IF]))
    assert "_mhL_5 = _mh_FixedLayout(5, [('u', 8), ('u', 8), ('u', 8)])" in src
    assert "self.three = _mh_fast(_mhmake, channel.send, _mhL_5, ('a', 'b', 'c'), _mhslow_5)" in src
    body = src.split("def _mhslow_5(_mhsend, a, b, c, *, timeout=None):")[1].split("\ndef ")[0].split("\nclass ")[0]
    assert "_mhd = _mhP_5(5, a, b, c)" in body and "_mhsend(_mhd, timeout)" in body
    assert "getattr" not in body and "for " not in body


@pytest.mark.parametrize("name", sorted(p.stem for p in BARRELFISH.glob("*.if") if p not in BF_IMPORTS))
def test_real_barrelfish_files_generate_python(name: str) -> None:
    mod = idl.load(BARRELFISH / f"{name}.if", imports=BF_IMPORTS)
    assert mod.INTERFACE == name
    for num in mod.MESSAGE_NUMBERS.values():
        assert mod._mhDEC[num] is not None


def test_stubgen(tmp_path: Path) -> None:
    """The library function behind `multihop stubgen` (the command itself: tests/idl/test_idl_cli.py)."""
    written = idl.stubgen(SHIPPED / "bench.if", "python", tmp_path / "py", imports=[TYPES_IF])
    assert [p.name for p in written] == ["bench.py"] and "class BenchBinding" in written[0].read_text()
    written = idl.stubgen(SHIPPED / "echo.if", "python", tmp_path / "one" / "echo_stub.py")
    assert written == [tmp_path / "one" / "echo_stub.py"] and written[0].exists()
    written = idl.stubgen(SHIPPED / "echo.if", "c", tmp_path / "c")
    assert [p.name for p in written] == ["echo.h", "echo.c"]
    with pytest.raises(ValueError, match="unknown stub language"):
        idl.stubgen(SHIPPED / "echo.if", "rust", tmp_path)
    with pytest.raises(ValueError, match="looks like a file name"):
        idl.stubgen(SHIPPED / "echo.if", "c", tmp_path / "echo.h")
    with pytest.raises(idl.IdlCodegenError, match="both are 'from_' in Python"):
        idl.stubgen('interface x "" {\n  message m(uint8 from, uint8 from_);\n};', "python", tmp_path / "never")
    assert not (tmp_path / "never").exists()
    assert not hasattr(idl, "main")  # one command line: multihop.idl.command, run by `multihop stubgen`


# -- generated C -------------------------------------------------------------------------------

C_MAIN = r"""
/* The generated echo and kvstore stubs over a real channel of libmultihop_core.so: this one process
 * attaches twice (cores 0 and 1), exports a service on core 1, accepts it in a thread and binds to
 * it from core 0. Usage: cmain RUNTIME SERVICE TRANSPORT */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "echo.h"
#include "kvstore.h"

static mh_service *svc;
static mh_channel *srv_ch;
static int accept_rc = MH_E_INTERNAL;
static void *accept_one(void *arg) { (void)arg; accept_rc = mh_accept(svc, 30000, &srv_ch); return NULL; }

static void hex(const char *tag, const uint8_t *p, size_t n)
{
    printf("%s ", tag);
    for (size_t i = 0; i < n; i++) printf("%02x", p[i]);
    printf("\n");
}
static void on_ping(void *st, uint64_t seq, const uint8_t *data, size_t len)
{
    (void)st;
    printf("ping %llu %zu %c\n", (unsigned long long)seq, len, len ? data[len - 1] : '-');
}
static void on_invalidate(void *st, const char *key) { (void)st; printf("invalidate %s\n", key); }

int main(int argc, char **argv)
{
    if (argc != 4) return 2;
    mh_dispatcher *d0 = NULL, *d1 = NULL;
    mh_channel *cli_ch = NULL;
    pthread_t t;
    if (mh_attach(argv[1], 0, &d0) != MH_OK || mh_attach(argv[1], 1, &d1) != MH_OK) return 3;
    if (mh_export(d1, argv[2], &svc) != MH_OK || pthread_create(&t, NULL, accept_one, NULL) != 0) return 4;
    int brc = mh_bind(d0, argv[2], argv[3], 30000, &cli_ch);
    pthread_join(t, NULL);
    if (brc != MH_OK || accept_rc != MH_OK) { fprintf(stderr, "bind %d accept %d: %s\n", brc, accept_rc, mh_last_error()); return 5; }
    echo_binding ec, es;
    kvstore_binding kc, ks;
    echo_binding_init(&ec, cli_ch);
    echo_binding_init(&es, srv_ch);
    kvstore_binding_init(&kc, cli_ch);
    kvstore_binding_init(&ks, srv_ch);
    static uint8_t big[3000], raw[8192];
    size_t rawlen = 0;
    memset(big, 'b', sizeof big);
    const echo_rx_handlers eh = { .ping = on_ping };
    const kvstore_rx_handlers kh = { .invalidate = on_invalidate };

    printf("send %d\n", echo_ping_send(&ec, -1, 7, (const uint8_t *)"hello", 5));
    printf("raw %d\n", mh_recv(srv_ch, raw, sizeof raw, &rawlen, 5000));   /* the bytes on the wire */
    hex("wire", raw, rawlen);
    printf("dispatch %d\n", echo_dispatch(raw, rawlen, &eh, NULL));
    printf("send %d\n", echo_ping_send(&ec, -1, 8, big, sizeof big));      /* heap path on both sides */
    printf("recv %d\n", echo_recv(&es, 5000, &eh, NULL));
    printf("empty %d\n", echo_recv(&es, 0, &eh, NULL));
    printf("toolong %d\n", echo_ping_send(&ec, -1, 9, big, 4097));

    printf("send %d\n", kvstore_invalidate_send(&kc, -1, "some/key"));
    printf("recv %d\n", kvstore_recv(&ks, 5000, &kh, NULL));
    printf("nohandler %d\n", (kvstore_put_response_send(&kc, -1, kvstore_KV_EXISTS), kvstore_recv(&ks, 5000, &kh, NULL)));

    /* rpc: the service end already sent an invalidate and the response when the call goes out */
    kvstore_stats_t s0 = { 1, 2, 3, 4, 5 }, s1;
    memset(&s1, 0, sizeof s1);
    kvstore_invalidate_send(&ks, -1, "early");
    kvstore_get_stats_response_send(&ks, -1, &s0);
    printf("rpc %d\n", kvstore_get_stats_rpc(&kc, 5000, &s1));
    printf("stats %llu %llu\n", (unsigned long long)s1.keys, (unsigned long long)s1.misses);
    printf("backlog %zu\n", kvstore_backlog_count(&kc));
    printf("recv %d\n", kvstore_recv(&kc, 0, &kh, NULL));                 /* the early invalidate */
    printf("backlog %zu\n", kvstore_backlog_count(&kc));
    printf("rpc call arrived %d\n", mh_recv(srv_ch, raw, sizeof raw, &rawlen, 5000));
    hex("call", raw, rawlen);
    printf("rpc timeout %d\n", kvstore_get_stats_rpc(&kc, 50, &s1));
    printf("rpc null %d\n", kvstore_get_stats_rpc(NULL, 50, &s1));

    uint8_t small[4]; size_t need = 0;
    int rc = echo_ping_encode(small, sizeof small, &need, 1, (const uint8_t *)"xy", 2);
    printf("toosmall %d %zu\n", rc, need);
    printf("badenum %d\n", kvstore_put_response_encode(small, sizeof small, &need, (kvstore_status_t)7));
    uint64_t seq = 0; uint8_t data[4096]; size_t dlen = 0;
    static const uint8_t trunc[] = { 1, 0, 1, 0, 0 };
    printf("corrupt %d\n", echo_ping_decode(trunc, sizeof trunc, &seq, data, &dlen));
    printf("msgname %s %s\n", echo_msg_name(echo_say_call_MSGNUM), echo_msg_name(99) ? "?" : "null");

    echo_binding_destroy(&ec);
    echo_binding_destroy(&es);
    kvstore_binding_destroy(&kc);
    kvstore_binding_destroy(&ks);
    printf("close %d %d\n", mh_close(cli_ch), mh_close(srv_ch));
    mh_service_free(svc);
    mh_detach(d0);
    mh_detach(d1);
    return 0;
}
"""


@pytest.fixture(scope="module")
def cdylib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the real, plain libmultihop_core.so (tests/cdylib.py), or a failure without gcc."""
    if GCC is None:
        pytest.fail("gcc is required for the C tests (it is part of this machine kind; apt-get install gcc)")
    from cdylib import private_cdylib

    return private_cdylib(tmp_path_factory.mktemp("cdylib"))


def test_c_aliases_of_composite_types_compile(tmp_path: Path) -> None:
    """`alias`/`typedef` of a struct, enum or array type: the alias typedef follows the type (found by the
    random interfaces of test_idl_roundtrip)."""
    idl.stubgen(
        'interface al "" {\n  alias ptwo pair; typedef colour hue; typedef trio three;\n'
        "  typedef struct { uint8 a; uint8 b; } pair;\n  typedef enum { RED, GREEN } colour;\n"
        "  typedef uint16 trio[3];\n  message m(ptwo p, hue h, three t);\n};\n",
        "c",
        tmp_path,
    )
    header = (tmp_path / "al.h").read_text()
    assert header.index("} al_pair_t;") < header.index("typedef al_pair_t al_ptwo_t;")
    r = subprocess.run(
        [GCC, *CFLAGS, "-fsyntax-only", "-I", str(INCLUDE), "-I", str(tmp_path), str(tmp_path / "al.c")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_generated_c_compiles_and_runs(tmp_path: Path, cdylib: Path, runtime: mh.Runtime, transport: str) -> None:
    """All shipped and cap-free Barrelfish interfaces compile with -Werror; echo/kvstore stubs run over
    a real channel of libmultihop_core.so."""
    for path, imports in [(p, [TYPES_IF]) for p in SHIPPED.glob("*.if") if p.name != "types.if"] + [
        (BARRELFISH / f"{n}.if", BF_IMPORTS) for n in ("ping_pong", "intermon", "ata_rw28")
    ]:
        idl.stubgen(path, "c", tmp_path, imports)
    (tmp_path / "main.c").write_text(C_MAIN)
    sources = sorted(str(p) for p in tmp_path.glob("*.c"))
    exe = tmp_path / "cmain"
    r = subprocess.run(
        [
            GCC,
            *CFLAGS,
            "-pthread",
            "-I",
            str(INCLUDE),
            "-I",
            str(tmp_path),
            *sources,
            "-L",
            str(cdylib.parent),
            "-lmultihop_core",
            f"-Wl,-rpath,{cdylib.parent}",
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    from session import unique_name

    run = subprocess.run([str(exe), runtime.name, unique_name("cmain"), transport], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"cmain exited {run.returncode}:\n{run.stdout}\n{run.stderr}"
    out = run.stdout.splitlines()
    echo = idl.load(SHIPPED / "echo.if")
    kv = idl.load(SHIPPED / "kvstore.if")
    assert out == [
        "send 0",
        "raw 0",
        "wire " + echo.encode("ping", seq=7, data=b"hello").hex(),
        "ping 7 5 o",
        "dispatch 0",
        "send 0",
        "ping 8 3000 b",
        "recv 0",
        "empty -1",
        "toolong -5",
        "send 0",
        "invalidate some/key",
        "recv 0",
        "nohandler -5",
        "rpc 0",
        "stats 1 5",
        "backlog 1",
        "invalidate early",
        "recv 0",
        "backlog 0",
        "rpc call arrived 0",
        "call " + kv.encode("get_stats_call").hex(),
        "rpc timeout -1",
        "rpc null -5",
        "toosmall -4 20",
        "badenum -5",
        "corrupt -6",
        "msgname say_call null",
        "close 0 0",
    ]
