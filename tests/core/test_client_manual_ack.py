"""ClientConnection with `manual_ack` (what the bridge uses): acknowledgements only when the owner says so,
re-sends held back, QoS 2 flows reported for a journal, and state restored from one."""

from __future__ import annotations

import pytest

from mqtt_cli.core.client import ClientConnection
from mqtt_cli.core.events import (
    Acknowledged,
    ConnectionAccepted,
    MessagesReceived,
    PongReceived,
    PublishAcknowledged,
    PublishReceived,
    ReleaseReceived,
)
from mqtt_cli.core.packets import ConnAck, Connect, Disconnect, PingResp, PubAck, PubComp, Publish, PubRec, PubRel
from mqtt_cli.core.properties import Properties

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
    assert isinstance(event, MessagesReceived)
    assert broker.received() == [] and client.held == 1
    # A re-send before the owner is done is not delivered again.
    assert broker.send(Publish("a", b"x", qos=1, dup=True, packet_id=7)) == []
    assert client.acknowledge(7)
    assert broker.received() == [PubAck(7)]
    assert not client.acknowledge(7)  # already done: nothing more to send
    assert broker.received() == []


@pytest.mark.parametrize("version", [4, 5])
def test_qos1_identifier_reused_while_held_is_a_new_message(version: int) -> None:
    """mosquitto with max_inflight_messages 0 gives a new message an identifier still awaiting our PUBACK once
    65,535 are in flight to us. DUP 0 says it is not a re-send: it is delivered, and each message gets its own
    PUBACK. Dropping it as a re-send stalled a bridge's source broker behind it for good."""
    client, broker = connected(version, manual_ack=True)
    (first,) = broker.send(Publish("a", b"1", qos=1, packet_id=7))
    (second,) = broker.send(Publish("a", b"2", qos=1, packet_id=7))
    assert isinstance(first, MessagesReceived) and isinstance(second, MessagesReceived)
    assert second.messages[0].payload == b"2" and client.held == 2
    assert broker.send(Publish("a", b"2", qos=1, dup=True, packet_id=7)) == []  # a re-send still is one
    assert client.acknowledge(7) and client.acknowledge(7)
    assert broker.received() == [PubAck(7), PubAck(7)] and client.held == 0
    assert not client.acknowledge(7)
    # Acknowledged while disconnected: both PUBACKs go out after the CONNACK that finds the session.
    broker.send(Publish("a", b"3", qos=1, packet_id=9), Publish("a", b"4", qos=1, packet_id=9))
    client.receive_data(b"", 1.0)
    client.events()
    assert client.acknowledge(9) and client.acknowledge(9)
    reconnect(client, broker)
    assert broker.received() == [PubAck(9), PubAck(9)]


def test_qos2_flow_is_reported_and_deduplicated() -> None:
    client, broker = connected(5, manual_ack=True)
    (event,) = broker.send(Publish("a", b"x", qos=2, packet_id=9))
    assert isinstance(event, MessagesReceived) and broker.received() == []
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
    assert isinstance(event, MessagesReceived)


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


# --- the relay's hot path: a read's messages and plain PUBACKs as one event each, relay() --------------------


@pytest.mark.parametrize("version", [4, 5])
def test_messages_and_plain_pubacks_come_a_read_at_a_time(version: int) -> None:
    client, broker = connected(version, manual_ack=True)
    (received,) = broker.send(Publish("a", b"1", qos=1, packet_id=7), Publish("a", b"2", qos=2, packet_id=8))
    assert isinstance(received, MessagesReceived) and [m.payload for m in received.messages] == [b"1", b"2"]
    assert client.held == 2
    # Held as ever: a re-send is not delivered again, the owner's acknowledge() answers the broker.
    assert broker.send(Publish("a", b"1", qos=1, dup=True, packet_id=7)) == []
    assert client.acknowledge(7) and client.acknowledge(8)
    assert broker.received() == [PubAck(7), PubRec(8)]
    pids = [client.publish("out", b"x", 1, context=f"c{i}") for i in range(3)]
    broker.received()
    assert broker.send(*(PubAck(pid) for pid in pids)) == [Acknowledged(["c0", "c1", "c2"])]
    assert client.inflight == 0
    # Not a plain PUBACK (a failure on 5.0, or a QoS 2 flow): an event of its own.
    if version == 5:
        pid = client.publish("out", b"x", 1, context="refused")
        broker.received()
        assert broker.send(PubAck(pid, 0x87)) == [PublishAcknowledged(pid, 0x87, "refused")]
    pid = client.publish("out", b"x", 2, context="two")
    broker.received()
    assert broker.send(PubRec(pid)) == [PublishReceived(pid, "two")]


@pytest.mark.parametrize("manual_ack", [False, True])
def test_a_read_s_events_keep_the_order_received(manual_ack: bool) -> None:
    """Messages and plain PUBACKs are batched only between other events: what the owner sees is in the order
    the broker sent it (a marker PINGRESP after the messages before it, say)."""
    client, broker = connected(5, manual_ack=manual_ack)
    pid = client.publish("out", b"x", 1, context="ctx")
    broker.received()
    events = broker.send(
        PubAck(pid),
        Publish("a", b"1", qos=1, packet_id=1),
        Publish("a", b"0", qos=0),
        PingResp(),
        Publish("a", b"2", qos=1, packet_id=2),
    )
    assert events == [
        Acknowledged(["ctx"]),
        MessagesReceived([Publish("a", b"1", qos=1, packet_id=1), Publish("a", b"0", qos=0)]),
        PongReceived(),
        MessagesReceived([Publish("a", b"2", qos=1, packet_id=2)]),
    ]
    assert [type(e) for e in broker.send(Publish("a", b"3", qos=0))] == [MessagesReceived]  # a new read


def test_packets_received_counts_what_each_read_brought() -> None:
    client, broker = connected(4)
    before = client.packets_received
    pids = [client.publish("a", b"x", 1) for _ in range(3)]
    broker.received()
    broker.send(*(PubAck(p) for p in pids), Publish("b", b"y", qos=0))  # three plain PUBACKs, then a PUBLISH
    assert client.packets_received - before == 4


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("retain", [False, True])
def test_relay_queues_the_same_bytes_as_publish(version: int, retain: bool) -> None:
    client, broker = connected(version)
    assert client.relay("a/b", b"x", 1, retain) == 0  # a topic not published before: publish() checks it
    first = client.publish("a/b", b"x", 1, retain, context="p")
    pid = client.relay("a/b", b"y", 1, retain, context="r")
    assert pid == first + 1  # type: ignore[operator]
    assert broker.received() == [
        Publish("a/b", b"x", 1, retain, False, first),
        Publish("a/b", b"y", 1, retain, False, pid),
    ]
    assert [ctx for _, ctx in client.unacknowledged()] == ["p", "r"]
    assert broker.send(PubAck(pid)) == [Acknowledged(["r"])]


def test_relay_declines_what_publish_must_check_or_queue() -> None:
    client, broker = connected(5, connack=ConnAck(properties=Properties(receive_maximum=1, maximum_qos=1)))
    client.publish("t", b"", 1)
    assert client.relay("t", b"", 1, False) == 0  # window closed
    broker.send(PubAck(1))
    assert client.relay("t", b"", 2, False) == 0  # above the broker's maximum QoS
    assert client.relay("t", b"", 1, False) == 2
    client, broker = connected(5, connack=ConnAck(properties=Properties(maximum_packet_size=100)))
    client.publish("t", b"", 1)
    assert client.relay("t", b"", 1, False) == 0  # a size limit to check
    client, broker = connected(4)
    client.publish("t", b"", 1)
    assert client.relay("t", b"", 0, False) == 0  # QoS 0 has no flow
    assert client.relay("t", b"", 1, False) == 2
    broker.send(Disconnect())
    assert client.relay("t", b"", 1, False) == 0  # not connected


def test_session_epoch_counts_sessions_the_broker_started() -> None:
    """A packet identifier received in one session may name another message in the next: the bridge compares
    the epoch before it acknowledges a message it forwarded long ago."""
    client, broker = connected(4, manual_ack=True)
    assert client.session_epoch == 1
    assert reconnect(client, broker, present=True) and client.session_epoch == 1
    reconnect(client, broker, present=False)
    assert client.session_epoch == 2
