"""ClientConnection with `manual_ack` (what the bridge uses): acknowledgements only when the owner says so,
re-sends held back, QoS 2 flows reported for a journal, and state restored from one."""

from __future__ import annotations

import pytest

from mqtt_cli.core.client import ClientConnection
from mqtt_cli.core.events import (
    ConnectionAccepted,
    MessageReceived,
    PublishAcknowledged,
    PublishReceived,
    ReleaseReceived,
)
from mqtt_cli.core.packets import ConnAck, Connect, PubAck, PubComp, Publish, PubRec, PubRel

from .test_client import Broker, connected


def reconnect(client: ClientConnection, broker: Broker, present: bool = True) -> list[object]:
    client.receive_data(b"", 1.0)
    client.events()
    client.connect()
    broker.received()
    return broker.send(ConnAck(session_present=present))


@pytest.mark.parametrize("version", [4, 5])
def test_qos1_acknowledged_only_when_told(version: int) -> None:
    client, broker = connected(version, manual_ack=True)
    (event,) = broker.send(Publish("a", b"x", qos=1, packet_id=7))
    assert isinstance(event, MessageReceived)
    assert broker.received() == [] and client.held == 1
    # A re-send before the owner is done is not delivered again.
    assert broker.send(Publish("a", b"x", qos=1, dup=True, packet_id=7)) == []
    assert client.acknowledge(7)
    assert broker.received() == [PubAck(7)]
    assert not client.acknowledge(7)  # already done: nothing more to send
    assert broker.received() == []


def test_qos2_flow_is_reported_and_deduplicated() -> None:
    client, broker = connected(5, manual_ack=True)
    (event,) = broker.send(Publish("a", b"x", qos=2, packet_id=9))
    assert isinstance(event, MessageReceived) and broker.received() == []
    client.acknowledge(9)
    assert broker.received() == [PubRec(9)]
    # After PUBREC, a re-send is acknowledged again but not delivered.
    assert broker.send(Publish("a", b"x", qos=2, dup=True, packet_id=9)) == []
    assert broker.received() == [PubRec(9)]
    assert broker.send(PubRel(9)) == [ReleaseReceived(9)]
    assert broker.received() == [PubComp(9)]


def test_acknowledged_while_disconnected_goes_out_after_connack() -> None:
    client, broker = connected(5, manual_ack=True)
    broker.send(Publish("a", b"1", qos=1, packet_id=1), Publish("a", b"2", qos=2, packet_id=2))
    client.receive_data(b"", 1.0)
    client.events()
    assert client.acknowledge(1) and client.acknowledge(2)
    client.connect()
    broker.received()
    events = broker.send(ConnAck(session_present=True))
    assert isinstance(events[0], ConnectionAccepted)
    assert broker.received() == [PubAck(1), PubRec(2)]
    # The broker's re-sends, crossing our acknowledgements, are not delivered twice at QoS 2.
    assert broker.send(Publish("a", b"2", qos=2, dup=True, packet_id=2)) == []


def test_session_lost_forgets_held_messages() -> None:
    client, broker = connected(5, manual_ack=True)
    broker.send(Publish("a", b"1", qos=1, packet_id=1))
    reconnect(client, broker, present=False)
    assert not client.acknowledge(1)
    assert broker.received() == []
    (event,) = broker.send(Publish("a", b"1", qos=1, packet_id=1))
    assert isinstance(event, MessageReceived)


def test_outgoing_qos2_reports_pubrec() -> None:
    client, broker = connected(5, manual_ack=True)
    pid = client.publish("t", b"m", qos=2, context="ctx")
    broker.received()
    assert broker.send(PubRec(pid)) == [PublishReceived(pid, "ctx")]
    assert broker.received() == [PubRel(pid)]
    (done,) = broker.send(PubComp(pid))
    assert done == PublishAcknowledged(pid, 0, "ctx")


def test_without_manual_ack_nothing_changes() -> None:
    client, broker = connected(5)
    broker.send(Publish("a", b"x", qos=1, packet_id=3))
    assert broker.received() == [PubAck(3)]
    pid = client.publish("t", b"m", qos=2)
    broker.received()
    assert broker.send(PubRec(pid)) == []


def test_restored_flows_are_resent_after_connack() -> None:
    client = ClientConnection("bridge", version=5, clean_start=False, manual_ack=True)
    client.restore_outgoing(Publish("t", b"a", qos=2, packet_id=40), released=False, context="A")
    client.restore_outgoing(Publish("t", b"b", qos=2, packet_id=41), released=True, context="B")
    client.restore_incoming(5, 2, acknowledged=False)
    client.restore_incoming(6, 2, acknowledged=True)
    client.connect()
    broker = Broker(client)
    (connect,) = broker.received()
    assert isinstance(connect, Connect) and not connect.clean_start
    broker.send(ConnAck(session_present=True))
    assert broker.received() == [Publish("t", b"a", qos=2, dup=True, packet_id=40), PubRel(41)]
    # The source's re-sends: 5 is still ours (held, not delivered again), 6 was acknowledged (PUBREC again).
    assert broker.send(Publish("s", b"5", qos=2, dup=True, packet_id=5)) == []
    assert broker.send(Publish("s", b"6", qos=2, dup=True, packet_id=6)) == []
    assert broker.received() == [PubRec(6)]
    assert client.acknowledge(5)
    assert broker.received() == [PubRec(5)]
    assert broker.send(PubComp(41)) == [PublishAcknowledged(41, 0, "B")]


@pytest.mark.parametrize(("version", "level"), [(3, 0x83), (4, 0x84), (5, 0x05)])
def test_bridge_flag_in_connect(version: int, level: int) -> None:
    client = ClientConnection("b", version=version, bridge=True)
    client.connect()
    data = client.data_to_send()
    name_len = data[3]
    assert data[4 + name_len] == level
