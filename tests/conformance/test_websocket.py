"""MQTT over WebSocket (3.1.1 and 5.0 chapter 6): `mqtt serve` with a ws:// listener on port 0 and Debian's
mosquitto with a websockets listener. The upgrade and every frame are built and read here by hand (not with
wsproto, which the broker itself uses), so a mistake of the broker's WebSocket layer cannot hide itself."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.brokers import HOST, Broker, start_mosquitto, wait_for_ready
from tests.conformance.wire import (
    PINGREQ,
    TIMEOUT,
    VERSIONS,
    Conn,
    T,
    closed_without,
    connect,
    publish,
    spec,
    subscribe,
    uid,
)

pytestmark = pytest.mark.interop

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 1.3


class Op:
    """WebSocket frame opcodes (RFC 6455 5.2)."""

    CONTINUATION = 0x0
    TEXT = 0x1
    BINARY = 0x2
    CLOSE = 0x8
    PING = 0x9
    PONG = 0xA


def frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A client frame, masked as a client's must be (RFC 6455 5.3)."""
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Upgrade:
    """The server's answer to an upgrade request: status, headers (lower-case names) and what followed."""

    def __init__(self, status: int, headers: dict[str, str], rest: bytes) -> None:
        self.status, self.headers, self.rest = status, headers, rest


def upgrade(sock: socket.socket, subprotocols: tuple[str, ...], path: str = "/mqtt") -> Upgrade | None:
    """Sends a WebSocket upgrade request offering `subprotocols`; a 101 is checked against RFC 6455 4.2.2. None:
    the server closed the connection without an answer."""
    key = base64.b64encode(os.urandom(16))
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {HOST}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key.decode()}",
        "Sec-WebSocket-Version: 13",
    ]
    if subprotocols:
        lines.append(f"Sec-WebSocket-Protocol: {', '.join(subprotocols)}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    buf = b""
    deadline = time.monotonic() + TIMEOUT
    while b"\r\n\r\n" not in buf:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            assert not buf, f"closed during the answer to the upgrade (received {buf!r})"
            return None
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    answer = Upgrade(int(status_line.split()[1]), headers, rest)
    if answer.status == 101:
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        assert headers.get("sec-websocket-accept") == accept, headers
        assert headers.get("upgrade", "").lower() == "websocket", headers
    return answer


class WsConn(Conn):
    """A raw client connection over WebSocket: `send` puts its bytes in one binary frame, `send_frames` sends
    frames as given; what the broker sends is read frame by frame, the payloads of binary frames feeding the
    packet reader of `Conn` (so `recv`, `closed`, `open` work unchanged). Every data frame from the broker is
    checked to be binary [MQTT-6.0.0-1] and unmasked; a close frame ends the stream, its code kept."""

    def __init__(self, broker: Broker, v5: bool = True, subprotocols: tuple[str, ...] = ("mqtt",)) -> None:
        assert broker.ws_port is not None
        self.broker, self.v5 = broker, v5
        self.sock = socket.create_connection((broker.host, broker.ws_port), timeout=TIMEOUT)
        answer = upgrade(self.sock, subprotocols)
        assert answer is not None and answer.status == 101, answer and (answer.status, answer.headers)
        self.subprotocol = answer.headers.get("sec-websocket-protocol")
        self.raw = answer.rest
        self.buf = b""
        self.close_code: int | None = None
        self.frames: list[int] = []  # opcodes of the data frames the broker sent

    def send(self, data: bytes) -> None:
        self.send_frames(frame(Op.BINARY, data))

    def send_frames(self, data: bytes) -> None:
        super().send(data)

    def _frame(self) -> tuple[int, bool, bytes] | None:
        """The next whole frame from `self.raw` (opcode, fin, payload), or None if it has not all come."""
        raw = self.raw
        if len(raw) < 2:
            return None
        n, at = raw[1] & 0x7F, 2
        assert not raw[1] & 0x80, "a server must not mask its frames (RFC 6455 5.1)"
        if n == 126:
            if len(raw) < 4:
                return None
            n, at = struct.unpack("!H", raw[2:4])[0], 4
        elif n == 127:
            if len(raw) < 10:
                return None
            n, at = struct.unpack("!Q", raw[2:10])[0], 10
        if len(raw) < at + n:
            return None
        self.raw = raw[at + n :]
        return raw[0] & 0x0F, bool(raw[0] & 0x80), raw[at : at + n]

    def _fill(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            got = self._frame()
            if got is None:
                self.sock.settimeout(max(0.001, deadline - time.monotonic()))
                try:
                    chunk = self.sock.recv(65536)
                except ConnectionResetError:
                    return False
                if not chunk:
                    return False
                self.raw += chunk
                continue
            opcode, _, payload = got
            if opcode == Op.CLOSE:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                return False
            if opcode == Op.PING:
                self.send_frames(frame(Op.PONG, payload))
                continue
            if opcode == Op.PONG:
                continue
            self.frames.append(opcode)
            assert opcode in (Op.BINARY, Op.CONTINUATION), f"the broker sent a data frame of opcode {opcode}"
            self.buf += payload
            return True


def ws_client(broker: Broker, version: int, client_id: str) -> WsConn:
    c = WsConn(broker, v5=version == 5)
    c.send(connect(client_id, version))
    assert c.connack().reason == 0
    return c


def _start_ours(workdir: Path) -> Broker:
    """`mqtt serve` with a TCP and a WebSocket listener, both on port 0; the ports are read from --ready-file."""
    ready = workdir / "ready.json"

    def launch() -> subprocess.Popen[Any]:
        ready.unlink(missing_ok=True)
        log = (workdir / "serve.log").open("ab")
        listen = ["--listen", f"mqtt://{HOST}:0", "--listen", f"ws://{HOST}:0"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "mqtt_cli", "serve", *listen, "--ready-file", str(ready), "-v"],
            stdout=subprocess.DEVNULL,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        wait_for_ready(ready, proc, 20, workdir / "serve.log")
        return proc

    proc = launch()
    ports = {b["scheme"]: b["port"] for b in json.loads(ready.read_text())["listeners"]}
    return Broker("ours", HOST, ports["mqtt"], workdir, launch, proc, ws_port=ports["ws"])


@pytest.fixture(scope="module")
def ours_ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = _start_ours(tmp_path_factory.mktemp("ours-ws"))
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def mosq_ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_mosquitto(tmp_path_factory.mktemp("mosq-ws"), websockets=True)
    yield broker
    broker.stop()


@pytest.fixture(params=["ours", "mosquitto"])
def broker(request: pytest.FixtureRequest) -> Broker:
    """The same frames to our broker's ws:// listener and to mosquitto's websockets listener."""
    return request.getfixturevalue("ours_ws" if request.param == "ours" else "mosq_ws")  # type: ignore[no-any-return]


@spec(v311=("6.0.0-1",), v5=("6.0.0-1",))
@VERSIONS
def test_MQTT_6_0_0_1_text_frame_closes(broker: Broker, version: int) -> None:
    """MQTT rides in binary frames only: a text frame closes the connection, before CONNECT and after it. Every
    data frame the broker sends is binary (checked by WsConn on every read). mosquitto 2.0.11 does not look at
    the opcode and takes a text frame's bytes as MQTT, which the statement forbids: asserted, so a fix is noticed."""
    c = WsConn(broker, v5=version == 5)
    c.send_frames(frame(Op.TEXT, connect(uid("ws-text"), version)))
    if broker.kind == "ours":
        closed_without(c, T.CONNACK)
        assert c.close_code == 1003  # "unsupported data" (RFC 6455 7.4.1)
    else:
        assert c.connack().reason == 0
    c.close()
    c = ws_client(broker, version, uid("ws-text"))
    c.send_frames(frame(Op.TEXT, PINGREQ))
    if broker.kind == "ours":
        closed_without(c, T.PINGRESP)
        assert c.close_code == 1003
    else:
        c.expect(T.PINGRESP)
    c.close()
    assert c.frames and set(c.frames) == {Op.BINARY}


@spec(v311=("6.0.0-2",), v5=("6.0.0-2",))
@VERSIONS
def test_MQTT_6_0_0_2_packets_not_aligned_with_frames(broker: Broker, version: int) -> None:
    """A CONNECT split over the three frames of one fragmented message, a SUBSCRIBE split across two messages,
    then a PUBLISH, a PINGREQ and the rest of a second PUBLISH in one frame: every packet is taken."""
    c = WsConn(broker, v5=version == 5)
    hello = connect(uid("ws-split"), version)
    c.send_frames(frame(Op.BINARY, hello[:1], fin=False) + frame(Op.CONTINUATION, hello[1:5], fin=False))
    c.send_frames(frame(Op.CONTINUATION, hello[5:]))
    assert c.connack().reason == 0
    sub = subscribe(1, ("ws/split/#", 1), v5=version == 5)
    c.send_frames(frame(Op.BINARY, sub[:3]))
    c.send_frames(frame(Op.BINARY, sub[3:]))
    c.expect(T.SUBACK)
    first = publish("ws/split/a", b"one", v5=version == 5)
    second = publish("ws/split/b", b"two" * 100, v5=version == 5)
    c.send_frames(frame(Op.BINARY, first + PINGREQ + second[:7]))
    c.send_frames(frame(Op.BINARY, second[7:]))
    got = [c.recv(), c.recv(), c.recv()]
    assert [p.type for p in got] == [T.PUBLISH, T.PINGRESP, T.PUBLISH], got
    assert (got[0].topic, got[0].payload) == ("ws/split/a", b"one")
    assert (got[2].topic, got[2].payload) == ("ws/split/b", b"two" * 100)
    assert c.open()
    c.close()


@spec(v311=("6.0.0-4",), v5=("6.0.0-4",))
def test_MQTT_6_0_0_4_server_selects_mqtt(broker: Broker) -> None:
    """A client offering "mqtt" (as MQTT-6.0.0-3 binds it to) gets "mqtt" back, wherever it stands in the offer,
    and the connection carries MQTT. mosquitto 2.0.11 (libwebsockets) picks the client's first name it knows, so
    an offer of "mqttv3.1, mqtt" gets "mqttv3.1", which the statement forbids: asserted, so a change is noticed.
    Offers without "mqtt" break MQTT-6.0.0-3; each broker's answer is asserted too."""
    for offered in (("mqtt",), ("chat", "mqtt"), ("mqttv3.1", "mqtt")):
        c = WsConn(broker, subprotocols=offered)
        expected = "mqttv3.1" if broker.kind == "mosquitto" and offered[0] == "mqttv3.1" else "mqtt"
        assert c.subprotocol == expected, (offered, c.subprotocol)
        c.send(connect(uid("ws-proto"), 5))
        assert c.connack().reason == 0
        c.close()
    # MQTT 3.1's name alone, still offered by old clients: both brokers take it and say so.
    c = WsConn(broker, subprotocols=("mqttv3.1",))
    assert c.subprotocol == "mqttv3.1"
    c.close()
    # No MQTT name in the offer: ours refuses the upgrade with HTTP 400, mosquitto closes without an answer.
    with socket.create_connection((broker.host, broker.ws_port), timeout=TIMEOUT) as sock:
        answer = upgrade(sock, ("chat",))
    if broker.kind == "ours":
        assert answer is not None and answer.status == 400, answer and answer.status
    else:
        assert answer is None
