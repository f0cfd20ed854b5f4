"""The trio client against real brokers: versions, refusals, flow control, keepalive, loss and reconnect."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import trio

from mqtt_cli.core.encoder import encode
from mqtt_cli.core.events import MessagesReceived
from mqtt_cli.core.packets import Publish, Subscription
from mqtt_cli.core.properties import Properties
from mqtt_cli.net.client import Client, ClientSettings, open_client
from mqtt_cli.net.errors import BrokerRefused, ConnectFailed, ConnectionLost, PublishFailed
from mqtt_cli.net.transports import Endpoint

from ..brokers import AUTH_USERS, HOST, Broker


def settings(broker: Broker, **kwargs: Any) -> ClientSettings:
    kwargs.setdefault("client_id", "t-" + trio.lowlevel.current_task().name[-20:].replace(".", "-"))
    return ClientSettings(endpoint=Endpoint("mqtt", broker.host, broker.port), **kwargs)


async def collect(client: Client, n: int) -> list[Any]:
    return [await client.messages.receive() for _ in range(n)]


@pytest.mark.parametrize("version", [3, 4, 5, None])
async def test_every_version_publishes_and_receives_at_every_qos(mosquitto: Broker, version: int | None) -> None:
    with trio.fail_after(10):
        async with open_client(settings(mosquitto, version=version, client_id=f"v{version}")) as c:
            assert c.version == (version or 5)
            assert await c.subscribe([Subscription(f"v/{version}/#", 2)]) == (2,)
            for qos in (0, 1, 2):
                await c.publish(f"v/{version}/{qos}", bytes(range(256)) * qos, qos)
            await c.wait_acknowledged()
            got = await collect(c, 3)
            assert sorted((m.qos, m.payload) for m in got) == [(q, bytes(range(256)) * q) for q in (0, 1, 2)]
            assert c.acknowledged == 2 and c.written == 1


async def test_5_properties_travel(mosquitto: Broker) -> None:
    props = Properties(content_type="text/plain", user_properties=[("a", "1"), ("a", "2")], correlation_data=b"\x00")
    with trio.fail_after(10):
        async with open_client(settings(mosquitto)) as c:
            await c.subscribe([Subscription("props/#", 1)], Properties(subscription_identifiers=[7]))
            await c.publish("props/x", b"p", 1, properties=props)
            (m,) = await collect(c, 1)
            assert m.properties.user_properties == (("a", "1"), ("a", "2"))
            assert m.properties.content_type == "text/plain" and m.properties.subscription_identifiers == (7,)


async def test_thousands_of_messages_through_a_small_window(mosquitto: Broker) -> None:
    # mosquitto announces receive maximum 20: the client must wait for acknowledgements, never exceed it.
    n = 3000
    with trio.fail_after(30):
        async with open_client(settings(mosquitto, client_id="window-sub")) as sub:
            await sub.subscribe([Subscription("window/#", 1)])
            async with open_client(settings(mosquitto, client_id="window-pub", auto_topic_aliases=True)) as pub:
                assert pub.conn.limits.receive_maximum == 20
                for i in range(n):
                    await pub.publish("window/t", b"%d" % i, 1 + i % 2)
                    assert pub.conn.inflight <= 20
                await pub.wait_acknowledged()
                assert pub.acknowledged == n
            got = await collect(sub, n)
            assert sorted(int(m.payload) for m in got) == list(range(n))


@pytest.mark.parametrize(
    ("version", "user", "password", "reason"),
    [(5, "admin", "wrong", 0x86), (4, "admin", "wrong", 0x86), (5, None, None, 0x87), (3, "nobody", "x", 0x86)],
)  # mosquitto 2.0 says "not authorized" (0x87, 3.x: 5) for bad passwords too: either is a refusal
async def test_refused_connections(
    mosquitto_auth: Broker, version: int, user: str | None, password: str | None, reason: int
) -> None:
    s = settings(mosquitto_auth, version=version, username=user, password=password.encode() if password else None)
    with trio.fail_after(10), pytest.raises(BrokerRefused) as info:
        async with open_client(s):
            pass
    assert info.value.reason_code in (reason, 0x87)


async def test_authorisation_refusals(mosquitto_auth: Broker) -> None:
    s = settings(mosquitto_auth, username="reader", password=AUTH_USERS["reader"].encode())
    with trio.fail_after(10):
        async with open_client(s) as c:
            await c.publish("public/x", b"no write", 1)
            await c.wait_acknowledged()
            assert [e.reason_code for e in c.refused] == [0x87]


async def test_refused_subscription_codes_come_back() -> None:
    # mosquitto grants every subscription (its ACL filters deliveries), so a scripted broker refuses here.
    async def handler(stream: trio.SocketStream) -> None:
        await stream.receive_some(1024)
        await stream.send_all(b"\x20\x03\x00\x00\x00")  # 5.0 CONNACK
        data = await stream.receive_some(1024)
        pid = data[2:4]
        await stream.send_all(b"\x90\x05" + pid + b"\x00\x87\x01")  # SUBACK: not authorized, granted QoS 1
        await trio.sleep(5)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await fake_broker(nursery, handler)
            async with open_client(ClientSettings(endpoint=Endpoint("mqtt", HOST, port), client_id="r")) as c:
                assert await c.subscribe([Subscription("a", 1), Subscription("b", 1)]) == (0x87, 1)
            nursery.cancel_scope.cancel()


async def test_connect_timeout_when_the_broker_never_answers() -> None:
    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep(10)

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(functools.partial(trio.serve_tcp, silent, 0, host=HOST))
        port = listener.socket.getsockname()[1]
        s = ClientSettings(endpoint=Endpoint("mqtt", HOST, port), connect_timeout=0.3)
        with trio.fail_after(5), pytest.raises(ConnectFailed, match="no answer"):
            async with open_client(s):
                pass
        nursery.cancel_scope.cancel()


async def fake_broker(nursery: trio.Nursery, handler: Any) -> int:
    (listener,) = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host=HOST))
    return int(listener.socket.getsockname()[1])


async def test_auto_falls_back_to_311_when_the_broker_closes_on_5() -> None:
    seen: list[int] = []

    async def handler(stream: trio.SocketStream) -> None:
        data = await stream.receive_some(1024)
        level = data[8]  # fixed header (2), protocol name (6), level
        seen.append(level)
        if level == 4:
            await stream.send_all(b"\x20\x02\x00\x00")
            await trio.sleep(5)
        await stream.aclose()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await fake_broker(nursery, handler)
            async with open_client(ClientSettings(endpoint=Endpoint("mqtt", HOST, port), client_id="fb")) as c:
                assert c.version == 4
            nursery.cancel_scope.cancel()
    assert seen == [5, 4]


@pytest.mark.parametrize(("burst", "pauses"), [(800, True), (200, False)])
async def test_linger_pauses_only_after_busy_reads_with_a_wide_window(burst: int, pauses: bool) -> None:
    """The bridge's --linger: after a read that brought several packets, on a connection seen with at least
    linger x 50,000 messages held or in flight (500 at 10 ms), the reader waits before it reads again; with a
    narrower window it never waits (that would cost a pause per window), nor after a read of one packet. The
    messages stay held, unacknowledged, as a bridge holds them until the other broker has them; they reach the
    owner, a read at a time, through the observer."""

    async def handler(stream: trio.SocketStream) -> None:
        await stream.receive_some(1024)
        await stream.send_all(b"\x20\x02\x00\x00")
        # Each step waits for the client's PINGREQ: sent once it is connected, so no packet shares CONNACK's read.
        await stream.receive_some(1024)
        await stream.send_all(b"".join(encode(Publish("t", b"x", 1, packet_id=i + 1), 4) for i in range(burst)))
        await stream.receive_some(1024)
        await stream.send_all(encode(Publish("t", b"y", 1, packet_id=burst + 1), 4))
        await trio.sleep(10)

    held: list[Publish] = []

    def observe(events: list[Any]) -> None:
        held.extend(p for e in events if isinstance(e, MessagesReceived) for p in e.messages)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await fake_broker(nursery, handler)
            s = ClientSettings(
                endpoint=Endpoint("mqtt", HOST, port), version=4, manual_ack=True, linger=0.01, observer=observe
            )
            async with open_client(s) as c:
                for expected in (burst, burst + 1):
                    await c.ping_marker()
                    while c.conn.held < expected:
                        await trio.sleep(0.005)
                    await trio.sleep(0.05)  # the reader's decision follows the read that completed the step
                    if expected == burst:
                        assert (c.pauses > 0) == pauses, c.pauses
                        after_burst = c.pauses
                assert c.pauses == after_burst  # the lone message's read: no pause
                assert len(held) == burst + 1
            nursery.cancel_scope.cancel()


async def test_keepalive_gives_up_on_a_silent_broker() -> None:
    async def handler(stream: trio.SocketStream) -> None:
        await stream.receive_some(1024)
        await stream.send_all(b"\x20\x02\x00\x00")  # CONNACK, then nothing: no PINGRESP
        await trio.sleep(10)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await fake_broker(nursery, handler)
            start = trio.current_time()
            with pytest.raises(ConnectionLost, match="keepalive"):
                async with open_client(
                    ClientSettings(endpoint=Endpoint("mqtt", HOST, port), version=4, keepalive=1)
                ) as c:
                    await c.subscribe([Subscription("x")])
            assert 1.4 < trio.current_time() - start < 3
            nursery.cancel_scope.cancel()


async def test_ack_timeout_when_the_broker_swallows_messages() -> None:
    async def handler(stream: trio.SocketStream) -> None:
        await stream.receive_some(1024)
        await stream.send_all(b"\x20\x02\x00\x00")
        while await stream.receive_some(1024):
            pass  # reads everything, acknowledges nothing

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await fake_broker(nursery, handler)
            s = ClientSettings(endpoint=Endpoint("mqtt", HOST, port), version=4, ack_timeout=0.5)
            with pytest.raises(PublishFailed, match="acknowledged nothing"):
                async with open_client(s) as c:
                    await c.publish("t", b"x", 1)
                    await c.wait_acknowledged()
            nursery.cancel_scope.cancel()


async def test_lost_connection_is_reported(broker_factory: Any) -> None:
    broker = broker_factory()
    with trio.fail_after(10), pytest.raises(ConnectionLost):
        async with open_client(settings(broker)) as c:
            await c.subscribe([Subscription("x", 1)])
            broker.kill()
            async for _ in c.messages:
                pass
            assert c.failure is not None
            raise c.failure


@pytest.mark.parametrize("version", [4, 5])
async def test_reconnect_loses_nothing_across_a_broker_restart(broker_factory: Any, version: int) -> None:
    broker = broker_factory(persistence=True)
    n = 2000
    kw: dict[str, Any] = {"version": version, "reconnect": True, "session_expiry": 300, "reconnect_delay": 0.05}
    received: set[bytes] = set()
    with trio.fail_after(30):
        async with open_client(settings(broker, client_id=f"rsub{version}", clean_start=False, **kw)) as sub:
            await sub.subscribe([Subscription("rc/#", 1)])
            async with open_client(settings(broker, client_id=f"rpub{version}", **kw)) as pub:
                async with trio.open_nursery() as nursery:
                    for i in range(n):
                        if i == n // 3:
                            nursery.start_soon(trio.to_thread.run_sync, broker.restart)
                        await pub.publish("rc/t", b"%d" % i, 1)
                        await trio.sleep(0.0003)  # spread the messages over the restart
                    await pub.wait_acknowledged()
                assert pub.reconnects >= 1 and pub.acknowledged == n
            while len(received) < n:
                received.add((await sub.messages.receive()).payload)
            assert sub.reconnects >= 1
    assert received == {b"%d" % i for i in range(n)}


async def test_subscriptions_are_made_again_when_the_session_is_lost(broker_factory: Any) -> None:
    broker = broker_factory(persistence=False)  # a restart forgets every session
    with trio.fail_after(20):
        kw = {"reconnect": True, "reconnect_delay": 0.05}
        async with open_client(settings(broker, client_id="resub", **kw)) as sub:
            await sub.subscribe([Subscription("again/#", 1)])
            await trio.to_thread.run_sync(broker.restart)
            while sub.reconnects == 0 or not sub.connected:
                await trio.sleep(0.02)
            await trio.sleep(0.2)  # the SUBSCRIBE made again on the new connection
            async with open_client(settings(broker, client_id="resub-pub")) as pub:
                await pub.publish("again/x", b"back", 1)
                await pub.wait_acknowledged()
            (m,) = await collect(sub, 1)
            assert m.payload == b"back"
