"""`mqtt serve --metrics-listen` and `[metrics] listen`: bad addresses exit 2 in one line, a port in use exits 1,
and --print-config shows the key."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mqtt_cli", "serve", *args], capture_output=True, text=True,
                          timeout=30)  # fmt: skip


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("9883", "command line: --metrics-listen: '9883' is not HOST:PORT (e.g. 127.0.0.1:9883)"),
        ("127.0.0.1:x", "command line: --metrics-listen: '127.0.0.1:x': the port must be a number from 0 to 65535"),
        ("http://127.0.0.1:9883", "is not HOST:PORT"),
    ],
)
def test_bad_flag_exits_2(value: str, message: str) -> None:
    result = serve("--port", "0", "--metrics-listen", value)
    assert result.returncode == 2
    assert result.stderr.startswith("mqtt: error: ") and message in result.stderr
    assert result.stderr.count("\n") == 1


def test_bad_key_exits_2(tmp_path: Path) -> None:
    conf = tmp_path / "broker.toml"
    conf.write_text('[metrics]\nlisten = "localhost"\n')
    result = serve("--config", str(conf))
    assert result.returncode == 2
    assert result.stderr == f"mqtt: error: {conf}: metrics: 'localhost' is not HOST:PORT (e.g. 127.0.0.1:9883)\n"


def test_port_in_use_exits_1_before_listening() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve("--port", "0", "--metrics-listen", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert f"metrics endpoint 127.0.0.1:{port}" in result.stderr and "listening on" not in result.stderr


def test_print_config_shows_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "broker.toml"
    conf.write_text('[metrics]\nlisten = "127.0.0.1:9883"\n')
    assert '[metrics]\nlisten = "127.0.0.1:9883"\n' in serve("--config", str(conf), "--print-config").stdout
    flag = serve("--config", str(conf), "--print-config", "--metrics-listen", "[::1]:0").stdout
    assert '[metrics]\nlisten = "[::1]:0"\n' in flag
