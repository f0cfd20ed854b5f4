"""BrokerCore driven directly: bytes in, bytes out, time by hand."""

from __future__ import annotations

from typing import Any

import pytest

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.outbox import NoticeKind
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
    Will,
)
from mqtt_cli.core.properties import Properties
from mqtt_cli.core.reader import PacketReader


class Client:
    """One connection to the broker core, speaking packets."""

    def __init__(self, broker: BrokerCore, version: int = 4, now: float = 0.0) -> None:
        self.broker = broker
        self.version = version
        self.conn = broker.open("127.0.0.1:1", now)
        self.reader = PacketReader(version)
        self.after_connack: list[Any] = []  # what came in the same read as the CONNACK (re-sends, queue)

    def send(self, packet: Any, now: float = 0.0) -> list[Any]:
        version = packet.protocol_version if isinstance(packet, Connect) else self.version
        self.broker.receive(self.conn, encode(packet, version), now)
        return self.received()

    def send_raw(self, data: bytes, now: float = 0.0) -> list[Any]:
        self.broker.receive(self.conn, data, now)
        return self.received()

    def received(self) -> list[Any]:
        data = bytes(self.conn.out)
        self.conn.out.clear()
        return self.reader.feed(data)

    def connect(self, client_id: str, now: float = 0.0, **kw: Any) -> ConnAck:
        ack, *self.after_connack = self.send(Connect(client_id, protocol_version=self.version, **kw), now)
        assert isinstance(ack, ConnAck)
        return ack

    def subscribe(self, *subs: Subscription | str, pid: int = 1, props: Properties | None = None) -> list[Any]:
        s = tuple(Subscription(x) if isinstance(x, str) else x for x in subs)
        return self.send(Subscribe(pid, s, props or Properties()))

    def lose(self, now: float = 0.0) -> None:
        self.broker.connection_lost(self.conn, now)

    @property
    def closed(self) -> bool:
        return self.conn.close_requested


@pytest.fixture
def broker() -> BrokerCore:
    return BrokerCore(BrokerConfig(sys_interval=0))


def client(broker: BrokerCore, client_id: str, version: int = 4, **kw: Any) -> Client:
    c = Client(broker, version)
    ack = c.connect(client_id, **kw)
    assert ack.reason_code == 0, ack
    return c


@pytest.mark.parametrize("version", [3, 4, 5])
def test_connect_publish_subscribe_each_version(broker: BrokerCore, version: int) -> None:
    sub = client(broker, "sub", version)
    assert sub.subscribe(Subscription("a/+", 2)) == [SubAck(1, (2,))]
    pub = client(broker, "pub", version)
    assert pub.send(Publish("a/b", b"0")) == []
    assert pub.send(Publish("a/b", b"1", 1, packet_id=5)) == [PubAck(5)]
    assert pub.send(Publish("a/b", b"2", 2, packet_id=6)) == [PubRec(6)]
    assert pub.send(PubRel(6)) == [PubComp(6)]
    got = sub.received()
    assert [(p.payload, p.qos) for p in got] == [(b"0", 0), (b"1", 1), (b"2", 2)]
    assert [p.packet_id for p in got] == [None, 1, 2]


def test_delivery_qos_is_the_minimum(broker: BrokerCore) -> None:
    sub = client(broker, "sub")
    sub.subscribe(Subscription("t", 1))
    pub = client(broker, "pub")
    pub.send(Publish("t", b"x", 2, packet_id=1))
    (p,) = sub.received()
    assert p.qos == 1


def test_qos2_exactly_once_on_resend(broker: BrokerCore) -> None:
    sub = client(broker, "sub")
    sub.subscribe(Subscription("t", 2))
    pub = client(broker, "pub")
    assert pub.send(Publish("t", b"x", 2, packet_id=9)) == [PubRec(9)]
    assert pub.send(Publish("t", b"x", 2, dup=True, packet_id=9)) == [PubRec(9)]
    assert pub.send(PubRel(9)) == [PubComp(9)]
    assert len(sub.received()) == 1


def test_overlapping_subscriptions_deliver_once_at_highest_qos_with_every_identifier(broker: BrokerCore) -> None:
    sub = client(broker, "sub", 5)
    sub.subscribe(Subscription("a/#", 0), props=Properties(subscription_identifier=1), pid=1)
    sub.subscribe(Subscription("a/b", 2), props=Properties(subscription_identifier=2), pid=2)
    pub = client(broker, "pub", 5)
    pub.send(Publish("a/b", b"x", 2, packet_id=1))
    (p,) = sub.received()
    assert p.qos == 2 and sorted(p.properties.subscription_identifiers) == [1, 2]


def test_retained_store_replace_delete(broker: BrokerCore) -> None:
    pub = client(broker, "pub")
    pub.send(Publish("r/1", b"a", 1, True, packet_id=1))
    pub.send(Publish("r/1", b"b", 0, True))
    pub.send(Publish("r/2", b"c", 0, True))
    sub = client(broker, "sub")
    got = sub.subscribe(Subscription("r/+", 1))
    assert got[0] == SubAck(1, (1,))
    assert sorted((p.topic, p.payload, p.retain) for p in got[1:]) == [("r/1", b"b", True), ("r/2", b"c", True)]
    pub.send(Publish("r/1", b"", 0, True))  # delete
    live = sub.received()
    assert [(p.payload, p.retain) for p in live] == [(b"", False)]  # live delivery: retain flag cleared
    late = client(broker, "late")
    assert [p.topic for p in late.subscribe("r/#")[1:]] == ["r/2"]


def test_retain_handling_and_retain_as_published(broker: BrokerCore) -> None:
    pub = client(broker, "pub", 5)
    pub.send(Publish("t", b"kept", 0, True))
    sub = client(broker, "sub", 5)
    assert len(sub.subscribe(Subscription("t", retain_handling=2))) == 1  # SUBACK only
    assert len(sub.subscribe(Subscription("t", retain_handling=1), pid=2)) == 1  # not a new subscription
    assert len(sub.subscribe(Subscription("u", retain_handling=1), pid=3)) == 1  # new, nothing retained
    assert len(sub.subscribe(Subscription("t", retain_handling=0), pid=4)) == 2  # re-sent on rh 0
    sub.subscribe(Subscription("t", retain_as_published=True), pid=5)
    sub.received()
    pub.send(Publish("t", b"new", 0, True))
    (p,) = sub.received()
    assert p.retain is True


def test_no_local(broker: BrokerCore) -> None:
    me = client(broker, "me", 5)
    me.subscribe(Subscription("t", no_local=True))
    me.send(Publish("t", b"x"))
    assert me.received() == []
    other = client(broker, "other", 5)
    other.send(Publish("t", b"y"))
    assert [p.payload for p in me.received()] == [b"y"]


def test_bridge_flag_means_no_local_and_retain_as_published(broker: BrokerCore) -> None:
    # mosquitto's bridge flag (3.1.1 protocol level | 0x80): a bridge's own messages are not echoed to it and
    # retained flags reach it as published.
    bridge = Client(broker, 4)
    bridge.connect("bridge", bridge=True)
    bridge.subscribe(Subscription("t/#", 0))
    bridge.send(Publish("t/a", b"mine", retain=True))
    assert bridge.received() == []
    other = client(broker, "other")
    other.send(Publish("t/b", b"theirs", retain=True))
    (p,) = bridge.received()
    assert (p.payload, p.retain) == (b"theirs", True)
    plain = client(broker, "plain")
    plain.subscribe(Subscription("t/#", 0))
    plain.received()
    other.send(Publish("t/c", b"live", retain=True))
    (q,) = plain.received()
    assert q.retain is False


def watcher(broker: BrokerCore, topic: str = "will/#") -> Client:
    w = client(broker, f"watch-{topic}")
    w.subscribe(Subscription(topic, 1))
    return w


def test_will_on_connection_loss_not_on_disconnect(broker: BrokerCore) -> None:
    w = watcher(broker)
    a = client(broker, "a", will=Will("will/a", b"gone", 1))
    a.lose()
    assert [p.payload for p in w.received()] == [b"gone"]
    b = client(broker, "b", will=Will("will/b", b"gone"))
    b.send(Disconnect())
    b.lose()
    assert w.received() == []


def test_will_on_disconnect_0x04_and_protocol_error(broker: BrokerCore) -> None:
    w = watcher(broker)
    a = client(broker, "a", 5, will=Will("will/a", b"1"))
    a.send(Disconnect(0x04))
    assert [p.payload for p in w.received()] == [b"1"]
    b = client(broker, "b", 5, will=Will("will/b", b"2"))
    got = b.send_raw(bytes.fromhex("30 04 00 01 23 00"))  # PUBLISH to '#'
    assert got == [Disconnect(0x90, Properties(reason_string=got[0].properties.reason_string))]
    assert b.closed
    assert [p.payload for p in w.received()] == [b"2"]


def test_keepalive_expiry_publishes_will(broker: BrokerCore) -> None:
    w = watcher(broker)
    a = client(broker, "a", keepalive=10, will=Will("will/a", b"silent"))
    assert a.conn.keepalive_deadline() == 15.0
    broker.keepalive_expired(a.conn, 15.0)
    assert [p.payload for p in w.received()] == [b"silent"]


def test_will_delay_cancelled_by_reconnect(broker: BrokerCore) -> None:
    w = watcher(broker)
    will = Will("will/a", b"late", 0, False, Properties(will_delay_interval=30))
    a = client(broker, "a", 5, clean_start=False, properties=Properties(session_expiry_interval=300), will=will)
    a.lose(0)
    assert broker.tick(10) == 30
    assert w.received() == []
    client(broker, "a", 5, clean_start=False, properties=Properties(session_expiry_interval=300))
    broker.tick(40)
    assert w.received() == []


def test_will_delay_elapses(broker: BrokerCore) -> None:
    w = watcher(broker)
    will = Will("will/a", b"late", 0, False, Properties(will_delay_interval=30))
    a = client(broker, "a", 5, properties=Properties(session_expiry_interval=300), will=will)
    a.lose(0)
    broker.tick(29.9)
    assert w.received() == []
    broker.tick(30)
    assert [p.payload for p in w.received()] == [b"late"]


def test_will_sent_at_once_when_the_session_ends_first(broker: BrokerCore) -> None:
    w = watcher(broker)
    will = Will("will/a", b"ended", 0, False, Properties(will_delay_interval=60))
    a = client(broker, "a", 5, properties=Properties(session_expiry_interval=10), will=will)
    a.lose(0)
    broker.tick(10)
    assert [p.payload for p in w.received()] == [b"ended"]
    assert "a" not in broker.sessions


def test_take_over_v5(broker: BrokerCore) -> None:
    w = watcher(broker)
    old = client(broker, "dup", 5, will=Will("will/dup", b"taken"))
    new = Client(broker, 5)
    assert new.connect("dup").reason_code == 0
    (d,) = old.received()
    assert isinstance(d, Disconnect) and d.reason_code == 0x8E and old.closed
    assert [p.payload for p in w.received()] == [b"taken"]


def test_a_close_the_broker_chose_is_logged_as_a_disconnection_with_its_reason(broker: BrokerCore) -> None:
    """A take-over or an operator's disconnection is no fault: `disconnected` with its reason code, not `error`;
    a protocol error stays `error`."""
    client(broker, "dup", 5)
    Client(broker, 5).connect("dup")  # takes the session over: the first connection gets 0x8E
    client(broker, "kicked", 5)
    assert broker.queries.disconnect_client("kicked", 0.0, "by the admin API")
    bad = client(broker, "bad", 5)
    bad.send_raw(b"\xf0\x00")  # reserved packet type: malformed
    notices = [(n.kind, n.client_id, n.reason_code) for n in broker.out.notices if n.kind != NoticeKind.CONNECTED]
    assert notices == [
        (NoticeKind.DISCONNECTED, "dup", 0x8E),
        (NoticeKind.DISCONNECTED, "kicked", 0x98),
        (NoticeKind.ERROR, "bad", 0x82),
    ]


def test_persistent_session_queue_and_resend(broker: BrokerCore) -> None:
    sub = client(broker, "s", clean_start=False)
    sub.subscribe(Subscription("t", 2))
    pub = client(broker, "p")
    pub.send(Publish("t", b"1", 1, packet_id=1))
    pub.send(Publish("t", b"2", 2, packet_id=2))
    pub.send(PubRel(2))
    first = sub.received()
    assert [p.payload for p in first] == [b"1", b"2"]
    sub.send(PubRec(first[1].packet_id))  # -> PUBREL from the broker, then the connection drops
    sub.lose()
    pub.send(Publish("t", b"3", 1, packet_id=3))  # queued while offline
    pub.send(Publish("t", b"4", 0))  # QoS 0 is not queued
    again = Client(broker)
    assert again.connect("s", clean_start=False).session_present is True
    got = again.after_connack
    assert got[0] == Publish("t", b"1", 1, dup=True, packet_id=first[0].packet_id)
    assert got[1] == PubRel(first[1].packet_id)
    assert [p.payload for p in got[2:]] == [b"3"]


def test_clean_session_discards(broker: BrokerCore) -> None:
    sub = client(broker, "s", clean_start=False)
    sub.subscribe("t")
    sub.lose()
    again = Client(broker)
    assert again.connect("s", clean_start=True).session_present is False
    assert len(broker.router.subscriptions) == 0


def test_offline_queue_limit_counts_drops() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_queued_messages=3)))
    sub = client(broker, "s", clean_start=False)
    sub.subscribe(Subscription("t", 1))
    sub.lose()
    pub = client(broker, "p")
    for i in range(5):
        pub.send(Publish("t", str(i).encode(), 1, packet_id=i + 1))
    assert broker.stats.publish_dropped == 2
    again = Client(broker)
    again.connect("s", clean_start=False)
    assert [p.payload for p in again.after_connack] == [b"0", b"1", b"2"]


def test_inflight_window_queues_then_pumps() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_inflight=2)))
    sub = client(broker, "s")
    sub.subscribe(Subscription("t", 1))
    pub = client(broker, "p")
    for i in range(4):
        pub.send(Publish("t", str(i).encode(), 1, packet_id=i + 1))
    got = sub.received()
    assert [p.payload for p in got] == [b"0", b"1"]
    assert [p.payload for p in sub.send(PubAck(got[0].packet_id))] == [b"2"]


def test_shared_subscription_round_robin(broker: BrokerCore) -> None:
    a = client(broker, "a")
    b = client(broker, "b", 5)
    a.subscribe("$share/g/jobs/+")
    b.subscribe("$share/g/jobs/+")
    pub = client(broker, "p")
    for i in range(4):
        pub.send(Publish("jobs/x", str(i).encode()))
    got_a = [p.payload for p in a.received()]
    got_b = [p.payload for p in b.received()]
    assert sorted(got_a + got_b) == [b"0", b"1", b"2", b"3"] and len(got_a) == len(got_b) == 2


def test_shared_subscription_takes_turns_in_client_id_order(broker: BrokerCore) -> None:
    members = {cid: client(broker, cid) for cid in ("m3", "m1", "m2")}  # subscribing in another order
    for c in members.values():
        c.subscribe("$share/g/jobs")
    pub = client(broker, "p")
    order = []
    for i in range(7):
        pub.send(Publish("jobs", str(i).encode()))
        order += [cid for cid, c in members.items() if c.received()]
    assert order == ["m1", "m2", "m3", "m1", "m2", "m3", "m1"]
    # A member that leaves the group is skipped; the turn goes on from the one chosen last (m1).
    members["m2"].send(Unsubscribe(2, ("$share/g/jobs",)))
    for i in range(3):
        pub.send(Publish("jobs", str(i).encode()))
        order += [cid for cid, c in members.items() if c.received()]
    assert order[7:] == ["m3", "m1", "m3"]


def test_shared_subscription_skips_offline_members_and_queues_when_all_are(broker: BrokerCore) -> None:
    a = client(broker, "a", clean_start=False)
    b = client(broker, "b")
    for c in (a, b):
        c.subscribe(Subscription("$share/g/jobs", 1))
    a.lose()
    pub = client(broker, "p")
    for i in range(2):
        pub.send(Publish("jobs", str(i).encode(), 1, packet_id=i + 1))
    assert [m.payload for m in b.received()] == [b"0", b"1"]  # a is offline: b takes both
    b.lose()
    pub.send(Publish("jobs", b"2", 1, packet_id=3))  # nobody connected: a's session keeps it
    again = Client(broker)
    again.connect("a", clean_start=False)
    assert [m.payload for m in again.after_connack] == [b"2"]


@pytest.mark.parametrize("leave", ["unsubscribe", "disconnect", "lost"])
def test_shared_group_and_its_turn_go_with_its_last_member(broker: BrokerCore, leave: str) -> None:
    a = client(broker, "a")
    b = client(broker, "b")
    for c in (a, b):
        c.subscribe("$share/g/jobs", "$share/h/jobs")
    client(broker, "p").send(Publish("jobs", b"x"))
    assert set(broker.router.shared.groups) == {"$share/g/jobs", "$share/h/jobs"}
    assert broker.router.shared.groups["$share/g/jobs"].last == "a"
    for c in (a, b):
        if leave == "unsubscribe":
            c.send(Unsubscribe(2, ("$share/g/jobs", "$share/h/jobs")))
        elif leave == "disconnect":
            c.send(Disconnect())
        else:
            c.lose()
    assert broker.router.shared.groups == {}
    assert len(broker.router.subscriptions) == 0


def test_topic_alias_from_client(broker: BrokerCore) -> None:
    sub = client(broker, "s")
    sub.subscribe("long/topic/name")
    pub = client(broker, "p", 5)
    pub.send(Publish("long/topic/name", b"1", properties=Properties(topic_alias=1)))
    pub.send(Publish("", b"2", properties=Properties(topic_alias=1)))
    assert [(p.topic, p.payload) for p in sub.received()] == [("long/topic/name", b"1"), ("long/topic/name", b"2")]
    (d,) = pub.send(Publish("", b"3", properties=Properties(topic_alias=2)))
    assert d.reason_code == 0x82


def test_topic_alias_over_maximum(broker: BrokerCore) -> None:
    pub = client(broker, "p", 5)
    (d,) = pub.send(Publish("t", b"", properties=Properties(topic_alias=11)))
    assert d.reason_code == 0x94


def test_receive_maximum_exceeded() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_inflight=2)))
    pub = client(broker, "p", 5)
    pub.send(Publish("t", b"", 2, packet_id=1))
    pub.send(Publish("t", b"", 2, packet_id=2))
    (d,) = pub.send(Publish("t", b"", 2, packet_id=3))
    assert isinstance(d, Disconnect) and d.reason_code == 0x93


def test_client_id_rules(broker: BrokerCore) -> None:
    assert Client(broker, 4).connect("", clean_start=False).reason_code == 2
    v31 = Client(broker, 3)  # our encoder refuses an empty 3.1 client id: raw bytes
    assert v31.send_raw(bytes.fromhex("10 0e 00 06 4d 51 49 73 64 70 03 02 00 3c 00 00")) == [ConnAck(False, 2)]
    assert Client(broker, 4).connect("", clean_start=True).reason_code == 0
    ack = Client(broker, 5).connect("", clean_start=False)
    assert ack.reason_code == 0 and ack.properties.assigned_client_identifier


def test_unsupported_protocol_level(broker: BrokerCore) -> None:
    c = Client(broker, 5)  # level 6: answered in the 5.0 format
    assert c.send_raw(bytes.fromhex("10 0d 00 04 4d 51 54 54 06 02 00 3c 00 01 63")) == [ConnAck(False, 0x84)]
    assert c.closed
    d = Client(broker, 4)  # MQIsdp level 4 (a 3.x client's mistake): answered in the 3.x format
    assert d.send_raw(bytes.fromhex("10 0f 00 06 4d 51 49 73 64 70 04 02 00 3c 00 01 63")) == [ConnAck(False, 1)]


def test_malformed_packet_closes_only_its_sender(broker: BrokerCore) -> None:
    sub = client(broker, "s", 5)
    sub.subscribe("t")
    bad = client(broker, "bad", 5)
    (d,) = bad.send_raw(bytes.fromhex("36 07 00 03 61 2f 62 00 01"))  # QoS 3
    assert d.reason_code == 0x81 and bad.closed
    good = client(broker, "good", 5)
    good.send(Publish("t", b"fine"))
    assert [p.payload for p in sub.received()] == [b"fine"]


def test_packet_before_connect_closes(broker: BrokerCore) -> None:
    c = Client(broker)
    assert c.send(PingReq()) == [] and c.closed


def test_unsubscribe(broker: BrokerCore) -> None:
    c = client(broker, "c", 5)
    c.subscribe("t")
    assert c.send(Unsubscribe(2, ("t", "nope"))) == [UnsubAck(2, (0x00, 0x11))]
    assert len(broker.router.subscriptions) == 0


def test_ping(broker: BrokerCore) -> None:
    assert client(broker, "c").send(PingReq()) == [PingResp()]


def test_message_expiry(broker: BrokerCore) -> None:
    sub = client(broker, "s", 5, clean_start=False, properties=Properties(session_expiry_interval=100))
    sub.subscribe(Subscription("t", 1))
    sub.lose(0)
    pub = client(broker, "p", 5)
    pub.send(Publish("t", b"short", 1, packet_id=1, properties=Properties(message_expiry_interval=5)), 0)
    pub.send(Publish("t", b"long", 1, packet_id=2, properties=Properties(message_expiry_interval=50)), 0)
    again = Client(broker, 5)
    again.connect("s", now=10, clean_start=False, properties=Properties(session_expiry_interval=100))
    (p,) = again.after_connack
    assert p.payload == b"long" and p.properties.message_expiry_interval == 40
    assert broker.stats.expired == 1


def test_client_maximum_packet_size(broker: BrokerCore) -> None:
    sub = client(broker, "s", 5, properties=Properties(maximum_packet_size=50))
    sub.subscribe("t")
    pub = client(broker, "p", 5)
    pub.send(Publish("t", b"x" * 100))
    pub.send(Publish("t", b"small"))
    assert [p.payload for p in sub.received()] == [b"small"]
    assert broker.stats.publish_dropped == 1


def test_server_keep_alive() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_keepalive=60)))
    ack = Client(broker, 5).connect("c", keepalive=300)
    assert ack.properties.server_keep_alive == 60
    assert Client(broker, 4).connect("d", keepalive=300).reason_code == 2


def test_slow_subscriber_drops_qos0_and_queues_qos1() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, max_buffered_bytes=100, limits=Limits(max_inflight=0)))
    sub = client(broker, "s")
    sub.subscribe(Subscription("t", 1))
    pub = client(broker, "p")
    for _ in range(10):
        pub.send(Publish("t", b"x" * 20))  # QoS 0
    for i in range(5):
        pub.send(Publish("t", b"y" * 20, 1, packet_id=i + 1))
    assert broker.stats.publish_dropped > 0
    assert len(broker.sessions["s"].queue) > 0
    # The writer drains, again and again; the queued QoS 1 messages follow, none lost.
    got = sub.received()
    while sub.conn.wants_drain:
        broker.drained(sub.conn, 0)
        got += sub.received()
    assert sum(1 for p in got if p.qos == 1) == 5


def test_sys_topics() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=10, version="mqtt-cli 0.1.0"))
    c = client(broker, "c")
    c.subscribe("$SYS/broker/version")
    c.subscribe("#", pid=2)
    assert broker.tick(10) == 20
    got = c.received()
    assert [(p.topic, p.payload) for p in got] == [("$SYS/broker/version", b"mqtt-cli 0.1.0")]


def test_shutdown_publishes_wills_and_disconnects_v5(broker: BrokerCore) -> None:
    w = watcher(broker)
    a = client(broker, "a", 5, will=Will("will/a", b"bye"))
    broker.shutdown(0)
    (d,) = a.received()
    assert d.reason_code == 0x8B
    assert [p.payload for p in w.received()] == [b"bye"]


def test_connected_count(broker: BrokerCore) -> None:
    a = client(broker, "a")
    b = client(broker, "b", clean_start=False)
    assert broker.connected == 2
    Client(broker).connect("a")  # take-over: still two
    assert broker.connected == 2
    b.lose()
    a.send(Disconnect())
    assert broker.connected == 1
    assert broker.sys.sys_figures(0)["$SYS/broker/clients/connected"] == "1"


def test_response_information(broker: BrokerCore) -> None:
    ack = Client(broker, 5).connect("req", properties=Properties(request_response_information=1))
    assert ack.properties.response_information == "response/req/"
    assert Client(broker, 5).connect("plain").properties.response_information is None


# --- found in review: the client's maximum packet size, re-sent expiry, $SYS, stray acknowledgements -----------


def test_reason_strings_are_left_out_over_the_client_maximum_packet_size() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(reason_strings=True)))
    # [MQTT-3.14.2-3]/[MQTT-3.1.2-24]: a DISCONNECT with its reason string would be 34 bytes here.
    c = client(broker, "c", 5, properties=Properties(maximum_packet_size=11))  # the CONNACK is 11 bytes
    (d,) = c.send(Publish("", b"x", properties=Properties(topic_alias=3)))  # an alias never set
    assert isinstance(d, Disconnect) and d.reason_code == 0x82 and d.properties.reason_string is None
    assert c.closed
    # A CONNACK keeps the assigned identifier and drops the response information that would not fit.
    ack = Client(broker, 5).connect("", properties=Properties(maximum_packet_size=30, request_response_information=1))
    assert ack.reason_code == 0 and ack.properties.assigned_client_identifier
    assert ack.properties.response_information is None
    # A take-over's DISCONNECT goes without its reason string (25 bytes with it).
    old = client(broker, "t", 5, properties=Properties(maximum_packet_size=11))
    Client(broker, 5).connect("t")
    (d,) = old.received()
    assert isinstance(d, Disconnect) and d.reason_code == 0x8E and d.properties.reason_string is None


def test_resent_messages_carry_the_expiry_they_have_left(broker: BrokerCore) -> None:
    # [MQTT-3.3.2-6]: a re-sent PUBLISH says what is left; an expired QoS 1 one is dropped (as mosquitto).
    expiry = Properties(session_expiry_interval=100)
    sub = client(broker, "s", 5, clean_start=False, properties=expiry)
    sub.subscribe(Subscription("ex/#", 1))
    pub = client(broker, "p", 5)
    pub.send(Publish("ex/a", b"a", 1, packet_id=1, properties=Properties(message_expiry_interval=10)), 0)
    pub.send(Publish("ex/b", b"b", 1, packet_id=2, properties=Properties(message_expiry_interval=2)), 0)
    assert [p.topic for p in sub.received()] == ["ex/a", "ex/b"]  # not acknowledged
    sub.lose(0)
    again = Client(broker, 5)
    again.connect("s", now=3, clean_start=False, properties=expiry)
    (p,) = again.after_connack
    assert p.topic == "ex/a" and p.dup and p.properties.message_expiry_interval == 7
    assert broker.stats.expired == 1


def test_clients_cannot_publish_to_sys(broker: BrokerCore) -> None:
    w = watcher(broker)
    w.subscribe("$SYS/#", pid=2)
    v5 = client(broker, "v5", 5)
    assert v5.send(Publish("$SYS/broker/version", b"fake", 1, True, packet_id=1)) == [PubAck(1, 0x87)]
    assert v5.send(Publish("$SYS/x", b"fake", 2, packet_id=2)) == [PubRec(2, 0x87)]
    v3 = client(broker, "v3", 4)
    assert v3.send(Publish("$SYS/x", b"fake", 2, True, packet_id=3)) == [PubRec(3)]
    assert v3.send(PubRel(3)) == [PubComp(3)]
    assert w.received() == [] and len(broker.router.retained) == 0
    assert not v5.closed and not v3.closed


@pytest.mark.parametrize("version", [4, 5])
def test_acknowledgements_for_nothing_in_flight_are_ignored(broker: BrokerCore, version: int) -> None:
    c = client(broker, "c", version)
    assert c.send(PubAck(7)) == []
    assert c.send(PubComp(8)) == []
    assert c.send(PubRec(9)) == [PubRel(9, 0x92 if version == 5 else 0)]
    assert not c.closed
    # The wrong acknowledgement for a message in flight is still a protocol error.
    c.subscribe(Subscription("t", 2))
    client(broker, "p").send(Publish("t", b"x", 2, packet_id=1))
    (p,) = c.received()
    c.send(PubAck(p.packet_id))
    assert c.closed


def test_max_keepalive_0_means_no_limit() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_keepalive=0)))
    assert Client(broker, 4).connect("a", keepalive=0).reason_code == 0
    assert Client(broker, 4).connect("b", keepalive=65535).reason_code == 0
    ack = Client(broker, 5).connect("c", keepalive=0)
    assert ack.reason_code == 0 and ack.properties.server_keep_alive is None


def test_a_first_packet_that_is_not_connect_closes_at_once(broker: BrokerCore) -> None:
    http = Client(broker)
    http.send_raw(b"GE")  # "GET ..." reads as a PUBACK header announcing 69 bytes: not waited for
    assert http.closed
    tls = Client(broker)
    tls.send_raw(b"\x16\x03\x01\x02\x00")
    assert tls.closed and "TLS handshake" in broker.out.notices[-1].detail
    slow = Client(broker)
    slow.send_raw(b"\x10")  # a CONNECT in pieces is fine
    assert not slow.closed


def test_one_subscribe_with_overlapping_filters_lists_its_identifier_once(broker: BrokerCore) -> None:
    c = client(broker, "c", 5)
    c.subscribe(Subscription("a/#", 1), Subscription("a/+", 1), props=Properties(subscription_identifier=4))
    client(broker, "p", 5).send(Publish("a/b", b"x"))
    (p,) = c.received()
    assert p.properties.subscription_identifiers == (4,)
