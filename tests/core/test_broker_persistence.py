"""BrokerCore's side of persistence (core/persistence.py), without I/O: the change records it emits, the
acknowledgements it holds until the network layer says the commit is done, and a restore from stored records.
The store itself and the promise on real sockets: tests/broker/test_persistence.py."""

from __future__ import annotations

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.packets import PubAck, PubComp, Publish, PubRec, PubRel, Subscription
from mqtt_cli.core.persistence import (
    DeliveryAdded,
    DeliveryDone,
    DeliveryReleased,
    IncomingAdded,
    IncomingReleased,
    RetainedSet,
    SessionRemoved,
    SessionSaved,
    StoredDelivery,
    StoredSession,
)
from mqtt_cli.core.properties import Properties
from mqtt_cli.core.session import SubscriptionOptions
from tests.core.test_broker import Client


def test_off_by_default_nothing_recorded_acks_written_at_once() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    pub = Client(broker)
    pub.connect("p")
    assert pub.send(Publish("t", b"x", 1, packet_id=7)) == [PubAck(7)]
    assert broker.storage.changes is None and not broker.storage.held


def test_changes_recorded_and_puback_held_until_released() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    broker.storage.enable_persistence()
    sub = Client(broker)
    sub.connect("keeper", clean_start=False)
    sub.subscribe(Subscription("q/#", 1))
    sub.lose()
    pub = Client(broker)
    pub.connect("p")
    assert broker.storage.changes is not None
    broker.storage.changes.clear()
    assert pub.send(Publish("q/x", b"m", 1, True, packet_id=3)) == []  # held: nothing written yet
    kinds = [type(c) for c in broker.storage.changes]
    assert kinds == [RetainedSet, DeliveryAdded]
    added = broker.storage.changes[1]
    assert isinstance(added, DeliveryAdded) and added.client_id == "keeper"
    assert [data for _, data in broker.storage.held] == [b"\x40\x02\x00\x03"]
    held = list(broker.storage.held)
    broker.storage.held.clear()
    broker.storage.release(held)
    assert pub.received() == [PubAck(3)]

    # The subscriber comes back and acknowledges: the delivery is done, its row named.
    broker.storage.changes.clear()
    sub = Client(broker)
    sub.connect("keeper", clean_start=False)
    publish = next(p for p in sub.after_connack if isinstance(p, Publish))
    sub.send(PubAck(publish.packet_id))  # type: ignore[arg-type]
    assert DeliveryDone("keeper", added.row) in broker.storage.changes
    assert any(isinstance(c, SessionSaved) for c in broker.storage.changes)

    # A clean start ends the stored session.
    broker.storage.changes.clear()
    sub.lose()
    Client(broker).connect("keeper", clean_start=True)
    assert SessionRemoved("keeper") in broker.storage.changes


def test_restore_gives_back_sessions_subscriptions_and_queues() -> None:
    source = BrokerCore(BrokerConfig(sys_interval=0))
    source.storage.enable_persistence()
    pub = Client(source)
    pub.connect("p")
    pub.send(Publish("r/t", b"kept", 1, True, packet_id=1))
    assert source.storage.changes is not None
    message = next(c.message for c in source.storage.changes if isinstance(c, RetainedSet))

    broker = BrokerCore(BrokerConfig(sys_interval=0))
    subscriptions = (("q/#", SubscriptionOptions(1)),)
    stored = StoredSession("keeper", 4, 0xFFFFFFFF, None, subscriptions, (StoredDelivery(41, message, 1, False, ()),))
    broker.storage.restore([stored], [message], 5.0)
    broker.storage.enable_persistence()
    sub = Client(broker)
    assert sub.connect("keeper", clean_start=False).session_present
    assert [(p.topic, p.payload) for p in sub.after_connack if isinstance(p, Publish)] == [("r/t", b"kept")]
    other = Client(broker)
    other.connect("o")
    assert [p.payload for p in other.subscribe("r/#") if isinstance(p, Publish)] == [b"kept"]
    # The restored subscription routes new messages, whose rows come after the restored ones.
    pub = Client(broker)
    pub.connect("p2")
    pub.send(Publish("q/y", b"new", 1, packet_id=2))
    assert broker.storage.changes is not None
    rows = [c.row for c in broker.storage.changes if isinstance(c, DeliveryAdded)]
    assert rows == [42]



def _release(broker: BrokerCore) -> None:
    held = list(broker.storage.held)
    broker.storage.held.clear()
    broker.storage.release(held)


def test_incoming_qos2_pubcomp_held_until_the_release_is_recorded() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    broker.storage.enable_persistence()
    pub = Client(broker, 5)
    pub.connect("p2", clean_start=False, properties=Properties(session_expiry_interval=60))
    assert broker.storage.changes is not None
    broker.storage.changes.clear()
    assert pub.send(Publish("t", b"x", 2, packet_id=9)) == []  # PUBREC held
    assert IncomingAdded("p2", 9) in broker.storage.changes
    _release(broker)
    assert pub.received() == [PubRec(9)]
    broker.storage.changes.clear()
    assert pub.send(PubRel(9)) == []  # PUBCOMP held
    assert broker.storage.changes == [IncomingReleased("p2", 9)]
    _release(broker)
    assert pub.received() == [PubComp(9)]


def test_outgoing_qos2_held_until_its_packet_id_is_recorded_and_sent_without_an_alias() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    broker.storage.enable_persistence()
    sub = Client(broker, 5)
    sub.connect("s2", clean_start=False,
                properties=Properties(session_expiry_interval=60, topic_alias_maximum=5))  # fmt: skip
    sub.subscribe(Subscription("a/#", 2))
    pub = Client(broker, 5)
    pub.connect("p")
    assert broker.storage.changes is not None
    broker.storage.changes.clear()
    pub.send(Publish("a/b", b"two", 2, packet_id=1))
    pub.send(Publish("a/b", b"zero", 0))
    zero = sub.received()
    assert [(p.payload, p.topic) for p in zero] == [(b"zero", "a/b")]  # QoS 0 not held, topic in full
    sent = [c for c in broker.storage.changes if isinstance(c, DeliveryAdded) and c.packet_id >= 0]
    assert len(sent) == 1 and sent[0].client_id == "s2"
    _release(broker)
    (two,) = [p for p in sub.received() if isinstance(p, Publish)]
    assert two.payload == b"two" and two.topic == "a/b" and two.packet_id == sent[0].packet_id
    broker.storage.changes.clear()
    assert sub.send(PubRec(two.packet_id)) == []  # PUBREL held  # type: ignore[arg-type]
    assert [type(c) for c in broker.storage.changes] == [DeliveryReleased]
    _release(broker)
    assert sub.received() == [PubRel(two.packet_id)]  # type: ignore[arg-type]
    broker.storage.changes.clear()
    sub.send(PubComp(two.packet_id))  # type: ignore[arg-type]
    assert [type(c) for c in broker.storage.changes] == [DeliveryDone]


def test_store_failing_refuses_5_0_qos1_and_qos2_with_quota_exceeded() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    broker.storage.enable_persistence()
    broker.storage.failing = True
    pub5 = Client(broker, 5)
    pub5.connect("p5")
    assert pub5.send(Publish("t", b"x", 1, packet_id=1)) == [PubAck(1, 0x97)]
    assert pub5.send(Publish("t", b"x", 2, packet_id=2)) == [PubRec(2, 0x97)]
    pub4 = Client(broker, 4)
    pub4.connect("p4")
    assert pub4.send(Publish("t", b"x", 1, packet_id=1)) == []  # 3.1.1: taken, its PUBACK withheld
    assert broker.stats.rejected[0x97] == 2
