"""PackedQueue: restored deliveries packed in one bytearray, unpacked one at a time, in order, as they were.
PackedRetained: restored retained messages frozen one bytes object each, thawed (and delivered) as they were."""

from __future__ import annotations

import pytest

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.packed import PackedQueue, PackedRetained, Shape
from mqtt_cli.core.packets import PubAck, Publish, Subscribe, Subscription
from mqtt_cli.core.persistence import DeliveryAdded, DeliveryDone, StoredSession
from mqtt_cli.core.properties import EMPTY_PROPERTIES, Properties, properties_from_items
from mqtt_cli.core.session import Delivery, Message, SubscriptionOptions
from tests.core.test_broker import Client

_EXPIRY = 0x02  # Message Expiry Interval


def _queue(n: int, payload_size: int = 8) -> tuple[PackedQueue, list[Shape]]:
    shapes = [
        Shape("a/1", "pub", EMPTY_PROPERTIES, 1, False, 1, False, ()),
        Shape("a/2", None, properties_from_items(((_EXPIRY, 60),)), 2, True, 1, True, (7,)),
    ]
    queue = PackedQueue(shapes)
    for i in range(n):
        payload = (b"%d:" % i).ljust(payload_size, b".")
        queue.add(100 + i, 10.0 + i, i % 2, payload, len(payload) + 3)
    return queue, shapes


def test_unpacks_what_was_added_in_order() -> None:
    queue, _ = _queue(3)
    assert len(queue) == 3 and queue and queue.last_row == 102
    assert queue.payload_bytes == 24 and queue.size == 33
    listed = [(d.row, d.message.topic, d.message.payload, d.message.received_at, d.qos, d.retain) for d in queue]
    assert listed == [
        (100, "a/1", b"0:......", 10.0, 1, False),
        (101, "a/2", b"1:......", 11.0, 1, True),
        (102, "a/1", b"2:......", 12.0, 1, False),
    ]
    first = queue.popleft()
    assert first.message.origin == "pub" and first.message.properties is EMPTY_PROPERTIES
    second = queue.popleft()
    m = second.message
    assert (m.qos, m.retain, m.origin, second.subscription_ids) == (2, True, None, (7,))
    assert m.expires_at == 71.0  # received at 11 with a 60 s expiry interval
    assert len(queue) == 1 and queue.payload_bytes == 8


class _AnyShape(list[Shape]):
    """A shape table answering every index (a real one past 16 million entries is too big for a test)."""

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        return Shape(f"s/{index}", None, EMPTY_PROPERTIES, 1, False, 1, False, ())


def test_records_whose_numbers_do_not_fit_the_short_header_read_back() -> None:
    # Steps from the row before (1, past 24 bits, backwards), shape indexes and payload lengths (past 16 bits)
    # on each side of what the 16-byte header holds.
    records = [
        (5, 0, b"a"),
        (6, 0xFFFFFF, b"b" * 0xFFFF),  # the largest that fit
        (6 + 0xFFFFFF, 1, b"c"),
        (7 + 0xFFFFFF + 0xFFFFFF, 0x1000000, b"d" * 0x10000),  # step, shape and length one over
        (3, 2, b"e"),  # not after the one before: the row as it is
        (1 << 40, 3, b""),
        ((1 << 40) + 1, 4, b"f"),
    ]
    queue = PackedQueue(_AnyShape())
    for i, (row, shape, payload) in enumerate(records):
        queue.add(row, float(i), shape, payload, len(payload))
    expected = [(row, f"s/{shape}", payload, float(i)) for i, (row, shape, payload) in enumerate(records)]
    assert [(d.row, d.message.topic, d.message.payload, d.message.received_at) for d in queue] == expected
    assert [(d.row, d.message.topic, d.message.payload, d.message.received_at) for d in (
        queue.popleft() for _ in records)] == expected  # fmt: skip
    assert not queue


def test_appended_deliveries_come_after_the_packed_ones() -> None:
    queue, _ = _queue(2)
    late = Delivery(Message("b", b"late", 1, False, EMPTY_PROPERTIES, "x", 50.0), 1, False)
    queue.append(late)
    assert len(queue) == 3
    other, _ = _queue(1)  # queues share an empty tail until appended to: never each other's deliveries
    assert [d.message.payload for d in other] == [b"0:......"] and other.tail_payload_bytes() == 0
    assert [d.message.payload for d in queue] == [b"0:......", b"1:......", b"late"]
    assert queue.tail_payload_bytes() == 4
    assert [queue.popleft().row for _ in range(2)] == [100, 101]
    assert queue.popleft() is late
    assert not queue and len(queue) == 0


def test_taking_most_of_a_large_queue_keeps_the_rest_intact() -> None:
    # Over 1 MiB taken and over half the blob: the taken part is cut off; what remains still reads right.
    queue, _ = _queue(30_000, payload_size=64)
    for i in range(20_000):
        assert queue.popleft().row == 100 + i
    rest = [d.row for d in queue]
    assert rest == list(range(20_100, 30_100))
    assert [queue.popleft().row for _ in range(10_000)] == rest
    assert not queue


def test_a_restored_packed_queue_is_delivered_acknowledged_and_counted() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_inflight=2)))
    shapes = [Shape("q/t", "p", EMPTY_PROPERTIES, 1, False, 1, False, ())]
    packed = PackedQueue(shapes)
    for i in range(5):
        packed.add(10 + i, 0.0, 0, b"m%d" % i, 5)
    subs = (("q/#", SubscriptionOptions(1)),)
    broker.storage.restore([StoredSession("keeper", 4, 0xFFFFFFFF, None, subs, (), queued=packed)], [], 1.0)
    broker.storage.enable_persistence()
    assert broker.queries.queued() == (5, 10)
    sub = Client(broker)
    assert sub.connect("keeper", clean_start=False).session_present
    first = [p for p in sub.after_connack if isinstance(p, Publish)]
    assert [p.payload for p in first] == [b"m0", b"m1"]  # the window of 2
    assert broker.queries.queued() == (3, 6)
    got = [p.payload for p in first]
    while True:
        more: list[Publish] = []
        for p in first:
            more += [x for x in sub.send(PubAck(p.packet_id)) if isinstance(x, Publish)]  # type: ignore[arg-type]
        if not more:
            break
        got += [p.payload for p in more]
        first = more
    assert got == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert broker.storage.changes is not None
    assert [c.row for c in broker.storage.changes if isinstance(c, DeliveryDone)] == [10, 11, 12, 13, 14]
    assert broker.queries.queued() == (0, 0)
    # New deliveries are numbered after the restored rows.
    pub = Client(broker)
    pub.connect("p2")
    sub.lose()
    pub.send(Publish("q/x", b"new", 1, packet_id=1))
    assert [c.row for c in broker.storage.changes if isinstance(c, DeliveryAdded)] == [15]


# Every property a PUBLISH can carry from its publisher to a retained message (the topic alias is the
# connection's, not the message's; subscription identifiers are the subscriber's).
PROPERTY_KINDS = {
    "none": EMPTY_PROPERTIES,
    "payload format": Properties(payload_format_indicator=1),
    "expiry": Properties(message_expiry_interval=60),
    "content type": Properties(content_type="text/plain; charset=ütf-8"),
    "response topic": Properties(response_topic="reply/ü/1"),
    "correlation data": Properties(correlation_data=b"\x00\xff\x00"),
    "user properties": Properties(user_properties=[("k", "v"), ("k", "w"), ("ü", "")]),
    "all": Properties(
        payload_format_indicator=0,
        message_expiry_interval=3600,
        content_type="application/json",
        response_topic="r",
        correlation_data=b"id",
        user_properties=[("a", "1")],
    ),
}

_SLOTS = ("topic", "payload", "qos", "retain", "properties", "origin", "received_at", "expires_at")


def _fields(m: Message) -> tuple[object, ...]:
    return tuple(getattr(m, name) for name in _SLOTS)


def _freeze(messages: list[Message]) -> PackedRetained:
    """As the store does: one shape per (origin, properties, QoS), a frozen record per message."""
    packed = PackedRetained()
    shapes: dict[tuple[object, ...], int] = {}
    for m in messages:
        key = (m.origin, m.properties.items, m.qos)
        if key not in shapes:
            shapes[key] = packed.shape(m.origin, m.properties, m.qos)
        packed.add(m.topic, m.payload, shapes[key], m.received_at)
    return packed


@pytest.mark.parametrize("kind", list(PROPERTY_KINDS))
def test_a_frozen_retained_message_thaws_to_the_original(kind: str) -> None:
    props = PROPERTY_KINDS[kind]
    messages = [
        Message("ü/a/b", b"\x00payload\xff", 1, True, props, "pub", 12.25),
        Message("x", b"y" * 70_000, 2, True, props, None, 0.0),  # a long payload, a $SYS-like origin
        Message("/" * 3 + "é" * 1000, b"z", 0, True, props, "c" * 23, -5.5),  # empty levels, a long topic
    ]
    packed = _freeze(messages)
    assert len(packed) == 3
    for m, frozen in zip(messages, packed.frozen, strict=True):
        assert packed.topic(frozen) == m.topic
        thawed = packed.thaw(frozen)
        assert _fields(thawed) == _fields(m)
        assert thawed.size == m.size
    expiry = props.message_expiry_interval
    assert packed.expires_at(0, 12.25) == (None if expiry is None else 12.25 + expiry)


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("kind", list(PROPERTY_KINDS))
def test_a_restored_frozen_retained_message_is_delivered_as_the_live_one(kind: str, version: int) -> None:
    # The general path (a broker that received the messages) against the frozen one (a broker restored with
    # them): what a subscriber gets, byte for byte, on each.
    props = PROPERTY_KINDS[kind]
    live = BrokerCore(BrokerConfig(sys_interval=0))
    pub = Client(live, 5)
    pub.connect("pub")
    for i, topic in enumerate(["other", "s/1", "s/2/x", "s/ü"]):
        pub.send(Publish(topic, b"v%d" % i, i % 3, True, packet_id=i + 1 if i % 3 else None, properties=props), 3.0)
    restored = BrokerCore(BrokerConfig(sys_interval=0))
    # In topic order, as the store reads them (and as they were published here): the same tree, the same order.
    packed = _freeze([m for _, m in sorted(live.router.retained.items())])
    restored.storage.restore([], packed, 3.0)
    assert len(packed) == 0  # handed over: the tree holds them, a message retained since frees the one it replaces
    assert len(restored.router.retained) == len(live.router.retained) == 4
    got = []
    for broker in (live, restored):
        sub = Client(broker, version)
        sub.connect("sub", 10.0)
        sub.send(Publish("s/2/x", b"", 0, True), 10.0)  # cleared on both: the frozen one goes as the live one
        broker.receive(sub.conn, encode(Subscribe(1, (Subscription("s/#", 2),), EMPTY_PROPERTIES), version), 10.0)
        got.append(bytes(sub.conn.out))
        sub.conn.out.clear()
        assert len(broker.router.retained) == 3
        assert broker.router.retained.get("s/1") is not None and "s/2/x" not in broker.router.retained
    assert got[0] == got[1]
    assert b"v1" in got[1] and b"v3" in got[1] and b"v2" not in got[1] and b"v0" not in got[1]
