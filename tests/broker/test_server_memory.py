"""The trio server over in-memory streams, with trio's MockClock for keep alive, will delay and timeouts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from mqtt_cli.core import broker as broker_module
from mqtt_cli.core.broker import BrokerConfig
from mqtt_cli.core.encoder import encode
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
from mqtt_cli.core.properties import Properties
from mqtt_cli.core.reader import PacketReader
from mqtt_cli.net.server import CONNECT_TIMEOUT, BrokerServer, ServeOptions


class MemClient:
    def __init__(self, stream: trio.abc.Stream, version: int) -> None:
        self.stream = stream
        self.version = version
        self.reader = PacketReader(version)
        self.pending: list[Any] = []

    async def send(self, packet: Any) -> None:
        version = packet.protocol_version if isinstance(packet, Connect) else self.version
        await self.stream.send_all(encode(packet, version))

    async def next(self) -> Any:
        """The next packet, or None at end of stream."""
        while not self.pending:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.pending.extend(self.reader.feed(data))
        return self.pending.pop(0)


def run(test: Callable[[BrokerServer, Callable[..., Awaitable[MemClient]]], Awaitable[None]], **config: Any) -> None:
    """Runs `test` against a server on a mock clock that jumps ahead whenever everything waits."""

    async def main() -> None:
        server = BrokerServer(ServeOptions(listeners=[], broker=BrokerConfig(sys_interval=0, **config)))
        with trio.fail_after(3600):  # mock time: an hour of it at most
            async with trio.open_nursery() as nursery:
                server._nursery = nursery  # where the server starts its writers
                nursery.start_soon(server._ticker)

                async def connect(version: int = 4, lockstep: bool = False, **kw: Any) -> MemClient:
                    pair = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
                    ours, theirs = pair()
                    nursery.start_soon(server._handle, theirs)
                    client = MemClient(ours, version)
                    if kw.get("client_id") is not None:
                        await client.send(Connect(protocol_version=version, **kw))
                        assert isinstance(await client.next(), ConnAck)
                    return client

                await test(server, connect)
                nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_round_trip_and_ping() -> None:
    async def test(server: BrokerServer, connect: Any) -> None:
        sub = await connect(client_id="s")
        await sub.send(Subscribe(1, (Subscription("t", 1),)))
        assert await sub.next() == SubAck(1, (1,))
        pub = await connect(5, client_id="p")
        await pub.send(Publish("t", b"hi", 1, packet_id=3))
        got = await sub.next()
        assert (got.topic, got.payload, got.qos) == ("t", b"hi", 1)
        await sub.send(PingReq())
        assert await sub.next() == PingResp()

    run(test)


def test_keepalive_expiry_closes_and_publishes_the_will() -> None:
    async def test(server: BrokerServer, connect: Any) -> None:
        watcher = await connect(client_id="w", keepalive=0)
        await watcher.send(Subscribe(1, (Subscription("will/#"),)))
        await watcher.next()
        quiet = await connect(client_id="q", keepalive=10, will=Will("will/q", b"gone"))
        start = trio.current_time()
        assert await quiet.next() is None  # closed by the broker
        assert 15 <= trio.current_time() - start < 16  # 1.5 times the keep alive
        will = await watcher.next()
        assert will.payload == b"gone"

    run(test)


def test_keepalive_is_kept_by_traffic() -> None:
    async def test(server: BrokerServer, connect: Any) -> None:
        c = await connect(client_id="c", keepalive=10)
        for _ in range(5):
            await trio.sleep(9)
            await c.send(PingReq())
            assert await c.next() == PingResp()

    run(test)


def test_will_delay_with_mock_clock() -> None:
    async def test(server: BrokerServer, connect: Any) -> None:
        watcher = await connect(client_id="w")
        await watcher.send(Subscribe(1, (Subscription("will/#"),)))
        await watcher.next()
        will = Will("will/d", b"late", 0, False, Properties(will_delay_interval=30))
        c = await connect(5, client_id="d", will=will, properties=Properties(session_expiry_interval=100))
        await c.stream.aclose()  # connection lost
        start = trio.current_time()
        got = await watcher.next()
        assert got.payload == b"late"
        assert 30 <= trio.current_time() - start < 31

    run(test)


def test_connect_timeout() -> None:
    async def test(server: BrokerServer, connect: Any) -> None:
        silent = await connect()
        start = trio.current_time()
        assert await silent.next() is None
        assert CONNECT_TIMEOUT <= trio.current_time() - start < CONNECT_TIMEOUT + 1

    run(test)


def test_connect_timeout_counts_from_the_start_not_from_the_last_byte() -> None:
    async def test(server: BrokerServer, connect: Any) -> None:
        trickle = await connect()
        start = trio.current_time()

        async def drip() -> None:
            await trickle.stream.send_all(b"\x10\x7f")  # a CONNECT announcing 127 bytes, then a byte every 4 s
            while True:
                await trio.sleep(4)
                try:
                    await trickle.stream.send_all(b"\x00")
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drip)
            assert await trickle.next() is None
            nursery.cancel_scope.cancel()
        assert CONNECT_TIMEOUT <= trio.current_time() - start < CONNECT_TIMEOUT + 1

    run(test)


def test_protocol_error_sends_disconnect_and_closes() -> None:
    async def test(server: BrokerServer, connect: Any) -> None:
        c = await connect(5, client_id="bad")
        await c.stream.send_all(bytes.fromhex("36 07 00 03 61 2f 62 00 01 00"))  # QoS 3
        got = await c.next()
        assert isinstance(got, Disconnect) and got.reason_code == 0x81
        assert await c.next() is None

    run(test)


def test_slow_subscriber_does_not_hold_up_the_publisher() -> None:
    async def test(server: BrokerServer, connect: Any) -> None:
        slow = await connect(client_id="slow", lockstep=True)
        await slow.send(Subscribe(1, (Subscription("t", 0),)))
        await slow.next()
        fast = await connect(client_id="fast")
        await fast.send(Subscribe(1, (Subscription("t", 0),)))
        await fast.next()
        pub = await connect(client_id="p")
        # `slow` stops reading: its writer blocks (a lockstep stream has no buffer), its bytes pile up until the
        # broker drops QoS 0 for it; the publisher and the fast subscriber go on.
        for _ in range(3000):
            await pub.send(Publish("t", b"x" * 1000))
        received = 0
        with trio.move_on_after(5):
            while received < 3000:
                await fast.next()
                received += 1
        assert received == 3000
        assert server.core.stats.publish_dropped > 0
        assert server.core.sessions["slow"].dropped == server.core.stats.publish_dropped

    run(test, max_buffered_bytes=64 * 1024)


def test_a_bug_costs_one_connection_not_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    async def test(server: BrokerServer, connect: Any) -> None:
        other = await connect(client_id="other")
        victim = await connect(5, client_id="victim")
        original = server.core._on_pingreq

        def broken(conn: Any, packet: Any, now: float) -> None:
            if conn.client_id == "victim":
                raise RuntimeError("boom")
            original(conn, packet, now)

        # The broker's table of handlers is module-level (a compiled class cannot hold it): one entry replaced.
        monkeypatch.setitem(broker_module._HANDLERS, PingReq, lambda core, c, p, n: broken(c, p, n))
        await victim.send(PingReq())
        got = await victim.next()
        assert isinstance(got, Disconnect) and got.reason_code == 0x83, got
        assert await victim.next() is None
        await other.send(PingReq())
        assert await other.next() == PingResp()

    run(test)
