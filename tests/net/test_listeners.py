"""The broker's listeners over real sockets: mqtt, mqtts, ws, wss and unix, their settings, and opening and
closing listeners while the broker runs. Clients: ours (mqtt_cli.net.client) and a bare wsproto client that
sends exactly the frames a test needs (fragments, pings, text frames, closes)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import ssl
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from mqtt_cli.core.broker import BrokerConfig
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.outbox import Notice, NoticeKind
from mqtt_cli.core.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    Will,
)
from mqtt_cli.core.reader import PacketReader
from mqtt_cli.net.client import ClientSettings, open_client
from mqtt_cli.net.errors import BrokerRefused, ConnectFailed, ConnectionLost
from mqtt_cli.net.server import (
    BrokerServer,
    Listener,
    ListenerTLS,
    Scheme,
    ServeOptions,
    ServerError,
    parse_listen_url,
)
from mqtt_cli.net.transports import Endpoint, TLSOptions, make_ssl_context

from ..brokers import _make_certs

# --- helpers ------------------------------------------------------------------------------------------------


@asynccontextmanager
async def running(*specs: Listener, **options: Any) -> AsyncIterator[BrokerServer]:
    server = BrokerServer(ServeOptions(listeners=list(specs), **options))
    try:
        async with trio.open_nursery() as nursery:
            stop = trio.Event()
            await nursery.start(server.run, stop)
            try:
                yield server
            finally:
                stop.set()
    except ExceptionGroup as group:  # the nursery wraps what the server or the test raised: unwrap one
        if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
            raise group.exceptions[0] from None
        raise


def bound(server: BrokerServer, scheme: Scheme) -> Listener:
    return next(b for b in server.bound if b.scheme is scheme)


def endpoint(b: Listener, path: str = "/mqtt") -> Endpoint:
    if b.scheme is Scheme.UNIX:
        assert b.path is not None
        return Endpoint("unix", "", 0, b.path)
    return Endpoint(str(b.scheme), "localhost" if b.scheme.tls else b.host, b.port, path, b.scheme.tls)


async def roundtrip(where: Endpoint, ctx: Any = None, version: int = 5, client_id: str = "rt") -> int:
    with trio.fail_after(10):
        async with open_client(
            ClientSettings(endpoint=where, ssl_context=ctx, version=version, client_id=client_id)
        ) as c:
            await c.subscribe([Subscription("rt/#", 1)])
            await c.publish("rt/x", b"\x00\x01payload\xff" * 100, 1)
            await c.wait_acknowledged()
            message = await c.messages.receive()
            assert message.payload == b"\x00\x01payload\xff" * 100
            return c.version


class RawWebSocket:
    """A WebSocket client that sends what it is told, frame by frame, and collects what the server sends."""

    def __init__(self, stream: trio.SocketStream, ws: WSConnection) -> None:
        self.stream = stream
        self.ws = ws
        self.reader = PacketReader(5)
        self.events: list[Any] = []

    @classmethod
    async def open(cls, port: int, path: str = "/mqtt", subprotocols: tuple[str, ...] = ("mqtt",)) -> Any:
        """The open RawWebSocket, or the server's refusal (RejectConnection) with its body."""
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        ws = WSConnection(ConnectionType.CLIENT)
        await stream.send_all(ws.send(Request(host="localhost", target=path, subprotocols=list(subprotocols))))
        refusal = None
        while True:
            data = await stream.receive_some(65536)
            assert data, "closed during the upgrade"
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    raw = cls(stream, ws)
                    raw.subprotocol = event.subprotocol  # type: ignore[attr-defined]
                    return raw
                if isinstance(event, RejectConnection):
                    refusal = event
                    if not event.has_body:
                        return refusal
                if isinstance(event, RejectData) and event.body_finished:
                    return refusal

    async def send_bytes(self, data: bytes, final: bool = True) -> None:
        await self.stream.send_all(self.ws.send(Message(data=data, message_finished=final)))

    async def send(self, event: Any) -> None:
        await self.stream.send_all(self.ws.send(event))

    async def next_event(self) -> Any:
        while not self.events:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.ws.receive_data(data)
            self.events.extend(self.ws.events())
        return self.events.pop(0)

    async def packets(self, count: int) -> list[Any]:
        out: list[Any] = []
        while len(out) < count:
            event = await self.next_event()
            assert isinstance(event, BytesMessage), event
            out.extend(self.reader.feed(event.data))
        return out


# --- URLs ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mqtt://0.0.0.0:1884", Listener(Scheme.MQTT, "0.0.0.0", 1884)),
        ("mqtts://h", Listener(Scheme.MQTTS, "h", 8883)),
        ("ws://127.0.0.1:8080", Listener(Scheme.WS, "127.0.0.1", 8080)),
        ("ws://127.0.0.1:8080/", Listener(Scheme.WS, "127.0.0.1", 8080)),
        ("ws://h:0/mqtt", Listener(Scheme.WS, "h", 0, "/mqtt")),
        ("wss://h/mqtt?versions=5", Listener(Scheme.WSS, "h", 8081, "/mqtt", versions=frozenset({5}))),
        ("unix:///run/m.sock?mode=0660", Listener(Scheme.UNIX, "", 0, "/run/m.sock", mode=0o660)),
        (
            "mqtt://h:1?versions=3.1,3.1.1&max_connections=7",
            Listener(Scheme.MQTT, "h", 1, versions=frozenset({3, 4}), max_connections=7),
        ),
    ],
)
def test_listen_urls(url: str, expected: Listener) -> None:
    assert parse_listen_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://h", "scheme must be mqtt, mqtts, ws, wss or unix"),
        ("mqtt://h/path", "a path is for ws and wss"),
        ("mqtt://h:70000", "port must be a number"),
        ("unix://relative.sock", "absolute path"),
        ("unix:///s?mode=999", "not a file mode"),
        ("ws://h?versions=6", "unknown MQTT version '6'"),
        ("ws://h?mode=0600", "unknown setting 'mode'; known: versions, max_connections"),
        ("mqtt://h?max_connections=-1", "whole number"),
    ],
)
def test_listen_url_errors(url: str, message: str) -> None:
    with pytest.raises(ServerError, match=message.replace("(", r"\(")):
        parse_listen_url(url)


def test_urls_of_bound_listeners() -> None:
    assert Listener("wss", "h", 1).scheme is Scheme.WSS  # type: ignore[arg-type]
    assert Listener(Scheme.WS, "::1", 80, "/mqtt").url == "ws://[::1]:80/mqtt"
    assert Listener(Scheme.UNIX, "", 0, "/run/x.sock").url == "unix:///run/x.sock"
    assert parse_listen_url(Listener(Scheme.WSS, "h", 1, "/p").url) == Listener(Scheme.WSS, "h", 1, "/p")


# --- every transport with our client -------------------------------------------------------------------------


async def test_every_transport_with_our_client(tmp_path: Path) -> None:
    ca = _make_certs(tmp_path)
    sock_path = str(tmp_path / "mqtt.sock")
    specs = [parse_listen_url(u) for u in ("mqtt://127.0.0.1:0", "mqtts://127.0.0.1:0", "ws://127.0.0.1:0")]
    specs += [parse_listen_url("wss://127.0.0.1:0/mqtt"), parse_listen_url(f"unix://{sock_path}?mode=0600")]
    ctx = make_ssl_context(TLSOptions(cafile=str(ca)))
    async with running(*specs, tls_cert=tmp_path / "server.pem", tls_key=tmp_path / "server.key") as server:
        assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600
        assert await roundtrip(endpoint(bound(server, Scheme.MQTT))) == 5
        assert await roundtrip(endpoint(bound(server, Scheme.MQTTS)), ctx, version=4) == 4
        assert await roundtrip(endpoint(bound(server, Scheme.WS), "/any/path"), version=4) == 4
        assert await roundtrip(endpoint(bound(server, Scheme.WS)), version=3) == 3
        assert await roundtrip(endpoint(bound(server, Scheme.WSS)), ctx) == 5
        assert await roundtrip(endpoint(bound(server, Scheme.UNIX))) == 5
        peers = set()
        async with open_client(ClientSettings(endpoint=endpoint(bound(server, Scheme.UNIX)), client_id="u")):
            peers = {c.peer for c in server.core.connections}
        assert f"unix:{sock_path}" in peers
    assert not os.path.exists(sock_path)  # removed on shutdown


async def test_a_tls_client_that_leaves_before_connect_is_no_failed_handshake(tmp_path: Path) -> None:
    """A client that completes TLS and closes its socket before CONNECT (no close_notify: a port check, a killed
    client) is no handshake failure; a client that refuses our certificate, after the server's half, is."""
    ca = _make_certs(tmp_path)
    notices: list[Notice] = []
    async with running(
        parse_listen_url("mqtts://127.0.0.1:0"), tls_cert=tmp_path / "server.pem", tls_key=tmp_path / "server.key",
        on_notice=notices.append,
    ) as server:  # fmt: skip
        port = bound(server, Scheme.MQTTS).port
        trusting = make_ssl_context(TLSOptions(cafile=str(ca)))
        distrusting = make_ssl_context(TLSOptions())  # the system's CAs: our test CA is not one of them

        def visit(ctx: ssl.SSLContext) -> None:  # the standard library's blocking socket: it sends its alert
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, contextlib.suppress(ssl.SSLError):
                ctx.wrap_socket(raw, server_hostname="localhost")  # closed with raw: no close_notify

        with trio.fail_after(10):
            for ctx in (trusting, distrusting):
                await trio.to_thread.run_sync(visit, ctx)
            while len([n for n in notices if n.kind == NoticeKind.REFUSED]) < 1:
                await trio.sleep(0.01)
            await trio.sleep(0.2)  # time for a wrong notice about the first client to arrive too
    refused = [n.detail for n in notices if n.kind == NoticeKind.REFUSED]
    assert len(refused) == 1 and "TLS handshake failed" in refused[0] and "unknown ca" in refused[0], refused


async def test_listener_of_its_own_tls_files(tmp_path: Path) -> None:
    ca = _make_certs(tmp_path)
    files = ListenerTLS(tmp_path / "server.pem", tmp_path / "server.key")
    async with running(Listener(Scheme.WSS, "127.0.0.1", 0, tls=files)) as server:
        ctx = make_ssl_context(TLSOptions(cafile=str(ca)))
        assert await roundtrip(endpoint(bound(server, Scheme.WSS)), ctx) == 5
    with pytest.raises(ServerError, match=r"listener wss://127.0.0.1:0 needs a certificate"):
        async with running(Listener(Scheme.WSS, "127.0.0.1", 0)):
            pass


async def test_websocket_fixed_path(tmp_path: Path) -> None:
    async with running(parse_listen_url("ws://127.0.0.1:0/mqtt")) as server:
        b = bound(server, Scheme.WS)
        assert await roundtrip(endpoint(b, "/mqtt")) == 5
        with trio.fail_after(10), pytest.raises(ConnectFailed, match="HTTP 404"):
            await roundtrip(endpoint(b, "/other"))


# --- WebSocket details, frame by frame ----------------------------------------------------------------------


async def test_websocket_subprotocols() -> None:
    async with running(parse_listen_url("ws://127.0.0.1:0")) as server:
        port = bound(server, Scheme.WS).port
        with trio.fail_after(10):
            for offered, chosen in ((("mqtt",), "mqtt"), (("mqttv3.1",), "mqttv3.1"), (("x", "mqtt"), "mqtt")):
                raw = await RawWebSocket.open(port, subprotocols=offered)
                assert isinstance(raw, RawWebSocket)
                assert raw.subprotocol == chosen  # type: ignore[attr-defined]
                await raw.stream.aclose()
            raw = await RawWebSocket.open(port, subprotocols=())  # none offered: taken (no subprotocol)
            assert isinstance(raw, RawWebSocket) and raw.subprotocol is None  # type: ignore[attr-defined]
            await raw.stream.aclose()
            refusal = await RawWebSocket.open(port, subprotocols=("chat",))
            assert isinstance(refusal, RejectConnection) and refusal.status_code == 400
            # Not a WebSocket request at all: an HTTP answer, not a hang.
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = await stream.receive_some(4096)
            assert answer.startswith(b"HTTP/1.1 4"), answer
            await stream.aclose()


async def test_websocket_fragments_and_packets_across_frames() -> None:
    async with running(parse_listen_url("ws://127.0.0.1:0")) as server:
        with trio.fail_after(10):
            raw = await RawWebSocket.open(bound(server, Scheme.WS).port)
            connect = encode(Connect(protocol_version=5, client_id="frag"), 5)
            subscribe = encode(Subscribe(1, (Subscription("f/#", 0),)), 5)
            publish = encode(Publish("f/x", b"p" * 300, 0), 5)
            # CONNECT split over a fragmented message (3 frames), then SUBSCRIBE and PUBLISH in one frame,
            # with a ping between fragments (control frames may come between the frames of a message).
            await raw.send_bytes(connect[:3], final=False)
            await raw.send(Ping(b"hi"))
            await raw.send_bytes(connect[3:7], final=False)
            await raw.send_bytes(connect[7:], final=True)
            pong = await raw.next_event()
            assert isinstance(pong, Pong) and pong.payload == b"hi"
            (connack,) = await raw.packets(1)
            assert isinstance(connack, ConnAck) and connack.reason_code == 0
            await raw.send_bytes(subscribe + publish[:5])  # a packet split across two messages
            await raw.send_bytes(publish[5:])
            suback, delivered = await raw.packets(2)
            assert isinstance(suback, SubAck) and isinstance(delivered, Publish) and delivered.payload == b"p" * 300
            await raw.send_bytes(encode(PingReq(), 5))
            assert isinstance((await raw.packets(1))[0], PingResp)
            await raw.send(CloseConnection(code=1000))
            reply = await raw.next_event()
            assert isinstance(reply, CloseConnection) and reply.code == 1000
            assert await raw.stream.receive_some(10) == b""


async def test_websocket_close_codes() -> None:
    async with running(parse_listen_url("ws://127.0.0.1:0")) as server:
        port = bound(server, Scheme.WS).port
        with trio.fail_after(10):
            # A text frame is not MQTT [MQTT-6.0.0-1]: 1003.
            raw = await RawWebSocket.open(port)
            await raw.send(TextMessage(data="hello"))
            event = await raw.next_event()
            assert isinstance(event, CloseConnection) and event.code == 1003
            # A broken frame (a client frame without its mask): 1002, protocol error.
            raw = await RawWebSocket.open(port)
            await raw.stream.send_all(b"\x82\x02\x10\x00")
            event = await raw.next_event()
            assert isinstance(event, CloseConnection) and event.code == 1002
            # The broker ends the connection (a second CONNECT): DISCONNECT 0x82, then a normal closure.
            raw = await RawWebSocket.open(port)
            await raw.send_bytes(encode(Connect(protocol_version=5, client_id="twice"), 5))
            assert isinstance((await raw.packets(1))[0], ConnAck)
            await raw.send_bytes(encode(Connect(protocol_version=5, client_id="twice"), 5))
            (disconnect,) = await raw.packets(1)
            assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x82
            event = await raw.next_event()
            assert isinstance(event, CloseConnection) and event.code == 1000
            # The broker shuts down: DISCONNECT 0x8B, then 1001 "going away".
            raw = await RawWebSocket.open(port)
            await raw.send_bytes(encode(Connect(protocol_version=5, client_id="last"), 5))
            assert isinstance((await raw.packets(1))[0], ConnAck)
    with trio.fail_after(10):
        (disconnect,) = await raw.packets(1)
        assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x8B
        event = await raw.next_event()
        assert isinstance(event, CloseConnection) and event.code == 1001


def _frame(first: int, payload: bytes, mask: bytes = b"\x01\x02\x03\x04") -> bytes:
    """A client frame made by hand (wsproto would not make a wrong one); length forms 7, 16 and 64 bits."""
    n = len(payload)
    if n < 126:
        head = bytes([first, 0x80 | n])
    elif n < 65536:
        head = bytes([first, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([first, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        (_frame(0xC2, b"x"), 1002),  # a reserved bit (RSV1: compression, not agreed)
        (_frame(0x83, b"x"), 1002),  # opcode 3 is reserved
        (_frame(0x80, b"x"), 1002),  # a continuation with no message begun
        (_frame(0x02, b"x") + _frame(0x82, b"y"), 1002),  # a new message inside a fragmented one
        (_frame(0x89, b"p" * 126), 1002),  # a ping over 125 bytes (wsproto's check)
        (_frame(0x88, b"\x03\xe8\xff"), 1007),  # a close reason that is not UTF-8 (wsproto's check)
        (_frame(0x81, b"{}"), 1003),  # text
    ],
)
async def test_websocket_bad_frames_close_with_their_code(frames: bytes, code: int) -> None:
    async with running(parse_listen_url("ws://127.0.0.1:0")) as server:
        with trio.fail_after(10):
            raw = await RawWebSocket.open(bound(server, Scheme.WS).port)
            await raw.stream.send_all(frames)
            event = await raw.next_event()
            assert isinstance(event, CloseConnection) and event.code == code


async def test_websocket_frames_byte_by_byte_and_long_lengths() -> None:
    """Frames cut anywhere (here: one byte per read), 16- and 64-bit lengths, a masked payload whose chunks start
    at every offset of the mask key, and an empty final fragment."""
    async with running(parse_listen_url("ws://127.0.0.1:0")) as server:
        with trio.fail_after(20):
            raw = await RawWebSocket.open(bound(server, Scheme.WS).port)
            connect = encode(Connect(protocol_version=5, client_id="bytes"), 5)
            subscribe = encode(Subscribe(1, (Subscription("l/#", 0),)), 5)
            big = encode(Publish("l/big", bytes(range(256)) * 300, 0), 5)  # over 65,535: a 64-bit length
            mid = encode(Publish("l/mid", b"m" * 1000, 0), 5)  # a 16-bit length
            wire = _frame(0x82, connect) + _frame(0x02, subscribe[:3]) + _frame(0x00, subscribe[3:])
            wire += _frame(0x80, b"") + _frame(0x82, mid) + _frame(0x82, big, b"\xa1\xb2\xc3\xd4")
            for i in range(len(wire) - len(big) - 14):  # byte by byte up to the big frame
                await raw.stream.send_all(wire[i : i + 1])
            rest = wire[len(wire) - len(big) - 14 :]
            for start in range(0, len(rest), 4099):  # then in chunks that split the mask key everywhere
                await raw.stream.send_all(rest[start : start + 4099])
            connack, suback, got_mid, got_big = await raw.packets(4)
            assert isinstance(connack, ConnAck) and isinstance(suback, SubAck)
            assert got_mid.payload == b"m" * 1000
            assert got_big.payload == bytes(range(256)) * 300


async def test_websocket_frame_lengths_both_ways() -> None:
    """Our client's frames (masked) and the broker's (not) at each length form: 7, 16 and 64 bits."""
    async with running(parse_listen_url("ws://127.0.0.1:0")) as server:
        where = endpoint(bound(server, Scheme.WS))
        with trio.fail_after(20):
            async with open_client(ClientSettings(endpoint=where, client_id="sizes", version=5)) as c:
                await c.subscribe([Subscription("size/#", 0)])
                for size in (0, 1, 100, 125, 126, 600, 65535, 65536, 300_000):
                    payload = os.urandom(size)
                    await c.publish(f"size/{size}", payload, 1)
                    message = await c.messages.receive()
                    assert (message.topic, message.payload) == (f"size/{size}", payload)


async def test_websocket_one_frame_per_flush() -> None:
    """Many deliveries produced by one read leave in one binary frame, not one frame per packet."""
    async with running(parse_listen_url("ws://127.0.0.1:0")) as server:
        port = bound(server, Scheme.WS).port
        with trio.fail_after(10):
            sub = await RawWebSocket.open(port)
            await sub.send_bytes(encode(Connect(protocol_version=5, client_id="s"), 5))
            await sub.packets(1)
            await sub.send_bytes(encode(Subscribe(1, (Subscription("b/#", 0),)), 5))
            await sub.packets(1)
            pub = await RawWebSocket.open(port)
            burst = encode(Connect(protocol_version=5, client_id="p"), 5)
            burst += b"".join(encode(Publish(f"b/{i}", b"x", 0), 5) for i in range(50))
            await pub.send_bytes(burst)
            event = await sub.next_event()
            assert isinstance(event, BytesMessage) and event.message_finished
            assert len(sub.reader.feed(event.data)) == 50


# --- per-listener settings ------------------------------------------------------------------------------------


async def test_versions_allowed_per_listener() -> None:
    only5 = Listener(Scheme.MQTT, "127.0.0.1", 0, versions=frozenset({5}))
    only311 = Listener(Scheme.WS, "127.0.0.1", 0, versions=frozenset({4}))
    async with running(only5, only311) as server:
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", bound(server, Scheme.MQTT).port)
            await stream.send_all(encode(Connect(protocol_version=4, client_id="old"), 4))
            data = await stream.receive_some(100)
            assert data == b"\x20\x02\x00\x01"  # 3.1.1 CONNACK 0x01: unacceptable protocol version
            assert await stream.receive_some(100) == b""
            raw = await RawWebSocket.open(bound(server, Scheme.WS).port)
            await raw.send_bytes(encode(Connect(protocol_version=5, client_id="new"), 5))
            (connack,) = await raw.packets(1)
            assert isinstance(connack, ConnAck) and connack.reason_code == 0x84
            assert await roundtrip(endpoint(bound(server, Scheme.MQTT))) == 5
            assert await roundtrip(endpoint(bound(server, Scheme.WS)), version=4) == 4


async def test_max_connections_per_listener() -> None:
    one = Listener(Scheme.MQTT, "127.0.0.1", 0, max_connections=1)
    other = Listener(Scheme.WS, "127.0.0.1", 0)
    async with running(one, other) as server:
        where = endpoint(bound(server, Scheme.MQTT))
        with trio.fail_after(10):
            async with open_client(ClientSettings(endpoint=where, client_id="first")):
                with pytest.raises(BrokerRefused, match="closed the connection"):
                    async with open_client(ClientSettings(endpoint=where, client_id="second")):
                        pass
                assert await roundtrip(endpoint(bound(server, Scheme.WS))) == 5  # its own count
            assert await roundtrip(where) == 5  # the slot is free again


async def test_auth_settings_reach_the_core() -> None:
    from mqtt_cli.core.auth import AuthPolicy

    settings = AuthPolicy(allow_anonymous=True)
    async with running(Listener(Scheme.MQTT, "127.0.0.1", 0, auth=settings)) as server:
        with trio.fail_after(10):
            async with open_client(ClientSettings(endpoint=endpoint(bound(server, Scheme.MQTT)), client_id="a")):
                (conn,) = server.core.connections
                assert conn.policy is settings


# --- unix sockets -----------------------------------------------------------------------------------------------


async def test_unix_socket_files(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # a dead server's file: nobody accepts on it
    stale.close()
    async with running(parse_listen_url(f"unix://{path}")) as server:
        assert await roundtrip(endpoint(bound(server, Scheme.UNIX))) == 5
        with pytest.raises(ServerError, match="another server is listening"):
            async with running(parse_listen_url(f"unix://{path}")):
                pass
        assert path.exists()  # the second server left the first one's file alone
    assert not path.exists()
    path.write_text("not a socket")
    with pytest.raises(ServerError, match="is not a socket; remove it or pick another path"):
        async with running(parse_listen_url(f"unix://{path}")):
            pass
    assert path.read_text() == "not a socket"
    nowhere = tmp_path / "no-such-dir" / "s.sock"
    with pytest.raises(ServerError, match=f"cannot listen on unix://{re.escape(str(nowhere))}"):
        async with running(parse_listen_url(f"unix://{nowhere}")):
            pass


# --- opening and closing listeners at run time ------------------------------------------------------------------


async def test_open_and_close_listeners_at_run_time(tmp_path: Path) -> None:
    # Reason strings on (off by default, as mosquitto) so that the client can be told which listener closed.
    broker = BrokerConfig(limits=Limits(reason_strings=True))
    first_spec = Listener(Scheme.MQTT, "127.0.0.1", 0)
    async with running(first_spec, ready_file=tmp_path / "ready.json", broker=broker) as server:
        first = endpoint(bound(server, Scheme.MQTT))
        with trio.fail_after(20):
            async with open_client(ClientSettings(endpoint=first, client_id="watcher", version=5)) as watcher:
                await watcher.subscribe([Subscription("will/#", 1)])
                ws = await server.open_listener(Listener(Scheme.WS, "127.0.0.1", 0))
                unix = await server.open_listener(parse_listen_url(f"unix://{tmp_path}/late.sock"))
                assert {b.scheme for b in server.bound} == {Scheme.MQTT, Scheme.WS, Scheme.UNIX}
                assert "ws://127.0.0.1:" in (tmp_path / "ready.json").read_text()
                ws_where = endpoint(ws.bound[0])
                will = Will("will/ws", b"gone", 1)
                async with open_client(ClientSettings(endpoint=ws_where, client_id="on-ws", will=will)) as doomed:
                    await server.close_listener(ws)
                    # Its client was told (5.0 DISCONNECT 0x8B) and its will published to the other listener's.
                    message = await watcher.messages.receive()
                    assert (message.topic, message.payload) == ("will/ws", b"gone")
                    with pytest.raises(ConnectionLost, match="Server shutting down") as lost:
                        await doomed.publish("x", b"y", 1)
                        await doomed.wait_acknowledged()
                    assert f"listener {ws.bound[0].url} closed" in str(lost.value)
                with pytest.raises(ConnectFailed):
                    await roundtrip(ws_where)
                assert not any(b.scheme is Scheme.WS for b in server.bound)
                assert "ws://" not in (tmp_path / "ready.json").read_text()
                # The first listener's client never noticed.
                await watcher.publish("will/still", b"here", 1)
                message = await watcher.messages.receive()
                assert message.topic == "will/still"
                assert await roundtrip(endpoint(unix.bound[0])) == 5
                await server.close_listener(unix)
                assert not (tmp_path / "late.sock").exists()
                with pytest.raises(ServerError, match="cannot listen on mqtt://"):
                    await server.open_listener(Listener(Scheme.MQTT, "127.0.0.1", first.port))  # in use
                assert len(server.listeners) == 1
