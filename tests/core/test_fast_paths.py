"""Fast paths against the general paths they shortcut: Message.wire for messages without properties (framed by
hand, not by encode()), and PacketReader.feed for short acknowledgements (not decoded by the general decoder)."""

from __future__ import annotations

import pytest

from mqtt_cli.core.encoder import encode
from mqtt_cli.core.errors import RemoteProtocolError
from mqtt_cli.core.packets import PubAck, PubComp, Publish, PubRec, PubRel
from mqtt_cli.core.properties import EMPTY_PROPERTIES
from mqtt_cli.core.reader import PacketReader
from mqtt_cli.core.session import Message

TOPICS = ["a", "bench/0", "säure/€/x", "t" * 300]
PAYLOADS = [b"", b"x" * 64, b"y" * 200, b"z" * 20_000, b"w" * 2_100_000]  # 1, 2, 3 and 4 bytes of length


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("retain", [False, True])
def test_fast_path_equals_general_encoder(version: int, qos: int, retain: bool) -> None:
    for topic in TOPICS:
        for payload in PAYLOADS:
            message = Message(topic, payload, 1, False, EMPTY_PROPERTIES, "publisher", 0.0)
            pid = 513 if qos else None
            expected = encode(Publish(topic, payload, qos, retain, False, pid, EMPTY_PROPERTIES), version)
            assert message.wire(version, qos, retain, pid, None) == expected
            # Again from the cache, with another packet identifier spliced in.
            if qos:
                other = encode(Publish(topic, payload, qos, retain, False, 65535, EMPTY_PROPERTIES), version)
                assert message.wire(version, qos, retain, 65535, None) == other


def test_fast_path_decodes_back() -> None:
    message = Message("x/y", b"hello", 1, False, EMPTY_PROPERTIES, None, 0.0)
    reader = PacketReader(version=5)
    [packet] = reader.feed(message.wire(5, 1, True, 7, None))
    assert (packet.topic, packet.payload, packet.qos, packet.retain, packet.packet_id) == ("x/y", b"hello", 1, True, 7)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_short_acknowledgements_equal_general_decoder(version: int) -> None:
    for kind in (PubAck, PubRec, PubRel, PubComp):
        for pid in (1, 255, 256, 65535):
            raw = encode(kind(pid), version)
            assert len(raw) == 4
            fast = PacketReader(version=version).feed(raw * 3)
            assert fast == [kind(pid)] * 3
            assert all(type(p) is kind for p in fast)
            if version == 5:  # the same acknowledgement with its reason code written out takes the general decoder
                general = PacketReader(version=5).feed(bytes((raw[0], 3)) + raw[2:] + b"\x00")
                assert general == fast[:1]


@pytest.mark.parametrize("raw", [b"\x40\x02\x00\x00", b"\x60\x02\x00\x01", b"\x72\x02\x00\x01"])
def test_short_acknowledgements_the_fast_path_refuses(raw: bytes) -> None:
    # Identifier 0, PUBREL without its flags, PUBCOMP with flags: the general decoder's errors, as before.
    with pytest.raises(RemoteProtocolError):
        PacketReader(version=4).feed(raw)
