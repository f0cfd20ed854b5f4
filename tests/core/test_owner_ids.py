"""Packet identifiers an owner names (an embedded bridge: its broker session's, which a restart keeps), sans-IO:
the flows' ranges, ClientConnection(owner_ids=True) holding PUBREL until the owner's release(), and BrokerCore's
in-process client side (the QoS 2 forward and its PUBREL held for the commit, the flows re-sent as they stood)."""

from __future__ import annotations

from typing import Any

import pytest

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.errors import LocalProtocolError
from mqtt_cli.core.events import PublishAcknowledged, PublishReceived
from mqtt_cli.core.flows import OWN_IDS_FROM, OutgoingFlows
from mqtt_cli.core.packets import ConnAck, PubComp, Publish, PubRec, PubRel, Subscribe, Subscription
from mqtt_cli.core.persistence import DeliveryAdded, DeliveryReleased
from mqtt_cli.core.properties import EMPTY_PROPERTIES
from mqtt_cli.core.session import Message, SubscriptionOptions

from .test_broker import client
from .test_client import connected
from .test_client_manual_ack import reconnect


def test_flows_hand_out_only_their_range_and_take_any_given_identifier() -> None:
    flows = OutgoingFlows(None)
    flows.use_ids(65533, 65535)
    got = [flows.send_fields("t", b"", 1, False, EMPTY_PROPERTIES).packet_id for _ in range(3)]
    assert got == [65533, 65534, 65535]
    with pytest.raises(LocalProtocolError, match="65533 to 65535"):
        flows.send_fields("t", b"", 1, False, EMPTY_PROPERTIES)
    assert flows.send_fields("t", b"", 2, False, EMPTY_PROPERTIES, None, 7).packet_id == 7  # given: any
    with pytest.raises(LocalProtocolError, match="7 is in use"):
        flows.try_send("t", b"", 1, False, EMPTY_PROPERTIES, None, 7)
    flows.puback(65534)
    assert flows.send_fields("t", b"", 1, False, EMPTY_PROPERTIES).packet_id == 65534  # wrapped within the range


def test_owner_ids_client_publishes_under_the_given_identifier_and_its_own_packets_above() -> None:
    client_, broker = connected(5, manual_ack=True, owner_ids=True)
    client_.publish("a", b"1", 1, packet_id=5)
    assert client_.relay("a", b"2", 1, False, None, 6) == 6
    client_.subscribe([Subscription("s", 1)])
    sent = broker.received()
    assert [p.packet_id for p in sent] == [5, 6, OWN_IDS_FROM]
    assert isinstance(sent[2], Subscribe)


def test_owner_ids_pubrel_waits_for_release_and_a_reconnect_keeps_waiting() -> None:
    client_, broker = connected(5, manual_ack=True, owner_ids=True)
    client_.publish("a", b"x", 2, packet_id=9, context="ctx")
    broker.received()
    (event,) = broker.send(PubRec(9))
    assert isinstance(event, PublishReceived) and event.context == "ctx"
    assert broker.received() == []  # no PUBREL before the owner says its store holds the PUBREC
    # A reconnect meanwhile re-sends no PUBREL either; the release then sends it.
    reconnect(client_, broker)
    assert broker.received() == []
    client_.release(9)
    assert broker.received() == [PubRel(9)]
    client_.release(9)  # once only
    assert broker.received() == []
    (done,) = broker.send(PubComp(9))
    assert isinstance(done, PublishAcknowledged) and done.context == "ctx"


def test_owner_ids_release_while_disconnected_goes_with_the_resends() -> None:
    client_, broker = connected(5, manual_ack=True, owner_ids=True)
    client_.publish("a", b"x", 2, packet_id=9)
    broker.received()
    broker.send(PubRec(9))
    client_.receive_data(b"", 1.0)
    client_.events()
    client_.release(9)
    client_.connect()
    broker.received()
    broker.send(ConnAck(session_present=True))
    assert broker.received() == [PubRel(9)]


def test_owner_ids_a_lost_session_sends_again_under_the_same_identifiers() -> None:
    client_, broker = connected(5, manual_ack=True, owner_ids=True)
    client_.publish("a", b"x", 1, packet_id=40)
    broker.received()
    events = reconnect(client_, broker, present=False)
    (accepted,) = events
    assert [p.packet_id for p, _ in accepted.unacknowledged] == [40]  # type: ignore[attr-defined]


class Sink:
    def __init__(self) -> None:
        self.delivered: list[tuple[bytes, int, int | None]] = []
        self.released_ids: list[int] = []
        self.restored: list[tuple[bytes, int]] = []

    def deliver(self, message: Message, qos: int, retain: bool, packet_id: int | None) -> None:
        self.delivered.append((message.payload, qos, packet_id))

    def released(self, packet_id: int) -> None:
        self.released_ids.append(packet_id)

    def restore_released(self, message: Message, retain: bool, packet_id: int) -> None:
        self.restored.append((message.payload, packet_id))

    def taken(self, token: Any) -> None:
        pass


def attach(broker: BrokerCore, sink: Sink) -> Any:
    conn = broker.local.attach("local.bridge", sink, 0.0, receive_maximum=10, bridge="cloud")
    broker.local.subscribe_internal(conn, {"a/#": SubscriptionOptions(2, True, True)}, 0.0)
    broker.local.resume_internal(conn, 0.0)
    return conn


def commit(broker: BrokerCore) -> None:
    held = list(broker.storage.held)
    broker.storage.held.clear()
    broker.storage.changes = []
    broker.storage.release(held)


def test_a_bridge_session_never_hands_out_the_clients_own_identifiers() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    sink = Sink()
    conn = attach(broker, sink)
    conn.session.outgoing.use_ids(OWN_IDS_FROM - 2, OWN_IDS_FROM - 1)  # as attach did, narrower: the wrap shows
    pub = client(broker, "pub")
    for i in range(3):
        pub.send(Publish("a/x", b"%d" % i, 1, packet_id=i + 1))
        broker.local.acknowledge_internal(conn, sink.delivered[-1][2], 1.0)  # type: ignore[arg-type]
    assert [d[2] for d in sink.delivered] == [OWN_IDS_FROM - 2, OWN_IDS_FROM - 1, OWN_IDS_FROM - 2]


def test_with_persistence_a_qos2_forward_and_its_pubrel_wait_for_their_commits() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    broker.storage.enable_persistence()
    sink = Sink()
    conn = attach(broker, sink)
    pub = client(broker, "pub")
    broker.storage.changes = []
    pub.send(Publish("a/x", b"q2", 2, packet_id=1))
    assert sink.delivered == []  # its packet identifier is not on file yet
    assert [type(c) for c in broker.storage.changes] == [DeliveryAdded]  # sent with it: its packet identifier
    pid = broker.storage.changes[0].packet_id  # type: ignore[union-attr]
    commit(broker)
    assert sink.delivered == [(b"q2", 2, pid)]
    assert broker.local.received_internal(conn, pid)
    assert [type(c) for c in broker.storage.changes] == [DeliveryReleased] and sink.released_ids == []
    commit(broker)
    assert sink.released_ids == [pid]
    assert not broker.local.received_internal(conn, pid)  # no flow awaits PUBREC under it now: the caller releases
    # Detached before PUBCOMP: the next attach re-sends only the PUBREL, under the same identifier.
    broker.local.detach(conn, 2.0)
    again = Sink()
    conn = attach(broker, again)
    assert again.restored == [(b"q2", pid)] and again.delivered == []
    broker.local.acknowledge_internal(conn, pid, 3.0)
    assert len(conn.session.outgoing) == 0


def test_without_persistence_nothing_waits() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    sink = Sink()
    conn = attach(broker, sink)
    pub = client(broker, "pub")
    pub.send(Publish("a/x", b"q2", 2, packet_id=1))
    ((_, _, pid),) = sink.delivered
    assert pid is not None
    assert broker.local.received_internal(conn, pid) and sink.released_ids == [pid]
