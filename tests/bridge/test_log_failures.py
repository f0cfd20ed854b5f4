"""`mqtt bridge` forwards on when its log (standard error) cannot be written: a full disk (/dev/full), a closed
pipe. Real processes: our broker on each side, the bridge, `mqtt pub` on one side and `mqtt sub` on the other;
every wait bounded. And BridgeLog's count of the lines it lost, said once writing works again.

Before, the bridge's first log line raised OSError and ended it (exit 1): these tests failed on that."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mqtt_cli.net.bridge import BridgeLog
from tests.broker.conftest import start_ours
from tests.brokers import Broker
from tests.conftest import cli_env

from .helpers import RUNNING

pytestmark = pytest.mark.interop

DEADLINE = 20.0
MQTT = [sys.executable, "-m", "mqtt_cli"]


def at(broker: Broker) -> list[str]:
    return ["-h", broker.host, "-p", str(broker.port)]


def forwarded(local: Broker, remote: Broker, bridge: subprocess.Popen[Any], tag: str) -> bytes:
    """What a subscriber on `remote` gets of messages published on `local` every 0.2 s until it has one (the bridge
    says in its log when it is connected, which cannot be read here)."""
    sub = subprocess.Popen(
        [*MQTT, "sub", *at(remote), "-t", f"log/{tag}", "-C", "1", "-q", "1", "-W", str(DEADLINE)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + DEADLINE
        while sub.poll() is None and time.monotonic() < deadline:
            assert bridge.poll() is None, f"the bridge ended (exit {bridge.returncode})"
            subprocess.run([*MQTT, "pub", *at(local), "-t", f"log/{tag}", "-m", tag, "-q", "1"], env=cli_env(),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=DEADLINE)  # fmt: skip
            time.sleep(0.2)
        out, err = sub.communicate(timeout=DEADLINE)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait(timeout=5)
    assert sub.returncode == 0, err
    return out


def start_bridge(
    tmp_path: Path, local: Broker, remote: Broker, stderr: Any, *extra: str, stdout: Any = subprocess.DEVNULL
) -> subprocess.Popen[Any]:
    args = [*MQTT, "bridge", *extra, "--local", local.url, "--remote", remote.url, "--name", "logfail", "--state-dir",
            str(tmp_path / "state"), "--restart-timeout", "0.1", "0.5", "-t", "log/# out 1"]  # fmt: skip
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
    RUNNING.append(proc)  # killed by tests/bridge/conftest.py if the test fails before it ends it
    return proc


def stopped(proc: subprocess.Popen[Any]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=DEADLINE)


@pytest.mark.parametrize("where", ["dev-full", "closed-pipe"])
def test_a_bridge_whose_log_cannot_be_written_forwards_on(tmp_path: Path, where: str) -> None:
    local, remote = start_ours(tmp_path / "local"), start_ours(tmp_path / "remote")
    RUNNING.extend([local, remote])
    if where == "dev-full":
        with open("/dev/full", "wb") as full:
            bridge = start_bridge(tmp_path, local, remote, full)
    else:
        read, write = os.pipe()
        os.close(read)  # every write to the other end: EPIPE (SIGPIPE is ignored by Python)
        bridge = start_bridge(tmp_path, local, remote, write)
        os.close(write)
    assert forwarded(local, remote, bridge, "first") == b"first\n"
    remote.restart()  # more log lines: a connection lost, tried again, back
    assert forwarded(local, remote, bridge, "after-a-restart") == b"after-a-restart\n"
    assert stopped(bridge) == 0  # SIGTERM: drained, as documented, whatever the log


def test_a_json_status_that_cannot_be_written_is_given_up_and_the_bridge_goes_on(tmp_path: Path) -> None:
    local, remote = start_ours(tmp_path / "local"), start_ours(tmp_path / "remote")
    RUNNING.extend([local, remote])
    log = tmp_path / "bridge.log"
    with open("/dev/full", "wb") as full, log.open("wb") as stderr:
        bridge = start_bridge(
            tmp_path, local, remote, stderr, "--json-status", "--status-interval", "0.05", stdout=full
        )
    assert forwarded(local, remote, bridge, "status-lost") == b"status-lost\n"
    deadline = time.monotonic() + DEADLINE
    said = "bridge logfail: cannot write the status output: No space left on device; no more status lines"
    while said not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.read_text().count(said) == 1, log.read_text()
    assert forwarded(local, remote, bridge, "still") == b"still\n"
    assert stopped(bridge) == 0


def test_bridge_log_drops_and_counts_lines_then_says_how_many(tmp_path: Path) -> None:
    with open("/dev/full", "wb") as full:
        log = BridgeLog(full.fileno(), prefix="mqtt: ")
        log("bridge: local connected to mqtt://127.0.0.1:1")
        log("bridge: remote connected to mqtt://127.0.0.1:2")
    assert (log.lost.total, log.lost.unsaid, log.lost.reason) == (2, 2, "No space left on device")
    out = tmp_path / "log"
    with out.open("wb") as file:
        log.fd = file.fileno()
        log("bridge: remote connection lost")
        log("bridge: remote connected")
    assert out.read_text() == (
        "mqtt: bridge: 2 log lines could not be written (No space left on device)\n"
        "mqtt: bridge: remote connection lost\nmqtt: bridge: remote connected\n"
    )
    assert (log.lost.total, log.lost.unsaid) == (2, 0)
