"""SUBSCRIBE, UNSUBSCRIBE and topic rules (3.1.1 and 5.0 chapters 3.8-3.11, 4.7)."""

from __future__ import annotations

import struct
import unicodedata

import pytest

from tests.brokers import Broker
from tests.conformance.test_publish import qos2_in, settle, subscriber
from tests.conformance.wire import (
    VERSIONS,
    T,
    ack,
    client,
    packet,
    publish,
    refused,
    s,
    spec,
    subscribe,
    uid,
    unsubscribe,
)

pytestmark = pytest.mark.interop


@spec(v311=("3.8.4-1", "3.8.4-2", "2.3.1-7"), v5=("3.8.4-1", "3.8.4-2", "2.2.1-6"))
@VERSIONS
def test_MQTT_3_8_4_2_suback_same_identifier(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        c.send(subscribe(0xBEEF, (uid("t"), 1), v5=version == 5))
        assert c.expect(T.SUBACK).pid == 0xBEEF


@spec(
    v311=("3.8.4-4", "3.8.4-5", "3.9.3-1", "3.9.3-2", "4.7.1-2", "4.7.1-3", "3.8.3-2"),
    v5=("3.8.4-5", "3.8.4-6", "3.8.4-7", "3.9.3-1", "3.9.3-2", "4.7.1-1", "4.7.1-2"),
)
@VERSIONS
def test_MQTT_3_9_3_1_one_code_per_filter_in_order(broker: Broker, version: int) -> None:
    prefix = uid("f")
    filters = [(f"{prefix}/a", 2), (f"{prefix}/+/#", 0), (f"{prefix}/b", 1)]
    with client(broker, uid(), version) as c:
        c.send(subscribe(1, *filters, v5=version == 5))
        assert c.expect(T.SUBACK).codes == [2, 0, 1]


@spec(v311=("4.7.1-2", "4.7.1-3", "3.9.3-2"), v5=("4.7.1-1", "4.7.1-2", "3.9.3-2"))
@pytest.mark.parametrize("bad", ["a/#/b", "a/b#", "a/+b", "a+/b", "#/"])
@VERSIONS
def test_MQTT_4_7_1_2_invalid_filter_refused(broker: Broker, version: int, bad: str) -> None:
    good = uid("g")
    with client(broker, uid(), version) as c:
        c.send(subscribe(1, (good, 0), (bad, 0), v5=version == 5))
        # both close the connection: a 3.1.1 protocol violation (4.8.0-1), a 5.0 Malformed Packet (0x81; 0x8F in
        # a SUBACK is for well-formed filters the server will not take)
        assert [p.reason for p in c.closed()] == ([] if version == 4 else [0x81])


@spec(v311=("3.8.4-3",), v5=("3.8.4-3", "3.8.4-4"))
@VERSIONS
def test_MQTT_3_8_4_3_identical_filter_replaces_subscription(broker: Broker, version: int) -> None:
    topic = uid("r")
    with client(broker, uid(), version) as pub:
        pub.send(publish(topic, b"kept", retain=True, v5=version == 5))
        settle(pub)
        with subscriber(broker, version, (topic, 0)) as sub:
            assert sub.expect(T.PUBLISH).qos == 0
            sub.send(subscribe(2, (topic, 1), v5=version == 5))
            got = [sub.recv(), sub.recv()]
            assert {g.type for g in got} == {T.SUBACK, T.PUBLISH}  # retained sent again
            qos2_in(pub, topic, b"once", 3, version)
            got_pub = sub.expect(T.PUBLISH)
            assert got_pub.payload == b"once" and got_pub.qos == 1  # one subscription, the new QoS
            sub.send(ack(T.PUBACK, got_pub.pid))
            sub.quiet()
        pub.send(publish(topic, b"", retain=True, v5=version == 5))
        settle(pub)


@spec(v311=("3.8.3-3", "4.8.0-1"), v5=("3.8.3-2", "4.13.1-1"))
@VERSIONS
def test_MQTT_3_8_3_3_subscribe_without_filters_closes(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        c.send(packet(T.SUBSCRIBE, 2, struct.pack(">H", 1) + (b"\x00" if version == 5 else b"")))
        refused(c, version == 5, 0x82 if broker.kind == "ours" else 0x81)


@spec(v311=("3.8.3-4",), v5=("3.8.3-5",))
@pytest.mark.parametrize("options", [0x03, 0x04, 0xC0], ids=["qos-3", "reserved-bit-2", "reserved-bits-6-7"])
@VERSIONS
def test_MQTT_3_8_3_4_reserved_subscription_options_close(broker: Broker, version: int, options: int) -> None:
    if version == 5 and options == 0x04:
        options = 0xC1  # bit 2 is No Local in 5.0; bits 6-7 stay reserved
    with client(broker, uid(), version) as c:
        c.send(subscribe(1, (uid("t"), options), v5=version == 5))
        # 5.0 3.8.3.1: Maximum QoS 3 is a Protocol Error (0x82); mosquitto 2.0.11 says 0x81
        refused(c, version == 5, 0x81 if broker.kind == "mosquitto" or options != 0x03 else 0x82)


@spec(v311=("3.8.3-1", "1.5.3-1"), v5=("3.8.3-1", "1.5.4-1"))
@VERSIONS
def test_MQTT_3_8_3_1_filter_ill_formed_utf8_closes(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        c.send(subscribe(1, (b"a/\xff", 0), v5=version == 5))
        refused(c, version == 5, 0x81)


@spec(v311=("3.10.3-1", "1.5.3-1"), v5=("3.10.2-1", "1.5.4-1"))
@VERSIONS
def test_MQTT_3_10_3_1_unsubscribe_ill_formed_utf8_closes(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        c.send(unsubscribe(1, b"a/\xc0\xaf", v5=version == 5))
        refused(c, version == 5, 0x81)


@spec(v311=("3.10.3-2",), v5=("3.10.2-2",))
@VERSIONS
def test_MQTT_3_10_3_2_unsubscribe_without_filters_closes(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        c.send(packet(T.UNSUBSCRIBE, 2, struct.pack(">H", 1) + (b"\x00" if version == 5 else b"")))
        refused(c, version == 5, 0x82 if broker.kind == "ours" else 0x81)


@spec(
    v311=("3.10.4-1", "3.10.4-2", "3.10.4-4", "3.10.4-5", "3.10.4-6", "2.3.1-7"),
    v5=("3.10.4-1", "3.10.4-2", "3.10.4-4", "3.10.4-5", "3.10.4-6", "3.11.3-1", "3.11.3-2", "2.2.1-6"),
)
@VERSIONS
def test_MQTT_3_10_4_1_unsubscribe_exact_filter(broker: Broker, version: int) -> None:
    prefix = uid("u")
    with subscriber(broker, version, (f"{prefix}/+", 0), (f"{prefix}/a", 0)) as sub:
        sub.send(unsubscribe(0x0102, f"{prefix}/a", f"{prefix}/nothing", f"{prefix}/A", v5=version == 5))
        got = sub.expect(T.UNSUBACK)
        assert got.pid == 0x0102
        if version == 5:
            assert got.codes == [0x00, 0x11, 0x11]
        with client(broker, uid(), version) as pub:
            pub.send(publish(f"{prefix}/a", b"via-plus", v5=version == 5))
            settle(pub)
        assert sub.expect(T.PUBLISH).payload == b"via-plus"
        sub.quiet()  # only the '+' subscription is left: one copy
        sub.send(unsubscribe(2, f"{prefix}/+", v5=version == 5))
        sub.expect(T.UNSUBACK)
        with client(broker, uid(), version) as pub:
            pub.send(publish(f"{prefix}/a", b"none", v5=version == 5))
            settle(pub)
        sub.quiet()


@spec(v311=("3.10.4-3",), v5=("3.10.4-3",))
@VERSIONS
def test_MQTT_3_10_4_3_unsubscribe_completes_qos2_in_flight(broker: Broker, version: int) -> None:
    topic = uid("t")
    with subscriber(broker, version, (topic, 2)) as sub, client(broker, uid(), version) as pub:
        qos2_in(pub, topic, b"x", 1, version)
        got = sub.expect(T.PUBLISH)
        sub.send(unsubscribe(5, topic, v5=version == 5))
        sub.expect(T.UNSUBACK)
        sub.send(ack(T.PUBREC, got.pid))
        assert sub.expect(T.PUBREL).pid == got.pid
        sub.send(ack(T.PUBCOMP, got.pid))


@spec(v311=("4.7.2-1",), v5=("4.7.2-1",))
@VERSIONS
def test_MQTT_4_7_2_1_wildcards_do_not_match_dollar_topics(broker: Broker, version: int) -> None:
    name = uid("dollar")
    with client(broker, uid(), version) as c:
        c.send(subscribe(1, ("#", 0), (f"+/{name}", 0), (f"${name}/#", 0), v5=version == 5))
        c.expect(T.SUBACK)
        c.send(publish(f"${name}/{name}", b"x", v5=version == 5))
        got = c.expect(T.PUBLISH)
        while got.topic.startswith("$SYS") or not got.topic.startswith("$"):
            got = c.expect(T.PUBLISH)  # leftovers of earlier tests may reach '#'; ours is what counts
        assert got.topic == f"${name}/{name}"  # by the '$...' filter only: one copy, then nothing
        c.send(unsubscribe(2, "#", v5=version == 5))
        while (got := c.recv()).type == T.PUBLISH:
            assert not got.topic.startswith("$"), got


@spec(v311=("4.7.3-1",), v5=("4.7.3-1",))
@VERSIONS
def test_MQTT_4_7_3_1_empty_topic_closes(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        c.send(publish("", b"x", v5=version == 5))
        # ours: 0x82 (no Topic Alias either), mosquitto: 0x82 too
        refused(c, version == 5, 0x82)


@spec(v311=("4.7.3-1",), v5=("4.7.3-1",))
@VERSIONS
def test_MQTT_4_7_3_1_empty_filter_refused(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        c.send(subscribe(1, ("", 0), v5=version == 5))
        assert all(p.type == T.DISCONNECT and p.reason == 0x81 for p in c.closed())


@spec(v311=("4.7.3-2", "1.5.3-2"), v5=("4.7.3-2", "1.5.4-2"))
@pytest.mark.parametrize("where", ["topic", "filter"])
@VERSIONS
def test_MQTT_4_7_3_2_null_character_closes(broker: Broker, version: int, where: str) -> None:
    with client(broker, uid(), version) as c:
        bad = b"a/\x00b"
        c.send(publish(bad, b"x", v5=version == 5) if where == "topic" else subscribe(1, (bad, 0), v5=version == 5))
        refused(c, version == 5, 0x81)


@spec(v311=("4.7.3-4", "1.5.3-3"), v5=("4.7.3-4", "1.5.4-3"))
@VERSIONS
def test_MQTT_4_7_3_4_no_normalisation(broker: Broker, version: int) -> None:
    prefix = uid("n")
    composed = unicodedata.normalize("NFC", "é")
    decomposed = unicodedata.normalize("NFD", "é")
    bom = "\ufeffx"
    with subscriber(broker, version, (f"{prefix}/{composed}", 0), (f"{prefix}/{bom}", 0)) as sub:
        with client(broker, uid(), version) as pub:
            for topic in (decomposed, f"{prefix}/{decomposed}", f"{prefix}/X", f"{prefix}/x", f"{prefix}/{bom}"):
                pub.send(publish(topic, b"x", v5=version == 5))
            settle(pub)
        got = sub.expect(T.PUBLISH)
        assert got.topic == f"{prefix}/{bom}"  # the BOM is kept, not stripped
        sub.quiet()


@spec(v311=("3.8.3-1",), v5=("3.8.3-1",))
@VERSIONS
def test_MQTT_3_8_3_1_filter_length_prefix_is_exact(broker: Broker, version: int) -> None:
    """A filter whose length runs past the packet is malformed."""
    with client(broker, uid(), version) as c:
        body = struct.pack(">H", 1) + (b"\x00" if version == 5 else b"") + s("ab")[:1] + b"\x05ab\x00"
        c.send(packet(T.SUBSCRIBE, 2, body))
        refused(c, version == 5, 0x81)


@spec(v311=("3.3.2-1", "1.5.3-1"), v5=("3.3.2-1", "1.5.4-1"))
@pytest.mark.parametrize("bad", [b"a/\xff", b"a/\xed\xb0\x80"], ids=["invalid", "surrogate"])
@VERSIONS
def test_MQTT_3_3_2_1_topic_ill_formed_utf8_closes(broker: Broker, version: int, bad: bytes) -> None:
    with client(broker, uid(), version) as c:
        c.send(publish(bad, b"x", v5=version == 5))
        refused(c, version == 5, 0x81)
