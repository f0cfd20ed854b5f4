"""`mqtt passwd`, as mosquitto_passwd: flags, prompts on a real terminal (a pty), file modes and errors. Files it
writes are read by Debian's mosquitto in tests/broker/test_auth.py."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqtt_cli.core.passwords import HashKind, parse_password_file, verify_password

DEADLINE = 15.0


def passwd(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "passwd", *args],
        capture_output=True, text=True, timeout=DEADLINE, input=stdin,
    )  # fmt: skip


def on_terminal(args: list[str], answers: list[str]) -> tuple[int, str]:
    """Runs `mqtt passwd` on a pty, typing each answer after each prompt; (exit code, everything shown)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: becomes mqtt passwd
        os.execv(sys.executable, [sys.executable, "-m", "mqtt_cli", "passwd", *args])
    shown = b""
    pending = list(answers)
    given = 0
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
            # One answer per prompt, once it is shown: an answer typed before getpass has turned echo off is
            # flushed by it (TCSAFLUSH), and the command would wait for it for ever.
            if pending and shown.lower().count(b"password:") > given and shown.rstrip().endswith(b":"):
                os.write(fd, pending.pop(0).encode() + b"\n")
                given += 1
    end = time.monotonic() + 5  # it may close the terminal a moment before it exits
    while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < end:
        time.sleep(0.02)
    status = waited[1]
    if waited[0] == 0:  # still running: it waits for input that is not coming
        os.kill(pid, 9)
        _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), shown.decode(errors="replace")


def test_create_asks_twice_without_echo(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    code, shown = on_terminal(["-c", str(path), "alice"], ["Tr0ub4dor", "Tr0ub4dor"])
    assert code == 0, shown
    assert "Password:" in shown and "Reenter password:" in shown
    assert "Tr0ub4dor" not in shown  # not echoed
    entry = parse_password_file(path.read_text())["alice"]
    assert entry.kind is HashKind.PBKDF2_SHA512 and verify_password(entry, b"Tr0ub4dor")
    assert path.stat().st_mode & 0o777 == 0o600


def test_passwords_that_differ_change_nothing(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    assert passwd("-c", "-b", str(path), "alice", "one").returncode == 0
    before = path.read_text()
    code, shown = on_terminal([str(path), "alice"], ["two", "three"])
    assert code == 1 and "the passwords do not match" in shown
    assert path.read_text() == before


def test_batch_update_delete_and_mode_kept(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    assert passwd("-c", "-b", str(path), "alice", "one").returncode == 0
    path.chmod(0o640)
    assert passwd("-H", "sha512", "-b", str(path), "bob", "two").returncode == 0
    assert passwd("-b", str(path), "alice", "three").returncode == 0
    table = parse_password_file(path.read_text())
    assert list(table) == ["alice", "bob"]
    assert verify_password(table["alice"], b"three") and table["bob"].kind is HashKind.SHA512
    assert path.stat().st_mode & 0o777 == 0o640
    assert passwd("-D", str(path), "alice").returncode == 0
    assert list(parse_password_file(path.read_text())) == ["bob"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pw"]  # no temporary file left


def test_update_hashes_a_plain_file_once(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("alice:one\nbob:two words\n")
    assert passwd("-U", str(path)).returncode == 0
    table = parse_password_file(path.read_text())
    assert verify_password(table["alice"], b"one") and verify_password(table["bob"], b"two words")
    again = passwd("-U", str(path))  # mosquitto_passwd would hash the hashes
    assert again.returncode == 1 and "already has a hash" in again.stderr


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["FILE", "alice", "secret"], 2, "needs -b"),
        (["-b", "FILE", "alice"], 2, "-b needs the password"),
        (["FILE"], 2, "a user name is needed"),
        (["-c", "-D", "FILE", "alice"], 2, "exclude each other"),
        (["-b", "FILE", "al:ice", "x"], 2, "no colon"),
        (["FILE", "alice"], 2, "no terminal"),  # stdin is not a terminal: nothing to ask on
        (["-D", "MISSING", "alice"], 1, "does not exist (-c creates it)"),
        (["-D", "FILE", "zoe"], 1, "user 'zoe' is not in"),
        (["-b", "GARBAGE", "alice", "x"], 1, "line 2: not USER:HASH"),
    ],
)
def test_errors_are_one_line(tmp_path: Path, args: list[str], code: int, words: str) -> None:
    (tmp_path / "FILE").write_text("")
    assert passwd("-c", "-b", str(tmp_path / "FILE"), "alice", "x").returncode == 0
    (tmp_path / "GARBAGE").write_text("# x\ngarbage\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    paths = {"FILE", "MISSING", "GARBAGE"}
    done = passwd(*[str(tmp_path / a) if a in paths else a for a in args], stdin="")
    assert done.returncode == code, done.stderr
    assert done.stderr.count("\n") == 1 and words in done.stderr and done.stderr.startswith("mqtt: error: ")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing written
