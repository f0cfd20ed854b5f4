"""The broker's write path over real sockets: output leaves with a non-blocking send from the task that produced
it while the socket takes it (no writer task), and goes through a writer task, in order and without loss, when a
subscriber stops reading and its socket fills (net/server.py `_flush`). Clients are bare sockets speaking our
codec (over TLS: trio's SSLStream, its records counted), so a test decides exactly when a subscriber reads."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio
import trio.testing

from mqtt_cli.core.broker import BrokerConfig
from mqtt_cli.core.config import PersistenceSettings
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.packets import ConnAck, Connect, Packet, PubAck, Publish, SubAck, Subscribe, Subscription
from mqtt_cli.core.reader import PacketReader
from mqtt_cli.net.server import BrokerServer, Listener, ListenerTLS, Scheme
from mqtt_cli.net.transports import TLSOptions, make_ssl_context

from ..brokers import _make_certs
from .test_listeners import running

# A broker that keeps every QoS 1 message for a subscriber that stops reading (mosquitto.conf's benchmark limits).
UNLIMITED = BrokerConfig(sys_interval=0, limits=Limits(max_inflight=0, max_queued_messages=0))


class RawClient:
    """An MQTT 3.1.1 client on a bare trio socket: it sends and reads only when told to."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.reader = PacketReader(4)
        self.pending: list[object] = []

    @classmethod
    async def connect(
        cls, server: BrokerServer, client_id: str, receive_buffer: int = 0, clean_session: bool = True
    ) -> RawClient:
        bound = server.bound[0]
        if bound.scheme is Scheme.UNIX:
            sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: object = bound.path
        else:
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = (bound.host, bound.port)
        if receive_buffer:  # before connecting: the window the broker sees is set at the handshake
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        await sock.connect(address)
        client = cls(sock)
        await client.send(Connect(protocol_version=4, client_id=client_id, clean_start=clean_session))
        assert isinstance(await client.next(), ConnAck)
        return client

    async def send(self, packet: Packet) -> None:
        data = memoryview(encode(packet, 4))
        while data:
            sent = await self.sock.send(data)
            data = data[sent:]

    async def next(self) -> object:
        while not self.pending:
            data = await self.sock.recv(1 << 16)
            assert data, "the broker closed the connection"
            self.pending.extend(self.reader.feed(data))
        return self.pending.pop(0)

    async def subscribe(self, topic: str, qos: int) -> None:
        await self.send(Subscribe(1, (Subscription(topic, qos),)))
        assert isinstance(await self.next(), SubAck)


class RecordCounter(trio.abc.Stream):
    """A client's TCP stream under its TLS stream that counts the TLS records it receives once `counting` is set:
    a record is (at most 16 kB of) one send of the broker's."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.counting = False
        self.records = 0
        self.partial = bytearray()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.stream.receive_some(max_bytes)
        buf = self.partial
        buf += data
        while len(buf) >= 5 and len(buf) >= (end := 5 + int.from_bytes(buf[3:5], "big")):  # type, version, length
            self.records += self.counting
            del buf[:end]
        return data

    async def aclose(self) -> None:
        await self.stream.aclose()


class TLSRawClient(RawClient):
    """RawClient over TLS, its records counted (RecordCounter)."""

    def __init__(self, stream: trio.SSLStream[RecordCounter]) -> None:
        super().__init__(stream.transport_stream.stream.socket)
        self.stream = stream

    @classmethod
    async def connect_tls(
        cls, server: BrokerServer, client_id: str, ca: Path, receive_buffer: int = 0, clean_session: bool = True
    ) -> TLSRawClient:
        bound = server.bound[0]
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        await sock.connect((bound.host, bound.port))
        tcp = trio.SocketStream(sock)
        ctx = make_ssl_context(TLSOptions(cafile=str(ca)))
        client = cls(trio.SSLStream(RecordCounter(tcp), ctx, server_hostname="localhost"))
        await client.send(Connect(protocol_version=4, client_id=client_id, clean_start=clean_session))
        assert isinstance(await client.next(), ConnAck)
        return client

    async def send(self, packet: Packet) -> None:
        await self.stream.send_all(encode(packet, 4))

    async def next(self) -> object:
        while not self.pending:
            data = await self.stream.receive_some(1 << 16)
            assert data, "the broker closed the connection"
            self.pending.extend(self.reader.feed(data))
        return self.pending.pop(0)


def writer_tasks() -> int:
    """How many of the broker's writer tasks run now (every task of this trio run, walked from the root)."""
    count = 0
    root = trio.lowlevel.current_root_task()
    assert root is not None
    tasks = [root]
    while tasks:
        task = tasks.pop()
        count += task.name.endswith("._writer")
        tasks.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return count


def listener(scheme: Scheme, tmp_path: Path) -> Listener:
    if scheme is Scheme.UNIX:
        return Listener(Scheme.UNIX, "", 0, str(tmp_path / "broker.sock"))
    if scheme is Scheme.MQTTS:
        _make_certs(tmp_path)
        return Listener(Scheme.MQTTS, "127.0.0.1", 0, tls=ListenerTLS(tmp_path / "server.pem", tmp_path / "server.key"))
    return Listener(scheme, "127.0.0.1", 0)


async def connect(server: BrokerServer, client_id: str, tmp_path: Path, receive_buffer: int = 0) -> RawClient:
    """A RawClient, or a TLSRawClient for an mqtts:// listener (its CA in `tmp_path`, from listener())."""
    if server.bound[0].scheme is Scheme.MQTTS:
        return await TLSRawClient.connect_tls(server, client_id, tmp_path / "ca.pem", receive_buffer)
    return await RawClient.connect(server, client_id, receive_buffer)


@pytest.mark.parametrize("scheme", [Scheme.MQTT, Scheme.UNIX, Scheme.MQTTS])
async def test_a_subscriber_that_keeps_up_is_written_without_a_writer_task(scheme: Scheme, tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with running(listener(scheme, tmp_path), broker=UNLIMITED) as server:
            sub = await connect(server, "sub", tmp_path)
            await sub.subscribe("t", 1)
            pub = await connect(server, "pub", tmp_path)
            for n in range(1, 51):
                await pub.send(Publish("t", n.to_bytes(4, "big"), qos=1, packet_id=n))
                got = await sub.next()
                assert isinstance(got, Publish) and got.payload == n.to_bytes(4, "big")
                assert got.packet_id is not None
                await sub.send(PubAck(got.packet_id))
                assert await pub.next() == PubAck(n)
                # A writer lingers a second after its last send: none now means none was started for these.
                assert writer_tasks() == 0


@pytest.mark.parametrize("scheme", [Scheme.MQTT, Scheme.UNIX, Scheme.MQTTS])
async def test_a_stalled_subscriber_gets_everything_in_order_through_a_writer(scheme: Scheme, tmp_path: Path) -> None:
    count, size = 160, 64 * 1024  # 10 MiB: more than the socket buffers on both sides and the broker's 1 MiB
    with trio.fail_after(60):
        async with running(listener(scheme, tmp_path), broker=UNLIMITED) as server:
            sub = await connect(server, "slow", tmp_path, receive_buffer=4096)
            await sub.subscribe("t", 1)
            pub = await connect(server, "pub", tmp_path)
            filler = b"x" * (size - 4)

            async def publish() -> None:
                for n in range(count):
                    await pub.send(Publish("t", n.to_bytes(4, "big") + filler, qos=1, packet_id=n + 1))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(publish)
                # The publisher is acknowledged while the subscriber reads nothing: its socket full, the rest
                # waits with a writer task (and, past max_buffered_bytes, in the session's queue).
                for n in range(count):
                    assert await pub.next() == PubAck(n + 1)
            assert writer_tasks() == 1
            # Then the subscriber reads: every message once, in the order published (a partial direct send's rest
            # went first, the writer's bytes before any later direct send).
            for n in range(count):
                got = await sub.next()
                assert isinstance(got, Publish) and got.packet_id is not None
                assert got.payload[:4] == n.to_bytes(4, "big") and len(got.payload) == size
                await sub.send(PubAck(got.packet_id))
            # Once drained, small messages flow as before, after everything else.
            await pub.send(Publish("t", b"last", qos=1, packet_id=count + 1))
            assert await pub.next() == PubAck(count + 1)
            got = await sub.next()
            assert isinstance(got, Publish) and got.payload == b"last"


@pytest.mark.parametrize("persistence", [True, False])
async def test_a_long_read_reaches_a_persistent_subscriber_while_the_rest_is_handled(
    persistence: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With persistence a QoS 1 publisher's acknowledgements wait for its subscribers' (or a commit), so every
    RECEIVE_BATCH packets of a read the deliveries so far go out with its answers; without, a read's deliveries go
    in one send a subscriber."""
    from mqtt_cli.net import server as server_module

    sends: list[int] = []  # the file descriptor of each direct send
    real = server_module.send_direct

    def counted(sock: socket.socket, data: bytearray) -> int:
        sends.append(sock.fileno())
        return real(sock, data)

    monkeypatch.setattr(server_module, "send_direct", counted)
    batches = 8
    count = batches * server_module.RECEIVE_BATCH
    store = PersistenceSettings(path=str(tmp_path / "broker.db") if persistence else None)
    with trio.fail_after(20):
        async with running(Listener(Scheme.MQTT, "127.0.0.1", 0), broker=UNLIMITED, persistence=store) as server:
            sub = await RawClient.connect(server, "sub", clean_session=False)
            await sub.subscribe("t", 1)
            await trio.testing.wait_all_tasks_blocked()
            (to_subscriber,) = set(sends)  # the broker's side of the subscriber's connection (CONNACK, SUBACK)
            pub = await RawClient.connect(server, "pub")
            await trio.testing.wait_all_tasks_blocked()
            sends.clear()
            # One write (6 kB), read at once on the broker's side.
            await pub.sock.send(b"".join(encode(Publish("t", b"%d" % n, qos=1, packet_id=n), 4) for n in
                                         range(1, count + 1)))  # fmt: skip
            for n in range(1, count + 1):
                got = await sub.next()
                assert isinstance(got, Publish) and got.payload == b"%d" % n and got.packet_id is not None
                await sub.send(PubAck(got.packet_id))
            for n in range(1, count + 1):
                assert await pub.next() == PubAck(n)
    if persistence:
        assert sends.count(to_subscriber) >= batches // 2, sends
    else:
        assert sends.count(to_subscriber) <= 2, sends  # (one, or two if the kernel split the read)


@pytest.mark.parametrize("persistence", [True, False])
async def test_a_long_read_reaches_a_persistent_subscriber_while_the_rest_is_handled_over_tls(
    persistence: bool, tmp_path: Path
) -> None:
    """The same over TLS: with persistence the read's deliveries reach the subscriber in several sends (TLS
    records) while the rest of the read is handled, not in one after it (net/tlsstream.py's direct sends)."""
    from mqtt_cli.net import server as server_module

    ca = _make_certs(tmp_path)
    batches = 8
    count = batches * server_module.RECEIVE_BATCH
    store = PersistenceSettings(path=str(tmp_path / "broker.db") if persistence else None)
    spec = Listener(Scheme.MQTTS, "127.0.0.1", 0)
    files = {"tls_cert": tmp_path / "server.pem", "tls_key": tmp_path / "server.key"}
    with trio.fail_after(20):
        async with running(spec, broker=UNLIMITED, persistence=store, **files) as server:
            sub = await TLSRawClient.connect_tls(server, "sub", ca, clean_session=False)
            await sub.subscribe("t", 1)
            pub = await TLSRawClient.connect_tls(server, "pub", ca)
            await trio.testing.wait_all_tasks_blocked()
            counter = sub.stream.transport_stream
            counter.counting = True
            # One write (one TLS record of 3 kB), read at once on the broker's side.
            await pub.stream.send_all(b"".join(encode(Publish("t", b"%d" % n, qos=1, packet_id=n), 4) for n in
                                               range(1, count + 1)))  # fmt: skip
            for n in range(1, count + 1):
                got = await sub.next()
                assert isinstance(got, Publish) and got.payload == b"%d" % n and got.packet_id is not None
                await sub.send(PubAck(got.packet_id))
            for n in range(1, count + 1):
                assert await pub.next() == PubAck(n)
            records = counter.records
    if persistence:
        assert records >= batches // 2
    else:
        assert records <= 2  # (one, or two if the kernel split the read)
