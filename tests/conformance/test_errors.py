"""Fixed headers, reserved bits, packet identifiers, PINGREQ and DISCONNECT (3.1.1 and 5.0 chapters 1.5, 2,
3.12-3.15, 4.8 / 4.13)."""

from __future__ import annotations

import struct

import pytest

from tests.brokers import Broker
from tests.conformance.test_publish import subscriber
from tests.conformance.wire import (
    PINGREQ,
    VERSIONS,
    Conn,
    P,
    T,
    Will,
    ack,
    client,
    connect,
    packet,
    props,
    publish,
    refused,
    s,
    spec,
    subscribe,
    uid,
)

pytestmark = pytest.mark.interop

BAD_FLAGS = {
    "PUBACK": (T.PUBACK, 1, struct.pack(">H", 1)),
    "PUBREC": (T.PUBREC, 2, struct.pack(">H", 1)),
    "PUBREL": (T.PUBREL, 0, struct.pack(">H", 1)),
    "PUBCOMP": (T.PUBCOMP, 4, struct.pack(">H", 1)),
    "SUBSCRIBE": (T.SUBSCRIBE, 0, struct.pack(">H", 1) + s("a") + b"\x00"),
    "UNSUBSCRIBE": (T.UNSUBSCRIBE, 3, struct.pack(">H", 1) + s("a")),
    # DUP set (0xA): a 3.1 resend, which 3.1.1 and 5.0 no longer allow.
    "PUBREL+DUP": (T.PUBREL, 0xA, struct.pack(">H", 1)),
    "SUBSCRIBE+DUP": (T.SUBSCRIBE, 0xA, struct.pack(">H", 1) + s("a") + b"\x00"),
    "UNSUBSCRIBE+DUP": (T.UNSUBSCRIBE, 0xA, struct.pack(">H", 1) + s("a")),
    "PINGREQ": (T.PINGREQ, 8, b""),
    "DISCONNECT": (T.DISCONNECT, 1, b""),
}

MOSQUITTO_IGNORES_FLAGS = {T.PUBACK, T.PUBREC, T.PUBCOMP, T.PINGREQ}


def _bad_flags(broker: Broker, version: int, name: str) -> None:
    ptype, flags, body = BAD_FLAGS[name]
    if version == 5 and ptype in (T.SUBSCRIBE, T.UNSUBSCRIBE):
        body = body[:2] + b"\x00" + body[2:]
    topic = uid("will")
    with subscriber(broker, version, (topic, 0)) as watch, client(broker, uid(), version, will=Will(topic)) as c:
        c.send(packet(ptype, flags, body))
        if broker.kind == "mosquitto" and ptype in MOSQUITTO_IGNORES_FLAGS:
            assert c.open()  # mosquitto 2.0.11 reads these without looking at the flags
            return
        refused(c, version == 5, 0x81)
        if ptype == T.DISCONNECT:  # not a DISCONNECT that ends the session normally: the will goes out
            assert watch.expect(T.PUBLISH).topic == topic


@spec(v311=("2.2.2-1", "2.2.2-2"), v5=("2.1.3-1",))
@pytest.mark.parametrize("name", ["PUBACK", "PUBREC", "PUBCOMP", "PINGREQ"])
@VERSIONS
def test_MQTT_2_2_2_2_invalid_fixed_header_flags_close(broker: Broker, version: int, name: str) -> None:
    _bad_flags(broker, version, name)


@spec(v311=("3.6.1-1",), v5=("3.6.1-1",))
@VERSIONS
def test_MQTT_3_6_1_1_pubrel_flags(broker: Broker, version: int) -> None:
    _bad_flags(broker, version, "PUBREL")


@spec(v311=("3.8.1-1",), v5=("3.8.1-1",))
@VERSIONS
def test_MQTT_3_8_1_1_subscribe_flags(broker: Broker, version: int) -> None:
    _bad_flags(broker, version, "SUBSCRIBE")


@spec(v311=("3.10.1-1",), v5=("3.10.1-1",))
@VERSIONS
def test_MQTT_3_10_1_1_unsubscribe_flags(broker: Broker, version: int) -> None:
    _bad_flags(broker, version, "UNSUBSCRIBE")


@spec(v311=("3.6.1-1", "3.8.1-1", "3.10.1-1"), v5=("3.6.1-1", "3.8.1-1", "3.10.1-1"))
@pytest.mark.parametrize("name", ["PUBREL+DUP", "SUBSCRIBE+DUP", "UNSUBSCRIBE+DUP"])
@VERSIONS
def test_MQTT_3_6_1_1_dup_on_pubrel_subscribe_unsubscribe_closes_after_31(
    broker: Broker, version: int, name: str
) -> None:
    _bad_flags(broker, version, name)


def test_mqtt_31_resends_with_dup_on_pubrel_subscribe_unsubscribe(broker: Broker) -> None:
    """MQTT 3.1 set DUP on a PUBREL, SUBSCRIBE or UNSUBSCRIBE sent again (flags 0xA): answered, not closed."""
    topic = uid("t")
    with client(broker, uid(), 3) as c:
        c.send(publish(topic, b"x", qos=2, pid=7, v5=False))
        assert c.expect(T.PUBREC).pid == 7
        c.send(packet(T.PUBREL, 0xA, struct.pack(">H", 7)))
        assert c.expect(T.PUBCOMP).pid == 7
        c.send(packet(T.SUBSCRIBE, 0xA, struct.pack(">H", 8) + s(topic) + b"\x01"))
        assert c.expect(T.SUBACK).pid == 8
        c.send(packet(T.UNSUBSCRIBE, 0xA, struct.pack(">H", 9) + s(topic)))
        assert c.expect(T.UNSUBACK).pid == 9
        assert c.open()


@spec(v311=("3.14.1-1",), v5=("3.14.1-1",))
@VERSIONS
def test_MQTT_3_14_1_1_disconnect_flags(broker: Broker, version: int) -> None:
    _bad_flags(broker, version, "DISCONNECT")


@spec(v5=("3.15.1-1", "4.12.0-7"))
@pytest.mark.parametrize("flags", [0, 1])
def test_MQTT_3_15_1_1_auth_without_auth_method_closes(broker: Broker, flags: int) -> None:
    with client(broker, uid(), 5) as c:
        c.send(packet(T.AUTH, flags, b"\x19\x00"))
        refused(c, True, 0x81 if flags else 0x82)


@spec(v311=("3.1.0-1", "4.8.0-1"), v5=("3.1.0-1", "4.13.1-1"))
@VERSIONS
def test_MQTT_3_1_0_1_first_packet_not_connect_closes(broker: Broker, version: int) -> None:
    with Conn(broker, version == 5) as c:
        c.send(publish("a", b"x", v5=version == 5))
        assert c.closed() == []


@spec(v311=("2.3.1-1", "4.8.0-1"), v5=("2.2.1-3", "4.13.1-1"))
@pytest.mark.parametrize("what", ["publish", "subscribe", "unsubscribe"])
@VERSIONS
def test_MQTT_2_3_1_1_packet_identifier_zero_closes(broker: Broker, version: int, what: str) -> None:
    v5 = version == 5
    raw = {
        "publish": publish("a", b"x", qos=1, pid=0, v5=v5),
        "subscribe": subscribe(0, ("a", 0), v5=v5),
        "unsubscribe": packet(T.UNSUBSCRIBE, 2, struct.pack(">H", 0) + (b"\x00" if v5 else b"") + s("a")),
    }[what]
    with client(broker, uid(), version) as c:
        c.send(raw)
        refused(c, v5, 0x82 if broker.kind == "ours" or what == "publish" else 0x81)


@spec(v311=("3.12.4-1",), v5=("3.12.4-1",))
@VERSIONS
def test_MQTT_3_12_4_1_pingresp(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        for _ in range(3):
            c.send(PINGREQ)
            got = c.expect(T.PINGRESP)
            assert got.flags == 0 and got.body == b""


@spec(v311=("4.8.0-1",), v5=("4.13.1-1",))
@pytest.mark.parametrize("ptype", [T.PINGREQ, T.PINGRESP])
@VERSIONS
def test_MQTT_4_8_0_1_ping_with_a_body_closes(broker: Broker, version: int, ptype: T) -> None:
    with client(broker, uid(), version) as c:
        c.send(packet(ptype, 0, b"\x00"))
        if broker.kind == "mosquitto":
            assert c.open()  # mosquitto 2.0.11 ignores the body (and answers a PINGREQ)
            return
        seen = c.closed()
        assert all(p.type == T.DISCONNECT and p.reason in (0x81, 0x82) for p in seen), seen


@spec(v5=("1.5.5-1",))
def test_MQTT_1_5_5_1_overlong_remaining_length(broker: Broker) -> None:
    """A Variable Byte Integer of five bytes is malformed; a non-minimal one of two bytes for 0 is malformed
    to us, and read by mosquitto 2.0.11 (the MUST binds the sender; a receiver may refuse)."""
    with client(broker, uid(), 5) as c:
        c.send(bytes([T.PINGREQ << 4, 0x80, 0x80, 0x80, 0x80, 0x01]))
        refused(c, True, 0x81)
    with client(broker, uid(), 5) as c:
        c.send(bytes([T.PINGREQ << 4, 0x80, 0x00]))
        if broker.kind == "ours":
            refused(c, True, 0x81)
        else:
            assert c.expect(T.PINGRESP)


@spec(v5=("3.14.2-1", "3.14.2-2", "3.14.4-1", "3.14.4-2", "4.13.2-1"))
def test_MQTT_3_14_2_2_server_disconnect_form(broker: Broker) -> None:
    cid = uid()
    with client(broker, cid, 5, properties=[(P.SESSION_EXPIRY, 30)]) as first:
        with client(broker, cid, 5, clean=False, properties=[(P.SESSION_EXPIRY, 30)]):
            seen = first.closed()
        for p in seen:
            assert p.type == T.DISCONNECT and p.reason in (0x8E,) and p.prop(P.SESSION_EXPIRY) is None
        with client(broker, cid, 5):
            pass


@spec(v5=("3.14.0-1",))
def test_MQTT_3_14_0_1_no_disconnect_before_connack(broker: Broker) -> None:
    with Conn(broker, True) as c:
        c.send(connect(uid(), 5, properties=[(P.RECEIVE_MAXIMUM, 0)]))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen), seen


@spec(v5=("3.1.2-29", "3.4.2-2", "3.4.2-3", "3.9.2-1", "3.9.2-2", "3.11.2-1", "3.11.2-2"))
def test_MQTT_3_1_2_29_no_reason_string_without_problem_information(broker: Broker) -> None:
    with client(broker, uid(), 5, properties=[(P.REQUEST_PROBLEM_INFO, 0)]) as c:
        c.send(publish(uid("nobody"), b"x", qos=1, pid=1))
        got = c.expect(T.PUBACK)
        assert got.reason in (0x00, 0x10) and not got.props
        c.send(subscribe(2, ("a/#/b", 0)))
        got = c.recv()
        assert got.type in (T.SUBACK, T.DISCONNECT)
        if got.type == T.SUBACK:
            assert not got.props


@spec(v5=("3.14.2-3", "3.14.2-4", "3.2.2-19", "3.2.2-20", "3.1.2-24"))
def test_MQTT_3_14_2_3_disconnect_fits_maximum_packet_size(broker: Broker) -> None:
    with client(broker, uid(), 5, properties=[(P.MAXIMUM_PACKET_SIZE, 16), (P.REQUEST_PROBLEM_INFO, 1)]) as c:
        assert len(c.connack_packet.body) + 2 <= 16  # type: ignore[attr-defined]
        c.send(packet(T.PUBLISH, 0x06, s("a") + b"\x00\x01\x00"))
        seen = c.closed()
        assert all(len(p.body) + 2 <= 16 for p in seen), seen


@spec(v5=("3.2.2-22", "3.1.2-21"))
def test_MQTT_3_2_2_22_keep_alive_used_as_sent(broker: Broker) -> None:
    with client(broker, uid(), 5, keepalive=7) as c:
        assert c.connack_packet.prop(P.SERVER_KEEP_ALIVE) in (None, 7)  # type: ignore[attr-defined]


@spec(v5=("4.12.0-1", "3.2.2-8"))
def test_MQTT_4_12_0_1_unknown_authentication_method_refused(broker: Broker) -> None:
    with Conn(broker, True) as c:
        c.send(connect(uid(), 5, properties=[(P.AUTH_METHOD, "SCRAM-SHA-1")]))
        seen = c.closed()
        assert [(p.type, p.reason) for p in seen] == [(T.CONNACK, 0x8C)], seen


@spec(v5=("4.12.0-6", "3.1.2-28"))
def test_MQTT_4_12_0_6_no_auth_method_in_connack(broker: Broker) -> None:
    with client(broker, uid(), 5, properties=[(P.REQUEST_RESPONSE_INFO, 0)]) as c:
        ack = c.connack_packet  # type: ignore[attr-defined]
        assert ack.prop(P.AUTH_METHOD) is None and ack.prop(P.RESPONSE_INFO) is None
        c.send(PINGREQ)
        assert c.recv().type == T.PINGRESP  # no AUTH


@spec(v5=("2.2.2-1",))
def test_MQTT_2_2_2_1_property_length_always_present(broker: Broker) -> None:
    with Conn(broker, True) as c:
        c.send(connect(uid(), 5) + props(None)[:0])
        got = c.connack()
        assert len(got.body) >= 3  # flags, reason code, property length (0 when there are none)


@spec(v5=("3.1.2-24", "3.14.0-1"))
def test_MQTT_3_1_2_24_connack_too_large_for_the_client_closes(broker: Broker) -> None:
    """A Maximum Packet Size of 8 leaves no room for the CONNACK's properties: both brokers close unanswered
    (ours used to keep the connection open without a CONNACK)."""
    with Conn(broker, True) as c:
        c.send(connect(uid(), 5, properties=[(P.MAXIMUM_PACKET_SIZE, 8)]))
        assert c.closed() == []


OPEN, SILENT = -1, -2  # mosquitto keeps the connection / closes it without a DISCONNECT

PROTOCOL_ERRORS = {
    "qos0-dup": (publish("a/b", b"x", dup=True), 0x81, OPEN),
    "topic-alias-0": (publish("a/b", b"x", properties=[(P.TOPIC_ALIAS, 0)]), 0x82, 0x81),
    "unknown-topic-alias": (publish("", b"x", properties=[(P.TOPIC_ALIAS, 3)]), 0x82, 0x82),
    "property-twice": (publish("a/b", b"x", properties=[(P.MESSAGE_EXPIRY, 5), (P.MESSAGE_EXPIRY, 6)]), 0x82, SILENT),
    "payload-format-2": (publish("a/b", b"x", properties=[(P.PAYLOAD_FORMAT, 2)]), 0x82, OPEN),
    "property-of-another-packet": (publish("a/b", b"x", properties=[(P.SESSION_EXPIRY, 5)]), 0x81, 0x81),
    "subscription-identifier-0": (subscribe(1, ("a", 0), properties=[(P.SUBSCRIPTION_ID, 0)]), 0x82, 0x81),
    "retain-handling-3": (subscribe(1, ("a", 0x30)), 0x82, 0x81),
    "session-expiry-after-0": (packet(T.DISCONNECT, 0, b"\x00" + props([(P.SESSION_EXPIRY, 30)])), 0x82, 0x82),
    "puback-reason-not-in-table": (packet(T.PUBACK, 0, b"\x00\x01\x05"), 0x82, OPEN),
    "pubrel-reason-not-in-table": (packet(T.PUBREL, 2, b"\x00\x01\x10"), 0x82, OPEN),
    "packet-type-0": (packet(0, 0, b""), 0x81, 0x82),
}


@spec(v5=("4.13.1-1", "3.3.1-2", "3.3.2-8", "4.13.2-1"))
@pytest.mark.parametrize("case", list(PROTOCOL_ERRORS))
def test_MQTT_4_13_1_1_errors_and_their_reason_codes(broker: Broker, case: str) -> None:
    """Packets a client may not send, the code each broker answers with (5.0 2.4 / 4.13 choose between 0x81
    Malformed Packet and 0x82 Protocol Error; mosquitto 2.0.11 lets some through)."""
    raw, ours_code, mosquitto_code = PROTOCOL_ERRORS[case]
    expected = ours_code if broker.kind == "ours" else mosquitto_code
    with client(broker, uid(), 5) as c:
        c.send(raw)
        if expected == OPEN:
            assert c.open()
        elif expected == SILENT:
            assert c.closed() == []
        else:
            assert [(p.type, p.reason) for p in c.closed()] == [(T.DISCONNECT, expected)]


@spec(v5=("3.6.2-1",))
def test_MQTT_3_6_2_1_pubrec_for_an_unknown_identifier(broker: Broker) -> None:
    with client(broker, uid(), 5) as c:
        c.send(ack(T.PUBREC, 77))
        got = c.expect(T.PUBREL)
        # ours: 0x92 Packet Identifier not found (5.0 3.6.2.1); mosquitto 2.0.11: 0x00
        assert (got.pid, got.reason) == (77, 0x92 if broker.kind == "ours" else 0x00)
        assert c.open()
