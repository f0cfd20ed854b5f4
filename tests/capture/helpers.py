"""Shared by the capture tests: MQTT conversations as captures, and decoding them in-process."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from mqtt_cli.capture import Dissector
from mqtt_cli.capture.sources import CaptureSource
from mqtt_cli.core import (
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    encode,
)

from .pcapwriter import ETHERNET, Conversation, Record, pcap

TS0 = 1_700_000_000_000_000_000


def session(
    conv: Conversation, version: int = 4, client_id: str = "dev-1", publishes: int = 3, mss: int | None = None
) -> Conversation:
    """A whole MQTT session on `conv`: handshake, CONNECT/CONNACK, SUBSCRIBE/SUBACK, QoS 1 PUBLISH/PUBACK, a
    PINGREQ, DISCONNECT, FIN."""
    conv.handshake()
    conv.send(encode(Connect(client_id, protocol_version=version), version), True, mss)
    conv.send(encode(ConnAck(), version), False, mss)
    conv.send(encode(Subscribe(1, (Subscription("t/#", 1),)), version), True, mss)
    conv.send(encode(SubAck(1, (1,)), version), False, mss)
    for n in range(publishes):
        conv.send(encode(Publish(f"t/{n}", b"payload %d" % n, 1, packet_id=n + 2), version), True, mss)
        conv.send(encode(PubAck(n + 2), version), False, mss)
    conv.send(encode(PingReq(), version), True, mss)
    conv.send(encode(Disconnect(), version), True, mss)
    return conv.close()


def dissect(
    records: Iterable[Record], linktype: int = ETHERNET, ports: Iterable[int] = (1883,), **options: Any
) -> list[dict[str, Any]]:
    """Records of a list of (ts, frame), through the Dissector, in order."""
    dissector = Dissector(ports, **options)
    out: list[dict[str, Any]] = []
    for number, (ts, frame) in enumerate(records, 1):
        out += dissector.frame(ts, linktype, frame, number)
    return out + dissector.finish()


def read_capture(data: bytes, name: str = "test") -> tuple[str, list[tuple[int | None, int, bytes, int]]]:
    """(format, records) of capture bytes, through the same opening code as files (sniffing, decompression)."""
    source = CaptureSource(stream=io.BytesIO(data), name=name)
    return source.format, list(source.records())


def types(records: list[dict[str, Any]]) -> list[str]:
    return [r["type"] for r in records]


def as_pcap(conv: Conversation, link: int = ETHERNET, **options: Any) -> bytes:
    return pcap(conv.frames(link), link, **options)
