"""BrokerCore's mosquitto.conf service options, sans-IO: client ids (use_username_as_clientid,
allow_zero_length_clientid, auto_id_prefix), persistent_client_expiration, and the notices an operator audits
(subscriptions, drops started, counted and stopped)."""

from __future__ import annotations

from mqtt_cli.core.auth import OPEN_POLICY
from mqtt_cli.core.broker import BrokerConfig, BrokerCore, Notice, NoticeKind
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.packets import Connect, Publish, Subscribe, Subscription, Unsubscribe
from mqtt_cli.core.persistence import SessionRemoved
from mqtt_cli.core.properties import Properties
from tests.core.test_broker import Client

DAY = 86400  # an integer, as the [limits] key is (the compiled core checks the type)


def notices(broker: BrokerCore, kind: NoticeKind | None = None) -> list[Notice]:
    found = [n for n in broker.out.notices if kind is None or n.kind is kind]
    broker.out.notices.clear()
    return found


def test_empty_client_id_refused_when_zero_length_ids_are_not_allowed() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, allow_zero_length_clientid=False))
    ack = Client(broker, 4).connect("", clean_start=True)
    assert ack.reason_code == 2  # 3.1.1: identifier rejected
    ack = Client(broker, 5).connect("", clean_start=True)
    assert ack.reason_code == 0x85


def test_assigned_ids_take_the_auto_id_prefix() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, auto_id_prefix="site-", instance="i"))
    ack = Client(broker, 5).connect("", clean_start=True)
    assert ack.reason_code == 0 and ack.properties.assigned_client_identifier == "site-i-1"
    c = Client(broker, 4)
    c.connect("", clean_start=True)
    assert c.conn.client_id == "site-i-2"


def test_user_name_as_client_id_and_a_client_without_one_refused() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, use_username_as_clientid=True))
    alice = Client(broker, 4)
    alice.connect("whatever", username="alice")
    assert alice.conn.client_id == "alice" and "alice" in broker.sessions and "whatever" not in broker.sessions
    five = Client(broker, 5)
    assert five.connect("", username="bob", clean_start=True).reason_code == 0
    assert five.conn.client_id == "bob"
    nobody = Client(broker, 4)
    assert nobody.connect("nobody").reason_code == 5  # 3.1.1: not authorized
    # Behind a policy, the name it logged in with (OPEN_POLICY checks nothing, as a listener without auth).
    withpolicy = Client(broker, 4)
    withpolicy.conn = broker.open("127.0.0.1:2", 0.0, OPEN_POLICY)
    withpolicy.connect("x", username="carol")
    assert withpolicy.conn.client_id == "carol"


def test_persistent_client_expiration_ends_idle_never_expiring_sessions_and_the_stored_one() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(persistent_client_expiration=14 * DAY)))
    broker.storage.enable_persistence()
    old = Client(broker, 4)
    old.connect("old311", clean_start=False)
    never = Client(broker, 5)
    never.connect("never5", clean_start=False, properties=Properties(session_expiry_interval=0xFFFFFFFF))
    short = Client(broker, 5)
    short.connect("short5", clean_start=False, properties=Properties(session_expiry_interval=60))
    for c in (old, never, short):
        c.subscribe(Subscription("a/#", 1))
        c.lose(0.0)
    broker.storage.changes = []
    broker.tick(61.0)
    assert set(broker.sessions) == {"old311", "never5"}  # its own expiry of 60 s came first
    broker.tick(14 * DAY - 1)
    assert set(broker.sessions) == {"old311", "never5"}
    broker.storage.changes = []
    broker.tick(14 * DAY + 1)
    assert broker.sessions == {}
    assert {c.client_id for c in broker.storage.changes if isinstance(c, SessionRemoved)} == {"old311", "never5"}
    assert broker.router.subscriptions.match("a/b") == []


def test_without_persistent_client_expiration_such_sessions_stay() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    c = Client(broker, 4)
    c.connect("old311", clean_start=False)
    c.lose(0.0)
    broker.tick(1000 * DAY)
    assert "old311" in broker.sessions


def test_subscribe_and_unsubscribe_notices_say_client_filter_qos_and_result() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    c = Client(broker, 5)
    c.connect("auditor")
    notices(broker)
    c.subscribe(Subscription("a/#", 1), Subscription("c", 0))
    c.subscribe(Subscription("a/#", 2))
    subs = notices(broker)
    assert [(n.kind, n.client_id, n.detail) for n in subs] == [
        (NoticeKind.SUBSCRIBE, "auditor", "SUBSCRIBE 'a/#' QoS 1: granted QoS 1"),
        (NoticeKind.SUBSCRIBE, "auditor", "SUBSCRIBE 'c' QoS 0: granted QoS 0"),
        (NoticeKind.SUBSCRIBE, "auditor", "SUBSCRIBE 'a/#' QoS 2: granted QoS 2, replacing the one it had"),
    ]
    c.send(Unsubscribe(2, ("c", "nope")))
    assert [(n.kind, n.detail) for n in notices(broker)] == [
        (NoticeKind.UNSUBSCRIBE, "UNSUBSCRIBE 'c': removed"),
        (NoticeKind.UNSUBSCRIBE, "UNSUBSCRIBE 'nope': no such subscription (0x11)"),
    ]


def test_drops_for_a_full_queue_are_noticed_when_they_start_counted_and_when_they_stop() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, drop_log_interval=10.0, limits=Limits(max_queued_messages=10)))
    slow = Client(broker, 4)
    slow.connect("slow", clean_start=False)
    slow.subscribe(Subscription("f/#", 1))
    slow.lose(0.0)
    pub = Client(broker, 4)
    pub.connect("pub")
    notices(broker)

    def flood(n: int, now: float, start: int) -> None:
        for i in range(n):
            pub.send(Publish("f/x", b"m", qos=1, packet_id=start + i), now)

    flood(25, 1.0, 1)  # 10 queued, 15 dropped: one notice, not fifteen
    dropped = notices(broker, NoticeKind.DROPPED)
    assert [(n.client_id, n.detail) for n in dropped] == [
        ("slow", "outgoing messages are being dropped: its queue is full (max_queued_messages 10)")
    ]
    flood(5, 5.0, 100)
    assert notices(broker, NoticeKind.DROPPED) == []  # within the interval: counted, not said
    flood(3, 12.0, 200)
    (count,) = notices(broker, NoticeKind.DROPPED)
    assert count.detail == "20 more outgoing messages dropped in 11 s (21 since dropping started): its queue is full"
    back = Client(broker, 4)
    back.conn = broker.open("127.0.0.1:3", 20.0)
    got = back.send(Connect("slow", protocol_version=4, clean_start=False), 20.0)
    (stop,) = notices(broker, NoticeKind.DROPPED)
    assert stop.detail == "outgoing messages are no longer dropped: 23 dropped in 19 s"
    assert broker.stats.dropped_queue_full == 23
    assert len([p for p in got if isinstance(p, Publish)]) == 10


def test_a_subscription_the_acl_refuses_is_noticed_with_its_reason_code() -> None:
    from tests.core.test_broker_auth import Conn, policy

    broker = BrokerCore(BrokerConfig(sys_interval=0))
    alice = Conn(broker, policy())
    alice.connect("alice")
    notices(broker)
    alice.send(Subscribe(1, (Subscription("c/#", 1), Subscription("a/#", 1))))
    assert [(n.kind, n.detail, n.reason_code) for n in notices(broker)] == [
        (NoticeKind.REFUSED, "SUBSCRIBE 'c/#' QoS 1: refused by the ACL", 0x87),
        (NoticeKind.SUBSCRIBE, "SUBSCRIBE 'a/#' QoS 1: granted QoS 1", None),
    ]
