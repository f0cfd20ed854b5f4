"""Dump records from a bare MQTT byte stream of one direction (`mqtt dump --raw FILE`, `--hex HEX`).

There is no capture around the bytes: records have no timestamp, frame or addresses (null), and `offset`
says where each packet starts in the stream. The protocol version comes from a CONNECT in the stream, or
from `version` (3, 4 or 5) for a stream without one (a broker's side, say); 3.1.1 otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from mqtt_cli.core import Connect

from .decoder import DirectionDecoder
from .records import Record, RecordBuilder, RecordContext

__all__ = ["decode_stream", "parse_hex"]

_HEX_NOISE = re.compile(r"0x|[\s:,\-]", re.IGNORECASE)


def parse_hex(text: str) -> bytes:
    """Bytes from hex as people paste it ("10 0c 00 04", "100c0004", "10:0c:00:04", "0x10,0x0c"); ValueError if
    it is not hex."""
    digits = _HEX_NOISE.sub("", text)
    if len(digits) % 2:
        raise ValueError(f"odd number of hex digits ({len(digits)})")
    try:
        return bytes.fromhex(digits)
    except ValueError:
        bad = next((c for c in digits if c not in "0123456789abcdefABCDEF"), "?")
        raise ValueError(f"{bad!r} is not a hex digit") from None


def decode_stream(chunks: Iterable[bytes], version: int | None = None, keep_objects: bool = False) -> Iterator[Record]:
    """Records of the packets in the concatenation of `chunks` (each chunk fed as it comes: streaming)."""
    decoder = DirectionDecoder(version, synced=True)
    build = RecordBuilder(keep_objects).build
    ctx = RecordContext()
    for chunk in chunks:
        if not chunk:
            continue
        for item in decoder.data(chunk, None, None):
            packet = getattr(item[5], "packet", item[5])
            if type(packet) is Connect:
                ctx = RecordContext(client=packet.client_id or None)
            yield build(item, ctx, decoder.version or 4)
    for item in decoder.end(None, None):
        yield build(item, ctx, decoder.version or 4)
