"""Starting inputs for the fuzz targets: valid sessions for the codec, varied programs for the broker."""

from __future__ import annotations

import random

from mqtt_cli.core import (
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    Properties,
    PubAck,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    Unsubscribe,
    Will,
    encode,
)

__all__ = ["seeds"]


def _session(level: int) -> bytes:
    v5 = level == 5
    props = Properties(user_properties=[("k", "v")], message_expiry_interval=5) if v5 else Properties()
    packets = [
        Connect("seed", will=Will("w/t", b"bye", 1), protocol_version=level, username="u", password=b"p"),
        ConnAck(),
        Subscribe(1, (Subscription("a/#", 1),)),
        SubAck(1, (1,)),
        Publish("a/b", b"hello", 1, packet_id=2, properties=props),
        PubAck(2),
        Publish("a/c", b"x" * 200, 2, packet_id=3),
        PubRec(3),
        PubRel(3),
        Unsubscribe(4, ("a/#",)),
        PingReq(),
        Disconnect(),
    ]
    return b"".join(encode(p, level) for p in packets)


def seeds(target: str) -> list[bytes]:
    if target == "codec":
        # mode byte (level, strict or tolerant, size limit), cutting step, stream
        return [bytes((mode, step)) + _session((3, 3, 4, 5)[mode & 3]) for mode in range(24) for step in (0, 3)]
    rng = random.Random(16)
    return [bytes(rng.getrandbits(8) for _ in range(rng.randrange(32, 600))) for _ in range(32)]
