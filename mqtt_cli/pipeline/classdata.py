"""The driver JVM's class-data archive: Spark's JVM starts from classes it has already loaded and checked before.

    options = java_options(java_executable(), jars_dir(), dump=True)   # for spark.driver.extraJavaOptions

A Spark session spends most of its start-up loading and verifying some ten thousand classes. Java's class-data
sharing (CDS) keeps them, parsed, in an archive file the JVM maps at start: on a 2-core machine the session starts
in about 6 s instead of 11, and the first job is done 7 s sooner.

* The first session that finds no archive dumps one when its JVM exits (`-XX:ArchiveClassesAtExit`, a run that
  starts some seconds slower), into a file of its own, `NAME.part`. Only one process at a time claims it.
* The JVM writes an archive's header last: until the dump is done the file starts with zeros, which a JVM refuses
  (it would crash on a truncated one). A later session moves a finished part file into place, then uses it.
* The archive belongs to one Java build and one set of Spark jars: its name holds a digest of both, so another
  JDK or Spark version makes (and uses) its own. A JVM that still cannot use it (another class path, given
  with --conf) starts as if there were none.
* Archives are kept in $XDG_CACHE_HOME/mqttkit/spark (~/.cache/mqttkit/spark); deleting the directory is safe.
  Where it cannot be written, sessions start without one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path

from mqtt_cli import DIST_NAME

__all__ = ["JVM_LOG_OPTIONS", "archive_path", "cache_dir", "jars_dir", "java_options"]

#: The JVM's own log (its warnings go to standard output by default, where a command's output goes) to its
#: standard error, Spark's log; none about class-data sharing (an archive it cannot use is not an error).
JVM_LOG_OPTIONS = "-Xlog:disable -Xlog:all=warning,cds*=off:stderr"
#: A part file with no header this long after its last write was left by a JVM that died while dumping.
_ABANDONED_S = 3600.0


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / DIST_NAME / "spark"


def jars_dir() -> Path:
    """The jars the driver's class path holds: $SPARK_HOME/jars, else those inside the pyspark package."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def archive_path(java: str, jars: Path) -> Path:
    """Where the archive of this Java build and these jars is kept."""
    digest = hashlib.sha256()
    for path in (Path(java).resolve(), jars):
        digest.update(str(path).encode())
        with contextlib.suppress(OSError):
            st = path.stat()
            digest.update(f" {st.st_size} {st.st_mtime_ns}".encode())
    with contextlib.suppress(OSError):
        digest.update("\n".join(sorted(p.name for p in jars.iterdir())).encode())
    return cache_dir() / f"driver-{digest.hexdigest()[:16]}.jsa"


def java_options(java: str, jars: Path, *, dump: bool) -> str:
    """The driver JVM's options: start from the archive when there is one; else, with `dump` and no other
    process dumping, dump one at exit. Only the log options when neither."""
    try:
        archive = archive_path(java, jars)
    except RuntimeError:  # no home directory to find a cache in
        return JVM_LOG_OPTIONS
    part = archive.with_suffix(".part")
    if not archive.exists() and _finished(part):
        with contextlib.suppress(OSError):  # another session moved it first, or the directory is read-only
            os.replace(part, archive)
    if archive.exists():
        return f"{JVM_LOG_OPTIONS} -Xshare:auto -XX:SharedArchiveFile={archive}"
    if dump and _claim(part):
        return f"{JVM_LOG_OPTIONS} -XX:ArchiveClassesAtExit={part}"
    return JVM_LOG_OPTIONS


def _finished(part: Path) -> bool:
    try:
        with part.open("rb") as f:
            return f.read(4).strip(b"\0") != b""
    except OSError:
        return False


def _claim(part: Path) -> bool:
    """True for the one process that creates the part file (the JVM replaces it with the archive as it dumps);
    an abandoned one is claimed again."""
    try:
        part.parent.mkdir(parents=True, exist_ok=True)
        if part.exists() and time.time() - part.stat().st_mtime > _ABANDONED_S:
            part.unlink()
        os.close(os.open(part, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        return True
    except OSError:
        return False
