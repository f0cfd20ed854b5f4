"""The driver JVM's class-data archive (pipeline/classdata.py): named for its Java and jars, claimed by one
process, used only once the JVM has finished writing it; and, with a real JVM, written by one session and mapped
by the next."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqtt_cli.pipeline import classdata

from .conftest import needs_spark


@pytest.fixture
def jvm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A cache in tmp_path, a stand-in java and jars directory (only their names and dates count here)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    java = tmp_path / "java"
    java.write_bytes(b"")
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"")
    return str(java), jars


def test_the_archive_is_named_for_its_java_and_its_jars(jvm: tuple[str, Path], tmp_path: Path) -> None:
    java, jars = jvm
    first = classdata.archive_path(java, jars)
    assert first.parent == tmp_path / "cache" / "mqttkit" / "spark" and first.suffix == ".jsa"
    assert classdata.archive_path(java, jars) == first
    (jars / "spark-sql.jar").write_bytes(b"")
    assert classdata.archive_path(java, jars) != first
    other = tmp_path / "java17"
    other.write_bytes(b"")
    assert classdata.archive_path(str(other), jars) != classdata.archive_path(java, jars)


def test_one_process_claims_the_dump_and_the_archive_is_used_once_written(jvm: tuple[str, Path]) -> None:
    java, jars = jvm
    archive = classdata.archive_path(java, jars)
    part = archive.with_suffix(".part")
    assert classdata.java_options(java, jars, dump=False) == classdata.JVM_LOG_OPTIONS  # nothing claimed
    assert not part.exists()
    dumping = classdata.java_options(java, jars, dump=True)
    assert dumping == f"{classdata.JVM_LOG_OPTIONS} -XX:ArchiveClassesAtExit={part}"
    assert part.exists()
    # Claimed: the next sessions neither dump nor use the file while its header is zeros (being written).
    assert classdata.java_options(java, jars, dump=True) == classdata.JVM_LOG_OPTIONS
    part.write_bytes(b"\0" * 4096 + b"regions")
    assert classdata.java_options(java, jars, dump=True) == classdata.JVM_LOG_OPTIONS
    part.write_bytes(bytes.fromhex("a8ab0bf0") + b"\0" * 4092 + b"regions")  # the header, written last
    options = classdata.java_options(java, jars, dump=True)
    assert options == f"{classdata.JVM_LOG_OPTIONS} -Xshare:auto -XX:SharedArchiveFile={archive}"
    assert archive.exists() and not part.exists()


def test_a_dump_left_unfinished_for_an_hour_is_claimed_again(jvm: tuple[str, Path]) -> None:
    java, jars = jvm
    part = classdata.archive_path(java, jars).with_suffix(".part")
    assert "ArchiveClassesAtExit" in classdata.java_options(java, jars, dump=True)
    past = time.time() - 3601
    os.utime(part, (past, past))
    assert classdata.java_options(java, jars, dump=True).endswith(f"-XX:ArchiveClassesAtExit={part}")


def test_a_cache_that_cannot_be_written_gives_no_archive(jvm: tuple[str, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    java, jars = jvm
    (tmp_path / "file").write_bytes(b"")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # a file where the directory would be
    assert classdata.java_options(java, jars, dump=True) == classdata.JVM_LOG_OPTIONS
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("HOME")
    monkeypatch.setattr("pwd.getpwuid", _no_user)  # no home directory at all
    assert classdata.java_options(java, jars, dump=True) == classdata.JVM_LOG_OPTIONS


def _no_user(uid: int) -> None:
    raise KeyError(uid)


_SESSION = """
import os, sys
from pathlib import Path
from mqtt_cli.pipeline.session import start_session, stop_session
spark = start_session("local[1]")  # no job: the start-up alone loads most of what is archived
me = os.getpid()
children = [c for t in Path(f"/proc/{me}/task").iterdir() for c in (t / "children").read_text().split()]
maps = "".join(Path(f"/proc/{c}/maps").read_text() for c in children)
print("mapped" if sys.argv[1] in maps else "not mapped")
stop_session(spark)
"""


def _header(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(4)


@needs_spark
@pytest.mark.slow
def test_a_session_writes_the_archive_as_its_jvm_exits_and_the_next_maps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mqtt_cli.pipeline.session import java_executable

    from ..conftest import cli_env

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    env = cli_env()
    java = java_executable()
    assert java is not None
    archive = classdata.archive_path(java, classdata.jars_dir())

    def session() -> str:
        proc = subprocess.run([sys.executable, "-c", _SESSION, str(archive)], capture_output=True, text=True,
                              timeout=180, env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()[-1]

    assert session() == "not mapped"
    part = archive.with_suffix(".part")
    deadline = time.monotonic() + 120  # the JVM dumps after the Python process has gone
    while time.monotonic() < deadline and _header(part) == b"\0\0\0\0":
        time.sleep(0.5)
    assert session() == "mapped"
    assert archive.stat().st_size > 10_000_000 and not part.exists()
