"""BrokerCore's side of persistence (core/persistence.py), without I/O: the change records it emits, the
acknowledgements it holds until the network layer says the commit is done, and a restore from stored records.
The store itself and the promise on real sockets: tests/broker/test_persistence.py."""

from __future__ import annotations

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.packets import PubAck, Publish, Subscription
from mqtt_cli.core.persistence import (
    DeliveryAdded,
    DeliveryDone,
    RetainedSet,
    SessionRemoved,
    SessionSaved,
    StoredDelivery,
    StoredSession,
)
from mqtt_cli.core.session import SubscriptionOptions
from tests.core.test_broker import Client


def test_off_by_default_nothing_recorded_acks_written_at_once() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    pub = Client(broker)
    pub.connect("p")
    assert pub.send(Publish("t", b"x", 1, packet_id=7)) == [PubAck(7)]
    assert broker.changes is None and not broker.held


def test_changes_recorded_and_puback_held_until_released() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    broker.enable_persistence()
    sub = Client(broker)
    sub.connect("keeper", clean_start=False)
    sub.subscribe(Subscription("q/#", 1))
    sub.lose()
    pub = Client(broker)
    pub.connect("p")
    assert broker.changes is not None
    broker.changes.clear()
    assert pub.send(Publish("q/x", b"m", 1, True, packet_id=3)) == []  # held: nothing written yet
    kinds = [type(c) for c in broker.changes]
    assert kinds == [RetainedSet, DeliveryAdded]
    added = broker.changes[1]
    assert isinstance(added, DeliveryAdded) and added.client_id == "keeper"
    assert [data for _, data in broker.held] == [b"\x40\x02\x00\x03"]
    held = list(broker.held)
    broker.held.clear()
    broker.release(held)
    assert pub.received() == [PubAck(3)]

    # The subscriber comes back and acknowledges: the delivery is done, its row named.
    broker.changes.clear()
    sub = Client(broker)
    sub.connect("keeper", clean_start=False)
    publish = next(p for p in sub.after_connack if isinstance(p, Publish))
    sub.send(PubAck(publish.packet_id))  # type: ignore[arg-type]
    assert DeliveryDone("keeper", added.row) in broker.changes
    assert any(isinstance(c, SessionSaved) for c in broker.changes)

    # A clean start ends the stored session.
    broker.changes.clear()
    sub.lose()
    Client(broker).connect("keeper", clean_start=True)
    assert SessionRemoved("keeper") in broker.changes


def test_restore_gives_back_sessions_subscriptions_and_queues() -> None:
    source = BrokerCore(BrokerConfig(sys_interval=0))
    source.enable_persistence()
    pub = Client(source)
    pub.connect("p")
    pub.send(Publish("r/t", b"kept", 1, True, packet_id=1))
    assert source.changes is not None
    message = next(c.message for c in source.changes if isinstance(c, RetainedSet))

    broker = BrokerCore(BrokerConfig(sys_interval=0))
    subscriptions = (("q/#", SubscriptionOptions(1)),)
    stored = StoredSession("keeper", 4, 0xFFFFFFFF, None, subscriptions, (StoredDelivery(41, message, 1, False, ()),))
    broker.restore([stored], [message], 5.0)
    broker.enable_persistence()
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
    assert broker.changes is not None
    rows = [c.row for c in broker.changes if isinstance(c, DeliveryAdded)]
    assert rows == [42]

