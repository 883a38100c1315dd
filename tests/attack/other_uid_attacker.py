"""Attack a runtime from another uid: run as root, drop to the attacker's uid, try every path.

Usage: python other_uid_attacker.py UID GID RUNTIME_NAME RUNTIME_DIR CDYLIB CORE...

It imports everything it needs (the extension, cffi and the C library) while still root (the
interpreter lives under /root, which other users cannot read), then gives up root for good
(setgroups, setresgid, setresuid) and attempts each path. It prints one JSON object: for every
attempt, ["refused", exception type, message] or ["ALLOWED", what it got].
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from typing import Any, Callable

import cffi

import multihop as mh
from multihop import _core

uid, gid, name, rdir, cdylib = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
cores = [int(c) for c in sys.argv[6:]]

ffi = cffi.FFI()
ffi.cdef("""
typedef struct mh_dispatcher mh_dispatcher;
int mh_attach(const char *runtime_name, uint32_t core, mh_dispatcher **out);
const char *mh_last_error(void);
""")
lib = ffi.dlopen(cdylib)

os.setgroups([])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)
assert os.getuid() == uid and os.geteuid() == uid

report: dict[str, Any] = {}


def attempt(what: str, call: Callable[[], Any]) -> None:
    try:
        got = call()
    except BaseException as e:  # every refusal is recorded, whatever its type
        report[what] = ["refused", type(e).__name__, str(e)]
    else:
        report[what] = ["ALLOWED", repr(got)[:200]]


def c_attach(core: int) -> Any:
    out = ffi.new("mh_dispatcher **")
    rc = lib.mh_attach(name.encode(), core, out)
    if rc != 0:
        raise OSError(rc, ffi.string(lib.mh_last_error()).decode())
    return "attached"


def raw(path: str) -> Any:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    s.connect(path)
    s.send(b'\x01{"op": "hello", "role": "tool", "core": 0}')
    s.send(b'\x01{"op": "shutdown", "req": 1}')
    answer = s.recv(65536)
    s.close()
    if b"may not attach" in answer or not answer:
        raise PermissionError(answer.decode(errors="replace") or "hung up")
    return answer


attempt("Runtime.attach", lambda: mh.Runtime.attach(name))
attempt("Runtime.start", lambda: mh.Runtime.start(name, cores=cores))
attempt("runtime_state", lambda: _core.runtime_state(rdir))
attempt("runtime_claim", lambda: _core.runtime_claim(rdir))
attempt("runtime_remove_if_unheld", lambda: _core.runtime_remove_if_unheld(rdir) or (_ for _ in ()).throw(PermissionError("not removed")))
attempt("read runtime.json", lambda: open(os.path.join(rdir, "runtime.json")).read())
attempt("read a monitor log", lambda: open(os.path.join(rdir, f"mon-{cores[0]}.log")).read())
attempt("write the lock", lambda: open(os.path.join(rdir, "lock"), "w").write("x"))
for core in cores:
    sock = os.path.join(rdir, f"mon-{core}.sock")
    attempt(f"Dispatcher.attach core {core}", lambda core=core: _core.Dispatcher.attach(rdir, core))
    attempt(f"C mh_attach core {core}", lambda core=core: c_attach(core))
    attempt(f"monitor_status core {core}", lambda sock=sock: _core.monitor_status(sock, timeout=5))
    attempt(f"monitor_shutdown core {core}", lambda sock=sock: _core.monitor_shutdown(sock, timeout=5))
    attempt(f"monitor_set_table core {core}", lambda sock=sock: _core.monitor_set_table(sock, {0: {0: 0}}, timeout=5))
    attempt(f"forged monitor link core {core}", lambda core=core: _core.ForgedMonitorLink(rdir, core, 77))
    attempt(f"raw frames core {core}", lambda sock=sock: raw(sock))
for pid in (int(p) for p in os.environ.get("MH_MONITOR_PIDS", "").split(",") if p):
    attempt(f"SIGTERM monitor {pid}", lambda pid=pid: os.kill(pid, signal.SIGTERM))
print(json.dumps(report))
