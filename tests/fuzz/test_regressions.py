"""Inputs the fuzzer found failing, each kept as found (shortened) with what it showed and the fix."""

from __future__ import annotations

from mqtt_cli.core import ConnAck, PacketReader, encode

from .harness import codec_input


def test_mqtt31_connack_has_no_session_present_flag() -> None:
    # Found by the codec target: a 3.1 CONNACK whose first (unused) byte had bit 0 set decoded as
    # session_present=True, which encode() rightly refuses for 3.1: the decoder invented a 3.1.1 flag.
    codec_input(bytes((1, 0)) + b"\x20\x02\x01\x00")
    assert PacketReader(3).feed(b"\x20\x02\x01\x00") == [ConnAck(False, 0)]
    assert PacketReader(4).feed(b"\x20\x02\x01\x00") == [ConnAck(True, 0)]
    assert encode(ConnAck(False, 0), 3) == b"\x20\x02\x00\x00"
