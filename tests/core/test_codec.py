"""Parse, encode and round-trip tests generated from the fixture table, plus the reader's own behaviour."""

from __future__ import annotations

import pickle

import pytest

from mqtt_cli.core.encoder import encode
from mqtt_cli.core.errors import LocalProtocolError, MalformedPacket, PacketTooLarge, RemoteProtocolError
from mqtt_cli.core.packets import (
    PACKET_CLASSES,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from mqtt_cli.core.properties import PROPERTY_TABLE, Properties
from mqtt_cli.core.reader import PacketReader, decode
from mqtt_cli.core.wire import encode_vbi, read_vbi

from .fixtures import ERROR_FIXTURES, FIXTURES, ErrorFixture, Fixture, h

CANONICAL = [f for f in FIXTURES if f.canonical]


@pytest.mark.parametrize("fx", FIXTURES, ids=str)
def test_parse(fx: Fixture) -> None:
    assert decode(fx.raw, fx.version) == fx.packet


@pytest.mark.parametrize("fx", CANONICAL, ids=str)
def test_encode(fx: Fixture) -> None:
    assert encode(fx.packet, fx.version) == fx.raw


@pytest.mark.parametrize("fx", FIXTURES, ids=str)
def test_round_trip(fx: Fixture) -> None:
    packet = decode(fx.raw, fx.version)
    again = encode(packet, fx.version)
    assert decode(again, fx.version) == packet
    if fx.canonical:
        assert again == fx.raw


@pytest.mark.parametrize("fx", [f for f in FIXTURES if len(f.raw) < 200], ids=str)
def test_every_chunking_point(fx: Fixture) -> None:
    for cut in range(len(fx.raw)):
        reader = PacketReader(fx.version)
        assert reader.feed(fx.raw[:cut]) == []
        assert reader.feed(fx.raw[cut:]) == [fx.packet]
        assert reader.buffered == 0


@pytest.mark.parametrize("fx", [f for f in FIXTURES if len(f.raw) < 200], ids=str)
def test_one_byte_at_a_time(fx: Fixture) -> None:
    reader = PacketReader(fx.version)
    got = []
    for i in range(len(fx.raw)):
        got += reader.feed(fx.raw[i : i + 1])
    assert got == [fx.packet]


def test_table_covers_every_packet_type_in_every_version() -> None:
    seen = {(f.version, type(f.packet)) for f in FIXTURES}
    for cls in PACKET_CLASSES.values():
        for version in (4, 5) if cls is not Auth else (5,):  # AUTH in 3.1.1 is an error fixture
            assert (version, cls) in seen, f"no {cls.__name__} fixture for level {version}"
    for cls in (Connect, ConnAck, Publish, PubAck, PingReq, Disconnect):
        assert (3, cls) in seen


def test_table_covers_every_property() -> None:
    seen: set[int] = set()
    for f in FIXTURES:
        packet = f.packet
        for props in (
            getattr(packet, "properties", None),
            getattr(getattr(packet, "will", None), "properties", None),
        ):
            if props:
                seen.update(pid for pid, _ in props)
    assert seen == set(PROPERTY_TABLE)


def test_table_covers_every_reason_code_family() -> None:
    codes = {(type(f.packet).__name__, getattr(f.packet, "reason_code", None)) for f in FIXTURES}
    assert ("ConnAck", 0x86) in codes and ("Disconnect", 0x04) in codes and ("Auth", 0x19) in codes


# --- errors ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fx", ERROR_FIXTURES, ids=str)
def test_strict_reader_raises(fx: ErrorFixture) -> None:
    reader = PacketReader(fx.version)
    with pytest.raises(fx.error) as info:
        reader.feed(fx.raw)
    err = info.value
    assert err.reason_code == fx.reason_code
    assert fx.message in str(err)
    assert err.packet == fx.packet
    assert err.fatal == fx.fatal
    assert err.packet_type == fx.raw[0] >> 4


@pytest.mark.parametrize("fx", ERROR_FIXTURES, ids=str)
def test_tolerant_reader_reports_and_goes_on(fx: ErrorFixture) -> None:
    """A capture decoder sees the error in line, with the packet when it could be decoded, then the next one."""
    after = h("c0 00")
    reader = PacketReader(fx.version, strict=False)
    if fx.fatal:
        got = []
        with pytest.raises(fx.error):
            got = reader.feed(fx.raw + after)
        assert got == []
        with pytest.raises(fx.error):  # the stream is over
            reader.feed(after)
        return
    got = reader.feed(fx.raw + after)
    assert len(got) == 2, got
    err, nxt = got
    assert isinstance(err, fx.error)
    assert err.packet == (fx.packet if fx.tolerant == "same" else fx.tolerant)
    assert nxt == PingReq()


def test_strict_error_keeps_the_packets_before_it() -> None:
    reader = PacketReader(4)
    with pytest.raises(RemoteProtocolError) as info:
        reader.feed(h("c0 00 40 02 00 01 30 05 00 03 61 2f 2b c0 00"))
    assert info.value.packets == [PingReq(), PubAck(1)]
    # A non-fatal error leaves the reader positioned after the bad packet, the rest kept for the next call.
    assert reader.feed(b"") == [PingReq()]
    assert reader.feed(h("d0")) == []


def test_strict_reader_after_non_fatal_error_goes_on() -> None:
    reader = PacketReader(4)
    with pytest.raises(RemoteProtocolError):
        reader.feed(h("30 05 00 03 61 2f 2b c0"))
    assert reader.feed(h("00")) == [PingReq()]


def test_violations_are_all_listed() -> None:
    with pytest.raises(MalformedPacket) as info:
        decode(h("38 05 00 03 61 2f 2b"), 4)  # DUP on QoS 0 and a wildcard
    messages = [str(e) for e in info.value.details["violations"]]
    assert any("DUP" in m for m in messages) and any("wildcard" in m for m in messages)


def test_max_packet_size() -> None:
    raw = encode(Publish("a/b", b"x" * 10), 4)  # 17 bytes
    assert PacketReader(4, max_packet_size=17).feed(raw) == [Publish("a/b", b"x" * 10)]
    reader = PacketReader(4, max_packet_size=16)
    with pytest.raises(PacketTooLarge) as info:
        reader.feed(raw[:2])  # known from the fixed header alone, before the body is buffered
    assert info.value.reason_code == 0x95 and info.value.fatal
    with pytest.raises(PacketTooLarge):
        reader.feed(raw[2:])


def test_maximum_remaining_length_asks_for_more() -> None:
    reader = PacketReader(4)
    assert reader.feed(h("30 ff ff ff 7f 00 01 61") + b"x" * 1000) == []
    assert reader.buffered == 1008


@pytest.mark.parametrize("size", [10, 200, 20_000, 3_000_000])
def test_a_publish_split_anywhere_in_its_fixed_header(size: int) -> None:
    # Remaining Lengths of one, two, three and four bytes, each cut at every byte of the fixed header and just after.
    raw = encode(Publish("t", b"p" * size), 4)
    (whole,) = PacketReader(4).feed(raw)
    for cut in range(1, 7):
        reader = PacketReader(4)
        assert reader.feed(raw[:cut]) == []
        assert reader.feed(raw[cut:]) == [whole]
        assert reader.buffered == 0


def test_a_remaining_length_of_five_bytes_ends_the_stream_however_it_is_cut() -> None:
    raw = h("30 ff ff ff ff 01 00")  # the fifth byte of the Remaining Length (the first after the type) is an error
    for cut in range(1, len(raw)):
        reader = PacketReader(4)
        with pytest.raises(MalformedPacket, match="PUBLISH packet is longer than four bytes") as info:
            if cut < 5:
                assert reader.feed(raw[:cut]) == []
                reader.feed(raw[cut:])
            else:
                reader.feed(raw[:cut])
        assert info.value.fatal
        with pytest.raises(MalformedPacket):
            reader.feed(b"\x00")  # the stream is over


def test_remaining_length_boundaries() -> None:
    cases = {
        0: "00",
        127: "7f",
        128: "80 01",
        16383: "ff 7f",
        16384: "80 80 01",
        2097151: "ff ff 7f",
        2097152: "80 80 80 01",
        268435455: "ff ff ff 7f",
    }
    for value, text in cases.items():
        raw = h(text)
        assert encode_vbi(value) == raw
        assert read_vbi(raw, 0, len(raw)) == (value, len(raw), True)
    with pytest.raises(LocalProtocolError):
        encode_vbi(268435456)
    with pytest.raises(MalformedPacket):
        read_vbi(h("ff ff ff ff 01"), 0, 5)


def test_version_learned_from_connect_in_the_same_buffer() -> None:
    connect = Connect("c", protocol_version=5)
    publish = Publish("a", b"x", 1, packet_id=1, properties=Properties(content_type="t"))
    reader = PacketReader()
    assert reader.feed(encode(connect) + encode(publish, 5)) == [connect, publish]
    assert reader.version == 5


def test_version_learned_from_connect_31() -> None:
    reader = PacketReader()
    reader.feed(encode(Connect("c", protocol_version=3)))
    assert reader.version == 3


def test_unknown_version_reads_311() -> None:
    reader = PacketReader()
    assert reader.feed(h("40 02 00 01")) == [PubAck(1)]
    assert reader.version is None


def test_unsupported_version_details() -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode(h("10 0d 00 04 4d 51 54 54 06 02 00 3c 00 01 63"))
    assert info.value.details == {"protocol_name": "MQTT", "protocol_level": 6}


def test_fast_path_objects_equal_and_frozen() -> None:
    raw = encode(Publish("a/b", b"x", 1, packet_id=5), 4)
    (packet,) = PacketReader(4).feed(raw)
    assert type(packet) is Publish
    assert packet == Publish("a/b", b"x", 1, packet_id=5)
    assert hash(packet) == hash(Publish("a/b", b"x", 1, packet_id=5))
    with pytest.raises(AttributeError):
        packet.topic = "z"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(packet)) == packet


def test_topic_strings_are_shared() -> None:
    raw = encode(Publish("shared/topic", b"1"), 4) * 2
    a, b = PacketReader(4).feed(raw)
    assert a.topic is b.topic


def test_payload_is_bytes_not_a_view() -> None:
    data = bytearray(encode(Publish("a", b"xyz"), 4))
    (packet,) = PacketReader(4).feed(bytes(data))
    assert type(packet.payload) is bytes


# --- encoder refuses what the protocol forbids -------------------------------------------------------------

BAD_TO_ENCODE = [
    ("QoS 3", Publish("a", qos=3, packet_id=1), 4),
    ("wildcard topic", Publish("a/#"), 4),
    ("U+0000 in topic", Publish("a\x00"), 4),
    ("empty topic in 3.1.1", Publish(""), 4),
    ("empty topic without alias in 5.0", Publish(""), 5),
    ("QoS 1 without packet id", Publish("a", qos=1), 4),
    ("QoS 0 with packet id", Publish("a", packet_id=1), 4),
    ("QoS 0 with DUP", Publish("a", dup=True), 4),
    ("packet id 0", PubAck(0), 4),
    ("packet id 65536", PubAck(65536), 4),
    ("properties in 3.1.1", Publish("a", properties=Properties(content_type="x")), 4),
    ("property not allowed in packet", Publish("a", properties=Properties(session_expiry_interval=1)), 5),
    ("repeated property", Publish("a", properties=Properties([(0x03, "a"), (0x03, "b")])), 5),
    ("reason code not allowed", PubAck(1, 0x92), 5),
    ("reason code in 3.1.1", PubAck(1, 0x10), 4),
    ("3.1.1 CONNACK code 6", ConnAck(False, 6), 4),
    ("session present on refusal", ConnAck(True, 5), 4),
    ("empty SUBSCRIBE", Subscribe(1, ()), 4),
    ("invalid filter", Subscribe(1, (Subscription("a/#/b"),)), 4),
    ("no-local in 3.1.1", Subscribe(1, (Subscription("a", no_local=True),)), 4),
    ("no-local on shared", Subscribe(1, (Subscription("$share/g/a", no_local=True),)), 5),
    ("retain handling 3", Subscribe(1, (Subscription("a", retain_handling=3),)), 5),
    ("empty UNSUBSCRIBE", Unsubscribe(1, ()), 4),
    ("SUBACK code 0x8F in 3.1.1", SubAck(1, (0x8F,)), 4),
    ("UNSUBACK without codes in 5.0", UnsubAck(1), 5),
    ("AUTH in 3.1.1", Auth(), 4),
    ("DISCONNECT reason in 3.1.1", Disconnect(4), 4),
    ("password without user name in 3.1.1", Connect("c", password=b"p"), 4),
    ("3.1 empty client id", Connect("", protocol_version=3), 4),
    ("will topic with wildcard", Connect("c", will=Will("a/+")), 4),
    ("will QoS 3", Connect("c", will=Will("a", qos=3)), 4),
    ("keepalive 65536", Connect("c", keepalive=65536), 4),
    ("protocol level 6", Connect("c", protocol_version=6), 4),
    ("user property not a pair", None, 5),
]


@pytest.mark.parametrize(("what", "packet", "version"), BAD_TO_ENCODE, ids=[c[0] for c in BAD_TO_ENCODE])
def test_encoder_refuses(what: str, packet: object, version: int) -> None:
    with pytest.raises(LocalProtocolError):
        if packet is None:
            packet = Publish("a", properties=Properties([(0x26, "not a pair")]))
        encode(packet, version)  # type: ignore[arg-type]


def test_encode_rejects_non_packets() -> None:
    with pytest.raises(TypeError):
        encode("hello", 4)  # type: ignore[arg-type]


# --- Properties ----------------------------------------------------------------------------------------------


def test_properties_access_and_equality() -> None:
    p = Properties(content_type="a", user_properties=[("k", "1"), ("k", "2")], subscription_identifiers=[4, 5])
    assert p.content_type == "a"
    assert p.user_properties == (("k", "1"), ("k", "2"))
    assert p.subscription_identifiers == (4, 5)
    assert p.subscription_identifier == 4
    assert p.topic_alias is None
    # Order between different properties does not matter; order among user properties does.
    q = Properties([(0x26, ("k", "1")), (0x03, "a"), (0x0B, 4), (0x26, ("k", "2")), (0x0B, 5)])
    assert p == q and hash(p) == hash(q)
    r = Properties(content_type="a", user_properties=[("k", "2"), ("k", "1")], subscription_identifiers=[4, 5])
    assert p != r
    assert p.replace(content_type=None).content_type is None
    assert p.replace(user_properties=[]).user_properties == ()
    with pytest.raises(AttributeError):
        p.content_type = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Properties(colour="red")
    with pytest.raises(LocalProtocolError):
        Properties(topic_alias=0)
    assert pickle.loads(pickle.dumps(p)) == p


def test_properties_as_list() -> None:
    p = Properties(correlation_data=b"\x01\xab", user_properties=[("a", "b")], message_expiry_interval=5)
    assert p.as_list() == [
        ["correlation_data", "01ab"],
        ["user_property", ["a", "b"]],
        ["message_expiry_interval", 5],
    ]


def test_properties_as_json_names_them_as_the_attributes() -> None:
    """One naming for sub --json, dump --json and pub --json-lines: repeatable properties as lists in wire order,
    a once-only property repeated (a broken packet, as dump shows it) as the list of its values."""
    from mqtt_cli.core.properties import properties_json

    p = Properties([(0x26, ("k", "v")), (0x0B, 3), (0x09, b"\x01"), (0x26, ("k", "w")), (0x0B, 9)])
    assert p.as_json() == {"user_properties": [["k", "v"], ["k", "w"]], "subscription_identifiers": [3, 9],
                           "correlation_data": "01"}  # fmt: skip
    assert properties_json([["content_type", "a"], ["content_type", "b"], ["content_type", "c"]]) == {
        "content_type": ["a", "b", "c"]
    }
    assert Properties().as_json() == {}


def test_seen_property_blocks_are_shared_and_bad_ones_never_remembered() -> None:
    good = encode(Publish("a", b"1", 1, packet_id=1, properties=Properties(content_type="t")), 5)
    first, second = PacketReader(5).feed(good + good)
    assert first == second and first.properties is second.properties
    bad = h("30 0a 00 01 74 06 08 00 03 61 2f 23")  # response topic with a wildcard
    for _ in range(3):
        (err,) = PacketReader(5, strict=False).feed(bad)
        assert isinstance(err, RemoteProtocolError) and "response_topic" in str(err)


def test_strict_error_after_a_large_split_packet_keeps_the_rest_readable() -> None:
    big = encode(Publish("a", b"x" * 5000), 4)
    reader = PacketReader(4)
    assert reader.feed(big[:100]) == []  # waiting for 5000-odd bytes
    with pytest.raises(RemoteProtocolError) as info:
        reader.feed(big[100:] + h("30 03 00 01 23") + h("c0 00"))
    assert info.value.packets == [Publish("a", b"x" * 5000)]
    assert reader.feed(b"") == [PingReq()]


def test_bytearray_and_memoryview_input() -> None:
    raw = encode(Publish("a", b"xyz", 1, packet_id=1), 4)
    for data in (bytearray(raw), memoryview(raw)):
        (packet,) = PacketReader(4).feed(data)  # type: ignore[arg-type]
        assert type(packet.payload) is bytes and packet == Publish("a", b"xyz", 1, packet_id=1)


def test_a_reused_input_buffer_does_not_change_buffered_bytes() -> None:
    raw = encode(Publish("a", b"xyz"), 4)
    buf = bytearray(raw[:4])
    reader = PacketReader(4)
    assert reader.feed(buf) == []
    buf[:] = b"\xff" * 4  # the caller reuses its buffer
    assert reader.feed(raw[4:]) == [Publish("a", b"xyz")]


def test_tolerant_properties_show_unknown_identifiers() -> None:
    (err,) = PacketReader(5, strict=False).feed(h("30 0a 00 01 74 06 03 00 01 61 7f 01"))
    assert err.packet.properties.as_list() == [["content_type", "a"], ["unknown_0x7f", "01"]]
    assert "unknown property identifier 0x7F" in str(err)


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("first", [0x40, 0x50, 0x62, 0x70, 0x42, 0x60, 0x71])
@pytest.mark.parametrize("pid", [0, 1, 0x1234, 0xFFFF])
def test_acknowledgement_fast_path_agrees_with_the_general_decoder(version: int, first: int, pid: int) -> None:
    """PacketReader.feed decodes a bare PUBACK/PUBREC/PUBREL/PUBCOMP without the general decoder: same packet,
    or the same error (flags, identifier 0) as `decode_body` gives."""
    from mqtt_cli.core.decoder import decode_body

    data = bytes([first, 2, pid >> 8, pid & 0xFF])
    (fast,) = PacketReader(version, strict=False).feed(data)
    try:
        general = decode_body(first, data, 2, 4, version)
    except RemoteProtocolError as err:
        assert type(fast) is type(err) and fast.message == err.message
        assert type(fast.packet) is type(err.packet) and fast.packet == err.packet
    else:
        assert type(fast) is type(general) and fast == general
