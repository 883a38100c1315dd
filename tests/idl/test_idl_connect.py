"""Generated bindings bind and export themselves: ``EchoBinding.bind(d, name, transport)``, ``EchoBinding.export(d, name, handler)``.

Everything runs over real runtimes, monitors and channels: "auto" is checked
against the routing tables of direct, fat-tree and ring runtimes (and against
the hop count of the channel it made), the served side runs in this process
and in a spawned child process, and a failing handler ends only its client.
"""

from __future__ import annotations

import gc
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

import idl_procs
import multihop as mh
import multihop.idl as idl
import procs
from multihop.flounder.connect import choose_transport
from session import unique_name

ROOT = Path(__file__).resolve().parents[2]
ECHO_IF = ROOT / "flounder-idl" / "echo.if"
echo = idl.load(ECHO_IF)


class Echo:
    """A handler object: one for every client."""

    def echo(self, request: bytes) -> bytes:
        return request

    def say(self, text: str) -> str:
        if text == "boom":
            raise RuntimeError("the handler failed on purpose")
        return f"you said {text}"

    def bye(self) -> None:
        pass


class PerClient:
    """A handler class: one instance per client, answering ping with pong on its own binding."""

    def __init__(self, binding: Any) -> None:
        self.binding = binding
        self.count = 0

    def ping(self, seq: int, data: bytes) -> None:
        self.count += 1
        self.binding.tx.pong(seq, data + b"#%d" % self.count)

    def echo(self, request: bytes) -> bytes:
        return request[::-1]


@pytest.fixture
def fat_tree() -> Iterator[mh.Runtime]:
    """Four cores in two sockets, fat-tree routing: 0-1 direct, 2-3 direct, leaders 0-2 direct."""
    rt = mh.Runtime.start(unique_name("fat"), cores=[0, 1, 2, 3], routing="fat-tree", topology=mh.Topology(sockets=[[0, 1], [2, 3]]))
    try:
        yield rt
    finally:
        rt.stop()


def test_auto_follows_the_routing_table_of_a_fat_tree(fat_tree: mh.Runtime) -> None:
    rt = fat_tree
    table = mh.rts.routing_table(rt.topology, "fat-tree")
    with rt.dispatcher(3) as srv, echo.EchoBinding.export(srv, "e", Echo()) as server:
        for core in rt.cores:
            with rt.dispatcher(core) as d:
                expected = "ump" if core == 3 or table[core][3] == 3 else "multihop"
                assert choose_transport(d, "e") == expected
                b = echo.EchoBinding.bind(d, "e")  # "auto" is the default
                assert b.channel.transport == expected, core
                assert b.channel.stats().get("hops", 0) == (0 if expected == "ump" else {0: 3, 1: 4}[core])
                assert b.rpc.echo(b"core %d" % core, timeout=10) == b"core %d" % core
                # The caller's choice wins over auto, both ways.
                for transport in ("ump", "multihop"):
                    forced = echo.EchoBinding.bind(d, "e", transport=transport)
                    assert forced.channel.transport == transport
                    assert forced.rpc.say(transport, timeout=10) == f"you said {transport}"
                    forced.channel.close()
                b.channel.close()
        # By iref too: the iref names the exporter's core, no registry lookup needed.
        with rt.dispatcher(0) as d:
            b = echo.EchoBinding.bind(d, server.iref)
            assert b.channel.transport == "multihop" and b.rpc.echo(b"iref", timeout=10) == b"iref"
        assert not server.errors


def test_auto_on_ring_and_direct_runtimes() -> None:
    with mh.Runtime.start(unique_name("ring"), cores=[0, 1, 2, 3], routing="ring") as rt:
        with rt.dispatcher(2) as srv:
            svc = srv.export("r")  # kept: a dropped Service withdraws its name
            assert svc.name == "r"
            picked = {}
            for core in rt.cores:
                with rt.dispatcher(core) as d:
                    picked[core] = choose_transport(d, "r")
            # Ring order 0 -> 1 -> 2 -> 3 -> 0: only core 1 (and 2 itself) reach 2 in one hop.
            assert picked == {0: "multihop", 1: "ump", 2: "ump", 3: "multihop"}
    with mh.Runtime.start(unique_name("direct"), cores=[0, 1, 2]) as rt:
        with rt.dispatcher(2) as srv, echo.EchoBinding.export(srv, "d", Echo()):
            for core in rt.cores:
                with rt.dispatcher(core) as d:
                    b = echo.EchoBinding.bind(d, "d", transport="auto")
                    assert b.channel.transport == "ump" and b.rpc.say("hi", timeout=10) == "you said hi"
                    b.channel.close()


def test_a_binding_keeps_its_dispatcher(rt: mh.Runtime) -> None:
    # Neither end's dispatcher is held by the test: the server keeps its service (and so its dispatcher), the
    # binding its dispatcher, whose link to the monitor a multi-hop channel lives on.
    with echo.EchoBinding.export(rt.dispatcher(1), "kept", Echo()) as server:
        b = echo.EchoBinding.bind(rt.dispatcher(0), "kept", transport="multihop")
        gc.collect()
        assert b.rpc.echo(b"still bound", timeout=10) == b"still bound"
        assert b.dispatcher.core == 0 and b.dispatcher.attached
        b.channel.close()
    assert not server.errors


def test_a_handler_class_serves_each_client_with_its_own_instance(rt: mh.Runtime) -> None:
    with rt.dispatcher(1) as srv, echo.EchoBinding.export(srv, "pc", PerClient) as server:
        with rt.dispatcher(0) as d:
            a = echo.EchoBinding.bind(d, "pc", transport="ump")
            b = echo.EchoBinding.bind(d, "pc", transport="multihop")
            for i in range(3):
                a.tx.ping(i, b"a")
            b.tx.ping(9, b"b")
            assert [(m.seq, m.data) for m in (a.rx.next(10) for _ in range(3))] == [(0, b"a#1"), (1, b"a#2"), (2, b"a#3")]
            m = b.rx.next(10)
            assert (m.name, m.seq, m.data) == ("pong", 9, b"b#1")  # its own instance: count starts again
            assert b.rpc.echo(b"abc", timeout=10) == b"cba"
            a.channel.close()
            b.channel.close()
        assert not server.errors


def test_many_clients_at_once_and_a_failing_handler_ends_only_its_client(rt: mh.Runtime) -> None:
    with rt.dispatcher(1) as srv, echo.EchoBinding.export(srv, "many", Echo()) as server:
        results: dict[int, list[str]] = {}

        def client(k: int) -> None:
            with rt.dispatcher(0) as d:
                b = echo.EchoBinding.bind(d, "many", transport="ump" if k % 2 else "multihop", timeout=30)
                results[k] = [b.rpc.say(f"{k}.{i}", timeout=30) for i in range(20)]
                b.channel.close()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        with rt.dispatcher(0) as d:
            bad = echo.EchoBinding.bind(d, "many")
            with pytest.raises(mh.ChannelClosed):
                bad.rpc.say("boom", timeout=30)
            for t in threads:
                t.join(60)
            assert results == {k: [f"you said {k}.{i}" for i in range(20)] for k in range(6)}
            # The server still serves new clients after the failure.
            good = echo.EchoBinding.bind(d, "many")
            assert good.rpc.echo(b"still here", timeout=10) == b"still here"
        assert len(server.errors) == 1 and "failed on purpose" in str(server.errors[0])


def test_a_message_without_a_handler_ends_that_client_with_the_error_kept(rt: mh.Runtime) -> None:
    with rt.dispatcher(1) as srv, echo.EchoBinding.export(srv, "strict", Echo()) as server:
        with rt.dispatcher(0) as d:
            b = echo.EchoBinding.bind(d, "strict")
            b.tx.ping(1, b"nobody handles ping")
            with pytest.raises(mh.ChannelClosed):
                b.rx.next(30)
        assert [type(e).__name__ for e in server.errors] == ["UnhandledMessage"]


def test_without_a_handler_the_program_accepts_bindings(rt: mh.Runtime) -> None:
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as d:
        server = echo.EchoBinding.export(srv, "manual")
        with server:
            with pytest.raises(mh.Timeout):
                server.accept(timeout=0.05)
            got: list[Any] = []
            # bind may wait for accept (or only for the service's backlog): accept in a thread either way.
            t = threading.Thread(target=lambda: got.append(server.accept(timeout=30)))
            t.start()
            client = echo.EchoBinding.bind(d, "manual", transport="multihop", timeout=30)
            t.join(30)
            (peer,) = got
            assert isinstance(peer, echo.EchoBinding) and server.bindings == [peer]
            client.tx.ping(5, b"x")
            m = peer.rx.next(10)
            assert (m.name, m.seq, m.data) == ("ping", 5, b"x")
        assert server.closed
        with pytest.raises(RuntimeError, match="closed"):
            server.accept(timeout=0)
        with pytest.raises(mh.ChannelClosed):
            client.rx.next(10)  # close() closed the accepted bindings


def test_bad_arguments_are_clear_errors(rt: mh.Runtime) -> None:
    with rt.dispatcher(1) as srv, rt.dispatcher(0) as d:
        with echo.EchoBinding.export(srv, "taken", Echo()) as server:
            with pytest.raises(mh.ExportError, match="already exported"):
                echo.EchoBinding.export(srv, "taken", Echo())
            with pytest.raises(ValueError, match="unknown transport 'tcp'"):
                echo.EchoBinding.bind(d, "taken", transport="tcp")
            with pytest.raises(TypeError, match="name .str. or an iref"):
                echo.EchoBinding.bind(d, 1.5)  # type: ignore[arg-type]
            with pytest.raises(mh.BindError, match='no service "nobody" is exported'):
                echo.EchoBinding.bind(d, "nobody")
            with pytest.raises(mh.BindError):
                echo.EchoBinding.bind(d, "nobody", transport="ump")
            with pytest.raises(RuntimeError, match="serves its clients itself"):
                server.accept(timeout=0)
            b = echo.EchoBinding.bind(d, "taken")
            assert b.rpc.echo(b"ok", timeout=10) == b"ok"
        assert rt.alive


def test_served_by_another_process(fat_tree: mh.Runtime) -> None:
    ready, stop = procs.CTX.Event(), procs.CTX.Event()
    with procs.child(idl_procs.served, fat_tree.name, 2, "remote", ready, stop) as p:
        assert ready.wait(60)
        for core, transport in ((3, "ump"), (1, "multihop")):
            with fat_tree.dispatcher(core) as d:
                b = echo.EchoBinding.bind(d, "remote", timeout=30)
                assert b.channel.transport == transport
                assert [b.rpc.echo(bytes([i]) * i, timeout=30) for i in range(50)] == [bytes([i]) * i for i in range(50)]
                b.channel.close()
        stop.set()
        p.join(30)
        assert p.exitcode == 0


# -- the C back end: echo_bind / echo_export / echo_accept ------------------------------------

GCC = shutil.which("gcc")
INCLUDE = ROOT / "core-rs" / "include"
C_DIR = Path(__file__).resolve().parents[1] / "c"


@pytest.fixture(scope="module")
def echo_bind_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/c/echo_bind.c built against the generated echo stubs and the real libmultihop_core.so."""
    if GCC is None:
        pytest.fail("gcc is required for the C tests (it is part of this machine kind; apt-get install gcc)")
    from cdylib import private_cdylib

    out = tmp_path_factory.mktemp("echo_bind")
    lib = private_cdylib(out)
    idl.stubgen(ECHO_IF, "c", out)
    exe = out / "echo_bind"
    r = subprocess.run(
        [
            GCC,
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            str(INCLUDE),
            "-I",
            str(out),
            "-I",
            str(C_DIR),
            str(out / "echo.c"),
            str(C_DIR / "echo_bind.c"),
            "-L",
            str(lib.parent),
            "-lmultihop_core",
            f"-Wl,-rpath,{lib.parent}",
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return exe


@pytest.mark.parametrize(
    "core, transport, expected",
    [
        (0, "null", "multihop"),
        (1, "auto", "multihop"),
        (2, "auto", "ump"),
        (3, "auto", "ump"),
        (0, "ump", "ump"),
        (2, "multihop", "multihop"),
    ],
)
def test_c_bind_picks_the_transport_python_picks(echo_bind_exe: Path, fat_tree: mh.Runtime, core: int, transport: str, expected: str) -> None:
    rt = fat_tree
    with rt.dispatcher(3) as srv, rt.dispatcher(core) as d:
        server = echo.EchoBinding.export(srv, "c-clients")
        with server:
            if transport in ("null", "auto"):
                assert choose_transport(d, "c-clients") == expected
            got: list[Any] = []
            t = threading.Thread(target=lambda: got.append(server.accept(timeout=30)))
            t.start()
            with subprocess.Popen(
                [str(echo_bind_exe), "client", rt.name, str(core), "c-clients", transport], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            ) as p:
                try:
                    t.join(30)
                    (peer,) = got
                    assert peer.channel.transport == expected
                    peer.serve(Echo(), timeout=30)
                    peer.serve(Echo(), timeout=30)
                    out, err = p.communicate(timeout=30)
                finally:
                    p.kill()
            assert p.returncode == 0, err
            assert out.splitlines() == ["echo hello from C", "say you said C"]


def test_c_server_serves_python_clients(echo_bind_exe: Path, fat_tree: mh.Runtime) -> None:
    rt = fat_tree
    with subprocess.Popen([str(echo_bind_exe), "server", rt.name, "2", "c-server"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        try:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
            with rt.dispatcher(1) as d:
                b = echo.EchoBinding.bind(d, "c-server", timeout=30)
                assert b.channel.transport == "multihop"  # core 1 to core 2: through the leaders 0 and 2
                assert b.rpc.echo(b"abc", timeout=30) == b"cba"
                assert b.rpc.say("py", timeout=30) == "C heard py"
                b.channel.close()
            out, err = p.communicate(timeout=30)
        finally:
            p.kill()
    assert p.returncode == 0, err
    assert out == "served 2\n"


def test_c_bind_to_nobody_says_so(echo_bind_exe: Path, rt: mh.Runtime) -> None:
    r = subprocess.run([str(echo_bind_exe), "nobody", rt.name, "0", "no-such-service"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('-7 bind to "no-such-service": ') and "no service" in r.stdout


def test_the_readme_flounder_example_runs(tmp_path: Path) -> None:
    """The README's bind/export example, as a user copies it (the README test runs every block; this one is ours)."""
    import re

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (block,) = [b for b in blocks if "GreeterBinding.export" in b]
    r = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
