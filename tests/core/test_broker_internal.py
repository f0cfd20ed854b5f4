"""BrokerCore's in-process clients (an embedded bridge's local side), sans-IO: messages in and out, no bytes."""

from __future__ import annotations

from typing import Any

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.packets import Publish
from mqtt_cli.core.persistence import DeliveryAdded, DeliveryDone, SessionSaved
from mqtt_cli.core.properties import EMPTY_PROPERTIES
from mqtt_cli.core.session import Message, SubscriptionOptions

from .test_broker import client


class Sink:
    def __init__(self) -> None:
        self.delivered: list[tuple[str, bytes, int, bool, int | None]] = []
        self.taken_tokens: list[Any] = []

    def deliver(self, message: Message, qos: int, retain: bool, packet_id: int | None) -> None:
        self.delivered.append((message.topic, message.payload, qos, retain, packet_id))

    def taken(self, token: Any) -> None:
        self.taken_tokens.append(token)


def attached(broker: BrokerCore, sink: Sink, filters: dict[str, int], window: int = 3) -> Any:
    conn = broker.local.attach("local.bridge", sink, 0.0, receive_maximum=window)
    broker.local.subscribe_internal(conn, {f: SubscriptionOptions(q, True, True) for f, q in filters.items()}, 0.0)
    broker.local.resume_internal(conn, 0.0)
    return conn


def test_deliveries_are_messages_bounded_by_the_window_until_acknowledged() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    sink = Sink()
    conn = attached(broker, sink, {"a/#": 1})
    pub = client(broker, "pub")
    for i in range(5):
        pub.send(Publish("a/x", b"%d" % i, 1, packet_id=i + 1))
    assert [d[1] for d in sink.delivered] == [b"0", b"1", b"2"]  # the window: 3 in flight, 2 queued
    assert all(d[2] == 1 and d[4] is not None for d in sink.delivered) and conn.out == bytearray()
    assert broker.stats.publish_sent_qos[1] == 3
    broker.local.acknowledge_internal(conn, sink.delivered[0][4], 1.0)
    assert [d[1] for d in sink.delivered] == [b"0", b"1", b"2", b"3"]
    for d in list(sink.delivered[1:]):
        broker.local.acknowledge_internal(conn, d[4], 1.0)
    assert [d[1] for d in sink.delivered] == [b"0", b"1", b"2", b"3", b"4"]
    assert len(conn.session.outgoing) == 1


def test_no_local_and_retained_on_subscribe() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    pub = client(broker, "pub")
    pub.send(Publish("r/kept", b"old", 0, retain=True))
    sink = Sink()
    conn = attached(broker, sink, {"r/#": 1})
    assert sink.delivered == [("r/kept", b"old", 0, True, None)]
    watcher = client(broker, "watch")
    watcher.subscribe("r/#")
    assert broker.local.publish_internal(conn, "r/in", b"from-remote", 1, False, EMPTY_PROPERTIES, 1.0, token=7)
    assert len(sink.delivered) == 1  # not back to the bridge itself (no local)
    assert [p.payload for p in watcher.received()] == [b"from-remote"]


def test_sys_is_refused_from_the_remote_but_allowed_for_notifications() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    conn = attached(broker, Sink(), {})
    watcher = client(broker, "watch")
    watcher.subscribe("$SYS/#")
    assert broker.local.publish_internal(conn, "$SYS/x", b"no", 1, False, EMPTY_PROPERTIES, 1.0, token=1)
    assert watcher.received() == [] and broker.stats.rejected == {0x87: 1}
    broker.local.publish_internal(conn, "$SYS/x", b"yes", 1, True, EMPTY_PROPERTIES, 1.0, system=True)
    assert [p.payload for p in watcher.received()] == [b"yes"]


def test_with_persistence_taken_after_the_commit_and_deliveries_stored() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    broker.storage.enable_persistence()
    sink = Sink()
    conn = attached(broker, sink, {"out/#": 1})
    assert any(isinstance(c, SessionSaved) and c.client_id == "local.bridge" for c in broker.storage.changes)
    # From the remote: not taken until the commit is done.
    assert broker.local.publish_internal(conn, "in/x", b"m", 1, False, EMPTY_PROPERTIES, 1.0, token=("pid", 1)) is False
    held = list(broker.storage.held)
    broker.storage.held.clear()
    broker.storage.release(held)
    assert sink.taken_tokens == [("pid", 1)]
    # For the remote: stored as a delivery of the bridge's session, done when the remote acknowledged it.
    pub = client(broker, "pub")
    broker.storage.changes.clear()
    pub.send(Publish("out/y", b"o", 1, packet_id=1))
    # Added as it is sent, with its packet identifier, in one record (re-handed with it after a restart).
    (added,) = broker.storage.changes
    assert isinstance(added, DeliveryAdded) and added.packet_id == sink.delivered[-1][4]
    broker.local.acknowledge_internal(conn, sink.delivered[-1][4], 2.0)
    assert isinstance(broker.storage.changes[-1], DeliveryDone)


def test_detach_keeps_the_session_and_a_new_attach_resends_in_flight_first() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    sink = Sink()
    conn = attached(broker, sink, {"a/#": 2}, window=1)
    pub = client(broker, "pub")
    pub.send(Publish("a/1", b"1", 2, packet_id=1))
    pub.send(Publish("a/2", b"2", 1, packet_id=2))
    broker.local.detach(conn, 3.0)
    pub.send(Publish("a/3", b"3", 1, packet_id=3))  # queued for the session meanwhile
    again = Sink()
    conn = attached(broker, again, {"a/#": 2}, window=5)
    assert [(d[1], d[2]) for d in again.delivered] == [(b"1", 2), (b"2", 1), (b"3", 1)]
    broker.local.acknowledge_internal(conn, again.delivered[0][4], 4.0)  # QoS 2: the flow ends at once
    assert len(conn.session.outgoing) == 2
    broker.local.detach(conn, 5.0, forget=True)
    assert "local.bridge" not in broker.sessions and len(broker.router.subscriptions) == 0
