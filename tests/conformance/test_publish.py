"""PUBLISH, its acknowledgements, QoS flows and retained messages (3.1.1 and 5.0 chapters 3.3-3.7, 4.3-4.6)."""

from __future__ import annotations

import pytest

from tests.brokers import Broker
from tests.conformance.wire import (
    PINGREQ,
    VERSIONS,
    Conn,
    P,
    T,
    ack,
    client,
    connect,
    packet,
    publish,
    refused,
    spec,
    subscribe,
    uid,
)

pytestmark = pytest.mark.interop


def subscriber(broker: Broker, version: int, *filters: tuple[str, int], **kw: object) -> Conn:
    c = client(broker, uid("s"), version, **kw)
    c.send(subscribe(1, *filters, v5=version == 5))
    c.expect(T.SUBACK)
    return c


def settle(conn: Conn) -> None:
    """Everything the broker got from `conn` before this is processed."""
    conn.send(PINGREQ)
    conn.expect(T.PINGRESP)


def qos2_in(conn: Conn, topic: str, payload: bytes, pid: int, version: int, **kw: object) -> None:
    conn.send(publish(topic, payload, qos=2, pid=pid, v5=version == 5, **kw))  # type: ignore[arg-type]
    assert conn.expect(T.PUBREC).pid == pid
    conn.send(ack(T.PUBREL, pid))
    assert conn.expect(T.PUBCOMP).pid == pid


@spec(v311=("3.3.1-4",), v5=("3.3.1-4", "4.13.1-1"))
@VERSIONS
def test_MQTT_3_3_1_4_qos_3_closes(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        c.send(packet(T.PUBLISH, 0x06, bytes(publish("a", qos=1, pid=1, v5=version == 5))[2:]))
        refused(c, version == 5, 0x81)


@spec(v311=("3.3.2-2", "4.7.1-1"), v5=("3.3.2-2", "4.7.0-1"))
@pytest.mark.parametrize("topic", ["a/+", "a/#", "+"])
@VERSIONS
def test_MQTT_3_3_2_2_wildcard_in_topic_name_closes(broker: Broker, version: int, topic: str) -> None:
    with client(broker, uid(), version) as c:
        c.send(publish(topic, b"x", v5=version == 5))
        # ours: 0x90 Topic Name invalid (the 5.0 code for it); mosquitto 2.0.11 says 0x82 (Protocol Error)
        refused(c, version == 5, 0x90 if broker.kind == "ours" else 0x82)


@spec(v311=("3.3.2-3", "4.7.1-2", "4.7.1-3"), v5=("3.3.2-3", "4.7.1-1", "4.7.1-2"))
@pytest.mark.parametrize(
    "flt,topics,matched",
    [
        ("s/+/x", ["s/a/x", "s/b/x", "s/a/y", "s/x"], ["s/a/x", "s/b/x"]),
        ("s/#", ["s", "s/a", "s/a/b", "t/a"], ["s", "s/a", "s/a/b"]),
        ("s/+", ["s/", "s/a", "s/a/b"], ["s/", "s/a"]),
        ("+/+", ["/x", "s/a", "s"], ["/x", "s/a"]),
    ],
    ids=["plus-middle", "hash-parent", "plus-empty-level", "plus-leading-slash"],
)
@VERSIONS
def test_MQTT_3_3_2_3_topic_matches_filter(
    broker: Broker, version: int, flt: str, topics: list[str], matched: list[str]
) -> None:
    prefix = uid("m")
    with subscriber(broker, version, (f"{prefix}/{flt}", 0)) as sub, client(broker, uid(), version) as pub:
        for topic in topics:
            pub.send(publish(f"{prefix}/{topic}", topic.encode(), v5=version == 5))
        settle(pub)
        got = [sub.expect(T.PUBLISH).topic for _ in matched]
        assert got == [f"{prefix}/{t}" for t in matched]
        sub.quiet()


@spec(v311=("3.3.4-1", "2.3.1-6", "4.3.2-2"), v5=("3.3.4-1", "2.2.1-5", "4.3.2-4", "3.4.2-1", "3.5.2-1", "3.7.2-1"))
@VERSIONS
def test_MQTT_3_3_4_1_answer_by_qos(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        c.send(publish(uid("t"), b"0", v5=version == 5) + PINGREQ)
        assert c.recv().type == T.PINGRESP
        c.send(publish(uid("t"), b"1", qos=1, pid=0x1234, v5=version == 5))
        assert c.expect(T.PUBACK).pid == 0x1234
        qos2_in(c, uid("t"), b"2", 0x4321, version)


@spec(v311=("4.3.2-2",), v5=("4.3.2-5",))
@VERSIONS
def test_MQTT_4_3_2_2_identifier_reused_after_puback_is_new(broker: Broker, version: int) -> None:
    topic = uid("t")
    with subscriber(broker, version, (topic, 1)) as sub, client(broker, uid(), version) as pub:
        for n in range(2):
            pub.send(publish(topic, b"%d" % n, qos=1, pid=7, dup=n == 1, v5=version == 5))
            pub.expect(T.PUBACK)
        got = [sub.expect(T.PUBLISH) for _ in range(2)]
        assert [g.payload for g in got] == [b"0", b"1"]
        for g in got:
            sub.send(ack(T.PUBACK, g.pid))


@spec(v311=("4.3.3-2",), v5=("4.3.3-8", "4.3.3-10", "4.3.3-11", "4.3.3-12"))
@VERSIONS
def test_MQTT_4_3_3_2_qos2_receiver_no_duplicates(broker: Broker, version: int) -> None:
    topic = uid("t")
    with subscriber(broker, version, (topic, 0)) as sub, client(broker, uid(), version) as pub:
        pub.send(publish(topic, b"once", qos=2, pid=9, v5=version == 5))
        assert pub.expect(T.PUBREC).pid == 9
        pub.send(publish(topic, b"once", qos=2, pid=9, dup=True, v5=version == 5))
        assert pub.expect(T.PUBREC).pid == 9
        pub.send(ack(T.PUBREL, 9))
        assert pub.expect(T.PUBCOMP).pid == 9
        pub.send(ack(T.PUBREL, 9))  # a repeated PUBREL is answered too
        assert pub.expect(T.PUBCOMP).pid == 9
        qos2_in(pub, topic, b"new", 9, version)
        assert [sub.expect(T.PUBLISH).payload for _ in range(2)] == [b"once", b"new"]
        sub.quiet()


@spec(
    v311=("4.3.3-1", "2.3.1-4", "2.3.1-6", "4.3.2-1"),
    v5=("4.3.3-1", "4.3.3-2", "4.3.3-3", "4.3.3-4", "4.3.3-5", "2.2.1-4", "2.2.1-5", "4.3.2-1", "4.3.2-2", "3.6.2-1"),
)
@VERSIONS
def test_MQTT_4_3_3_1_server_as_qos2_sender(broker: Broker, version: int) -> None:
    topic = uid("t")
    with subscriber(broker, version, (topic, 2)) as sub, client(broker, uid(), version) as pub:
        qos2_in(pub, topic, b"a", 1, version)
        qos2_in(pub, topic, b"b", 2, version)
        pub.send(publish(topic, b"c", qos=1, pid=3, v5=version == 5))
        pub.expect(T.PUBACK)
        a, b, c = (sub.expect(T.PUBLISH) for _ in range(3))
        assert (a.qos, b.qos, c.qos) == (2, 2, 1) and not (a.dup or b.dup or c.dup)
        assert len({a.pid, b.pid, c.pid}) == 3 and 0 not in {a.pid, b.pid, c.pid}
        sub.send(ack(T.PUBREC, a.pid))
        rel = sub.expect(T.PUBREL)
        assert rel.pid == a.pid and rel.flags == 2
        sub.send(ack(T.PUBCOMP, a.pid) + ack(T.PUBREC, b.pid))
        assert sub.expect(T.PUBREL).pid == b.pid
        sub.send(ack(T.PUBCOMP, b.pid) + ack(T.PUBACK, c.pid))
        sub.quiet()


@spec(v311=("3.3.1-2", "3.3.1-3", "4.3.1-1", "2.3.1-5"), v5=("3.3.1-2", "3.3.1-3", "4.3.1-1", "2.2.1-2"))
@VERSIONS
def test_MQTT_3_3_1_3_outgoing_dup_is_our_own(broker: Broker, version: int) -> None:
    topic = uid("t")
    with subscriber(broker, version, (topic, 1)) as sub, client(broker, uid(), version) as pub:
        pub.send(publish(topic, b"first", qos=1, pid=5, dup=True, v5=version == 5))
        pub.expect(T.PUBACK)
        got = sub.expect(T.PUBLISH)
        assert got.qos == 1 and not got.dup
        sub.send(ack(T.PUBACK, got.pid))
    with subscriber(broker, version, (topic, 0)) as sub, client(broker, uid(), version) as pub:
        pub.send(publish(topic, b"abc", qos=1, pid=6, dup=True, v5=version == 5))
        pub.expect(T.PUBACK)
        got = sub.expect(T.PUBLISH)
        assert got.qos == 0 and not got.dup and got.payload == b"abc"


@spec(v311=("3.3.1-1", "4.4.0-1", "4.3.2-1"), v5=("3.3.1-1", "4.4.0-1", "4.3.2-3", "4.3.3-3", "4.3.3-6"))
@VERSIONS
def test_MQTT_3_3_1_1_resent_on_reconnect_with_dup(broker: Broker, version: int) -> None:
    cid, topic = uid(), uid("t")
    expiry = [(P.SESSION_EXPIRY, 60)] if version == 5 else None
    sub = client(broker, cid, version, clean=False, properties=expiry)
    sub.send(subscribe(1, (topic, 2), v5=version == 5))
    sub.expect(T.SUBACK)
    with client(broker, uid(), version) as pub:
        pub.send(publish(topic, b"q1", qos=1, pid=1, v5=version == 5))
        pub.expect(T.PUBACK)
        qos2_in(pub, topic, b"q2", 2, version)
    first = [sub.expect(T.PUBLISH) for _ in range(2)]
    sub.send(ack(T.PUBREC, first[1].pid))
    sub.expect(T.PUBREL)
    sub.close()  # PUBLISH q1 unacknowledged, PUBREL for q2 unacknowledged
    with client(broker, cid, version, clean=False, properties=expiry) as again:
        got = [again.recv() for _ in range(2)]
        by_type = {g.type: g for g in got}
        assert by_type[T.PUBLISH].dup and by_type[T.PUBLISH].pid == first[0].pid
        assert by_type[T.PUBLISH].payload == b"q1"
        assert by_type[T.PUBREL].pid == first[1].pid
        again.send(ack(T.PUBACK, first[0].pid) + ack(T.PUBCOMP, first[1].pid))
        again.quiet()
        again.send(connect(cid, version))


@spec(v311=("3.3.5-1",), v5=("3.3.4-2",))
@VERSIONS
def test_MQTT_3_3_5_1_overlapping_subscriptions_max_qos(broker: Broker, version: int) -> None:
    prefix = uid("o")
    with client(broker, uid(), version) as sub, client(broker, uid(), version) as pub:
        sub.send(subscribe(1, (f"{prefix}/#", 0), (f"{prefix}/a", 2), v5=version == 5))
        assert sub.expect(T.SUBACK).codes == [0, 2]
        qos2_in(pub, f"{prefix}/a", b"x", 1, version)
        got = sub.expect(T.PUBLISH)
        # one copy at QoS 2 (ours, mosquitto) or one per subscription, the highest at QoS 2: both allowed
        assert got.qos == 2


@spec(v311=("3.3.5-2",))
@pytest.mark.parametrize("qos", [1, 2])
@VERSIONS
def test_MQTT_3_3_5_2_publish_not_allowed_acknowledged_not_delivered(broker: Broker, version: int, qos: int) -> None:
    """A PUBLISH the Client may not make (both brokers refuse clients' PUBLISHes to $SYS): 3.1.1 gets the positive
    acknowledgement of its QoS, 5.0 its acknowledgement with 0x87 Not authorized; nothing is delivered or
    retained. `mqtt serve` keeps the connection open; mosquitto 2.0.11 closes it after the acknowledgement."""
    topic = f"$SYS/{uid('conformance')}"
    with subscriber(broker, version, (topic, 2)) as sub, client(broker, uid(), version) as pub:
        pub.send(publish(topic, b"forged", qos=qos, pid=5, retain=True, v5=version == 5))
        got = pub.expect(T.PUBACK if qos == 1 else T.PUBREC)
        assert got.pid == 5 and got.reason == (0x87 if version == 5 else 0), got
        if broker.kind == "mosquitto":
            pub.closed()  # mosquitto closes the connection after that acknowledgement: the statement's other way
        else:
            if qos == 2 and version == 4:
                pub.send(ack(T.PUBREL, 5))
                assert pub.expect(T.PUBCOMP).pid == 5
            assert pub.open()
        sub.quiet()
    with subscriber(broker, version, (topic, 2)) as late:
        late.quiet()  # no retained message was stored


@spec(v311=("3.8.4-6",), v5=("3.8.4-8",))
@pytest.mark.parametrize("sub_qos,pub_qos", [(0, 2), (1, 2), (2, 1), (1, 0)])
@VERSIONS
def test_MQTT_3_8_4_6_delivered_at_min_qos(broker: Broker, version: int, sub_qos: int, pub_qos: int) -> None:
    topic = uid("t")
    with subscriber(broker, version, (topic, sub_qos)) as sub, client(broker, uid(), version) as pub:
        if pub_qos == 2:
            qos2_in(pub, topic, b"x", 1, version)
        else:
            pub.send(publish(topic, b"x", qos=pub_qos, pid=1, v5=version == 5))
            if pub_qos:
                pub.expect(T.PUBACK)
        assert sub.expect(T.PUBLISH).qos == min(sub_qos, pub_qos)


@spec(v311=("4.6.0-5", "4.6.0-6"), v5=("4.6.0-5", "4.6.0-6"))
@VERSIONS
def test_MQTT_4_6_0_6_ordered_topic(broker: Broker, version: int) -> None:
    topic = uid("t")
    with subscriber(broker, version, (topic, 1)) as sub, client(broker, uid(), version) as pub:
        for n in range(40):
            pub.send(publish(topic, b"%d" % n, qos=n % 2, pid=n + 1, v5=version == 5))
        for n in range(40):
            got = sub.expect(T.PUBLISH)
            assert got.payload == b"%d" % n
            if got.qos:
                sub.send(ack(T.PUBACK, got.pid))


# --- retained messages ---------------------------------------------------------------------------------------


@spec(
    v311=("3.3.1-5", "3.3.1-6", "3.3.1-8", "3.3.1-9"),
    v5=("3.3.1-5", "3.3.1-9", "3.3.1-12"),
)
@VERSIONS
def test_MQTT_3_3_1_5_retained_stored_and_sent_to_new_subscriptions(broker: Broker, version: int) -> None:
    topic = uid("r")
    with subscriber(broker, version, (topic, 1)) as live, client(broker, uid(), version) as pub:
        pub.send(publish(topic, b"kept", qos=1, pid=1, retain=True, v5=version == 5))
        pub.expect(T.PUBACK)
        got = live.expect(T.PUBLISH)
        assert not got.retain  # an established subscription: RETAIN 0 (5.0: Retain As Published is 0)
        with subscriber(broker, version, (topic, 1)) as late:
            got = late.expect(T.PUBLISH)
            assert got.retain and got.payload == b"kept" and got.qos == 1
        pub.send(publish(topic, b"", retain=True, v5=version == 5))
        settle(pub)


@spec(v311=("3.3.1-7",))
def test_MQTT_3_3_1_7_qos0_retained_replaces(broker: Broker) -> None:
    topic = uid("r")
    with client(broker, uid(), 4) as pub:
        pub.send(publish(topic, b"one", qos=1, pid=1, retain=True, v5=False))
        pub.expect(T.PUBACK)
        pub.send(publish(topic, b"two", retain=True, v5=False))
        settle(pub)
        with subscriber(broker, 4, (topic, 1)) as late:
            got = late.expect(T.PUBLISH)
            assert (got.payload, got.qos) == (b"two", 0)
            late.quiet()
        pub.send(publish(topic, b"", retain=True, v5=False))
        settle(pub)


@spec(v311=("3.3.1-10", "3.3.1-11"), v5=("3.3.1-6", "3.3.1-7"))
@VERSIONS
def test_MQTT_3_3_1_10_empty_retained_clears(broker: Broker, version: int) -> None:
    topic = uid("r")
    with subscriber(broker, version, (topic, 0)) as live, client(broker, uid(), version) as pub:
        pub.send(publish(topic, b"kept", retain=True, v5=version == 5))
        pub.send(publish(topic, b"", retain=True, v5=version == 5))
        settle(pub)
        assert [live.expect(T.PUBLISH).payload for _ in range(2)] == [b"kept", b""]  # processed normally
    with subscriber(broker, version, (topic, 0)) as late:
        late.quiet()


@spec(v311=("3.3.1-12",), v5=("3.3.1-8",))
@VERSIONS
def test_MQTT_3_3_1_12_non_retained_leaves_retained_alone(broker: Broker, version: int) -> None:
    topic = uid("r")
    with client(broker, uid(), version) as pub:
        pub.send(publish(topic, b"kept", retain=True, v5=version == 5))
        pub.send(publish(topic, b"passing", v5=version == 5))
        settle(pub)
        with subscriber(broker, version, (topic, 0)) as late:
            assert late.expect(T.PUBLISH).payload == b"kept"
            late.quiet()
        pub.send(publish(topic, b"", retain=True, v5=version == 5))
        settle(pub)
