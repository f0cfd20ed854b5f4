"""PackedQueue: restored deliveries packed in one bytearray, unpacked one at a time, in order, as they were."""

from __future__ import annotations

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.packed import PackedQueue, Shape
from mqtt_cli.core.packets import PubAck, Publish
from mqtt_cli.core.persistence import DeliveryAdded, DeliveryDone, StoredSession
from mqtt_cli.core.properties import EMPTY_PROPERTIES, properties_from_items
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


def test_appended_deliveries_come_after_the_packed_ones() -> None:
    queue, _ = _queue(2)
    late = Delivery(Message("b", b"late", 1, False, EMPTY_PROPERTIES, "x", 50.0), 1, False)
    queue.append(late)
    assert len(queue) == 3
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
    broker = BrokerCore(BrokerConfig(sys_interval=0, max_inflight=2))
    shapes = [Shape("q/t", "p", EMPTY_PROPERTIES, 1, False, 1, False, ())]
    packed = PackedQueue(shapes)
    for i in range(5):
        packed.add(10 + i, 0.0, 0, b"m%d" % i, 5)
    subs = (("q/#", SubscriptionOptions(1)),)
    broker.restore([StoredSession("keeper", 4, 0xFFFFFFFF, None, subs, (), queued=packed)], [], 1.0)
    broker.enable_persistence()
    assert broker.queued() == (5, 10)
    sub = Client(broker)
    assert sub.connect("keeper", clean_start=False).session_present
    first = [p for p in sub.after_connack if isinstance(p, Publish)]
    assert [p.payload for p in first] == [b"m0", b"m1"]  # the window of 2
    assert broker.queued() == (3, 6)
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
    assert broker.changes is not None
    assert [c.row for c in broker.changes if isinstance(c, DeliveryDone)] == [10, 11, 12, 13, 14]
    assert broker.queued() == (0, 0)
    # New deliveries are numbered after the restored rows.
    pub = Client(broker)
    pub.connect("p2")
    sub.lose()
    pub.send(Publish("q/x", b"new", 1, packet_id=1))
    assert [c.row for c in broker.changes if isinstance(c, DeliveryAdded)] == [15]
