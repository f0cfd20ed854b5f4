"""CONNECT and CONNACK (3.1.1 and 5.0 chapter 3.1-3.2), raw bytes against `mqtt serve` and mosquitto."""

from __future__ import annotations

import struct
import time

import pytest

from tests.brokers import Broker
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
    publish,
    refused,
    s,
    spec,
    subscribe,
    uid,
)

pytestmark = pytest.mark.interop


@spec(v311=("3.1.0-2", "4.8.0-1"), v5=("3.1.0-2", "4.13.1-1"))
@VERSIONS
def test_MQTT_3_1_0_2_second_connect_closes(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        c.send(connect(uid(), version))
        refused(c, version == 5, 0x82)


@spec(v311=("3.1.2-1",), v5=("3.1.2-1",))
@VERSIONS
def test_MQTT_3_1_2_1_unknown_protocol_name_closes(broker: Broker, version: int) -> None:
    body = s(b"MQTX") + bytes([version, 2]) + struct.pack(">H", 60) + (b"\x00" if version == 5 else b"") + s("x")
    with Conn(broker, version == 5) as c:
        c.send(packet(T.CONNECT, 0, body))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason in (0x01, 0x84) for p in seen), seen


@spec(v311=("3.1.2-2", "3.2.2-5"), v5=("3.1.2-2", "3.2.2-7", "4.13.2-1"))
@VERSIONS
def test_MQTT_3_1_2_2_unsupported_level_refused(broker: Broker, version: int) -> None:
    body = s(b"MQTT") + bytes([6, 2]) + struct.pack(">H", 60) + s("x")
    with Conn(broker, False) as c:  # the answer may come in the 3.1.1 form: level 6 is no 5.0 connection
        c.send(packet(T.CONNECT, 0, body))
        seen = c.closed()
        # 3.1.1: return code 0x01; a 5.0 server answers an unknown level with 0x84 in the 5.0 form
        assert [p.type for p in seen] == [T.CONNACK], seen
        assert seen[0].reason in (0x01, 0x84) and not seen[0].session_present


@spec(v311=("3.1.2-3", "3.2.2-6", "3.1.4-1"), v5=("3.1.2-3", "3.1.4-1"))
@VERSIONS
def test_MQTT_3_1_2_3_reserved_connect_flag_closes(broker: Broker, version: int) -> None:
    with Conn(broker, version == 5) as c:
        c.send(connect(uid(), version, reserved=True))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen) if version == 5 else not seen, seen


@spec(
    v311=("3.1.2-4", "3.1.4-3", "3.2.2-2", "3.2.2-3", "4.1.0-1", "4.1.0-2", "3.1.3-2"),
    v5=("3.1.2-5", "3.1.2-6", "3.1.4-4", "3.2.2-3", "3.1.2-23", "4.1.0-1", "3.1.3-2"),
)
@VERSIONS
def test_MQTT_3_1_2_4_clean_zero_resumes_session(broker: Broker, version: int) -> None:
    cid, topic = uid(), uid("t")
    expiry = [(P.SESSION_EXPIRY, 60)] if version == 5 else None
    with client(broker, cid, version, clean=False, properties=expiry) as c:
        assert not c.connack_packet.session_present  # type: ignore[attr-defined]
        c.send(subscribe(1, (topic, 1), v5=version == 5))
        c.expect(T.SUBACK)
    with client(broker, cid, version, clean=False, properties=expiry) as c:
        assert c.connack_packet.session_present  # type: ignore[attr-defined]
        with client(broker, uid(), version) as p:
            p.send(publish(topic, b"again", v5=version == 5))
        got = c.expect(T.PUBLISH)
        assert got.topic == topic and got.payload == b"again"
        c.send(connect(cid, version, clean=True))


@spec(v311=("3.1.2-5", "4.5.0-1"), v5=("4.5.0-1",))
@VERSIONS
def test_MQTT_3_1_2_5_messages_stored_while_offline(broker: Broker, version: int) -> None:
    cid, topic = uid(), uid("t")
    expiry = [(P.SESSION_EXPIRY, 60)] if version == 5 else None
    with client(broker, cid, version, clean=False, properties=expiry) as c:
        c.send(subscribe(1, (topic, 2), v5=version == 5))
        c.expect(T.SUBACK)
    with client(broker, uid(), version) as p:
        for qos in (1, 2):
            p.send(publish(topic, b"q%d" % qos, qos=qos, pid=qos, v5=version == 5))
            p.expect(T.PUBACK if qos == 1 else T.PUBREC)
    with client(broker, cid, version, clean=True) as c:
        pass
    # the clean connection above ended the session: nothing is waiting for a third one
    with client(broker, cid, version, clean=False, properties=expiry) as c:
        assert not c.connack_packet.session_present  # type: ignore[attr-defined]
        c.quiet()


@spec(v311=("3.1.2-5", "4.4.0-1"), v5=("4.4.0-1",))
@VERSIONS
def test_MQTT_3_1_2_5_offline_messages_delivered_on_return(broker: Broker, version: int) -> None:
    cid, topic = uid(), uid("t")
    expiry = [(P.SESSION_EXPIRY, 60)] if version == 5 else None
    with client(broker, cid, version, clean=False, properties=expiry) as c:
        c.send(subscribe(1, (topic, 2), v5=version == 5))
        c.expect(T.SUBACK)
    with client(broker, uid(), version) as p:
        for qos in (1, 2):
            p.send(publish(topic, b"q%d" % qos, qos=qos, pid=qos, v5=version == 5))
            p.expect(T.PUBACK if qos == 1 else T.PUBREC)
        p.send(ack(T.PUBREL, 2))  # mosquitto passes a QoS 2 message on at PUBREL, we at PUBLISH: both allowed
        p.expect(T.PUBCOMP)
    with client(broker, cid, version, clean=False, properties=expiry) as c:
        got = [c.expect(T.PUBLISH), c.expect(T.PUBLISH)]
        assert [(g.payload, g.qos) for g in got] == [(b"q1", 1), (b"q2", 2)]
        c.send(connect(cid, version))


@spec(v311=("3.1.2-6", "3.2.2-1"), v5=("3.1.2-4", "3.2.2-2", "4.1.0-2"))
@VERSIONS
def test_MQTT_3_1_2_6_clean_start_discards_session(broker: Broker, version: int) -> None:
    cid, topic = uid(), uid("t")
    expiry = [(P.SESSION_EXPIRY, 60)] if version == 5 else None
    with client(broker, cid, version, clean=False, properties=expiry) as c:
        c.send(subscribe(1, (topic, 1), v5=version == 5))
        c.expect(T.SUBACK)
    with client(broker, cid, version, clean=True) as c:
        assert not c.connack_packet.session_present  # type: ignore[attr-defined]
        with client(broker, uid(), version) as p:
            p.send(publish(topic, b"x", v5=version == 5) + PINGREQ)
            p.expect(T.PINGRESP)
        c.quiet()


@spec(v311=("3.1.2-7",))
def test_MQTT_3_1_2_7_retained_outlive_session(broker: Broker) -> None:
    topic = uid("t")
    with client(broker, uid(), 4) as p:
        p.send(publish(topic, b"kept", retain=True, v5=False))
        p.send(PINGREQ)
        p.expect(T.PINGRESP)
    with client(broker, uid(), 4) as c:
        c.send(subscribe(1, (topic, 0), v5=False))
        c.expect(T.SUBACK)
        got = c.expect(T.PUBLISH)
        assert got.payload == b"kept" and got.retain
        c.send(publish(topic, b"", retain=True, v5=False))


def _watch(broker: Broker, topic: str, version: int) -> Conn:
    w = client(broker, uid("w"), version)
    w.send(subscribe(1, (topic, 1), v5=version == 5))
    w.expect(T.SUBACK)
    return w


@spec(v311=("3.1.2-8", "3.1.2-16"), v5=("3.1.2-7", "3.1.2-8", "3.1.2-14"))
@VERSIONS
def test_MQTT_3_1_2_8_will_published_on_network_close(broker: Broker, version: int) -> None:
    topic = uid("will")
    with _watch(broker, topic, version) as w:
        c = client(broker, uid(), version, will=Will(topic, b"gone", qos=1))
        c.close()
        got = w.expect(T.PUBLISH)
        assert got.payload == b"gone" and not got.retain


@spec(v311=("3.1.2-10", "3.14.4-3"), v5=("3.1.2-10", "3.14.4-3"))
@VERSIONS
def test_MQTT_3_14_4_3_disconnect_discards_will(broker: Broker, version: int) -> None:
    topic = uid("will")
    with _watch(broker, topic, version) as w:
        c = client(broker, uid(), version, will=Will(topic, b"gone"))
        c.send(packet(T.DISCONNECT, 0, b""))
        c.closed()
        c.close()
        w.quiet()


@spec(v311=("3.1.2-17",), v5=("3.1.2-15",))
@VERSIONS
def test_MQTT_3_1_2_17_will_retain_published_retained(broker: Broker, version: int) -> None:
    topic = uid("will")
    c = client(broker, uid(), version, will=Will(topic, b"kept", retain=True))
    c.close()
    time.sleep(0.2)
    with client(broker, uid(), version) as late:
        late.send(subscribe(1, (topic, 0), v5=version == 5))
        late.expect(T.SUBACK)
        got = late.expect(T.PUBLISH)
        assert got.payload == b"kept" and got.retain
        late.send(publish(topic, b"", retain=True, v5=version == 5))


@spec(v311=("3.1.2-9", "3.1.4-1"), v5=("3.1.2-9", "3.1.4-1"))
@VERSIONS
def test_MQTT_3_1_2_9_will_flag_without_will_fields_closes(broker: Broker, version: int) -> None:
    body = s(b"MQTT") + bytes([version, 0x06]) + struct.pack(">H", 60) + (b"\x00" if version == 5 else b"")
    with Conn(broker, version == 5) as c:
        c.send(packet(T.CONNECT, 0, body + s(uid())))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen), seen


@spec(v311=("3.1.2-11", "3.1.2-13", "3.1.2-15"), v5=("3.1.2-11", "3.1.2-13"))
@pytest.mark.parametrize("flags", [0x08, 0x10, 0x20], ids=["will-qos-1", "will-qos-2", "will-retain"])
@VERSIONS
def test_MQTT_3_1_2_11_will_bits_without_will_flag_close(broker: Broker, version: int, flags: int) -> None:
    body = s(b"MQTT") + bytes([version, 0x02 | flags]) + struct.pack(">H", 60) + (b"\x00" if version == 5 else b"")
    with Conn(broker, version == 5) as c:
        c.send(packet(T.CONNECT, 0, body + s(uid())))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen), seen


@spec(v311=("3.1.2-14",), v5=("3.1.2-12",))
@VERSIONS
def test_MQTT_3_1_2_14_will_qos_3_closes(broker: Broker, version: int) -> None:
    with Conn(broker, version == 5) as c:
        c.send(connect(uid(), version, will=Will(uid("w"), qos=3)))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen), seen


@spec(v311=("3.1.2-18", "3.1.2-19", "3.1.2-20", "3.1.2-21"), v5=("3.1.2-16", "3.1.2-17", "3.1.2-18", "3.1.2-19"))
@pytest.mark.parametrize(
    "flags,fields",
    [(0x80, b""), (0xC0, s("user")), (0x00, s("user")), (0x80, s("user") + s("pw"))],
    ids=["user-missing", "password-missing", "user-unflagged", "password-unflagged"],
)
@VERSIONS
def test_MQTT_3_1_2_19_user_and_password_flags_match_fields(
    broker: Broker, version: int, flags: int, fields: bytes
) -> None:
    body = s(b"MQTT") + bytes([version, 0x02 | flags]) + struct.pack(">H", 60) + (b"\x00" if version == 5 else b"")
    with Conn(broker, version == 5) as c:
        c.send(packet(T.CONNECT, 0, body + s(uid()) + fields))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen), seen


@spec(v311=("3.1.2-22",))
def test_MQTT_3_1_2_22_password_without_user_name_closes(broker: Broker) -> None:
    with Conn(broker, False) as c:
        c.send(connect(uid(), 4, password=b"pw"))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason != 0 for p in seen), seen


@spec(v311=("3.1.2-24",), v5=("3.1.2-22",))
@VERSIONS
def test_MQTT_3_1_2_24_keep_alive_one_and_a_half(ours: Broker, version: int) -> None:
    # ours only: mosquitto 2.0.11 closes a 5.0 client with keep alive 1 after about 5.6 s (docs/CONFORMANCE.md)
    with client(ours, uid(), version, keepalive=1) as c:
        start = time.monotonic()
        c.closed(timeout=4)
        elapsed = time.monotonic() - start
        assert 1.0 <= elapsed <= 3.0, elapsed


@spec(v311=("3.1.3-4", "1.5.3-1", "3.1.4-1"), v5=("3.1.3-4", "1.5.4-1", "3.1.4-1"))
@pytest.mark.parametrize("bad", [b"\xff\xfe", b"\xed\xa0\x80", b"\xc0\xaf"], ids=["invalid", "surrogate", "overlong"])
@VERSIONS
def test_MQTT_3_1_3_4_client_id_ill_formed_utf8_closes(broker: Broker, version: int, bad: bytes) -> None:
    with Conn(broker, version == 5) as c:
        c.send(connect(b"id" + bad, version))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen), seen


@spec(v311=("3.1.3-5", "3.1.4-4"), v5=("3.1.3-5", "3.1.4-5", "3.2.0-1"))
@VERSIONS
def test_MQTT_3_1_3_5_short_alphanumeric_client_id_allowed(broker: Broker, version: int) -> None:
    with Conn(broker, version == 5) as c:
        c.send(connect("0123456789abcdefghijKLM", version) + PINGREQ)
        got = c.recv()
        assert got.type == T.CONNACK and got.reason == 0
        assert c.recv().type == T.PINGRESP


@spec(v311=("3.1.3-6",), v5=("3.1.3-6", "3.1.3-7", "3.2.2-16", "3.2.2-8"))
@VERSIONS
def test_MQTT_3_1_3_6_empty_client_id_assigned(broker: Broker, version: int) -> None:
    ids = set()
    for _ in range(2):
        with client(broker, "", version) as c:
            if version == 5:
                assigned = c.connack_packet.prop(P.ASSIGNED_CLIENT_ID)  # type: ignore[attr-defined]
                assert isinstance(assigned, str) and assigned
                ids.add(assigned)
    assert version == 4 or len(ids) == 2


@spec(v311=("3.1.3-8", "3.1.3-9", "3.2.2-4", "3.2.2-5"))
def test_MQTT_3_1_3_8_empty_client_id_clean_zero_refused(broker: Broker) -> None:
    with Conn(broker, False) as c:
        c.send(connect("", 4, clean=False))
        seen = c.closed()
        assert [(p.type, p.reason, p.session_present) for p in seen] == [(T.CONNACK, 0x02, False)]


@spec(v311=("3.1.3-10", "1.5.3-1"), v5=("3.1.3-11", "1.5.4-1"))
@VERSIONS
def test_MQTT_3_1_3_10_will_topic_ill_formed_utf8_closes(broker: Broker, version: int) -> None:
    with Conn(broker, version == 5) as c:
        c.send(connect(uid(), version, will=Will(b"w/\xff")))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen), seen


@spec(v311=("3.1.3-11", "1.5.3-1"), v5=("3.1.3-12", "1.5.4-1"))
@VERSIONS
def test_MQTT_3_1_3_11_user_name_ill_formed_utf8_closes(broker: Broker, version: int) -> None:
    with Conn(broker, version == 5) as c:
        c.send(connect(uid(), version, username=b"u\xff"))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen), seen


@spec(v311=("3.1.4-1",), v5=("3.1.4-1",))
@VERSIONS
def test_MQTT_3_1_4_1_truncated_connect_closes(broker: Broker, version: int) -> None:
    full = connect(uid(), version)
    body = full[2:-3]  # the client identifier is cut short; the remaining length says so
    with Conn(broker, version == 5) as c:
        c.send(packet(T.CONNECT, 0, body))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen), seen


@spec(v311=("3.1.4-2",), v5=("3.1.4-3",))
@VERSIONS
def test_MQTT_3_1_4_2_same_client_id_takes_over(broker: Broker, version: int) -> None:
    cid = uid()
    with client(broker, cid, version) as first, client(broker, cid, version) as second:
        seen = first.closed()
        if version == 5 and broker.kind == "ours":
            assert [(p.type, p.reason) for p in seen] == [(T.DISCONNECT, 0x8E)]
        elif version == 5:
            assert seen == []  # mosquitto 2.0.11 closes the old connection without DISCONNECT 0x8E
        else:
            assert seen == []
        assert second.open()


@spec(v311=("3.1.4-5",), v5=("3.1.4-6",))
@VERSIONS
def test_MQTT_3_1_4_5_nothing_after_refused_connect_is_processed(broker: Broker, version: int) -> None:
    topic = uid("t")
    with Conn(broker, version == 5) as c:
        c.send(connect("", version, clean=False) if version == 4 else connect(b"\xff", version))
        c.send(publish(topic, b"sneaked", retain=True, v5=version == 5))
        c.closed()
    with client(broker, uid(), version) as w:
        w.send(subscribe(1, (topic, 0), v5=version == 5))
        w.expect(T.SUBACK)
        w.quiet()


@spec(v311=("3.2.0-1",), v5=("3.2.0-1", "3.2.0-2"))
@VERSIONS
def test_MQTT_3_2_0_1_connack_first_and_once(broker: Broker, version: int) -> None:
    topic = uid("t")
    with Conn(broker, version == 5) as c:
        c.send(connect(uid(), version) + subscribe(1, (topic, 0), v5=version == 5) + PINGREQ)
        assert [c.recv().type for _ in range(3)] == [T.CONNACK, T.SUBACK, T.PINGRESP]
        c.send(PINGREQ)
        assert c.recv().type == T.PINGRESP


@spec(v311=("3.2.2-4",), v5=("3.2.2-6",))
@VERSIONS
def test_MQTT_3_2_2_4_refused_connack_has_no_session_present(broker: Broker, version: int) -> None:
    cid = uid()
    expiry = [(P.SESSION_EXPIRY, 60)] if version == 5 else None
    with client(broker, cid, version, clean=False, properties=expiry):
        pass
    body = s(b"MQTT") + bytes([6, 0]) + struct.pack(">H", 60) + s(cid)
    with Conn(broker, False) as c:
        c.send(packet(T.CONNECT, 0, body))
        seen = c.closed()
        assert seen and seen[0].type == T.CONNACK and seen[0].reason != 0 and not seen[0].session_present
    with client(broker, cid, version):
        pass


@spec(v311=("3.1.3-9", "3.1.4-1"), v5=("3.1.3-8", "3.1.4-2"))
@pytest.mark.parametrize("cid", ["bad\x01id", "bad\x7fid", "bad\u0085id"], ids=["U+0001", "U+007F", "U+0085"])
@VERSIONS
def test_MQTT_3_1_3_8_control_characters_in_client_id_refused(broker: Broker, version: int, cid: str) -> None:
    """A choice (5.0 1.5.4 lets a receiver refuse these code points; mosquitto does): closed, no session."""
    with Conn(broker, version == 5) as c:
        c.send(connect(cid, version))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen), seen


@spec(v311=("3.2.2-1",), v5=("3.2.2-1", "3.2.2-9", "3.2.2-10", "3.2.2-13"))
@VERSIONS
def test_MQTT_3_2_2_1_connack_flags_and_capabilities(broker: Broker, version: int) -> None:
    with client(broker, uid(), version) as c:
        ack = c.connack_packet  # type: ignore[attr-defined]
        assert ack.body[0] & 0xFE == 0
        if version == 5:  # QoS 2 and retained messages are supported: neither is announced as missing
            assert ack.prop(P.MAXIMUM_QOS) is None and ack.prop(P.RETAIN_AVAILABLE) is None
        c.send(subscribe(1, (uid("t"), 2), v5=version == 5))
        assert c.expect(T.SUBACK).codes == [2]


@spec(v311=("4.7.3-1", "3.1.4-1"), v5=("4.7.3-1", "3.1.4-1"))
@pytest.mark.parametrize("version,delay", [(4, None), (5, None), (5, 5)], ids=["3.1.1", "5.0", "5.0-will-delay"])
def test_MQTT_4_7_3_1_empty_will_topic_refused(broker: Broker, version: int, delay: int | None) -> None:
    will = Will("", props=[(P.WILL_DELAY, delay)] if delay else None)
    with Conn(broker, version == 5) as c:
        c.send(connect(uid(), version, will=will))
        seen = c.closed()
        assert all(p.type == T.CONNACK and p.reason >= 0x80 for p in seen), seen
