"""BrokerCore.reconfigure (a SIGHUP reload): which limits apply at once, which to new connections only."""

from __future__ import annotations

import math

import pytest

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.packets import Publish, Subscription
from tests.core.test_broker import Client, client


def test_queue_limits_apply_at_once_to_existing_sessions() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, instance="a1", version="v", limits=Limits(max_queued_messages=10)))
    sub = client(broker, "s", clean_start=False)
    sub.subscribe(Subscription("t", 1))
    sub.lose()
    broker.reconfigure(
        BrokerConfig(sys_interval=0, instance="other", version="w", limits=Limits(max_queued_messages=2)), 1.0
    )
    assert (broker.config.instance, broker.config.version) == ("a1", "v")  # the run's identity stays
    pub = client(broker, "p")
    for i in range(5):
        pub.send(Publish("t", str(i).encode(), 1, packet_id=i + 1))
    assert broker.stats.publish_dropped == 3
    again = Client(broker)
    again.connect("s", clean_start=False)
    assert [p.payload for p in again.after_connack] == [b"0", b"1"]


def test_keepalive_limit_applies_to_new_connections() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    before = client(broker, "before", keepalive=600)
    broker.reconfigure(BrokerConfig(sys_interval=0, limits=Limits(max_keepalive=60)), 1.0)
    assert before.conn.keepalive == 600 and not before.closed
    late = Client(broker)
    assert late.connect("late", keepalive=600).reason_code != 0  # 3.1.1: refused above the new maximum


def test_sys_interval_change_moves_the_next_update() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    assert broker.tick(5.0) is None
    broker.reconfigure(BrokerConfig(sys_interval=2), 5.0)
    broker.next_sweep = math.inf  # (the keep-alive sweep aside)
    assert broker.output(5.0).deadline == 7.0  # the network layer's ticker wakes by then
    assert broker.tick(5.0) == 7.0


@pytest.mark.parametrize("version", [4, 5])
def test_message_size_limit_drops_and_keeps_the_client(version: int) -> None:
    """mosquitto's message_size_limit: a bigger payload is acknowledged and dropped, the client stays (5.0:
    0x97, where mosquitto sends 0x95, which PUBACK may not carry)."""
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(message_size_limit=10)))
    sub = client(broker, "s", version)
    sub.subscribe(Subscription("t", 1))
    pub = client(broker, "p", version)
    acks = pub.send(Publish("t", b"x" * 11, 1, packet_id=1)) + pub.send(Publish("t", b"x" * 11, 2, packet_id=2))
    assert [(type(a).__name__, a.reason_code) for a in acks] == [("PubAck", 0x97 if version == 5 else 0),
                                                                 ("PubRec", 0x97 if version == 5 else 0)]  # fmt: skip
    assert sub.received() == [] and not pub.closed
    pub.send(Publish("t", b"x" * 10, 1, packet_id=3))
    assert [m.payload for m in sub.received()] == [b"x" * 10]
