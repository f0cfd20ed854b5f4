"""The bridge's bookkeeping between its two connections, driven in memory (the clients' connections fed bytes as
if read from their sockets, no brokers): orderings that real brokers produce only by chance of timing."""

from __future__ import annotations

from mqtt_cli.core.bridge import parse_rule
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import ConnAck, PubAck, Publish
from mqtt_cli.core.reader import PacketReader
from mqtt_cli.net.bridge import LOCAL, REMOTE, Bridge, BridgeConfig, SideConfig
from mqtt_cli.net.client import Client
from mqtt_cli.net.transports import Endpoint


def connect(client: Client, session_present: bool) -> None:
    client.conn.connect()
    client.conn.data_to_send()
    client.conn.receive_data(encode(ConnAck(session_present), 4), 0.0)
    client.conn.events()


def read(client: Client, data: bytes, now: float) -> None:
    """`data` as if read from the client's socket: its events go to the bridge's observer, as the reader does."""
    client.conn.receive_data(data, now)
    observer = client.settings.observer
    assert observer is not None
    observer(client.conn.events())


def forwarded(client: Client) -> list[Publish]:
    return PacketReader(4).feed(client.conn.data_to_send())


def test_a_late_acknowledgement_does_not_acknowledge_a_reused_packet_id() -> None:
    """The local broker loses the session while a forward is in flight at the remote, then sends a new message
    under the same packet identifier. The remote's PUBACK for the old forward must not acknowledge the new one to
    the local broker: it would be acknowledged before the remote has it (lost if the bridge died then)."""

    def side() -> SideConfig:
        return SideConfig(endpoints=(Endpoint(),), client_id="b", version=4)

    bridge = Bridge(
        BridgeConfig(name="t", local=side(), remote=side(), rules=[parse_rule("t/# out 1")]), log=lambda _: None
    )
    bridge.clients = [Client(bridge._settings(LOCAL)), Client(bridge._settings(REMOTE))]
    local, remote = bridge.clients
    connect(local, False)
    connect(remote, False)

    read(local, encode(Publish("t/a", b"old", 1, packet_id=7), 4), 1.0)
    (old,) = forwarded(remote)
    assert old.payload == b"old" and local.conn.held == 1

    local.conn.connection_lost("gone")  # the local broker restarts without the session
    local.conn.events()
    connect(local, False)
    read(local, encode(Publish("t/b", b"new", 1, packet_id=7), 4), 2.0)
    (new,) = forwarded(remote)
    assert new.payload == b"new" and local.conn.held == 1

    read(remote, encode(PubAck(old.packet_id), 4), 3.0)  # type: ignore[arg-type]
    assert local.conn.data_to_send() == b"" and local.conn.held == 1
    read(remote, encode(PubAck(new.packet_id), 4), 3.0)  # type: ignore[arg-type]
    assert local.conn.data_to_send() == encode(PubAck(7), 4) and local.conn.held == 0
    assert bridge.counters.forwarded[LOCAL] == 2
