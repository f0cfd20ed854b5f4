"""BrokerCore.reconfigure (a SIGHUP reload): which limits apply at once, which to new connections only."""

from __future__ import annotations

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.packets import Publish, Subscription
from tests.core.test_broker import Client, client


def test_queue_limits_apply_at_once_to_existing_sessions() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, max_queued_messages=10, instance="a1", version="v"))
    sub = client(broker, "s", clean_start=False)
    sub.subscribe(Subscription("t", 1))
    sub.lose()
    broker.reconfigure(BrokerConfig(sys_interval=0, max_queued_messages=2, instance="other", version="w"), 1.0)
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
    broker.reconfigure(BrokerConfig(sys_interval=0, max_keepalive=60), 1.0)
    assert before.conn.keepalive == 600 and not before.closed
    late = Client(broker)
    assert late.connect("late", keepalive=600).reason_code != 0  # 3.1.1: refused above the new maximum


def test_sys_interval_change_moves_the_next_update() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    assert broker.tick(5.0) is None
    broker.reconfigure(BrokerConfig(sys_interval=2), 5.0)
    assert broker.timers_changed
    assert broker.tick(5.0) == 7.0
