"""Inputs the fuzzer found failing, each kept as found (shortened) with what it showed and the fix."""

from __future__ import annotations

from mqtt_cli.core import (
    ConnAck,
    Connect,
    Disconnect,
    PacketReader,
    PingReq,
    PingResp,
    Properties,
    Subscribe,
    Subscription,
    encode,
)
from mqtt_cli.core.broker import BrokerCore

from .harness import codec_input


def test_mqtt31_connack_has_no_session_present_flag() -> None:
    # Found by the codec target: a 3.1 CONNACK whose first (unused) byte had bit 0 set decoded as
    # session_present=True, which encode() rightly refuses for 3.1: the decoder invented a 3.1.1 flag.
    codec_input(bytes((1, 0)) + b"\x20\x02\x01\x00")
    assert PacketReader(3).feed(b"\x20\x02\x01\x00") == [ConnAck(False, 0)]
    assert PacketReader(4).feed(b"\x20\x02\x01\x00") == [ConnAck(True, 0)]
    assert encode(ConnAck(False, 0), 3) == b"\x20\x02\x00\x00"


def test_a_subscribe_with_an_invalid_filter_closes_whatever_follows_it() -> None:
    # Found by the broker target when an invalid 5.0 filter was answered SUBACK 0x8F and the connection stayed: the
    # packets after it in the same read waited in the reader (a PINGREQ went unanswered). Such a filter is now
    # malformed (4.7, 4.13; mosquitto): DISCONNECT 0x81 and closed, nothing after it handled or left waiting.
    core = BrokerCore()
    conn = core.open("127.0.0.1:1", 0.0)
    core.receive(conn, encode(Connect("x", protocol_version=5), 5), 0.0)
    conn.out.clear()
    bad = encode(Subscribe(1, (Subscription("f/+/x", 0),)), 5).replace(b"f/+/x", b"f/#/x")
    core.receive(conn, bad + bad.replace(b"\x00\x01", b"\x00\x02", 1) + encode(PingReq(), 5), 1.0)
    assert PacketReader(5).feed(bytes(conn.out)) == [Disconnect(0x81)]
    assert conn.closed


def test_a_maximum_packet_size_no_answer_fits_in_is_refused() -> None:
    # Found by the broker target: a 5.0 client announcing Maximum Packet Size 1 was accepted, then sent a
    # 2-byte PINGRESP (and 4-byte PUBACKs) over its maximum [MQTT-3.1.2-24]. Not even the CONNACK fits: the
    # connection is closed at once, nothing sent.
    core = BrokerCore()
    conn = core.open("127.0.0.1:1", 0.0)
    core.receive(conn, encode(Connect("x", protocol_version=5, properties=Properties(maximum_packet_size=4)), 5), 0)
    assert conn.closed and not conn.connected and bytes(conn.out) == b""
    conn = core.open("127.0.0.1:2", 0.0)
    # 11 bytes: the CONNACK with its Topic Alias Maximum and Receive Maximum fits, and so does a PINGRESP.
    core.receive(conn, encode(Connect("y", protocol_version=5, properties=Properties(maximum_packet_size=11)), 5), 0)
    core.receive(conn, encode(PingReq(), 5), 1.0)
    connack = ConnAck(properties=Properties(topic_alias_maximum=10, receive_maximum=20))
    assert PacketReader(5).feed(bytes(conn.out)) == [connack, PingResp()]
