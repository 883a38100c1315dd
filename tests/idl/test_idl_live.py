"""Generated Flounder bindings over real channels between processes.

(a) The kvstore binding (made by ``multihop stubgen --lang python``): rpc client here, ``serve``
    in a spawned process, over UMP and over a multi-hop channel.
(b) A C client (stubs from ``multihop stubgen --lang c`` + tests/c/allkinds_client.c, built
    with gcc against libmultihop_core.so) and a Python service exchanging every argument kind
    of tests/c/allkinds.if in both directions, checked on both sides.
(c) The C binding's rpc backlog (tests/c/backlog_client.c): a Python service sends other
    messages before an rpc's response; the C client finds them, in order, after the rpc.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

import multihop as mh
import multihop.idl  # noqa: F401  (mh.idl)
import procs
from generated import import_file

ROOT = Path(__file__).resolve().parents[2]
IDL = ROOT / "flounder-idl"
KVSTORE_IF = IDL / "kvstore.if"
TYPES_IF = IDL / "types.if"
ALLKINDS_IF = ROOT / "tests" / "c" / "allkinds.if"
ALLKINDS_MAIN = ROOT / "tests" / "c" / "allkinds_client.c"
BACKLOG_IF = ROOT / "tests" / "c" / "backlog.if"
BACKLOG_MAIN = ROOT / "tests" / "c" / "backlog_client.c"
INCLUDE = ROOT / "core-rs" / "include"
GCC = shutil.which("gcc")


def unique_name(prefix: str = "t") -> str:
    """session's unique_name, imported late (spawned children import this module, and must not
    import session: it would point them at a fresh runtime root)."""
    from session import unique_name as un

    return un(prefix)


def stubgen(*args: str) -> list[Path]:
    """Run ``multihop stubgen ARGS`` (the CLI, as a user would) and return the files it wrote."""
    r = subprocess.run([sys.executable, "-m", "multihop.cli", "stubgen", *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, f"multihop stubgen {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    return [Path(line) for line in r.stdout.split()]


# ---- (a) kvstore rpcs between two processes ------------------------------------------------


class KvStore:
    """The kvstore service behind ``serve``: rpc handlers return the out values."""

    def __init__(self, mod: types.ModuleType, binding: Any) -> None:
        self.mod, self.b = mod, binding
        self.data: dict[str, bytes] = {}
        self.gets = self.puts = self.misses = 0

    def put(self, key: str, value: bytes, overwrite: bool) -> Any:
        self.puts += 1
        if key in self.data:
            if not overwrite:
                return self.mod.status.KV_EXISTS
            self.b.tx.invalidate(key=key)  # goes out before the response
        self.data[key] = bytes(value)
        return self.mod.status.KV_OK

    def get(self, key: str) -> tuple[Any, bytes]:
        self.gets += 1
        if key not in self.data:
            self.misses += 1
            return self.mod.status.KV_NOT_FOUND, b""
        return self.mod.status.KV_OK, self.data[key]

    def remove(self, key: str) -> Any:
        return self.mod.status.KV_OK if self.data.pop(key, None) is not None else self.mod.status.KV_NOT_FOUND

    def list(self, prefix: str, max: int) -> tuple[int, bytes]:  # noqa: A002 (the interface's name)
        names = sorted(k for k in self.data if k.startswith(prefix))[:max]
        return len(names), b"\0".join(n.encode() for n in names)

    def get_stats(self) -> Any:
        return self.mod.stats(keys=len(self.data), bytes=sum(map(len, self.data.values())), gets=self.gets, puts=self.puts, misses=self.misses)


def kv_server(name: str, core: int, service: str, binding_py: str, ready: Any) -> None:
    """Serve the kvstore until the client closes; exactly one undecodable message is expected."""
    mod = import_file(Path(binding_py))
    with procs.accepted(name, core, service, ready) as ch:
        b = mod.KvstoreBinding(ch)
        kv = KvStore(mod, b)
        bad = 0
        for _ in range(100_000):
            try:
                b.serve(kv, timeout=30)
            except mh.idl.DecodeError:
                bad += 1  # the channel stays usable: go on
            except mh.ChannelClosed:
                break
        assert bad == 1, f"expected one undecodable message, saw {bad}"


def kvstore_exchange(mod: types.ModuleType, ch: mh.Channel, keys: int = 200) -> None:
    """The client side of the kvstore exchange with ``kv_server`` over ``ch``; closes ``ch`` at the end."""
    st = mod.status
    b = mod.KvstoreBinding(ch)
    T = 10.0
    assert b.rpc.put(key="a", value=b"1", overwrite=False, timeout=T) == st.KV_OK
    assert b.rpc.put(key="a", value=b"x", overwrite=False, timeout=T) == st.KV_EXISTS
    assert b.rx.try_next() is None
    assert b.rpc.put(key="a", value=b"2", overwrite=True, timeout=T) == st.KV_OK
    inv = b.rx.next(timeout=T)  # arrived while the rpc waited: kept for rx, in order
    assert (inv.name, inv.key) == ("invalidate", "a")
    assert b.rpc.get(key="a", timeout=T) == (st.KV_OK, b"2")
    assert b.rpc.get(key="zz", timeout=T) == mod.results.get(st.KV_NOT_FOUND, b"")
    # Many keys, values up to the interface's maximum.
    values = {f"k{i:03d}": bytes([i % 256]) * ((i * 97) % 8193) for i in range(keys)}
    for k, v in values.items():
        assert b.rpc.put(key=k, value=v, overwrite=False, timeout=T) == st.KV_OK
    for k, v in values.items():
        assert b.rpc.get(key=k, timeout=T) == (st.KV_OK, v)
    count, names = b.rpc.list(prefix="k00", max=100, timeout=T)
    assert (count, names) == (10, b"\0".join(f"k00{i}".encode() for i in range(10)))
    assert b.rpc.remove(key="k000", timeout=T) == st.KV_OK
    assert b.rpc.remove(key="k000", timeout=T) == st.KV_NOT_FOUND
    # Bad values are refused before anything is sent, naming the argument.
    with pytest.raises(ValueError, match="key"):
        b.rpc.put(key="x" * 257, value=b"", overwrite=True, timeout=T)
    with pytest.raises(ValueError, match="value"):
        b.rpc.put(key="x", value=b"v" * 8193, overwrite=True, timeout=T)
    # A message that does not decode is lost alone: the service goes on.
    ch.send(b"\xff\xff not a kvstore message")
    stats = b.rpc.get_stats(timeout=T)
    assert stats == mod.stats(keys=keys, bytes=1 + sum(map(len, values.values())) - len(values["k000"]), gets=keys + 2, puts=keys + 3, misses=1)
    ch.close()


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_kvstore_rpcs_between_processes(rt: mh.Runtime, tmp_path: Path, transport: str) -> None:
    (binding_py,) = stubgen(str(KVSTORE_IF), "--lang", "python", "-o", str(tmp_path / "kvstore_if.py"))
    assert binding_py == tmp_path / "kvstore_if.py"
    mod = import_file(binding_py)
    service = unique_name("kv")
    ready = procs.CTX.Event()
    with procs.child(kv_server, rt.name, 1, service, str(binding_py), ready) as p, rt.dispatcher(0) as d:
        assert ready.wait(30), "the kvstore service did not export in time"
        ch = d.bind(service, transport=transport, timeout=30)
        kvstore_exchange(mod, ch)
        p.join(30)
        assert p.exitcode == 0


@pytest.mark.parametrize("routing, client, server", [("ring", 0, 2), ("fat-tree", 1, 2)])
def test_kvstore_rpcs_through_an_intermediate_monitor(tmp_path: Path, routing: str, client: int, server: int) -> None:
    """Three cores, so the multi-hop path crosses a monitor that neither end is attached to:
    ring 0 -> 1 -> 2, and fat-tree across two sockets 1 -> leader 0 -> 2 (socket {2})."""
    (binding_py,) = stubgen(str(KVSTORE_IF), "--lang", "python", "-o", str(tmp_path / "kvstore_if.py"))
    mod = import_file(binding_py)
    topo = mh.Topology(sockets=[[0, 1], [2]]) if routing == "fat-tree" else None
    rt = mh.Runtime.start(unique_name("kv3"), cores=[0, 1, 2], routing=routing, topology=topo)
    try:
        service = unique_name("kv")
        ready = procs.CTX.Event()
        with procs.child(kv_server, rt.name, server, service, str(binding_py), ready) as p, rt.dispatcher(client) as d:
            assert ready.wait(30), "the kvstore service did not export in time"
            ch = d.bind(service, transport="multihop", timeout=30)
            assert ch.stats()["hops"] >= 3, ch.stats()
            kvstore_exchange(mod, ch, keys=50)
            p.join(30)
            assert p.exitcode == 0
        middle = 0 if routing == "fat-tree" else 1
        (row,) = [m for m in rt.status()["monitors"] if m["core"] == middle]
        assert row["data"]["forwarded"] > 0, f"monitor {middle} forwarded nothing: {row['data']}"
    finally:
        rt.stop()


# ---- (b) a C client and a Python service, every argument kind --------------------------------


def allkinds_values(mod: types.ModuleType) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(A, B): the values C sends and the values Python sends back, by message.

    tests/c/allkinds_client.c holds the same values; keep the two in step.
    """
    c, inner, outer = mod.colour, mod.inner, mod.outer
    outer_a = outer(first=inner(200, -300, 70000, True, c.GREEN), tag=2**64 - 2, ch=b"q", small=(-1, 0, 127))
    outer_b = outer(first=inner(0, 32767, 0, False, c.BLUE), tag=0, ch=b"\x01", small=(-128, -127, -126))
    a = {
        "scalars": dict(
            u8=255,
            u16=65535,
            u32=2**32 - 1,
            u64=2**64 - 1,
            i8=-128,
            i16=-32768,
            i32=-(2**31),
            i64=-(2**63),
            sz=2**63 + 5,
            up=0xDEADBEEFCAFEBABE,
            ip=-(2**62),
            yes=True,
            no=False,
            ch=b"Z",
            ref=0x123456789ABCDEF0,
            err=0xFFFF000000000001,
            h=42,
            core=65534,
        ),
        "composite": dict(
            c=c.BLUE,
            o=outer_a,
            t=(1, 65535, 300),
            fixed=(-5, 0, 5, 2**31 - 1),
            pair=(inner(1, -1, 1, False, c.RED), inner(2, -2, 2, True, c.BLUE)),
            shades=(c.GREEN, c.RED),
        ),
        "dynamic": dict(
            blob=bytes((i * 37) % 256 for i in range(1000)),
            nums=(-1, 0, 1, 2**31 - 1, -(2**31)),
            items=tuple(inner(i, -i, i * 1000, i % 2 == 0, c(i % 3)) for i in range(8)),
            name_="héllo wörld ✓",
            text=b"plain char text",
            old=(1, 2**64 - 1, 0),
            oldstr="old-style ünïcode string",
            empty=b"",
        ),
        "mix_call": dict(seq=7, c=c.GREEN, o=outer_a, t=(3, 2, 1), data=bytes(i % 3 for i in range(30)), s="ψ rpc", ref=99, err=2**63),
    }
    b = {
        "scalars": dict(
            u8=1,
            u16=2,
            u32=3,
            u64=4,
            i8=127,
            i16=32767,
            i32=2**31 - 1,
            i64=2**63 - 1,
            sz=0,
            up=1,
            ip=-1,
            yes=True,
            no=False,
            ch=b"\xff",
            ref=7,
            err=0,
            h=2**64 - 1,
            core=0,
        ),
        "composite": dict(
            c=c.RED,
            o=outer_b,
            t=(0, 0, 7),
            fixed=(-(2**31), 1, 2, 3),
            pair=(inner(9, 9, 9, True, c.GREEN), inner(255, -32768, 2**32 - 1, False, c.RED)),
            shades=(c.BLUE, c.BLUE),
        ),
        "dynamic": dict(blob=b"", nums=tuple(range(-32, 32)), items=(), name_="", text=bytes(range(256)), old=(), oldstr="B" * 1000, empty=bytes(16)),
        "mix_response": dict(
            seq_back=8, c_back=c.BLUE, o_back=outer_b, t_back=(9, 8, 7), data_back=bytes(range(256)), s_back="x" * 64, ref_back=2**64 - 1, err_back=1
        ),
    }
    return a, b


def allkinds_service(name: str, core: int, service: str, ready: Any) -> None:
    """The Python end of the exchange described in tests/c/allkinds_client.c."""
    mod = mh.idl.load(ALLKINDS_IF, imports=[TYPES_IF])
    A, B = allkinds_values(mod)
    with procs.accepted(name, core, service, ready) as ch:
        b = mod.AllkindsBinding(ch)
        for m in ("scalars", "composite", "dynamic"):
            raw = ch.recv(timeout=30)
            msg = mod.decode(raw)
            assert msg.name == m, f"expected {m}, got {msg.name}"
            assert msg._asdict() == A[m], f"{m}: C sent {msg!r}, expected {A[m]!r}"
            assert raw == mod.encode(m, **A[m]), f"{m}: C and Python encode differently"
        for m in ("scalars", "composite", "dynamic"):
            getattr(b.tx, m)(**B[m], timeout=30)

        class Handler:
            def mix(self, seq: int, c: Any, o: Any, t: Any, data: bytes, s: str, ref: int, err: int) -> tuple[Any, ...]:
                got = dict(seq=seq, c=c, o=o, t=t, data=data, s=s, ref=ref, err=err)
                assert got == A["mix_call"], f"mix call: C sent {got!r}"
                return tuple(B["mix_response"].values())

        assert b.serve(Handler(), timeout=30).name == "mix_call"
        done = b.rx.next(timeout=30)
        assert (done.name, done.checked) == ("done", 4), done
        b.tx.done(checked=4, timeout=30)
        try:
            ch.recv(timeout=30)
        except mh.ChannelClosed:
            pass
        else:
            raise AssertionError("the C client sent more than expected")


def build_c_client(out: Path, interface: Path, main: Path, *imports: Path) -> Path:
    """Generate C stubs of ``interface`` with ``multihop stubgen`` and build ``main`` against the cdylib."""
    if GCC is None:
        pytest.fail("gcc is required for the C tests (it is part of this machine kind; apt-get install gcc)")
    from cdylib import private_cdylib

    lib = private_cdylib(out)
    args = [str(interface), "--lang", "c", "-o", str(out)]
    for imp in imports:
        args += ["--import", str(imp)]
    written = stubgen(*args)
    assert sorted(p.name for p in written) == [f"{interface.stem}.c", f"{interface.stem}.h"]
    exe = out / main.stem
    cmd = [
        GCC,
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-O1",
        "-I",
        str(INCLUDE),
        "-I",
        str(out),
        str(out / f"{interface.stem}.c"),
        str(main),
        "-L",
        str(lib.parent),
        "-lmultihop_core",
        f"-Wl,-rpath,{lib.parent}",
        "-o",
        str(exe),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"gcc failed:\n{' '.join(cmd)}\n{r.stderr}"
    return exe


def run_c_client(rt: mh.Runtime, client: Path, service_fn: Any, prefix: str, transport: str) -> None:
    """Run the C test program `client` against `service_fn` in a spawned Python process on core 1:
    both must finish cleanly, the client reporting 0 failed checks."""
    service = unique_name(prefix)
    ready = procs.CTX.Event()
    with procs.child(service_fn, rt.name, 1, service, ready) as p:
        assert ready.wait(30), "the Python service did not export in time"
        t0 = time.monotonic()
        r = subprocess.run([str(client), rt.name, service, "0", transport], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"C client failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
        assert " 0 failed" in r.stdout, r.stdout
        p.join(max(1.0, 30 - (time.monotonic() - t0)))
        assert p.exitcode == 0, "the Python service failed (see its traceback above)"


@pytest.fixture(scope="module")
def allkinds_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C client, built from freshly generated stubs against the cdylib."""
    return build_c_client(tmp_path_factory.mktemp("allkinds_c"), ALLKINDS_IF, ALLKINDS_MAIN, TYPES_IF)


def test_allkinds_python_encoding_matches_the_c_values() -> None:
    # The values round-trip through the Python codec (so a C/Python mismatch is a real one).
    mod = mh.idl.load(ALLKINDS_IF, imports=[TYPES_IF])
    A, B = allkinds_values(mod)
    for side in (A, B):
        for m, fields in side.items():
            msg = mod.decode(mod.encode(m, **fields))
            assert msg._asdict() == fields, m


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_c_client_and_python_service_exchange_every_kind(rt: mh.Runtime, allkinds_client: Path, transport: str) -> None:
    run_c_client(rt, allkinds_client, allkinds_service, "allkinds", transport)


# ---- (c) the C binding's rpc backlog -------------------------------------------------------------


class BacklogService:
    """The service of tests/c/backlog_client.c: other messages go out before each response."""

    def __init__(self, binding: Any) -> None:
        self.b = binding
        self.calls = 0
        self.after: int | None = None
        self.finished = False

    def ask(self, n: int, extra: int) -> int:
        self.calls += 1
        for i in range(n):
            self.b.tx.note(seq=i, text=f"note {i}", timeout=30)
        if extra & 1:
            self.b.tx.blob(seq=n, data=bytes((i * 7) % 256 for i in range(2000)), timeout=30)
            self.after = 1  # sent once the response is out
        if extra & 2:
            time.sleep(1.0)  # longer than the client's 100 ms rpc timeout
        return n * 10

    def done(self, count: int) -> None:
        assert count > 0, "the C client made no checks"
        self.b.tx.done(count=self.calls, timeout=30)
        self.finished = True


def backlog_service(name: str, core: int, service: str, ready: Any) -> None:
    """Serve tests/c/backlog.if to one C client until it closes."""
    mod = mh.idl.load(BACKLOG_IF)
    with procs.accepted(name, core, service, ready) as ch:
        b = mod.BacklogBinding(ch)
        h = BacklogService(b)
        for _ in range(100):  # the client makes 5 calls and messages
            b.serve(h, timeout=30)
            if h.after is not None:
                b.tx.after(seq=h.after, timeout=30)
                h.after = None
            if h.finished:
                break
        assert h.finished, "the C client never sent done"
        try:
            ch.recv(timeout=30)
        except mh.ChannelClosed:
            pass
        else:
            raise AssertionError("the C client sent more than expected")


@pytest.fixture(scope="module")
def backlog_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/c/backlog_client.c, built from freshly generated stubs against the cdylib."""
    return build_c_client(tmp_path_factory.mktemp("backlog_c"), BACKLOG_IF, BACKLOG_MAIN)


def test_generated_header_documents_the_backlog() -> None:
    header, _ = mh.idl.generate_c(mh.idl.parse(BACKLOG_IF))
    assert "#define backlog_BACKLOG_MAX 64u" in header
    assert "every other message that arrives is kept, in" in header and "No message is lost" in header
    assert "int backlog_recv(backlog_binding *mh_b," in header


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_c_rpc_keeps_earlier_messages_in_its_backlog(rt: mh.Runtime, backlog_client: Path, transport: str) -> None:
    run_c_client(rt, backlog_client, backlog_service, "backlog", transport)
