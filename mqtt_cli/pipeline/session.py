"""The SparkSession of `mqtt analyze`, and what it needs to exist.

    problem = missing_requirement()          # None, or one line saying what to install
    spark = start_session("local[*]", {"spark.executor.memory": "2g"})
    ...
    stop_session(spark)                      # keep_log=True: after a failure that named spark_log

* Workers run `sys.executable` (PYSPARK_PYTHON), so they import the same pyspark, pyarrow and mqtt_cli as the
  driver. Our code reaches them through PYTHONPATH on a local master, and as a zip of the `mqtt_cli` package
  (`SparkContext.addPyFile`) on any other (`local-cluster[...]`, `spark://`, `yarn`, `k8s://`), whose executors
  are other processes, perhaps on other machines, that know nothing of this checkout.
* A local master binds the driver to 127.0.0.1 and has no web UI; logs are quiet (errors only, through our
  log4j2 configuration, also for executors); Spark's own console progress bar is off (`ingest` shows its own).
* The commands tell the size of their input (InputSize): under a local master a small one gets one shuffle
  partition and no adaptive planning, a tiny one also the JIT's first tier only and no generated code (see
  SMALL_INPUT_CONF, TINY_INPUT_CONF).
* The driver JVM starts from a class-data archive of the classes an earlier session loaded, in the user's cache
  (classdata.py): the first session writes it as its JVM exits, the next ones start about 5 s sooner.
* PySpark starts the JVM with SIGINT ignored: Ctrl-C reaches Python only, where `CtrlC` cancels the running
  jobs (from a thread of its own); the commands then stop the session, so the JVM and its workers go away and
  the terminal is left as it was.
"""

from __future__ import annotations

import enum
import importlib.util
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mqtt_cli import DIST_NAME

from . import classdata

__all__ = [
    "INSTALL_HINT",
    "SMALL_INPUT_CONF",
    "TINY_INPUT_CONF",
    "TINY_INPUT_JAVA_OPTIONS",
    "CtrlC",
    "InputSize",
    "is_local",
    "java_executable",
    "missing_requirement",
    "package_zip",
    "spark_log",
    "start_session",
    "stop_session",
]

INSTALL_HINT = f"pip install '{DIST_NAME}[spark]'"

#: Settings for a small input (a capture of a few MiB, a table of a few dozen): one shuffle partition and no
#: adaptive re-planning. Each shuffle partition is a task and each adaptive stage a re-plan, which on little
#: data cost more than the work: the report's queries took half the time without them. Given under `--conf`,
#: the user's values win.
SMALL_INPUT_CONF = {"spark.sql.shuffle.partitions": "1", "spark.sql.adaptive.enabled": "false"}
#: And for a tiny input (a few MiB), where the JVM's own warming up is most of the time: expressions interpreted
#: rather than compiled to Java (every query's generated classes cost a compilation, more than the rows they
#: would save), and the JIT compiler's first tier only (C2 compiles, on the cores the queries need, code that
#: runs for a few seconds at most). The report on a small capture took 40% less CPU time.
TINY_INPUT_CONF = {
    **SMALL_INPUT_CONF,
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
TINY_INPUT_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


class InputSize(enum.Enum):
    """How much a command reads, for the settings that suit it (a local master only): LARGE Spark's, SMALL
    SMALL_INPUT_CONF, TINY TINY_INPUT_CONF and TINY_INPUT_JAVA_OPTIONS."""

    LARGE = "large"
    SMALL = "small"
    TINY = "tiny"


_PACKAGE = Path(__file__).resolve().parent.parent  # mqtt_cli/
_LOG4J = Path(__file__).resolve().parent / "log4j2.properties"


def java_executable() -> str | None:
    """The `java` Spark would start: $JAVA_HOME/bin/java, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def missing_requirement() -> str | None:
    """None when pyspark, pandas, pyarrow and a Java runtime are all there; else one line saying what to install."""
    absent = [name for name in ("pyspark", "pandas", "pyarrow") if not _importable(name)]
    if absent:
        return f"mqtt analyze needs {', '.join(absent)} (Apache Spark's Python API): {INSTALL_HINT}"
    if java_executable() is None:
        where = (
            f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java"
            if os.environ.get("JAVA_HOME")
            else ("no java on PATH")
        )
        return (
            f"mqtt analyze needs a Java runtime for Spark ({where}): apt-get install openjdk-17-jre-headless,"
            " or set JAVA_HOME to a Java 17 or 21"
        )
    return None


def _importable(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None  # None: imports of it are blocked
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def is_local(master: str) -> bool:
    """local, local[N], local[*], local[N,F]: everything runs in this machine's driver JVM."""
    return master == "local" or (master.startswith("local[") and master.endswith("]"))


def package_zip(directory: Path) -> Path:
    """A zip of the mqtt_cli package (sources and data files, no caches), for addPyFile."""
    out = directory / "mqtt_cli.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(_PACKAGE.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                zf.write(path, Path("mqtt_cli") / path.relative_to(_PACKAGE))
    return out


def start_session(
    master: str = "local[*]", conf: dict[str, str] | None = None, app_name: str = "mqtt analyze",
    size: InputSize = InputSize.LARGE, dump_classes: bool = True,
) -> Any:  # fmt: skip
    """A SparkSession set up as the module's docstring says, with the settings for an input of `size` (InputSize)
    under a local master; `conf` (from --conf k=v) wins over our defaults. The driver JVM starts from the
    class-data archive (classdata.py) if there is one; else, with `dump_classes`, it writes one when it exits (a
    session kept for the life of a long process would write it only then: False there)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    local = is_local(master)
    if local:
        root = str(_PACKAGE.parent)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if root not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    quiet = f"-Dlog4j2.configurationFile=file:{_LOG4J}"
    driver = quiet
    java = java_executable()
    # A --conf spark.driver.extraJavaOptions replaces ours, archive and all: then no dump is claimed.
    if java is not None and "spark.driver.extraJavaOptions" not in (conf or {}):
        driver = f"{quiet} {classdata.java_options(java, classdata.jars_dir(), dump=dump_classes)}"
    tiny = local and size is InputSize.TINY
    settings = {
        "spark.app.name": app_name,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Parquet timestamps as INT64 microseconds (not the deprecated INT96): what the workers' pyarrow writer
        # writes too (pipeline/parts.py), and what other readers of the table expect.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.driver.extraJavaOptions": f"{driver} {TINY_INPUT_JAVA_OPTIONS}" if tiny else driver,
        "spark.executor.extraJavaOptions": quiet,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
    }
    if local or master.startswith("local-cluster["):
        settings.update(
            {
                "spark.ui.enabled": "false",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
            }
        )
    if local:
        cores = _local_cores(master)
        settings["spark.sql.shuffle.partitions"] = str(max(2, 2 * cores))
        settings["spark.driver.memory"] = "2g"
        settings.update({InputSize.SMALL: SMALL_INPUT_CONF, InputSize.TINY: TINY_INPUT_CONF}.get(size, {}))
    settings.update(conf or {})
    builder = SparkSession.builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    work = Path(tempfile.mkdtemp(prefix="mqtt-analyze-"))
    global spark_log
    spark_log = work / "spark.log"
    with _stderr_to(spark_log):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # PySpark logs every failed query as JSON on standard error before raising it: the exception is enough.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL + 1)
    if not local:
        # Executors elsewhere: ship our package (they have the same Python and pyspark, not this checkout).
        spark.sparkContext.addPyFile(str(package_zip(work)))
    return spark


#: Where the JVM of the latest session writes its standard error (Spark's errors, the JVM's own warnings), in a
#: work directory of that session's own (the package zip too, off a local master).
spark_log: Path | None = None


def stop_session(spark: Any, keep_log: bool = False) -> None:
    """Stops a session of start_session's and removes its work directory, unless `keep_log` (a failure told the
    user where the log is). The JVM may write on until it exits: into a file already unlinked."""
    global spark_log
    try:
        spark.stop()
    finally:
        if spark_log is not None and not keep_log:
            shutil.rmtree(spark_log.parent, ignore_errors=True)
            spark_log = None


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """File descriptor 2 goes to `path` while the JVM starts, and so stays *its* standard error: the JVM prints
    warnings of its own at start (an incubator module) that no setting silences. Job failures still reach us,
    as Python exceptions with Spark's message."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _local_cores(master: str) -> int:
    inside = master[len("local[") : -1] if master.startswith("local[") else "1"
    first = inside.split(",")[0]
    if first == "*":
        return os.cpu_count() or 1
    try:
        return max(1, int(first))
    except ValueError:
        return 1


class CtrlC:
    """Ctrl-C while Spark works, handled without re-entering py4j.

    PySpark's own SIGINT handler calls into the JVM from the signal handler; when the main thread is inside a
    py4j call at that moment (it always is during a job), the call re-enters the same socket and both print
    tracebacks. Here the first Ctrl-C only sets `interrupted` and, with `cancel_jobs`, cancels the running jobs
    from a thread of its own (the main thread's call then fails, and the command knows why); a second Ctrl-C
    raises KeyboardInterrupt as usual."""

    def __init__(self, spark: Any, cancel_jobs: bool = True) -> None:
        self._spark = spark
        self._cancel = cancel_jobs
        self.interrupted = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.interrupted:
            raise KeyboardInterrupt
        self.interrupted = True
        if self._cancel:
            threading.Thread(target=self._spark.sparkContext.cancelAllJobs, daemon=True).start()

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
