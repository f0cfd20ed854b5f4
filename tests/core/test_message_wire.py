"""Message.wire's fast path (messages without properties, framed by hand) against the general encoder."""

from __future__ import annotations

import pytest

from mqtt_cli.core.codec import PacketReader, encode
from mqtt_cli.core.packets import Publish
from mqtt_cli.core.properties import EMPTY_PROPERTIES
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
