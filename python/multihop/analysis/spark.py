"""The Spark session the analysis runs in: which master, which settings, and Java.

Master, in order of precedence:

1. a session already running in this process (a test fixture, a notebook) is
   used as it is;
2. a master set by ``spark-submit`` (``--master`` when it launched this
   Python, ``PYSPARK_SUBMIT_ARGS`` or ``spark-defaults.conf``) is never
   overridden (see :func:`preset_conf`);
3. the ``master`` argument (``multihop analyze --master URL``);
4. the environment variable ``MULTIHOP_SPARK_MASTER``;
5. ``local[*]``.

Sessions made here get ``spark.ui.enabled=false`` and a small shuffle
partition count unless the configuration already says otherwise, and no
console progress bar.  The driver JVM they start logs warnings and errors
only (:data:`LOG4J2_PROPERTIES`, unless ``spark.driver.extraJavaOptions`` is
already set), and its stdout and stderr go to :func:`jvm_log_path`, never to
the terminal.  Only a session made here is stopped by :func:`stop_if_created`.

Java: before a JVM is started, :func:`find_java` finds the ``java`` Spark will
run and checks its version against what the installed PySpark needs
(:func:`required_java`: 17 for PySpark 4, 8 before); a failure to start Spark
all the same is raised as :class:`SparkUnavailable` with the first line of the
cause, not as a traceback.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from multihop.analysis.deps import EXTRA, AnalysisUnavailable

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "ENV_MASTER",
    "DEFAULT_MASTER",
    "LOG4J2_PROPERTIES",
    "SparkUnavailable",
    "choose_master",
    "default_conf",
    "find_java",
    "get_session",
    "java_version",
    "jvm_log_path",
    "required_java",
    "preset_conf",
    "stop_if_created",
]

ENV_MASTER = "MULTIHOP_SPARK_MASTER"
"""Environment variable naming the Spark master when ``--master`` is not given."""

DEFAULT_MASTER = "local[*]"
"""The master used when nothing else names one."""

JAVA_HINT = (
    "install one with `apt-get install -y openjdk-17-jre-headless` (Debian/Ubuntu; `bash .ci/setup` does it), "
    "or set JAVA_HOME to an installed JDK/JRE 17 or newer"
)


class SparkUnavailable(AnalysisUnavailable):
    """Spark cannot run here: PySpark is not installed, Java is missing or too old, or Spark failed to start."""


def required_java(pyspark_version: str | None = None) -> int:
    """The oldest Java major version the (installed) PySpark runs on: 17 for PySpark 4, else 8."""
    if pyspark_version is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            pyspark_version = version("pyspark")
        except PackageNotFoundError:
            return 17
    major = re.match(r"\d+", pyspark_version)
    return 17 if major is None or int(major.group()) >= 4 else 8


def java_version(java: str, timeout: float = 30.0) -> int:
    """The major version of ``java`` (``java -version``: ``"17.0.15"`` gives 17, ``"1.8.0_292"`` gives 8).

    Raises:
        SparkUnavailable: it does not run, or says no version.
    """
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SparkUnavailable(f"cannot run `{java} -version` ({exc}); {JAVA_HINT}") from None
    text = out.stderr + out.stdout
    found = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if out.returncode != 0 or found is None:
        first = text.strip().splitlines()[0] if text.strip() else f"exit status {out.returncode}"
        raise SparkUnavailable(f"`{java} -version` gives no Java version ({first}); {JAVA_HINT}")
    major = int(found.group(1))
    if major == 1 and found.group(2) is not None:  # 1.8 is Java 8
        major = int(found.group(2))
    return major


def find_java(env: Mapping[str, str] | None = None, minimum: int | None = None) -> str:
    """Return the ``java`` Spark will use (``$JAVA_HOME/bin/java``, else ``java`` on PATH), checked.

    Args:
        env: the environment to look in (default: this process's).
        minimum: the oldest Java major version accepted (default: :func:`required_java`).

    Raises:
        SparkUnavailable: JAVA_HOME is set but has no ``bin/java``, there is
            no ``java`` on PATH, or it is older than ``minimum``; the message
            says how to install one.
    """
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if not (java.is_file() and os.access(java, os.X_OK)):
            raise SparkUnavailable(f"JAVA_HOME={home} has no executable bin/java; PySpark needs Java: {JAVA_HINT}")
        found = str(java)
    else:
        which = shutil.which("java", path=env.get("PATH", os.defpath))
        if which is None:
            raise SparkUnavailable(f"no `java` on PATH and JAVA_HOME is not set; PySpark needs Java: {JAVA_HINT}")
        found = which
    need = required_java() if minimum is None else minimum
    major = java_version(found)
    if major < need:
        where = f"JAVA_HOME={home}" if home else f"{found} (first `java` on PATH)"
        raise SparkUnavailable(f"{where} is Java {major}; this PySpark needs Java {need} or newer: {JAVA_HINT}")
    return found


def choose_master(requested: str | None, env: Mapping[str, str], preset: str | None) -> str | None:
    """Decide which master to set on a new session; ``None`` means leave the preset one alone.

    Args:
        requested: the caller's ``master`` argument, if any.
        env: the environment (read for :data:`ENV_MASTER`).
        preset: the master already in the Spark configuration (set by
            spark-submit), if any; it always wins, with a warning when
            ``requested`` disagrees.
    """
    if preset:
        if requested and requested != preset:
            warnings.warn(
                f"Spark master {preset!r} was set by spark-submit; ignoring master {requested!r}",
                RuntimeWarning,
                stacklevel=3,
            )
        return None
    return requested or env.get(ENV_MASTER) or DEFAULT_MASTER


def default_conf(master: str | None) -> dict[str, str]:
    """Settings applied to a session made here (each only where the configuration has none)."""
    cores = os.cpu_count() or 2
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
    }
    if master is None or master.startswith("local"):
        conf["spark.sql.shuffle.partitions"] = str(min(64, max(2, 2 * cores)))
    return conf


def _import_pyspark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise SparkUnavailable(f"PySpark is not installed ({exc}); install it with {EXTRA}") from None


def _spark_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """Entries of ``spark-defaults.conf`` in $SPARK_CONF_DIR, else $SPARK_HOME/conf or pyspark's."""
    conf_dir = env.get("SPARK_CONF_DIR")
    if not conf_dir:
        home = env.get("SPARK_HOME")
        if not home:
            try:
                import pyspark

                home = str(Path(pyspark.__file__).parent)
            except ImportError:
                return {}
        conf_dir = str(Path(home) / "conf")
    path = Path(conf_dir) / "spark-defaults.conf"
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = re.split(r"[\s=]+", line, maxsplit=1)
        if len(parts) == 2:
            out[parts[0]] = parts[1].strip()
    return out


def _submit_args(env: Mapping[str, str]) -> dict[str, str]:
    """``--master`` and ``--conf k=v`` of ``PYSPARK_SUBMIT_ARGS``."""
    try:
        args = shlex.split(env.get("PYSPARK_SUBMIT_ARGS", ""))
    except ValueError:
        return {}
    out: dict[str, str] = {}
    for i, arg in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg == "--master" and nxt:
            out["spark.master"] = nxt
        elif arg.startswith("--master="):
            out["spark.master"] = arg.split("=", 1)[1]
        elif arg in ("--conf", "-c") and nxt and "=" in nxt:
            key, value = nxt.split("=", 1)
            out[key] = value
        elif arg.startswith("--conf=") and "=" in arg[7:]:
            key, value = arg[7:].split("=", 1)
            out[key] = value
    return out


def preset_conf(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark settings made outside this module, which a new session must keep.

    Under ``spark-submit`` (``PYSPARK_GATEWAY_PORT`` set: the JVM launched this
    Python) that is the JVM's configuration; otherwise the ``--master`` and
    ``--conf`` of ``PYSPARK_SUBMIT_ARGS`` over the entries of ``spark-defaults.conf``.
    """
    env = os.environ if env is None else env
    if env.get("PYSPARK_GATEWAY_PORT"):
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()  # joins spark-submit's JVM
        return dict(SparkConf().getAll())
    conf = _spark_defaults(env)
    conf.update(_submit_args(env))
    return conf


def get_session(master: str | None = None, app_name: str = "multihop-analyze") -> tuple[SparkSession, bool]:
    """Return ``(session, created)``: the running session, or a new one made by the rules above.

    Raises:
        SparkUnavailable: PySpark or Java is missing, Java is too old, or Spark failed to start.
    """
    _import_pyspark()
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession() or getattr(SparkSession, "_instantiatedSession", None)
    if existing is not None and getattr(existing.sparkContext, "_jsc", None) is not None:
        current = existing.sparkContext.master
        if master and master != current:
            warnings.warn(
                f"a Spark session with master {current!r} is already running; ignoring master {master!r}",
                RuntimeWarning,
                stacklevel=2,
            )
        return existing, False

    if not os.environ.get("PYSPARK_GATEWAY_PORT"):  # else spark-submit's JVM is already running
        find_java()
    preset = preset_conf()
    chosen = choose_master(master, os.environ, preset.get("spark.master"))
    builder = SparkSession.builder.appName(app_name)
    if chosen is not None:
        builder = builder.master(chosen)
    for key, value in default_conf(chosen or preset.get("spark.master")).items():
        if key not in preset:
            builder = builder.config(key, value)
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if "spark.driver.extraJavaOptions" not in preset:
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG4J2_PROPERTIES}")
    log = jvm_log_path()
    try:
        with _jvm_output_to(log):
            session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
    except Exception as exc:  # py4j, PySpark and Java errors alike
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        master_text = chosen or preset.get("spark.master") or "(spark-submit's)"
        raise SparkUnavailable(
            f"Spark failed to start (master {master_text}): {first}. Check that Java works "
            f"(`java -version`) and that the master is reachable; {JAVA_HINT}. The JVM's output: {log}"
        ) from None
    return session, True


LOG4J2_PROPERTIES = Path(__file__).with_name("log4j2.properties")
"""The JVM's logging configuration: warnings and errors only (see the file)."""


def jvm_log_path() -> Path:
    """Where the output of a Spark JVM this process starts goes: ``<tmp>/multihop-analyze-<uid>/spark-<pid>.log``."""
    import tempfile

    d = Path(tempfile.gettempdir()) / f"multihop-analyze-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    return d / f"spark-{os.getpid()}.log"


@contextmanager
def _jvm_output_to(log: Path) -> Iterator[None]:
    """Point file descriptors 1 and 2 at ``log`` while the JVM starts, so it inherits them for its life.

    The JVM writes to its stdout and stderr outside log4j too (``WARNING:
    Using incubator modules``, launcher messages); the terminal keeps only
    what ``multihop analyze`` prints: progress and the report's paths.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def stop_if_created(session: SparkSession, created: bool) -> None:
    """Stop ``session`` if :func:`get_session` made it (and drop its JVM log); leave a borrowed one running."""
    if created:
        session.stop()
        jvm_log_path().unlink(missing_ok=True)
