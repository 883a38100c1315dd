"""Flounder capabilities (issue 16 §1): `cap` / `give_away_cap` arguments become handles in both back ends.

Every interface file of the Barrelfish set (tests/idl_data/barrelfish/, 37 of which carry capabilities)
generates Python and C, and the C compiles with -Werror; Python and C lay capability-carrying messages
out alike (C decodes what Python encodes and encodes it back, handles in the same order); and a
generated C client and a generated Python service pass descriptors both ways over a real runtime.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
from pathlib import Path

import pytest

import multihop as mh
import multihop.idl as idl
from session import unique_name

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "core-rs" / "include"
BARRELFISH = Path(__file__).resolve().parents[1] / "idl_data" / "barrelfish"
BF_IMPORTS = [BARRELFISH / "types.if", BARRELFISH / "platform_x86_32.if", BARRELFISH / "arch_x86_64.if"]
GCC = shutil.which("gcc")
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror"]

FDPASS = """
interface fdpass "descriptors both ways" {
    typedef struct { uint32 tag; give_away_cap fd; } tagged;
    rpc swap(in cap mine, in uint32 n, out give_away_cap yours, out uint32 len);
    message note(tagged t, cap spare);
    message many(cap fds[n, 4], String label[16]);
};
"""


def gcc() -> str:
    if GCC is None:
        pytest.fail("gcc is required for the C tests (it is part of this machine kind; apt-get install gcc)")
    return GCC


def test_every_barrelfish_interface_generates_and_compiles(tmp_path: Path) -> None:
    files = sorted(p for p in BARRELFISH.glob("*.if") if p not in BF_IMPORTS)
    with_caps = 0
    for p in files:
        iface = idl.parse(p, imports=BF_IMPORTS)
        with_caps += any(idl.model.has_caps(a.type) for m in iface.messages for a in m.args)
        idl.stubgen(p, "c", tmp_path, BF_IMPORTS)
        assert idl.load(p, imports=BF_IMPORTS).INTERFACE == iface.name
    assert len(files) >= 40 and with_caps >= 37
    cfiles = sorted(str(f) for f in tmp_path.glob("*.c"))
    halves = [cfiles[0::2], cfiles[1::2]]  # two compilers, one per core
    procs = [
        subprocess.Popen([gcc(), *CFLAGS, "-c", "-I", str(INCLUDE), "-I", str(tmp_path), *h], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        for h in halves
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert len(list(tmp_path.glob("*.o"))) == len(files)


DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fdpass.h"

static int unhex(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

/* each line: "<nfds> <hex>"; the handles are the numbers 100, 101, ...; prints OK <hex> or ERR <rc> */
int main(void)
{
    char line[4096];
    uint8_t in[2048], out[2048];
    while (fgets(line, sizeof line, stdin)) {
        char *sp = strchr(line, ' ');
        size_t nfds = (size_t)atoi(line), n = strcspn(sp + 1, "\n") / 2, outlen = 0;
        for (size_t i = 0; i < n; i++) in[i] = (uint8_t)(unhex(sp[1 + 2 * i]) << 4 | unhex(sp[2 + 2 * i]));
        int fds[MH_MAX_HANDLES];
        for (size_t i = 0; i < MH_MAX_HANDLES; i++) fds[i] = 100 + (int)i;
        int rc = fdpass_reencode(in, n, fds, nfds, out, sizeof out, &outlen);
        if (rc != MH_OK) printf("ERR %d\n", rc);
        else { printf("OK "); for (size_t i = 0; i < outlen; i++) printf("%02x", out[i]); printf("\n"); }
        fflush(stdout);
    }
    return 0;
}
"""


def test_python_and_c_lay_capabilities_out_alike(tmp_path: Path) -> None:
    from cdylib import private_cdylib

    lib = private_cdylib(tmp_path)  # the codec needs no channel; the stubs link against the library
    idl.stubgen(FDPASS, "c", tmp_path)
    (tmp_path / "driver.c").write_text(DRIVER)
    exe = tmp_path / "driver"
    r = subprocess.run(
        [
            gcc(),
            *CFLAGS,
            "-I",
            str(INCLUDE),
            "-I",
            str(tmp_path),
            str(tmp_path / "driver.c"),
            str(tmp_path / "fdpass.c"),
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
    mod = idl.load(FDPASS)
    cases = [
        mod.encode("swap_call", mine=100, n=7),
        mod.encode("swap_call", mine=None, n=1),
        mod.encode("swap_response", yours=100, len=3),
        mod.encode("note", t=mod.tagged(5, 100), spare=101),
        mod.encode("note", t=(6, None), spare=100),
        mod.encode("many", fds=[100, None, 101, 102], label="four"),
        mod.encode("many", fds=[], label=""),
    ]
    lines = "".join(f"{len(hs)} {data.hex()}\n" for data, hs, _ in cases)
    # wrong handle counts: one too few, one too many
    lines += f"1 {cases[3][0].hex()}\n3 {cases[0][0].hex()}\n"
    run = subprocess.run([str(exe)], input=lines, capture_output=True, text=True, timeout=30)
    out = run.stdout.splitlines()
    for (data, hs, _give), got in zip(cases, out, strict=False):
        assert got == f"OK {data.hex()}", (data, got)
        assert hs == [100 + i for i in range(len(hs))]
    assert out[len(cases) :] == ["ERR -6", "ERR -6"]
    # Python decodes what it encoded, each capability taking its handle in wire order
    data, hs, give = cases[3]
    assert give == [True, False]  # the struct's give_away_cap, then the plain cap
    assert mod.decode(data, ["a", "b"]) == mod.messages.note(mod.tagged(5, "a"), "b")


CLIENT = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fdpass.h"

static int memfd_with(const char *text)
{
    int fd = memfd_create("c-client", MFD_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) return -1;
    return fd;
}

static void show(const char *tag, int fd)
{
    char buf[128] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    printf("%s %s\n", tag, n >= 0 ? buf : "(unreadable)");
}

int main(int argc, char **argv)
{
    if (argc != 4) return 2;
    mh_dispatcher *d = NULL;
    fdpass_binding b;
    if (mh_attach(argv[1], 0, &d) != MH_OK) return 3;
    int rc = fdpass_bind(d, argv[2], argv[3], 10000, &b);
    if (rc != MH_OK) { fprintf(stderr, "bind %d: %s\n", rc, mh_last_error()); return 4; }
    int mine = memfd_with("from C");
    int yours = -1;
    uint32_t len = 0;
    rc = fdpass_swap_rpc(&b, 10000, mine, 7, &yours, &len);
    printf("swap %d %u\n", rc, len);
    show("yours", yours);
    printf("mine still open %d\n", fcntl(mine, F_GETFD) >= 0);
    int gift = memfd_with("a gift"), spare = memfd_with("spare");
    fdpass_tagged_t t = { 42, gift };
    printf("note %d\n", fdpass_note_send(&b, 10000, &t, spare));
    printf("gift closed %d spare open %d\n", fcntl(gift, F_GETFD) < 0, fcntl(spare, F_GETFD) >= 0);
    int many[3] = { mine, -1, spare };
    printf("many %d\n", fdpass_many_send(&b, 10000, many, 3, "three"));
    int owned = memfd_with("x");
    int bad[1] = { owned };
    close(owned);
    printf("closed handle %d\n", fdpass_many_send(&b, 10000, bad, 1, "bad"));
    close(mine);
    close(spare);
    close(yours);
    mh_close(b.ch);
    fdpass_binding_destroy(&b);
    mh_detach(d);
    return 0;
}
"""


@pytest.mark.parametrize("transport", ["ump", "multihop"])
def test_generated_c_client_and_python_service_pass_descriptors_both_ways(tmp_path: Path, transport: str) -> None:
    from cdylib import private_cdylib

    lib = private_cdylib(tmp_path)
    idl.stubgen(FDPASS, "c", tmp_path)
    (tmp_path / "client.c").write_text(CLIENT)
    exe = tmp_path / "client"
    r = subprocess.run(
        [
            gcc(),
            *CFLAGS,
            "-I",
            str(INCLUDE),
            "-I",
            str(tmp_path),
            str(tmp_path / "client.c"),
            str(tmp_path / "fdpass.c"),
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
    mod = idl.load(FDPASS)
    seen: queue.Queue = queue.Queue()

    class Service:
        def swap(self, mine: mh.Handle, n: int) -> tuple[int, int]:
            got = os.pread(mine.fileno(), 64, 0)
            fd = os.memfd_create("python-service")
            os.write(fd, b"from Python:" + got)
            return fd, len(got) + n  # given away: closed here once sent

        def note(self, t: object, spare: mh.Handle) -> None:
            seen.put(("note", t.tag, os.pread(t.fd.fileno(), 64, 0), os.pread(spare.fileno(), 64, 0)))

        def many(self, fds: tuple, label: str) -> None:
            seen.put(("many", label, [None if h is None else os.pread(h.fileno(), 64, 0) for h in fds]))

    with mh.Runtime.start(unique_name("fdpass"), cores=[0, 1], routing="direct") as rt:
        name = unique_name("svc")
        with mod.FdpassBinding.export(rt.dispatcher(core=1), name, Service()) as server:
            run = subprocess.run([str(exe), rt.name, name, transport], capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, f"client exited {run.returncode}:\n{run.stdout}\n{run.stderr}"
            assert run.stdout.splitlines() == [
                "swap 0 13",
                "yours from Python:from C",
                "mine still open 1",
                "note 0",
                "gift closed 1 spare open 1",
                "many 0",
                f"closed handle {mh._core.__dict__.get('MH_E_CAP', -14)}",
            ]
            assert seen.get(timeout=10) == ("note", 42, b"a gift", b"spare")
            assert seen.get(timeout=10) == ("many", "three", [b"from C", None, b"spare"])
            assert not server.errors
