"""`mqtt sub` and `mqtt rr` whose output cannot be written: a full disk (/dev/full, ENOSPC), a file-size limit
(util-linux prlimit, EFBIG) on standard output or on --output FILE. One line on standard error, exit 1
(EXIT_OUTPUT_FAILED, as cat and tee), no traceback. Real processes against the session's mosquitto; every wait
bounded.

Before, the OSError of the write rose as a traceback (exit 1 by accident): these tests failed on that. A closed
pipe (EPIPE) is not this: it ends the command quietly with 0 (tests/commands/test_exit_codes.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from mqtt_cli.exit_codes import EXIT_OUTPUT_FAILED
from tests.brokers import Broker
from tests.conftest import cli_env

pytestmark = pytest.mark.interop

DEADLINE = 20.0
LIMIT = 100  # bytes: less than one message
PAYLOAD = "x" * 300
MQTT = [sys.executable, "-m", "mqtt_cli"]


def at(broker: Broker) -> list[str]:
    return ["-h", broker.host, "-p", str(broker.port)]


def retained(broker: Broker, topic: str) -> None:
    """A retained message on `topic`: a subscriber gets it on subscribing, no race with its SUBACK."""
    done = subprocess.run(
        [*MQTT, "pub", *at(broker), "-t", topic, "-m", PAYLOAD, "-r", "-q", "1"],
        capture_output=True, stdin=subprocess.DEVNULL, env=cli_env(), timeout=DEADLINE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def run(args: list[str], stdout: IO[bytes] | int, fsize: int | None = None) -> tuple[int, str]:
    """`mqtt ARGS` with standard output to `stdout` (and every file it writes limited to `fsize` bytes: standard
    error is a pipe, which no limit covers): its exit code and standard error."""
    limit = ["prlimit", f"--fsize={fsize}:"] if fsize is not None else []
    done = subprocess.run(
        [*limit, *MQTT, *args], stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, env=cli_env(),
        timeout=DEADLINE,
    )  # fmt: skip
    return done.returncode, done.stderr.decode(errors="replace")


def assert_one_line(stderr: str, pattern: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert re.fullmatch(pattern, lines[0]), lines[0]


# -C 2 runs on the fast path (blocking client), -W alone on the trio path; QoS 0 and 1; plain and -v output.
FORMS = {
    "fast-qos0": ["-C", "2", "-W", "15"],
    "fast-qos1": ["-C", "2", "-W", "15", "-q", "1"],
    "trio-qos0": ["-W", "15"],
    "trio-qos1-verbose": ["-W", "15", "-q", "1", "-v"],
}


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_sub_on_a_full_disk_says_so_in_one_line_and_exits_1(mosquitto: Broker, topic: str, form: list[str]) -> None:
    retained(mosquitto, f"{topic}/a")
    with open("/dev/full", "wb") as full:
        code, stderr = run(["sub", *at(mosquitto), "-t", f"{topic}/#", *form], full)
    assert code == EXIT_OUTPUT_FAILED, stderr
    assert_one_line(
        stderr, r"mqtt: error: cannot write standard output: No space left on device \(ENOSPC\); 1 message lost, "
        r"nothing more received: free some space",
    )  # fmt: skip


@pytest.mark.parametrize("form", [FORMS["fast-qos0"], FORMS["trio-qos0"]], ids=["fast", "trio"])
def test_sub_past_a_file_size_limit_says_so_and_exits_1(
    mosquitto: Broker, topic: str, tmp_path: Path, form: list[str]
) -> None:
    retained(mosquitto, f"{topic}/a")
    out = tmp_path / "out"
    with out.open("wb") as stdout:
        code, stderr = run(["sub", *at(mosquitto), "-t", f"{topic}/#", *form], stdout, fsize=LIMIT)
    assert code == EXIT_OUTPUT_FAILED, stderr
    assert_one_line(stderr, r"mqtt: error: cannot write standard output: File too large \(EFBIG\); .*ulimit -f.*")
    assert out.read_bytes() == PAYLOAD.encode()[:LIMIT]


def test_sub_output_file_past_a_file_size_limit_names_the_file(mosquitto: Broker, topic: str, tmp_path: Path) -> None:
    retained(mosquitto, f"{topic}/a")
    out = tmp_path / "messages.txt"
    code, stderr = run(
        ["sub", *at(mosquitto), "-t", f"{topic}/#", "-W", "15", "--output", str(out)], subprocess.DEVNULL, LIMIT
    )
    assert code == EXIT_OUTPUT_FAILED, stderr
    assert_one_line(stderr, rf"mqtt: error: cannot write --output {re.escape(str(out))}: File too large \(EFBIG\); .*")
    assert out.stat().st_size == LIMIT


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "trio"])
def test_rr_on_a_full_disk_says_so_in_one_line_and_exits_1(mosquitto: Broker, topic: str, fast: bool) -> None:
    """rr's response written to /dev/full; responses are published (3.1.1, no correlation) until rr takes one."""
    args = [*MQTT, "rr", *at(mosquitto), "-V", "311", "-t", f"{topic}/req", "-e", f"{topic}/resp", "-m", "q",
            "-W", "15"]  # fmt: skip
    env = cli_env() if fast else cli_env(MQTT_CLI_FAST="0")  # the switch sends it to typer and trio
    with open("/dev/full", "wb") as full:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=full, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + DEADLINE
        while proc.poll() is None and time.monotonic() < deadline:
            answer = ["-t", f"{topic}/resp", "-m", "answer", "-V", "311"]
            subprocess.run([*MQTT, "pub", *at(mosquitto), *answer], capture_output=True, env=cli_env(),
                           stdin=subprocess.DEVNULL, timeout=DEADLINE)  # fmt: skip
            time.sleep(0.1)
        _, err = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    assert proc.returncode == EXIT_OUTPUT_FAILED, err
    assert_one_line(err.decode(), r"mqtt: error: cannot write standard output: No space left on device \(ENOSPC\); .*")


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "trio"])
def test_pub_debug_lines_on_a_full_disk_say_so_and_exit_1(mosquitto: Broker, topic: str, fast: bool) -> None:
    """-d's lines go to standard output: one that cannot be written was taken for the connection failing (exit 3
    after 10 s, 'no answer from the broker')."""
    env = cli_env() if fast else cli_env(MQTT_CLI_FAST="0")
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [*MQTT, "pub", *at(mosquitto), "-t", topic, "-m", "x", "-d"], stdin=subprocess.DEVNULL, stdout=full,
            stderr=subprocess.PIPE, env=env, timeout=DEADLINE,
        )  # fmt: skip
    assert done.returncode == EXIT_OUTPUT_FAILED, done.stderr
    assert_one_line(
        done.stderr.decode(), r"mqtt: error: cannot write standard output: No space left on device \(ENOSPC\); "
        r"a -d line lost, the command stopped: free some space",
    )  # fmt: skip


# --- standard error that cannot be written ----------------------------------------------------------------------

# Failures a script tells apart by the exit code alone (docs/exit-codes.md); with standard error full or closed
# the code must be the same, and nothing may go to standard output instead.
_REFUSED_PORT = ["-h", "127.0.0.1", "-p", "1"]
_STDERR_CASES = [
    ("pub, no broker", ["pub", *_REFUSED_PORT, "-t", "a", "-m", "x"]),
    ("sub, no broker", ["sub", *_REFUSED_PORT, "-t", "a", "-W", "1"]),
    ("rr, no broker", ["rr", *_REFUSED_PORT, "-t", "a", "-e", "b", "-m", "x"]),
    ("pub, an unknown flag", ["pub", "--no-such-flag"]),
    ("serve, a bad port", ["serve", "--port", "-5"]),
]


@pytest.mark.parametrize("stderr", ["full", "closed"])
@pytest.mark.parametrize("args", [a for _, a in _STDERR_CASES], ids=[n for n, _ in _STDERR_CASES])
def test_standard_error_that_cannot_be_written_keeps_the_exit_code(args: list[str], stderr: str) -> None:
    said = subprocess.run(
        [*MQTT, *args], stdin=subprocess.DEVNULL, capture_output=True, env=cli_env(), timeout=DEADLINE
    )
    assert said.returncode not in (0, 1) and said.stderr, said  # the case's own code, told on standard error
    if stderr == "full":
        with open("/dev/full", "wb") as full:
            done = subprocess.run(
                [*MQTT, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=full, env=cli_env(),
                timeout=DEADLINE,
            )  # fmt: skip
    else:
        done = subprocess.run(
            ["sh", "-c", 'exec "$@" 2>&-', "sh", *MQTT, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            env=cli_env(), timeout=DEADLINE,
        )  # fmt: skip
    assert done.returncode == said.returncode, done
    assert done.stdout == b""
