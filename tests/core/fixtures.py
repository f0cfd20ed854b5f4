"""One table of packets and their bytes, after MQTT.js's mqtt-packet: parse, encode and round-trip tests are
generated from it (test_codec.py). Bytes are written out by hand from the specifications (the spec's own examples
where it gives any), never produced by our encoder.

A fixture with `canonical=False` holds bytes that decode to the packet but that our encoder writes differently
(e.g. a 5.0 PUBACK with an explicit reason code 0): decode-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mqtt_cli.core.errors import (
    MalformedPacket,
    ProtocolError,
    RemoteProtocolError,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from mqtt_cli.core.packets import (
    Auth,
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
from mqtt_cli.core.properties import Properties, properties_from_items


def unchecked(items: list[tuple[int, Any]]) -> Properties:
    """Properties as a peer may send them, breaking rules that `Properties(...)` refuses to build."""
    return properties_from_items(tuple(items))


def h(text: str) -> bytes:
    return bytes.fromhex(text)


@dataclass(frozen=True)
class Fixture:
    name: str
    version: int
    packet: Any
    raw: bytes
    canonical: bool = True

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ErrorFixture:
    name: str
    version: int
    raw: bytes
    error: type[RemoteProtocolError]
    reason_code: int
    message: str  # a fragment the error's message must contain
    packet: Any = None  # the packet the error carries (None: not decodable)
    fatal: bool = False
    tolerant: Any = "same"  # what a tolerant reader recovers (texts with U+FFFD, unknown properties kept)

    def __str__(self) -> str:
        return self.name


MQTT = "00 04 4d 51 54 54"  # the protocol name "MQTT"
MQISDP = "00 06 4d 51 49 73 64 70"  # "MQIsdp" (3.1)

ALL_CONNECT_PROPERTIES = Properties(
    session_expiry_interval=0xFFFFFFFF,
    receive_maximum=20,
    maximum_packet_size=1048576,
    topic_alias_maximum=10,
    request_response_information=1,
    request_problem_information=0,
    user_properties=[("a", "b")],
    authentication_method="SCRAM",
    authentication_data=b"\x01\x02",
)
ALL_WILL_PROPERTIES = Properties(
    will_delay_interval=5,
    payload_format_indicator=1,
    message_expiry_interval=60,
    content_type="t",
    response_topic="r",
    correlation_data=b"\xca\xfe",
    user_properties=[("k", "v")],
)
ALL_CONNACK_PROPERTIES = Properties(
    session_expiry_interval=10,
    receive_maximum=100,
    maximum_qos=1,
    retain_available=0,
    maximum_packet_size=2048,
    assigned_client_identifier="auto-1",
    topic_alias_maximum=5,
    reason_string="ok",
    user_properties=[("a", "b")],
    wildcard_subscription_available=1,
    subscription_identifier_available=0,
    shared_subscription_available=1,
    server_keep_alive=30,
    response_information="ri",
    server_reference="srv",
    authentication_method="m",
    authentication_data=b"d",
)
# Interleaved repeats, in wire order: only items can say that.
ALL_PUBLISH_PROPERTIES = Properties(
    [
        (0x01, 1),
        (0x02, 3600),
        (0x23, 3),
        (0x08, "resp"),
        (0x09, b"\x00\x01"),
        (0x26, ("k", "v1")),
        (0x26, ("k", "v2")),
        (0x0B, 1),
        (0x0B, 268435455),
        (0x03, "text/plain"),
    ]
)

FIXTURES: list[Fixture] = [
    # --- CONNECT ---
    Fixture("connect 3.1", 3, Connect("c", protocol_version=3), h(f"10 0f {MQISDP} 03 02 00 3c 00 01 63")),
    Fixture("connect 3.1.1 minimal", 4, Connect("c"), h(f"10 0d {MQTT} 04 02 00 3c 00 01 63")),
    Fixture(
        "connect 3.1.1 spec example flags 0xCE (will QoS 1, user name, password)",
        4,
        Connect("id", True, 10, "u", b"pw", Will("w", b"bye", 1, False)),
        h(f"10 1d {MQTT} 04 ce 00 0a 00 02 69 64 00 01 77 00 03 62 79 65 00 01 75 00 02 70 77"),
    ),
    Fixture(
        "connect 3.1.1 empty client id, will QoS 2 retained, keepalive 0",
        4,
        Connect("", True, 0, will=Will("a/b", b"", 2, True)),
        h(f"10 13 {MQTT} 04 36 00 00 00 00 00 03 61 2f 62 00 00"),
    ),
    Fixture(
        "connect 3.1.1 bridge flag, persistent session",
        4,
        Connect("b", False, 60, bridge=True),
        h(f"10 0d {MQTT} 84 00 00 3c 00 01 62"),
    ),
    Fixture(
        "connect 3.1.1 user name only",
        4,
        Connect("c", username="u1"),
        h(f"10 11 {MQTT} 04 82 00 3c 00 01 63 00 02 75 31"),
    ),
    Fixture(
        "connect 3.1.1 keepalive 65535",
        4,
        Connect("c", keepalive=65535),
        h(f"10 0d {MQTT} 04 02 ff ff 00 01 63"),
    ),
    Fixture(
        "connect 5.0 spec example (session expiry 10)",
        5,
        Connect("c", True, 10, "u", b"p", properties=Properties(session_expiry_interval=10), protocol_version=5),
        h(f"10 19 {MQTT} 05 c2 00 0a 05 11 00 00 00 0a 00 01 63 00 01 75 00 01 70"),
    ),
    Fixture(
        "connect 5.0 every CONNECT property",
        5,
        Connect("c", properties=ALL_CONNECT_PROPERTIES, protocol_version=5),
        h(
            f"10 36 {MQTT} 05 02 00 3c 28"
            " 11 ff ff ff ff 21 00 14 27 00 10 00 00 22 00 0a 19 01 17 00 26 00 01 61 00 01 62"
            " 15 00 05 53 43 52 41 4d 16 00 02 01 02"
            " 00 01 63"
        ),
    ),
    Fixture(
        "connect 5.0 will with every will property",
        5,
        Connect("c", will=Will("w/t", b"x", 1, False, ALL_WILL_PROPERTIES), protocol_version=5),
        h(
            f"10 37 {MQTT} 05 0e 00 3c 00 00 01 63"
            " 20 18 00 00 00 05 01 01 02 00 00 00 3c 03 00 01 74 08 00 01 72 09 00 02 ca fe 26 00 01 6b 00 01 76"
            " 00 03 77 2f 74 00 01 78"
        ),
    ),
    Fixture(
        "connect 5.0 password without user name",
        5,
        Connect("c", password=b"p", protocol_version=5),
        h(f"10 11 {MQTT} 05 42 00 3c 00 00 01 63 00 01 70"),
    ),
    # --- CONNACK ---
    Fixture("connack 3.1 identifier rejected", 3, ConnAck(False, 2), h("20 02 00 02")),
    Fixture("connack 3.1.1 accepted", 4, ConnAck(), h("20 02 00 00")),
    Fixture("connack 3.1.1 session present", 4, ConnAck(True, 0), h("20 02 01 00")),
    Fixture("connack 3.1.1 not authorized", 4, ConnAck(False, 5), h("20 02 00 05")),
    Fixture("connack 5.0 success", 5, ConnAck(), h("20 03 00 00 00")),
    Fixture(
        "connack 5.0 every CONNACK property",
        5,
        ConnAck(True, 0, ALL_CONNACK_PROPERTIES),
        h(
            "20 48 01 00 45"
            " 11 00 00 00 0a 21 00 64 24 01 25 00 27 00 00 08 00 12 00 06 61 75 74 6f 2d 31 22 00 05"
            " 1f 00 02 6f 6b 26 00 01 61 00 01 62 28 01 29 00 2a 01 13 00 1e 1a 00 02 72 69"
            " 1c 00 03 73 72 76 15 00 01 6d 16 00 01 64"
        ),
    ),
    Fixture(
        "connack 5.0 bad user name or password with reason string",
        5,
        ConnAck(False, 0x86, Properties(reason_string="bad")),
        h("20 09 00 86 06 1f 00 03 62 61 64"),
    ),
    # --- PUBLISH ---
    Fixture("publish 3.1.1 QoS 0", 4, Publish("a/b", b"hi"), h("30 07 00 03 61 2f 62 68 69")),
    Fixture("publish 3.1 QoS 0", 3, Publish("a/b", b"hi"), h("30 07 00 03 61 2f 62 68 69")),
    Fixture(
        "publish 3.1.1 QoS 1 retained",
        4,
        Publish("a/b", b"hi", 1, True, packet_id=10),
        h("33 09 00 03 61 2f 62 00 0a 68 69"),
    ),
    Fixture(
        "publish 3.1.1 QoS 2 DUP packet id 65535",
        4,
        Publish("a/b", b"hi", 2, dup=True, packet_id=65535),
        h("3c 09 00 03 61 2f 62 ff ff 68 69"),
    ),
    Fixture("publish 3.1.1 empty payload", 4, Publish("a/b"), h("30 05 00 03 61 2f 62")),
    Fixture("publish 3.1.1 UTF-8 topic", 4, Publish("ü/€"), h("30 08 00 06 c3 bc 2f e2 82 ac")),
    Fixture("publish 3.1.1 binary payload", 4, Publish("a/b", b"\x00\xff"), h("30 07 00 03 61 2f 62 00 ff")),
    Fixture("publish 3.1.1 topic '/' (empty levels)", 4, Publish("/", b""), h("30 03 00 01 2f")),
    Fixture("publish $SYS topic", 4, Publish("$SYS/x", b"1"), h("30 09 00 06 24 53 59 53 2f 78 31")),
    Fixture("remaining length 127", 4, Publish("a", b"x" * 124), h("30 7f 00 01 61") + b"x" * 124),
    Fixture("remaining length 128", 4, Publish("a", b"x" * 125), h("30 80 01 00 01 61") + b"x" * 125),
    Fixture("remaining length 16383", 4, Publish("a", b"x" * 16380), h("30 ff 7f 00 01 61") + b"x" * 16380),
    Fixture("remaining length 16384", 4, Publish("a", b"x" * 16381), h("30 80 80 01 00 01 61") + b"x" * 16381),
    Fixture(
        "remaining length 2097151",
        4,
        Publish("a", b"x" * 2097148),
        h("30 ff ff 7f 00 01 61") + b"x" * 2097148,
    ),
    Fixture(
        "remaining length 2097152",
        4,
        Publish("a", b"x" * 2097149),
        h("30 80 80 80 01 00 01 61") + b"x" * 2097149,
    ),
    Fixture(
        "publish 5.0 spec example (topic a/b, packet id 10)",
        5,
        Publish("a/b", b"", 1, packet_id=10),
        h("32 08 00 03 61 2f 62 00 0a 00"),
    ),
    Fixture(
        "publish 5.0 every PUBLISH property, repeats interleaved",
        5,
        Publish("a/b", b"hi", properties=ALL_PUBLISH_PROPERTIES),
        h(
            "30 42 00 03 61 2f 62 3a"
            " 01 01 02 00 00 0e 10 23 00 03 08 00 04 72 65 73 70 09 00 02 00 01"
            " 26 00 01 6b 00 02 76 31 26 00 01 6b 00 02 76 32 0b 01 0b ff ff ff 7f"
            " 03 00 0a 74 65 78 74 2f 70 6c 61 69 6e"
            " 68 69"
        ),
    ),
    Fixture(
        "publish 5.0 empty topic with topic alias",
        5,
        Publish("", b"x", properties=Properties(topic_alias=1)),
        h("30 07 00 00 03 23 00 01 78"),
    ),
    Fixture(
        "publish 5.0 QoS 2 retained with user property",
        5,
        Publish("t", b"", 2, True, packet_id=1, properties=Properties(user_properties=[("ключ", "值")])),
        h("35 16 00 01 74 00 01 10 26 00 08 d0 ba d0 bb d1 8e d1 87 00 03 e5 80 bc"),
    ),
    # --- PUBACK, PUBREC, PUBREL, PUBCOMP ---
    Fixture("puback 3.1.1", 4, PubAck(1), h("40 02 00 01")),
    Fixture("pubrec 3.1.1", 4, PubRec(2), h("50 02 00 02")),
    Fixture("pubrel 3.1.1", 4, PubRel(3), h("62 02 00 03")),
    Fixture("pubcomp 3.1.1", 4, PubComp(4), h("70 02 00 04")),
    # 3.1 allowed DUP on a PUBREL, SUBSCRIBE or UNSUBSCRIBE sent again (3.1.1 fixed their flags).
    Fixture("pubrel 3.1 with DUP (a resend)", 3, PubRel(3), h("6a 02 00 03"), canonical=False),
    Fixture(
        "subscribe 3.1 with DUP",
        3,
        Subscribe(1, (Subscription("a/b", 1),)),
        h("8a 08 00 01 00 03 61 2f 62 01"),
        canonical=False,
    ),
    Fixture("unsubscribe 3.1 with DUP", 3, Unsubscribe(1, ("a",)), h("aa 05 00 01 00 01 61"), canonical=False),
    Fixture("puback 3.1", 3, PubAck(65535), h("40 02 ff ff")),
    Fixture("puback 5.0 short form", 5, PubAck(1), h("40 02 00 01")),
    Fixture("puback 5.0 no matching subscribers", 5, PubAck(1, 0x10), h("40 03 00 01 10")),
    Fixture(
        "puback 5.0 quota exceeded with reason string",
        5,
        PubAck(1, 0x97, Properties(reason_string="r")),
        h("40 08 00 01 97 04 1f 00 01 72"),
    ),
    Fixture(
        "puback 5.0 success with user property",
        5,
        PubAck(7, 0, Properties(user_properties=[("k", "v")])),
        h("40 0b 00 07 00 07 26 00 01 6b 00 01 76"),
    ),
    Fixture("pubrec 5.0 unspecified error", 5, PubRec(6, 0x80), h("50 03 00 06 80")),
    Fixture("pubrel 5.0 packet identifier not found", 5, PubRel(5, 0x92), h("62 03 00 05 92")),
    Fixture("pubcomp 5.0 packet identifier not found", 5, PubComp(5, 0x92), h("70 03 00 05 92")),
    Fixture("puback 5.0 explicit success, no properties", 5, PubAck(1), h("40 03 00 01 00"), canonical=False),
    Fixture("puback 5.0 explicit success, empty properties", 5, PubAck(1), h("40 04 00 01 00 00"), canonical=False),
    # --- SUBSCRIBE / SUBACK ---
    Fixture(
        "subscribe 3.1.1 one filter",
        4,
        Subscribe(1, (Subscription("a/b", 1),)),
        h("82 08 00 01 00 03 61 2f 62 01"),
    ),
    Fixture(
        "subscribe 3.1.1 two filters",
        4,
        Subscribe(2, (Subscription("a/#", 0), Subscription("+/b", 2))),
        h("82 0e 00 02 00 03 61 2f 23 00 00 03 2b 2f 62 02"),
    ),
    Fixture(
        "subscribe 5.0 options, shared, subscription identifier 268435455",
        5,
        Subscribe(
            3,
            (Subscription("a/+", 1, True, True, 2), Subscription("$share/g/x", 0, retain_handling=1)),
            Properties(subscription_identifier=268435455, user_properties=[("a", "b")]),
        ),
        h(
            "82 22 00 03 0c 0b ff ff ff 7f 26 00 01 61 00 01 62"
            " 00 03 61 2f 2b 2d 00 0a 24 73 68 61 72 65 2f 67 2f 78 10"
        ),
    ),
    Fixture("suback 3.1.1", 4, SubAck(1, (0, 1, 2, 0x80)), h("90 06 00 01 00 01 02 80")),
    Fixture(
        "suback 5.0 with failures and reason string",
        5,
        SubAck(3, (1, 0, 0x8F, 0x9E, 0xA1, 0xA2), Properties(reason_string="x")),
        h("90 0d 00 03 04 1f 00 01 78 01 00 8f 9e a1 a2"),
    ),
    # --- UNSUBSCRIBE / UNSUBACK ---
    Fixture("unsubscribe 3.1.1", 4, Unsubscribe(4, ("a/b", "c")), h("a2 0a 00 04 00 03 61 2f 62 00 01 63")),
    Fixture(
        "unsubscribe 5.0 with user property",
        5,
        Unsubscribe(5, ("a/#",), Properties(user_properties=[("k", "v")])),
        h("a2 0f 00 05 07 26 00 01 6b 00 01 76 00 03 61 2f 23"),
    ),
    Fixture("unsuback 3.1.1", 4, UnsubAck(4), h("b0 02 00 04")),
    Fixture("unsuback 5.0", 5, UnsubAck(5, (0x00, 0x11, 0x87, 0x8F)), h("b0 07 00 05 00 00 11 87 8f")),
    # --- PINGREQ / PINGRESP ---
    Fixture("pingreq 3.1", 3, PingReq(), h("c0 00")),
    Fixture("pingreq 3.1.1", 4, PingReq(), h("c0 00")),
    Fixture("pingreq 5.0", 5, PingReq(), h("c0 00")),
    Fixture("pingresp 3.1.1", 4, PingResp(), h("d0 00")),
    Fixture("pingresp 5.0", 5, PingResp(), h("d0 00")),
    Fixture("pingreq 3.1.1 non-minimal remaining length", 4, PingReq(), h("c0 80 00"), canonical=False),
    # --- DISCONNECT ---
    Fixture("disconnect 3.1", 3, Disconnect(), h("e0 00")),
    Fixture("disconnect 3.1.1", 4, Disconnect(), h("e0 00")),
    Fixture("disconnect 5.0 normal", 5, Disconnect(), h("e0 00")),
    Fixture("disconnect 5.0 with will message", 5, Disconnect(0x04), h("e0 01 04")),
    Fixture(
        "disconnect 5.0 server shutting down with properties",
        5,
        Disconnect(0x8B, Properties(session_expiry_interval=0, reason_string="bye", server_reference="s2")),
        h("e0 12 8b 10 11 00 00 00 00 1f 00 03 62 79 65 1c 00 02 73 32"),
    ),
    Fixture("disconnect 5.0 explicit normal", 5, Disconnect(), h("e0 01 00"), canonical=False),
    Fixture("disconnect 5.0 explicit normal, empty properties", 5, Disconnect(), h("e0 02 00 00"), canonical=False),
    # --- AUTH ---
    Fixture("auth 5.0 success, short form", 5, Auth(), h("f0 00")),
    Fixture(
        "auth 5.0 continue authentication",
        5,
        Auth(0x18, Properties(authentication_method="SCRAM", authentication_data=b"\x01\x02")),
        h("f0 0f 18 0d 15 00 05 53 43 52 41 4d 16 00 02 01 02"),
    ),
    Fixture(
        "auth 5.0 re-authenticate",
        5,
        Auth(0x19, Properties(authentication_method="m")),
        h("f0 06 19 04 15 00 01 6d"),
    ),
]


E = ErrorFixture
ERROR_FIXTURES: list[ErrorFixture] = [
    # Framing
    E("reserved packet type 0", 4, h("00 00"), MalformedPacket, 0x81, "reserved"),
    E(
        "remaining length of five bytes",
        4,
        h("30 ff ff ff ff 7f"),
        MalformedPacket,
        0x81,
        "four bytes",
        fatal=True,
    ),
    E(
        "non-minimal remaining length in 5.0",
        5,
        h("c0 80 00"),
        MalformedPacket,
        0x81,
        "minimally",
        packet=PingReq(),
    ),
    E("pingreq with a body", 4, h("c0 01 00"), MalformedPacket, 0x81, "unexpected bytes", packet=PingReq()),
    E(
        "disconnect 3.1.1 with a body",
        4,
        h("e0 01 00"),
        MalformedPacket,
        0x81,
        "unexpected",
        packet=Disconnect(),
    ),
    # Fixed-header flags
    E(
        "subscribe with flags 0",
        4,
        h("80 08 00 01 00 03 61 2f 62 01"),
        MalformedPacket,
        0x81,
        "flags",
        packet=Subscribe(1, (Subscription("a/b", 1),)),
    ),
    E("pubrel with flags 0", 4, h("60 02 00 01"), MalformedPacket, 0x81, "flags", packet=PubRel(1)),
    # DUP on PUBREL, SUBSCRIBE, UNSUBSCRIBE: 3.1 only; and in 3.1 no other flags, on no other packet.
    E("pubrel 3.1.1 with DUP", 4, h("6a 02 00 01"), MalformedPacket, 0x81, "flags are 0xA", packet=PubRel(1)),
    E("pubrel 5.0 with DUP", 5, h("6a 02 00 01"), MalformedPacket, 0x81, "flags are 0xA", packet=PubRel(1)),
    E(
        "subscribe 3.1.1 with DUP",
        4,
        h("8a 08 00 01 00 03 61 2f 62 01"),
        MalformedPacket,
        0x81,
        "flags",
        packet=Subscribe(1, (Subscription("a/b", 1),)),
    ),
    E(
        "unsubscribe 5.0 with DUP",
        5,
        h("aa 06 00 01 00 00 01 61"),
        MalformedPacket,
        0x81,
        "flags",
        packet=Unsubscribe(1, ("a",)),
    ),
    E("pubrel 3.1 with flags 0x3", 3, h("63 02 00 01"), MalformedPacket, 0x81, "flags", packet=PubRel(1)),
    E("puback 3.1 with DUP", 3, h("48 02 00 01"), MalformedPacket, 0x81, "flags", packet=PubAck(1)),
    E("puback with flags 2", 4, h("42 02 00 01"), MalformedPacket, 0x81, "flags", packet=PubAck(1)),
    E(
        "unsubscribe with flags 0",
        4,
        h("a0 05 00 01 00 01 61"),
        MalformedPacket,
        0x81,
        "flags",
        packet=Unsubscribe(1, ("a",)),
    ),
    # PUBLISH
    E(
        "publish QoS 3",
        4,
        h("36 07 00 03 61 2f 62 00 01"),
        MalformedPacket,
        0x81,
        "QoS 3",
        packet=Publish("a/b", b"", 3, packet_id=1),
    ),
    E(
        "publish QoS 0 with DUP",
        4,
        h("38 05 00 03 61 2f 62"),
        MalformedPacket,
        0x81,
        "DUP",
        packet=Publish("a/b", dup=True),
    ),
    E(
        "publish wildcard '+' in topic",
        4,
        h("30 05 00 03 61 2f 2b"),
        TopicNameInvalid,
        0x90,
        "wildcard",
        packet=Publish("a/+"),
    ),
    E(
        "publish topic '#'",
        5,
        h("30 04 00 01 23 00"),
        TopicNameInvalid,
        0x90,
        "wildcard",
        packet=Publish("#"),
    ),
    E(
        "publish packet id 0",
        4,
        h("32 07 00 03 61 2f 62 00 00"),
        ProtocolError,
        0x82,
        "packet identifier 0",
        packet=Publish("a/b", b"", 1, packet_id=0),
    ),
    E("publish 3.1.1 empty topic", 4, h("30 02 00 00"), TopicNameInvalid, 0x90, "empty", packet=Publish("")),
    E(
        "publish 5.0 empty topic without alias",
        5,
        h("30 03 00 00 00"),
        ProtocolError,
        0x82,
        "topic alias",
        packet=Publish(""),
    ),
    E(
        "publish topic not UTF-8",
        4,
        h("30 04 00 02 c3 28"),
        MalformedPacket,
        0x81,
        "UTF-8",
        tolerant=Publish("\ufffd("),
    ),
    E(
        "publish topic with U+0000",
        4,
        h("30 05 00 03 61 00 62"),
        MalformedPacket,
        0x81,
        "U+0000",
        tolerant=Publish("a\x00b"),
    ),
    E(
        "publish topic with a UTF-16 surrogate",
        4,
        h("30 05 00 03 ed a0 80"),
        MalformedPacket,
        0x81,
        "UTF-8",
        tolerant=Publish("\ufffd\ufffd\ufffd"),
    ),
    E(
        "publish topic with an overlong encoding",
        4,
        h("30 04 00 02 c0 af"),
        MalformedPacket,
        0x81,
        "UTF-8",
        tolerant=Publish("\ufffd\ufffd"),
    ),
    E("publish topic longer than the packet", 4, h("30 03 00 05 61"), MalformedPacket, 0x81, "past the end"),
    E(
        "publish QoS 1 without room for a packet id",
        4,
        h("32 05 00 03 61 2f 62"),
        MalformedPacket,
        0x81,
        "packet identifier",
    ),
    E(
        "publish 5.0 topic alias 0",
        5,
        h("30 08 00 01 74 03 23 00 00 78"),
        ProtocolError,
        0x82,
        "topic_alias",
        packet=Publish("t", b"x", properties=unchecked([(0x23, 0)])),
    ),
    E(
        "publish 5.0 payload format indicator 2",
        5,
        h("30 06 00 01 74 02 01 02"),
        ProtocolError,
        0x82,
        "payload_format_indicator",
        packet=Publish("t", properties=unchecked([(0x01, 2)])),
    ),
    E(
        "publish 5.0 response topic with a wildcard",
        5,
        h("30 0a 00 01 74 06 08 00 03 61 2f 23"),
        ProtocolError,
        0x82,
        "response_topic",
        packet=Publish("t", properties=unchecked([(0x08, "a/#")])),
    ),
    E(
        "publish 5.0 session expiry interval (not a PUBLISH property)",
        5,
        h("30 09 00 01 74 05 11 00 00 00 01"),
        MalformedPacket,
        0x81,
        "not allowed in PUBLISH",
        packet=Publish("t", properties=Properties([(0x11, 1)])),
    ),
    E(
        "publish 5.0 content type twice",
        5,
        h("30 0c 00 01 74 08 03 00 01 61 03 00 01 62"),
        ProtocolError,
        0x82,
        "more than once",
        packet=Publish("t", properties=Properties([(0x03, "a"), (0x03, "b")])),
    ),
    E(
        "publish 5.0 unknown property 0x05",
        5,
        h("30 06 00 01 74 02 05 00"),
        MalformedPacket,
        0x81,
        "unknown property",
        tolerant=Publish("t", properties=unchecked([(0x05, b"\x00")])),
    ),
    E(
        "publish 5.0 property length past the end",
        5,
        h("30 05 00 01 74 09 01"),
        MalformedPacket,
        0x81,
        "property length",
    ),
    E(
        "publish 5.0 property value past the block",
        5,
        h("30 07 00 01 74 02 02 00 00"),
        MalformedPacket,
        0x81,
        "message_expiry_interval",
    ),
    E(
        "publish 5.0 subscription identifier 0",
        5,
        h("30 06 00 01 74 02 0b 00"),
        ProtocolError,
        0x82,
        "subscription_identifier",
        packet=Publish("t", properties=unchecked([(0x0B, 0)])),
    ),
    E(
        "publish 5.0 non-minimal subscription identifier",
        5,
        h("30 07 00 01 74 03 0b 81 00"),
        MalformedPacket,
        0x81,
        "minimally",
        packet=Publish("t", properties=Properties([(0x0B, 1)])),
    ),
    # CONNECT
    E(
        "connect protocol name MQTX",
        4,
        h("10 0d 00 04 4d 51 54 58 04 02 00 3c 00 01 63"),
        UnsupportedProtocolVersion,
        0x84,
        "MQTX",
        tolerant=Connect("c", protocol_name="MQTX"),  # read on, as Wireshark does (mqtt dump)
    ),
    E(
        "connect level 6",
        4,
        h(f"10 0d {MQTT} 06 02 00 3c 00 01 63"),
        UnsupportedProtocolVersion,
        0x84,
        "level 6",
        tolerant=Connect("c", protocol_version=6, protocol_name="MQTT"),  # an unknown level: read as 3.1.1
    ),
    E(
        "connect MQIsdp with level 4",
        4,
        h(f"10 0f {MQISDP} 04 02 00 3c 00 01 63"),
        UnsupportedProtocolVersion,
        0x84,
        "MQIsdp",
        tolerant=Connect("c", protocol_name="MQIsdp"),
    ),
    E(
        "connect reserved flag",
        4,
        h(f"10 0d {MQTT} 04 03 00 3c 00 01 63"),
        MalformedPacket,
        0x81,
        "reserved",
        packet=Connect("c"),
    ),
    E(
        "connect will QoS without will flag",
        4,
        h(f"10 0d {MQTT} 04 0a 00 3c 00 01 63"),
        MalformedPacket,
        0x81,
        "without the will flag",
        packet=Connect("c"),
    ),
    E(
        "connect will retain without will flag",
        4,
        h(f"10 0d {MQTT} 04 22 00 3c 00 01 63"),
        MalformedPacket,
        0x81,
        "without the will flag",
        packet=Connect("c"),
    ),
    E(
        "connect will QoS 3",
        4,
        h(f"10 12 {MQTT} 04 1e 00 3c 00 01 63 00 01 77 00 00"),
        MalformedPacket,
        0x81,
        "will QoS is 3",
        packet=Connect("c", will=Will("w", b"", 3)),
    ),
    E(
        "connect 3.1.1 password without user name",
        4,
        h(f"10 10 {MQTT} 04 42 00 3c 00 01 63 00 01 70"),
        MalformedPacket,
        0x81,
        "password flag without the user name",
        packet=Connect("c", password=b"p"),
    ),
    E(
        "connect with a trailing byte",
        4,
        h(f"10 0e {MQTT} 04 02 00 3c 00 01 63 00"),
        MalformedPacket,
        0x81,
        "unexpected bytes",
        packet=Connect("c"),
    ),
    E(
        "connect will topic with a wildcard",
        4,
        h(f"10 12 {MQTT} 04 06 00 3c 00 01 63 00 01 23 00 00"),
        TopicNameInvalid,
        0x90,
        "wildcard",
        packet=Connect("c", will=Will("#")),
    ),
    E(
        "connect client id past the end",
        4,
        h(f"10 0d {MQTT} 04 02 00 3c 00 05 63"),
        MalformedPacket,
        0x81,
        "client identifier",
    ),
    E(
        "connect 5.0 authentication data without method",
        5,
        h(f"10 12 {MQTT} 05 02 00 3c 04 16 00 01 01 00 01 63"),
        ProtocolError,
        0x82,
        "authentication method",
        packet=Connect("c", properties=Properties(authentication_data=b"\x01"), protocol_version=5),
    ),
    E(
        "connect 5.0 receive maximum 0",
        5,
        h(f"10 11 {MQTT} 05 02 00 3c 03 21 00 00 00 01 63"),
        ProtocolError,
        0x82,
        "receive_maximum",
        packet=Connect("c", properties=unchecked([(0x21, 0)]), protocol_version=5),
    ),
    E(
        "connect 5.0 topic alias (not a CONNECT property)",
        5,
        h(f"10 11 {MQTT} 05 02 00 3c 03 23 00 01 00 01 63"),
        MalformedPacket,
        0x81,
        "not allowed in CONNECT",
        packet=Connect("c", properties=Properties([(0x23, 1)]), protocol_version=5),
    ),
    E(
        "connect 5.0 will delay interval outside the will",
        5,
        h(f"10 13 {MQTT} 05 02 00 3c 05 18 00 00 00 01 00 01 63"),
        MalformedPacket,
        0x81,
        "not allowed in CONNECT",
        packet=Connect("c", properties=Properties([(0x18, 1)]), protocol_version=5),
    ),
    E(
        "connect 5.0 session expiry interval twice",
        5,
        h(f"10 18 {MQTT} 05 02 00 3c 0a 11 00 00 00 01 11 00 00 00 02 00 01 63"),
        ProtocolError,
        0x82,
        "more than once",
        packet=Connect("c", properties=Properties([(0x11, 1), (0x11, 2)]), protocol_version=5),
    ),
    # CONNACK
    E("connack reserved flags", 4, h("20 02 02 00"), MalformedPacket, 0x81, "reserved", packet=ConnAck()),
    E(
        "connack 3.1.1 return code 6",
        4,
        h("20 02 00 06"),
        ProtocolError,
        0x82,
        "reserved",
        packet=ConnAck(False, 6),
    ),
    E(
        "connack refusal with session present",
        4,
        h("20 02 01 05"),
        ProtocolError,
        0x82,
        "session present",
        packet=ConnAck(True, 5),
    ),
    E(
        "connack 5.0 reason 0x10",
        5,
        h("20 03 00 10 00"),
        ProtocolError,
        0x82,
        "0x10",
        packet=ConnAck(False, 0x10),
    ),
    E(
        "connack 5.0 maximum QoS 2",
        5,
        h("20 05 00 00 02 24 02"),
        ProtocolError,
        0x82,
        "maximum_qos",
        packet=ConnAck(properties=unchecked([(0x24, 2)])),
    ),
    E("connack too short", 4, h("20 01 00"), MalformedPacket, 0x81, "at least 2"),
    # Acknowledgements
    E(
        "puback packet id 0",
        4,
        h("40 02 00 00"),
        ProtocolError,
        0x82,
        "packet identifier 0",
        packet=PubAck(0),
    ),
    E(
        "puback 3.1.1 with a reason code",
        4,
        h("40 03 00 01 00"),
        MalformedPacket,
        0x81,
        "unexpected",
        packet=PubAck(1),
    ),
    E("puback 5.0 reason 0x92", 5, h("40 03 00 01 92"), ProtocolError, 0x82, "0x92", packet=PubAck(1, 0x92)),
    E("pubrel 5.0 reason 0x10", 5, h("62 03 00 01 10"), ProtocolError, 0x82, "0x10", packet=PubRel(1, 0x10)),
    E("puback too short", 4, h("40 01 00"), MalformedPacket, 0x81, "packet identifier"),
    # SUBSCRIBE / SUBACK / UNSUBSCRIBE / UNSUBACK
    E(
        "subscribe without filters",
        4,
        h("82 02 00 01"),
        ProtocolError,
        0x82,
        "no topic filter",
        packet=Subscribe(1, ()),
    ),
    E(
        "subscribe QoS 3",
        4,
        h("82 08 00 01 00 03 61 2f 62 03"),
        MalformedPacket,
        0x81,
        "QoS 3",
        packet=Subscribe(1, (Subscription("a/b", 3),)),
    ),
    E(
        "subscribe 3.1.1 reserved option bits",
        4,
        h("82 08 00 01 00 03 61 2f 62 05"),
        MalformedPacket,
        0x81,
        "reserved bits",
        packet=Subscribe(1, (Subscription("a/b", 1),)),
    ),
    E(
        "subscribe 5.0 retain handling 3",
        5,
        h("82 09 00 01 00 00 03 61 2f 62 30"),
        ProtocolError,
        0x82,
        "retain handling 3",
        packet=Subscribe(1, (Subscription("a/b", 0, retain_handling=3),)),
    ),
    E(
        "subscribe 5.0 reserved option bits",
        5,
        h("82 09 00 01 00 00 03 61 2f 62 40"),
        MalformedPacket,
        0x81,
        "reserved option bits",
        packet=Subscribe(1, (Subscription("a/b"),)),
    ),
    E(
        "subscribe 5.0 no-local on a shared subscription",
        5,
        h("82 10 00 01 00 00 0a 24 73 68 61 72 65 2f 67 2f 78 04"),
        ProtocolError,
        0x82,
        "no-local",
        packet=Subscribe(1, (Subscription("$share/g/x", 0, no_local=True),)),
    ),
    E(
        "subscribe filter with '#' not last",
        4,
        h("82 0a 00 01 00 05 61 2f 23 2f 62 00"),
        RemoteProtocolError,
        0x8F,
        "#",
        packet=Subscribe(1, (Subscription("a/#/b"),)),
    ),
    E(
        "subscribe empty filter",
        4,
        h("82 05 00 01 00 00 00"),
        RemoteProtocolError,
        0x8F,
        "",
        packet=Subscribe(1, (Subscription(""),)),
    ),
    E(
        "subscribe 5.0 two subscription identifiers",
        5,
        h("82 0d 00 01 04 0b 01 0b 02 00 03 61 2f 62 00"),
        ProtocolError,
        0x82,
        "more than once",
        packet=Subscribe(1, (Subscription("a/b"),), Properties([(0x0B, 1), (0x0B, 2)])),
    ),
    E(
        "subscribe 5.0 subscription identifier 0",
        5,
        h("82 0b 00 01 02 0b 00 00 03 61 2f 62 00"),
        ProtocolError,
        0x82,
        "subscription_identifier",
        packet=Subscribe(1, (Subscription("a/b"),), unchecked([(0x0B, 0)])),
    ),
    E(
        "subscribe filter without options",
        4,
        h("82 07 00 01 00 03 61 2f 62"),
        MalformedPacket,
        0x81,
        "options",
    ),
    E("suback 3.1.1 code 3", 4, h("90 03 00 01 03"), ProtocolError, 0x82, "0x03", packet=SubAck(1, (3,))),
    E(
        "suback without codes",
        4,
        h("90 02 00 01"),
        ProtocolError,
        0x82,
        "no reason code",
        packet=SubAck(1, ()),
    ),
    E(
        "unsubscribe without filters",
        4,
        h("a2 02 00 01"),
        ProtocolError,
        0x82,
        "no topic filter",
        packet=Unsubscribe(1, ()),
    ),
    E(
        "unsuback 5.0 code 0x01",
        5,
        h("b0 04 00 01 00 01"),
        ProtocolError,
        0x82,
        "0x01",
        packet=UnsubAck(1, (1,)),
    ),
    E(
        "unsuback 3.1.1 with codes",
        4,
        h("b0 03 00 01 00"),
        MalformedPacket,
        0x81,
        "unexpected",
        packet=UnsubAck(1),
    ),
    # AUTH and DISCONNECT
    E("auth in 3.1.1", 4, h("f0 00"), ProtocolError, 0x82, "AUTH is not part of MQTT 3", packet=Auth()),
    E("disconnect 5.0 reason 0x01", 5, h("e0 01 01"), ProtocolError, 0x82, "0x01", packet=Disconnect(1)),
    E(
        "auth 5.0 continue without method",
        5,
        h("f0 01 18"),
        ProtocolError,
        0x82,
        "authentication method",
        packet=Auth(0x18),
    ),
]
