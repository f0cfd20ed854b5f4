"""`mqtt serve` goes on serving when its log cannot be written: a file-size limit (RLIMIT_FSIZE) on the file its
standard error or --log-file goes to, a full disk (/dev/full), a closed pipe. Real processes, real sockets,
paho-mqtt clients; every wait is bounded.

Before, the OSError of a log write rose into a connection's task and ended the server (exit 1, listeners
closed): these tests failed on that."""

from __future__ import annotations

import json
import os
import queue
import re
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import paho.mqtt.client as paho
import pytest

from tests.brokers import HOST

pytestmark = [pytest.mark.slow, pytest.mark.interop]

DEADLINE = 15.0
LIMIT = 4096  # bytes: a few dozen log lines
SERVE = [sys.executable, "-m", "mqtt_cli", "serve", "--port", "0", "-v"]


class Serve:
    """`mqtt serve ARGS` on a free port of 127.0.0.1 (its ready file tells which), standard error to `stderr`."""

    def __init__(self, workdir: Path, *args: str, stderr: IO[bytes] | int, fsize: int | None = None) -> None:
        self.ready = workdir / "ready.json"
        # util-linux's prlimit sets the soft limit (the hard one kept, to be lifted later) and execs the broker, which
        # keeps its pid; the limit covers every file the broker writes. (Not preexec_fn: unsafe with threads.)
        limit = ["prlimit", f"--fsize={fsize}:"] if fsize is not None else []
        self.proc = subprocess.Popen(
            [*limit, *SERVE, "--ready-file", str(self.ready), *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
        wait_for(lambda: self.ready.exists() or self.proc.poll() is not None, "the ready file")
        assert self.proc.poll() is None, f"mqtt serve did not start (exit {self.proc.returncode})"
        ready = json.loads(self.ready.read_text())
        self.port = int(ready["listeners"][0]["port"])
        self.metrics_url = ready["metrics"]["url"] if "metrics" in ready else None

    def metric(self, name: str) -> float:
        """One sample of GET /metrics (--metrics-listen)."""
        assert self.metrics_url is not None
        with urllib.request.urlopen(self.metrics_url + "/metrics", timeout=DEADLINE) as answer:
            text = answer.read().decode()
        return float(re.search(rf"^{name} (\S+)$", text, re.M)[1])  # type: ignore[index]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        """SIGTERM, and its exit code (killed if it does not end in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


@pytest.fixture
def serving() -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for broker in started:
        broker.stop()


def wait_for(predicate: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def connect_and_leave(port: int, client_id: str) -> None:
    """A 3.1.1 CONNECT, its CONNACK, a DISCONNECT: two log lines at -v (connected, disconnected)."""
    ident = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(ident).to_bytes(2, "big") + ident
    with socket.create_connection((HOST, port), timeout=DEADLINE) as sock:
        sock.sendall(bytes([0x10, len(body)]) + body)
        assert sock.recv(4) == b"\x20\x02\x00\x00"
        sock.sendall(b"\xe0\x00")
        assert sock.recv(1) == b""  # closed by the broker after DISCONNECT


def round_trip(port: int, tag: str) -> bytes:
    """A paho subscriber gets what a paho publisher sends it at QoS 1 through the broker."""
    got: queue.Queue[bytes] = queue.Queue()
    subscribed: queue.Queue[bool] = queue.Queue()
    sub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"sub-{tag}", protocol=paho.MQTTv5)
    sub.on_message = lambda c, u, m: got.put(m.payload)
    sub.on_subscribe = lambda c, u, mid, codes, props: subscribed.put(True)
    pub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"pub-{tag}", protocol=paho.MQTTv5)
    sub.connect(HOST, port)
    sub.loop_start()
    try:
        sub.subscribe(f"log/{tag}", qos=1)
        assert subscribed.get(timeout=DEADLINE)
        pub.connect(HOST, port)
        pub.loop_start()
        try:
            info = pub.publish(f"log/{tag}", tag.encode(), qos=1)
            info.wait_for_publish(timeout=DEADLINE)
            assert info.is_published()
        finally:
            pub.disconnect()
            pub.loop_stop()
        return got.get(timeout=DEADLINE)
    finally:
        sub.disconnect()
        sub.loop_stop()


@pytest.mark.parametrize("log_file", [False, True], ids=["stderr-text", "log-file-json"])
def test_serves_on_past_a_file_size_limit_and_says_how_many_lines_were_lost(
    tmp_path: Path, serving: list[Serve], log_file: bool
) -> None:
    stderr_path = tmp_path / "stderr.log"
    log = tmp_path / "broker.log" if log_file else stderr_path
    args = ["--metrics-listen", "127.0.0.1:0", *(["--log-file", str(log), "--log-format", "json"] if log_file else [])]
    with stderr_path.open("ab") as stderr:
        broker = Serve(tmp_path, *args, stderr=stderr, fsize=LIMIT)
    serving.append(broker)
    n = 0
    while not log.exists() or log.stat().st_size < LIMIT:  # the limit reached: a line cut there, or ending there
        assert n < 200, f"the log did not reach {LIMIT} bytes"
        connect_and_leave(broker.port, f"fill-{n}")
        n += 1
    for i in range(10):  # 20 lines that cannot be written
        connect_and_leave(broker.port, f"lost-{i}")
    assert round_trip(broker.port, "past-the-limit") == b"past-the-limit"
    assert broker.alive() and log.stat().st_size == LIMIT
    assert broker.metric("mqtt_broker_log_lines_lost_total") >= 20 + 3  # (see below)

    # The limit lifted (as room made on a full disk): the next line is preceded by one saying what was lost.
    hard = resource.prlimit(broker.proc.pid, resource.RLIMIT_FSIZE)[1]
    resource.prlimit(broker.proc.pid, resource.RLIMIT_FSIZE, (hard, hard))
    connect_and_leave(broker.port, "after-the-limit")
    wait_for(lambda: "after-the-limit" in log.read_text(errors="replace"), "the next line")
    raw = log.read_bytes()
    # Right after what was written up to the limit (a cut line ended first), on a line of its own.
    assert raw.rindex(b"\n", 0, raw.index(b"could not be written")) + 1 in (LIMIT, LIMIT + 1)
    lines = raw.decode(errors="replace").splitlines()
    said = next(i for i, line in enumerate(lines) if "could not be written" in line)
    assert any("after-the-limit" in line for line in lines[said + 1 :])  # (the round trip's last lines may come first)
    assert not any("lost-" in line for line in lines)
    if log_file:
        record = json.loads(lines[said])
        assert record["event"] == "log" and record["level"] == "warning"
        detail = record["detail"]
        json.loads(lines[said + 1])  # a line of its own after the cut one
        # Standard error said it once, however many lines went missing.
        told = re.findall(r"cannot write the log file .*: File too large", stderr_path.read_text())
        assert len(told) == 1
    else:
        detail = lines[said]
    lost = int(re.search(r"(\d+) lines could not be written \(File too large\)", detail)[1])  # type: ignore[index]
    assert lost >= 20 + 3  # the 20 above, the round trip's 3 (the subscriber's disconnect may come later)
    assert broker.stop() == 0


@pytest.mark.parametrize("sink", ["closed-pipe", "hung-up-terminal", "dev-full"])
def test_serves_on_when_standard_error_cannot_be_written(tmp_path: Path, serving: list[Serve], sink: str) -> None:
    if sink == "closed-pipe":  # the pipe's reader went away: EPIPE
        broker = Serve(tmp_path, stderr=subprocess.PIPE)
        assert broker.proc.stderr is not None
        broker.proc.stderr.close()
    elif sink == "hung-up-terminal":  # a terminal (coloured lines) whose other end closed: EIO
        controller, terminal = os.openpty()
        try:
            broker = Serve(tmp_path, stderr=terminal)
        finally:
            os.close(terminal)
            os.close(controller)
    else:  # a full disk: ENOSPC, from the first line on (where it listens)
        with open("/dev/full", "wb") as full:
            broker = Serve(tmp_path, stderr=full)
    serving.append(broker)
    for i in range(20):
        connect_and_leave(broker.port, f"unheard-{i}")
    assert round_trip(broker.port, sink) == sink.encode()
    assert broker.alive()
    assert broker.stop() == 0
