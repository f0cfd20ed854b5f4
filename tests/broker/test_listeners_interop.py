"""`mqtt serve` listeners with other people's clients: paho-mqtt over WebSocket, mosquitto_pub/sub over a Unix
socket, and our own command-line clients over ws://, wss:// and unix://."""

from __future__ import annotations

import os
import queue
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.broker.conftest import Served
from tests.brokers import _make_certs

pytestmark = pytest.mark.interop
DEADLINE = 15.0


def mqtt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqtt_cli", *args], capture_output=True, text=True, timeout=DEADLINE, check=False
    )


@pytest.mark.parametrize(("version", "path"), [(paho.MQTTv311, "/mqtt"), (paho.MQTTv5, "/any/where")])
def test_paho_over_websocket(serve_with: Callable[..., Served], tmp_path: Path, version: int, path: str) -> None:
    served = serve_with(tmp_path, "--listen", "ws://127.0.0.1:0")
    port = served.port("ws")
    received: queue.Queue[tuple[str, bytes]] = queue.Queue()
    subscribed: queue.Queue[bool] = queue.Queue()
    api = paho.CallbackAPIVersion.VERSION2
    client = paho.Client(api, client_id="paho-ws", protocol=version, transport="websockets")
    client.ws_set_options(path=path)
    client.on_message = lambda _c, _u, msg: received.put((msg.topic, msg.payload))
    client.on_subscribe = lambda *_: subscribed.put(True)
    client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    try:
        client.subscribe("paho/#", qos=1)
        assert subscribed.get(timeout=DEADLINE)
        big = bytes(range(256)) * 300  # 76,800 bytes: several WebSocket frames on paho's side
        client.publish("paho/small", b"hello", qos=1).wait_for_publish(DEADLINE)
        client.publish("paho/big", big, qos=2).wait_for_publish(DEADLINE)
        assert received.get(timeout=DEADLINE) == ("paho/small", b"hello")
        assert received.get(timeout=DEADLINE) == ("paho/big", big)
    finally:
        client.disconnect()
        client.loop_stop()


def test_paho_over_a_fixed_path_and_a_wrong_one(serve_with: Callable[..., Served], tmp_path: Path) -> None:
    served = serve_with(tmp_path, "--listen", "ws://127.0.0.1:0/mqtt")
    port = served.port("ws")
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="paho-path", transport="websockets")
    client.ws_set_options(path="/elsewhere")
    with pytest.raises(paho.WebsocketConnectionError, match="handshake"):  # our 404
        client.connect("127.0.0.1", port, keepalive=30)
    client.ws_set_options(path="/mqtt")
    assert client.connect("127.0.0.1", port, keepalive=30) == paho.MQTT_ERR_SUCCESS
    client.disconnect()


def test_mosquitto_clients_over_a_unix_socket(serve_with: Callable[..., Served], tmp_path: Path) -> None:
    sock = tmp_path / "mqtt.sock"
    served = serve_with(tmp_path, "--listen", f"unix://{sock}?mode=0666")
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o666
    sub = subprocess.Popen(
        ["mosquitto_sub", "--unix", str(sock), "-t", "ux/#", "-C", "2", "-W", "10", "-v", "-V", "mqttv5", "-q", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # Publish until the subscriber has subscribed and taken two messages (it may not have subscribed yet).
        for _ in range(50):
            pub = subprocess.run(
                ["mosquitto_pub", "--unix", str(sock), "-t", "ux/a", "-m", "over unix", "-q", "1"],
                capture_output=True,
                text=True,
                timeout=DEADLINE,
                check=False,
            )
            assert pub.returncode == 0, pub.stderr
            if sub.poll() is not None:
                break
            try:
                sub.wait(0.2)
            except subprocess.TimeoutExpired:
                continue
        out, _ = sub.communicate(timeout=DEADLINE)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    assert sub.returncode == 0
    assert out.splitlines() == ["ux/a over unix", "ux/a over unix"]
    assert served.stop() == 0
    assert not sock.exists()  # removed on shutdown


def test_our_clients_over_ws_wss_and_unix(serve_with: Callable[..., Served], tmp_path: Path) -> None:
    ca = _make_certs(tmp_path)
    sock = tmp_path / "s.sock"
    served = serve_with(
        tmp_path,
        *("--listen", "ws://127.0.0.1:0/mqtt", "--listen", "wss://127.0.0.1:0", "--listen", f"unix://{sock}"),
        *("--tls-cert", str(tmp_path / "server.pem"), "--tls-key", str(tmp_path / "server.key")),
    )
    wss = f"wss://localhost:{served.port('wss')}/mqtt"
    sources = [
        ["-L", served.url("ws")],
        ["-L", wss, "--cafile", str(ca)],
        ["--unix", str(sock)],
    ]
    for i, sub_where in enumerate(sources):
        pub_where = sources[(i + 1) % len(sources)]  # published over another transport than the subscriber's
        retained = mqtt("pub", *pub_where, "-t", f"cli/{i}", "-m", f"message {i}", "-r", "-q", "1")
        assert retained.returncode == 0, retained.stderr
        got = mqtt("sub", *sub_where, "-t", f"cli/{i}", "-C", "1", "-W", "10", "-v")
        assert got.returncode == 0, got.stderr
        assert got.stdout.strip() == f"cli/{i} message {i}"
    assert served.stop() == 0
    assert not sock.exists()


def test_bad_listener_urls_are_one_line_exit_2(tmp_path: Path) -> None:
    result = mqtt("serve", "--listen", "ws://127.0.0.1:0?mode=0600")
    assert result.returncode == 2
    assert "unknown setting 'mode'" in result.stderr and "Traceback" not in result.stderr
    path = tmp_path / "file"
    path.write_text("x")
    result = mqtt("serve", "--listen", f"unix://{path}")
    assert result.returncode == 1
    assert f"{path} is not a socket" in result.stderr and "Traceback" not in result.stderr
    assert path.read_text() == "x"
