"""Running `mqtt` client commands as real processes against real brokers, and a scripted broker for answers no
real broker gives on demand."""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..brokers import HOST
from ..conftest import VENV_BIN, cli_env

MQTT = str(VENV_BIN / "mqtt")


@dataclass
class Result:
    returncode: int
    stdout: bytes
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout.decode()


Mqtt = Callable[..., Result]


def run_mqtt(
    *args: str | int | Path, input: bytes | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> Result:
    """Runs `mqtt ARGS...`; stdin is `input` (or empty), output is bytes, nothing raises on the exit code."""
    proc = subprocess.run(
        [MQTT, *map(str, args)],
        input=input if input is not None else b"",
        capture_output=True,
        env=env or cli_env(),
        timeout=timeout,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr.decode(errors="replace"))


@pytest.fixture
def mqtt(tmp_path: Path) -> Mqtt:
    """`mqtt(...)` with XDG_CONFIG_HOME in tmp_path (no profile of the user's gets in the way)."""
    env = cli_env(XDG_CONFIG_HOME=str(tmp_path / "config"))
    for name in list(env):
        if name.startswith("MQTT_"):
            del env[name]

    def _run(*args: str | int | Path, input: bytes | None = None, env_extra: dict[str, str] | None = None,
             timeout: float = 60) -> Result:  # fmt: skip
        return run_mqtt(*args, input=input, env={**env, **(env_extra or {})}, timeout=timeout)

    _run.env = env  # type: ignore[attr-defined]
    return _run


def popen_mqtt(
    *args: str | int | Path, env: dict[str, str], stdin: int | None = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [MQTT, *map(str, args)], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )


def wait_for_output(proc: subprocess.Popen[bytes], text: bytes, timeout: float = 30.0) -> bytes:
    """Reads `proc`'s standard output until it holds `text` (with -d the clients say when SUBACK came), so a test
    acts once the client is really subscribed however slow the machine; fails, with the process killed, when the
    text does not come within `timeout` seconds."""
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while text not in seen:
            left = deadline - time.monotonic()
            chunk = os.read(proc.stdout.fileno(), 65536) if left > 0 and selector.select(left) else b""
            if not chunk:
                proc.kill()
                _, err = proc.communicate()
                raise AssertionError(f"{text!r} not printed (exit {proc.returncode}): {seen!r} {err!r}")
            seen += chunk
    return seen


def rr_answered_live(mqtt: Mqtt, rr: list[str], broker_args: list[str], topic: str, payload: str) -> tuple[int, bytes]:
    """Runs `mqtt rr` (args `rr`) and publishes `payload` to its response `topic` (3.1.1, not retained) until rr,
    once subscribed, takes one for its answer; returns rr's exit code and output."""
    proc = popen_mqtt(*rr, "-W", "20", env=mqtt.env)  # type: ignore[attr-defined]
    deadline = time.monotonic() + 20
    while proc.poll() is None and time.monotonic() < deadline:
        mqtt("pub", *broker_args, "-t", topic, "-m", payload, "-V", "311")
        time.sleep(0.2)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    return proc.returncode, out


@pytest.fixture
def topic() -> str:
    """A topic prefix of this test's own (the brokers are shared by the session)."""
    return f"t{uuid.uuid4().hex[:10]}"


class ScriptedBroker:
    """A TCP server answering CONNECT with CONNACK (5.0 or 3.1.1 as asked), SUBSCRIBE with `suback_code` for every
    filter, and PINGREQ with PINGRESP; `silent=True` never answers at all. One thread, loopback only."""

    def __init__(self, suback_code: int = 0x80, silent: bool = False) -> None:
        self.suback_code = suback_code
        self.silent = silent
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conns = []
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            conns.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
        for conn in conns:
            conn.close()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        version = 4
        try:
            while not self.stop.is_set():
                head = conn.recv(2)
                if len(head) < 2:
                    return
                length, shift, byte = head[1] & 0x7F, 7, head[1]
                while byte & 0x80:
                    byte = conn.recv(1)[0]
                    length |= (byte & 0x7F) << shift
                    shift += 7
                body = b""
                while len(body) < length:
                    body += conn.recv(length - len(body))
                kind = head[0] >> 4
                if self.silent:
                    continue
                if kind == 1:
                    version = body[6]
                    conn.sendall(b"\x20\x03\x00\x00\x00" if version == 5 else b"\x20\x02\x00\x00")
                elif kind == 8:
                    pid = body[:2]
                    pos = 2
                    if version == 5:
                        pos += 1 + body[2]  # short property block
                    count = 0
                    while pos < len(body):
                        n = int.from_bytes(body[pos : pos + 2], "big")
                        pos += 2 + n + 1
                        count += 1
                    payload = pid + (b"\x00" if version == 5 else b"") + bytes([self.suback_code]) * count
                    conn.sendall(bytes([0x90, len(payload)]) + payload)
                elif kind == 12:
                    conn.sendall(b"\xd0\x00")
                elif kind == 14:
                    return
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def scripted_broker() -> Iterator[Callable[..., ScriptedBroker]]:
    made: list[ScriptedBroker] = []

    def factory(**kwargs: object) -> ScriptedBroker:
        broker = ScriptedBroker(**kwargs)  # type: ignore[arg-type]
        made.append(broker)
        return broker

    yield factory
    for broker in made:
        broker.close()


def python_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


__all__ = ["MQTT", "Mqtt", "Result", "popen_mqtt", "python_env", "run_mqtt", "sys"]
