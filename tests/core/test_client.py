"""ClientConnection in memory: the test plays the broker with the codec, and drives time by hand."""

from __future__ import annotations

from typing import Any

import pytest

from mqtt_cli.core.client import ClientConnection
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.errors import LocalProtocolError
from mqtt_cli.core.events import (
    Acknowledged,
    ConnectionAccepted,
    ConnectionRefused,
    Disconnected,
    MessagesReceived,
    PongReceived,
    PublishAcknowledged,
    SubscribeAcknowledged,
    UnsubscribeAcknowledged,
)
from mqtt_cli.core.lifecycle import ConnectionState
from mqtt_cli.core.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
)
from mqtt_cli.core.properties import Properties
from mqtt_cli.core.reader import PacketReader


class Broker:
    """The broker's end: decodes what the client sent, encodes what the test answers."""

    def __init__(self, client: ClientConnection) -> None:
        self.client = client
        self.reader = PacketReader()

    def received(self, now: float = 0.0) -> list[Any]:
        return self.reader.feed(self.client.data_to_send(now))

    def send(self, *packets: Any, now: float = 0.0) -> list[Any]:
        version = self.reader.version or 4
        self.client.receive_data(b"".join(encode(p, version) for p in packets), now)
        return self.client.events()


def connected(version: int = 5, connack: ConnAck | None = None, **kwargs: Any) -> tuple[ClientConnection, Broker]:
    client = ClientConnection("c1", version=version, **kwargs)
    client.connect()
    broker = Broker(client)
    (connect,) = broker.received()
    assert isinstance(connect, Connect) and connect.protocol_version == version
    events = broker.send(connack or ConnAck())
    assert isinstance(events[0], ConnectionAccepted)
    return client, broker


@pytest.mark.parametrize("version", [3, 4, 5])
def test_connect_and_accept(version: int) -> None:
    client = ClientConnection("c1", version=version, keepalive=30, username="u", password=b"p")
    client.connect()
    broker = Broker(client)
    (connect,) = broker.received()
    assert (connect.client_id, connect.keepalive, connect.username, connect.password) == ("c1", 30, "u", b"p")
    assert client.state is ConnectionState.CONNECTING
    (event,) = broker.send(ConnAck(session_present=version == 3 and False))
    assert isinstance(event, ConnectionAccepted) and client.connected


def test_connect_announces_our_limits_in_5() -> None:
    client = ClientConnection("c", receive_maximum=10, maximum_packet_size=1000, topic_alias_maximum=5)
    client.connect()
    (connect,) = Broker(client).received()
    props = connect.properties
    assert (props.receive_maximum, props.maximum_packet_size, props.topic_alias_maximum) == (10, 1000, 5)


@pytest.mark.parametrize(
    ("version", "code", "expected"),
    [(5, 0x86, 0x86), (5, 0x87, 0x87), (4, 4, 0x86), (4, 5, 0x87), (4, 1, 0x84), (3, 2, 0x85)],
)
def test_refused(version: int, code: int, expected: int) -> None:
    client = ClientConnection("c1", version=version)
    client.connect()
    broker = Broker(client)
    broker.received()
    props = Properties(reason_string="go away") if version == 5 else Properties()
    (event,) = broker.send(ConnAck(False, code, props))
    assert isinstance(event, ConnectionRefused)
    assert (event.reason_code, event.return_code) == (expected, code)
    assert client.state is ConnectionState.CLOSED
    if version == 5:
        assert event.reason.endswith(": go away")


def test_a_3x_connack_in_answer_to_5_is_unsupported_version() -> None:
    client = ClientConnection("c1", version=5)
    client.connect()
    client.data_to_send()
    client.receive_data(b"\x20\x02\x00\x01", 0)
    (event,) = client.events()
    assert isinstance(event, ConnectionRefused) and event.reason_code == 0x84


def test_eof_before_connack() -> None:
    client = ClientConnection("c1")
    client.connect()
    client.receive_data(b"", 0)
    (event,) = client.events()
    assert isinstance(event, Disconnected) and event.by_peer


def test_mqtt31_needs_a_client_id() -> None:
    with pytest.raises(LocalProtocolError):
        ClientConnection("", version=3).connect()


def test_connack_properties_apply() -> None:
    props = Properties(
        receive_maximum=2, maximum_packet_size=60, topic_alias_maximum=3, maximum_qos=1, retain_available=0,
        server_keep_alive=10, assigned_client_identifier="given",
    )  # fmt: skip
    client, broker = connected(5, ConnAck(False, 0, props), keepalive=60)
    assert client.keepalive == 10 and client.client_id == "given"
    with pytest.raises(LocalProtocolError, match="QoS 1 at most"):
        client.publish("a", b"x", 2)
    with pytest.raises(LocalProtocolError, match="retained"):
        client.publish("a", b"x", 1, retain=True)
    with pytest.raises(LocalProtocolError, match="maximum packet size"):
        client.publish("a", b"x" * 100, 1)
    assert client.inflight == 0  # a refused publish leaves no trace
    client.publish("a", b"1", 1)
    client.publish("a", b"2", 1)
    assert not client.window_open
    with pytest.raises(LocalProtocolError, match="window"):
        client.publish("a", b"3", 1)
    first, _ = broker.received()
    (ack,) = broker.send(PubAck(first.packet_id))
    assert isinstance(ack, Acknowledged) and client.window_open


def test_max_inflight_caps_a_broker_without_receive_maximum() -> None:
    client, _ = connected(4, max_inflight=3)
    for i in range(3):
        client.publish("a", b"%d" % i, 1)
    assert not client.window_open


def test_qos1_and_qos2_outgoing_flows() -> None:
    client, broker = connected(5)
    p1 = client.publish("a", b"one", 1, context="m1")
    p2 = client.publish("a", b"two", 2, context="m2")
    assert client.publish("a", b"zero", 0) is None
    sent = broker.received()
    assert [p.qos for p in sent] == [1, 2, 0]
    events = broker.send(PubAck(p1), PubRec(p2))
    assert events == [Acknowledged(["m1"])]
    assert broker.received() == [PubRel(p2)]
    (done,) = broker.send(PubComp(p2))
    assert done.context == "m2" and done.ok and client.inflight == 0


def test_failed_pubrec_ends_the_flow_with_its_reason() -> None:
    client, broker = connected(5)
    pid = client.publish("a", b"x", 2)
    broker.received()
    (event,) = broker.send(PubRec(pid, 0x87))
    assert event.reason_code == 0x87 and not event.ok
    assert broker.received() == []


def test_incoming_qos1_is_acknowledged_and_delivered() -> None:
    _client, broker = connected(4)
    (event,) = broker.send(Publish("t", b"hi", 1, packet_id=9))
    assert isinstance(event, MessagesReceived) and [p.payload for p in event.messages] == [b"hi"]
    assert broker.received() == [PubAck(9)]


def test_incoming_qos2_is_delivered_exactly_once() -> None:
    _client, broker = connected(5)
    events = broker.send(Publish("t", b"once", 2, packet_id=4))
    assert [type(e) for e in events] == [MessagesReceived]
    assert broker.received() == [PubRec(4)]
    assert broker.send(Publish("t", b"once", 2, dup=True, packet_id=4)) == []  # re-sent: acknowledged again only
    assert broker.received() == [PubRec(4)]
    assert broker.send(PubRel(4)) == []
    assert broker.received() == [PubComp(4)]
    assert [type(e) for e in broker.send(Publish("t", b"again", 2, packet_id=4))] == [MessagesReceived]


def test_our_receive_maximum_is_enforced() -> None:
    _client, broker = connected(5, receive_maximum=2)
    broker.send(Publish("t", b"1", 2, packet_id=1), Publish("t", b"2", 2, packet_id=2))
    events = broker.send(Publish("t", b"3", 2, packet_id=3))
    assert isinstance(events[-1], Disconnected) and events[-1].reason_code == 0x93
    assert broker.received()[-1] == Disconnect(0x93)


def test_our_maximum_packet_size_is_enforced() -> None:
    _client, broker = connected(5, maximum_packet_size=50)
    events = broker.send(Publish("t", b"x" * 100))
    assert isinstance(events[-1], Disconnected) and events[-1].reason_code == 0x95


def test_incoming_topic_aliases() -> None:
    _client, broker = connected(5, topic_alias_maximum=2)
    (a,) = broker.send(Publish("long/topic", b"1", properties=Properties(topic_alias=1)))
    (b,) = broker.send(Publish("", b"2", properties=Properties(topic_alias=1)))
    assert [p.topic for p in a.messages + b.messages] == ["long/topic", "long/topic"]
    assert b.messages[0].properties.topic_alias is None  # resolved, not passed on
    (bad,) = broker.send(Publish("", b"3", properties=Properties(topic_alias=2)))
    assert isinstance(bad, Disconnected) and bad.reason_code == 0x82


def test_incoming_topic_alias_above_our_maximum() -> None:
    _client, broker = connected(5, topic_alias_maximum=1)
    (bad,) = broker.send(Publish("t", b"3", properties=Properties(topic_alias=2)))
    assert isinstance(bad, Disconnected) and bad.reason_code == 0x94


def test_outgoing_topic_aliases_explicit_and_automatic() -> None:
    client, broker = connected(5, ConnAck(False, 0, Properties(topic_alias_maximum=2)), auto_topic_aliases=True)
    client.publish("x/y", b"1", 0, properties=Properties(topic_alias=2))
    client.publish("x/y", b"2", 0, properties=Properties(topic_alias=2))
    client.publish("auto", b"3", 1)
    client.publish("auto", b"4", 1)
    client.publish("third", b"5", 0)  # both aliases taken: the topic goes in full
    sent = broker.received()
    assert [(p.topic, p.properties.topic_alias) for p in sent] == [
        ("x/y", 2), ("", 2), ("auto", 1), ("", 1), ("third", None)
    ]  # fmt: skip
    with pytest.raises(LocalProtocolError, match="topic alias maximum"):
        client.publish("x", b"", 0, properties=Properties(topic_alias=3))


def test_keepalive_pings_and_gives_up_after_one_and_a_half_periods() -> None:
    client, broker = connected(4, keepalive=10)
    assert client.next_deadline() == 10.0
    client.handle_timeout(5)
    assert broker.received() == []
    client.handle_timeout(10)
    assert broker.received(10) == [PingReq()]
    assert client.next_deadline() == 15.0
    (pong,) = broker.send(PingResp(), now=11)
    assert isinstance(pong, PongReceived) and client.pings_sent == 1
    assert client.next_deadline() == 20.0
    client.handle_timeout(20)
    assert broker.received(20) == [PingReq()]
    client.handle_timeout(26.5)
    (event,) = client.events()
    assert isinstance(event, Disconnected) and event.reason_code == 0x8D and not event.by_peer
    assert client.next_deadline() is None


def test_keepalive_zero_means_no_timer() -> None:
    client, _ = connected(4, keepalive=0)
    assert client.next_deadline() is None


def test_subscribe_and_unsubscribe_ids_do_not_collide_with_publishes() -> None:
    client, broker = connected(5)
    pub_id = client.publish("a", b"", 1)
    sub_id = client.subscribe([Subscription("a/#", 1)])
    unsub_id = client.unsubscribe(["b"])
    assert len({pub_id, sub_id, unsub_id}) == 3
    sent = broker.received()
    assert isinstance(sent[1], Subscribe) and isinstance(sent[2], Unsubscribe)
    events = broker.send(SubAck(sub_id, (1,)), UnsubAck(unsub_id, (0x11,)))
    assert events == [SubscribeAcknowledged(sub_id, (1,)), UnsubscribeAcknowledged(unsub_id, (0x11,))]
    (bad,) = broker.send(SubAck(sub_id, (1,)))
    assert isinstance(bad, Disconnected) and bad.reason_code == 0x82


def test_reconnect_with_session_resends_with_dup_and_pubrel() -> None:
    client, broker = connected(5, clean_start=True)
    q1 = client.publish("a", b"1", 1)
    q2 = client.publish("a", b"2", 2)
    broker.received()
    broker.send(PubRec(q2))
    broker.received()
    client.receive_data(b"", 1)
    assert isinstance(client.events()[-1], Disconnected)
    client.connect(clean_start=False)
    broker2 = Broker(client)
    (connect,) = broker2.received()
    assert connect.clean_start is False
    (accepted,) = broker2.send(ConnAck(session_present=True))
    assert accepted.session_present and accepted.unacknowledged == ()
    resent = broker2.received()
    assert resent == [Publish("a", b"1", 1, dup=True, packet_id=q1), PubRel(q2)]


def test_connection_lost_ends_the_connection_once_and_a_reconnect_resends() -> None:
    """A write that fails before the broker's close is read: the net layer says so, and the next connect()
    continues the session as after a close read from the socket."""
    client, broker = connected(4)
    pid = client.publish("a", b"1", 1)
    broker.received()
    client.connection_lost("writing failed: broken pipe")
    (event,) = client.events()
    assert isinstance(event, Disconnected) and event.by_peer and event.reason == "writing failed: broken pipe"
    assert not client.connected
    client.connection_lost("again")  # over already: nothing more
    assert client.events() == []
    client.connect()
    broker2 = Broker(client)
    broker2.received()
    broker2.send(ConnAck(session_present=True))
    assert broker2.received() == [Publish("a", b"1", 1, dup=True, packet_id=pid)]


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("retain", [False, True])
@pytest.mark.parametrize("payload", [b"", b"x" * 100, b"y" * 20_000])
def test_published_bytes_are_the_codecs(version: int, qos: int, retain: bool, payload: bytes) -> None:
    """publish() frames messages without properties from a topic encoded once: the same bytes as encode()."""
    client, _broker = connected(version)
    for topic in ("a/b", "a/b", "ünï/çødé"):
        pid = client.publish(topic, payload, qos, retain)
        data = client.data_to_send()
        assert data == encode(Publish(topic, payload, qos, retain, False, pid), version)
    with pytest.raises(LocalProtocolError, match="wildcard"):
        client.publish("a/+", b"", qos)


def test_reconnect_without_session_hands_back_unacknowledged_messages() -> None:
    client, broker = connected(5)
    client.publish("a", b"1", 1, context="one")
    q2 = client.publish("a", b"2", 2, context="two")
    client.publish("a", b"3", 2, context="three")
    broker.received()
    broker.send(PubRec(q2))
    client.receive_data(b"", 1)
    client.events()
    client.connect(clean_start=False)
    broker2 = Broker(client)
    broker2.received()
    events = broker2.send(ConnAck(session_present=False))
    # PUBREC had been received for "two": the broker owned it, so it counts as delivered.
    assert [(type(e), getattr(e, "context", None)) for e in events] == [
        (PublishAcknowledged, "two"), (ConnectionAccepted, None)
    ]  # fmt: skip
    accepted = events[-1]
    assert [(p.payload, p.packet_id, ctx) for p, ctx in accepted.unacknowledged] == [
        (b"1", None, "one"),
        (b"3", None, "three"),
    ]
    assert client.inflight == 0 and broker2.received() == []


def test_outgoing_aliases_are_set_again_after_reconnect() -> None:
    client, broker = connected(5, ConnAck(False, 0, Properties(topic_alias_maximum=5)))
    client.publish("x/y", b"1", 1, properties=Properties(topic_alias=1))
    client.publish("x/y", b"2", 1, properties=Properties(topic_alias=1))
    assert [p.topic for p in broker.received()] == ["x/y", ""]
    client.receive_data(b"", 1)
    client.connect(clean_start=False)
    broker2 = Broker(client)
    broker2.received()
    broker2.send(ConnAck(True, 0, Properties(topic_alias_maximum=5)))
    assert [(p.topic, p.dup) for p in broker2.received()] == [("x/y", True), ("", True)]


def test_broker_disconnect_with_reason() -> None:
    _client, broker = connected(5)
    (event,) = broker.send(Disconnect(0x8B, Properties(reason_string="bye")))
    assert isinstance(event, Disconnected) and event.by_peer and event.reason_code == 0x8B
    assert "Server shutting down: bye" in event.reason


@pytest.mark.parametrize(
    ("packet", "code"),
    [(PubAck(77), 0x82), (PubComp(77), 0x92), (Subscribe(1, (Subscription("a"),)), 0x82), (PingReq(), 0x82)],
)
def test_protocol_errors_close_with_a_reason(packet: Any, code: int) -> None:
    client, broker = connected(5)
    (event,) = broker.send(packet)
    assert isinstance(event, Disconnected) and event.reason_code == code and not event.by_peer
    assert broker.received() == [Disconnect(0x82)]  # 0x92 is no DISCONNECT reason code
    assert client.state is ConnectionState.CLOSED


def test_packets_before_connack_are_a_protocol_error() -> None:
    client = ClientConnection("c1")
    client.connect()
    broker = Broker(client)
    broker.received()
    broker.reader.version = 5
    (event,) = broker.send(Publish("a", b""))
    assert isinstance(event, Disconnected) and event.reason_code == 0x82


def test_malformed_bytes_close_the_connection() -> None:
    client, _broker = connected(4)
    client.receive_data(b"\x30\xff\xff\xff\xff\x01", 0)
    (event,) = client.events()
    assert isinstance(event, Disconnected) and event.reason_code == 0x81


def test_disconnect_and_commands_after_close() -> None:
    client, broker = connected(5)
    client.disconnect(0x04)
    assert broker.received() == [Disconnect(0x04)]
    assert isinstance(client.events()[-1], Disconnected)
    with pytest.raises(LocalProtocolError):
        client.publish("a", b"")
    with pytest.raises(LocalProtocolError):
        client.subscribe([Subscription("a")])


def test_a_client_must_not_send_subscription_identifiers() -> None:
    client, _ = connected(5)
    with pytest.raises(LocalProtocolError):
        client.publish("a", b"", 0, properties=Properties(subscription_identifiers=[1]))


def test_packet_identifiers_wrap_around_without_reuse() -> None:
    client, broker = connected(4)
    for _i in range(70000):
        pid = client.publish("a", b"", 1)
        broker.send(PubAck(pid))  # type: ignore[arg-type]
    assert client.inflight == 0


@pytest.mark.parametrize("version", [3, 4, 5])
def test_qos1_acknowledgements_of_one_read_are_the_encoder_s_pubacks_in_order(version: int) -> None:
    """The PUBACKs a subscriber writes as bytes (the fast path) are the encoder's PubAck, one per message, in the
    order received, all in one data_to_send()."""
    client, broker = connected(version)
    pids = [1, 2, 255, 256, 4660, 65535]
    events = broker.send(*(Publish("a/b", b"m%d" % i, 1, False, False, pid) for i, pid in enumerate(pids)))
    (received,) = events  # one event for the read
    assert [p.packet_id for p in received.messages] == pids
    assert client.data_to_send(0.0) == b"".join(encode(PubAck(pid), version) for pid in pids)


def test_close_window_holds_new_messages_until_the_next_connack() -> None:
    """A client leaving for another address drains what is in flight: no new QoS 1/2 message (publish or the
    relay's path) goes on the connection once its window is closed; the next CONNACK opens it again."""
    client, broker = connected(4, clean_start=False)
    pid = client.publish("a", b"1", 1)
    broker.received()
    client.close_window()
    assert not client.window_open
    assert client.relay("a", b"2", 1, False) == 0
    with pytest.raises(LocalProtocolError):
        client.publish("a", b"3", 1)
    assert client.publish("a", b"qos0", 0) is None  # QoS 0 has no flow to drain
    broker.send(PubAck(pid))
    assert client.inflight == 0
    client.disconnect()
    client.connect(clean_start=False)
    broker2 = Broker(client)
    broker2.received()
    broker2.send(ConnAck(session_present=True))
    assert client.window_open
    assert client.relay("a", b"2", 1, False)


def test_options_are_a_record_checked_once_and_replaced_by_connect() -> None:
    for bad in ({"version": 6}, {"keepalive": -1}, {"receive_maximum": 0}):
        with pytest.raises(ValueError, match="must be"):
            ClientConnection("c1", **bad)
    with pytest.raises(TypeError):
        ClientConnection("c1", on_message=print)  # no such option
    client = ClientConnection("", version=5)
    with pytest.raises(ValueError, match="version must be"):
        client.connect(version=2)
    assert client.state is ConnectionState.IDLE  # a refused connect() changes nothing
    client.connect(version=3, client_id="chosen")
    assert (client.options.version, client.options.client_id, client.version) == (3, "chosen", 3)
    broker = Broker(client)
    (connect,) = broker.received()
    assert (connect.protocol_version, connect.client_id) == (3, "chosen")


def test_broker_limits_come_from_connack_as_a_record() -> None:
    client, _ = connected(5, ConnAck(properties=Properties(receive_maximum=7, maximum_qos=1, retain_available=0)))
    assert (client.limits.receive_maximum, client.limits.maximum_qos, client.limits.retain_available) == (7, 1, False)
    assert client.limits.maximum_packet_size is None and client.limits.topic_alias_maximum == 0


def test_a_pubrec_again_after_pubrel_gets_pubrel_again() -> None:
    """The broker answered our re-sent QoS 2 PUBLISH after it had acknowledged it: PUBREL again, no second
    event, no protocol error (as mosquitto does)."""
    client, broker = connected(5)
    pid = client.publish("a", b"x", 2, context="m")
    broker.received()
    assert broker.send(PubRec(pid)) == []
    assert broker.received() == [PubRel(pid)]
    assert broker.send(PubRec(pid)) == []
    assert broker.received() == [PubRel(pid)]
    (done,) = broker.send(PubComp(pid))
    assert done.context == "m" and done.ok and client.inflight == 0


@pytest.mark.parametrize("qos", [0, 1])
def test_a_publish_too_large_for_the_broker_sets_no_alias(qos: int) -> None:
    # As the broker's deliveries (test_a_message_too_large_does_not_set_an_alias): an alias is the broker's to
    # use only once the packet that sets it went out.
    limits = Properties(topic_alias_maximum=2, maximum_packet_size=40)
    client, broker = connected(5, ConnAck(False, 0, limits), auto_topic_aliases=True)
    with pytest.raises(LocalProtocolError, match="maximum packet size"):
        client.publish("t/x", b"." * 40, qos)
    client.publish("t/x", b"small", qos)
    assert [(p.topic, p.properties.topic_alias) for p in broker.received()] == [("t/x", 1)]
