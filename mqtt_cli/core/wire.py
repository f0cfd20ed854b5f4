"""Primitive wire types shared by the codec and the property table (spec 1.5).

Readers take (data, pos, end) and return (value, new_pos), so packet bodies are never copied to be parsed;
they raise `MalformedPacket` when a field runs past `end`.
"""

from __future__ import annotations

import re

from .errors import LocalProtocolError, MalformedPacket

__all__ = [
    "MAX_VBI",
    "control_character",
    "encode_binary",
    "encode_string",
    "encode_vbi",
    "read_binary",
    "read_string",
    "read_u16",
    "read_u32",
    "read_vbi",
]

MAX_VBI = 268_435_455

# Remaining lengths of small packets are by far the most common: precompute their encodings.
_VBI_CACHE: tuple[bytes, ...] = tuple(bytes((n,)) for n in range(128))


def encode_vbi(n: int) -> bytes:
    """Variable Byte Integer, minimal form (1.5.5)."""
    if n < 128:
        if n < 0:
            raise LocalProtocolError(f"variable byte integer {n} is negative")
        return _VBI_CACHE[n]
    if n < 16_384:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    if n > MAX_VBI:
        raise LocalProtocolError(f"variable byte integer {n} exceeds {MAX_VBI}")
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_vbi(data: bytes, pos: int, end: int, what: str = "variable byte integer") -> tuple[int, int, bool]:
    """Returns (value, new_pos, minimal). Five or more bytes are malformed; so is running past `end`."""
    value = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise MalformedPacket(f"{what} runs past the end of the packet (at byte {pos})")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            # Minimal: only a single 0x00 byte may encode zero, and no last byte may be 0x00.
            return value, pos, not (byte == 0 and pos - start > 1)
        shift += 7
        if shift == 28:
            raise MalformedPacket(f"{what} is longer than four bytes (at byte {start})")


def read_u16(data: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    if pos + 2 > end:
        raise MalformedPacket(f"{what} runs past the end of the packet (at byte {pos})")
    return (data[pos] << 8) | data[pos + 1], pos + 2


def read_u32(data: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    if pos + 4 > end:
        raise MalformedPacket(f"{what} runs past the end of the packet (at byte {pos})")
    return int.from_bytes(data[pos : pos + 4], "big"), pos + 4


def read_binary(data: bytes, pos: int, end: int, what: str) -> tuple[bytes, int]:
    if pos + 2 > end:
        raise MalformedPacket(f"{what} length runs past the end of the packet (at byte {pos})")
    stop = pos + 2 + ((data[pos] << 8) | data[pos + 1])
    if stop > end:
        raise MalformedPacket(f"{what} ({stop - pos - 2} bytes) runs past the end of the packet (at byte {pos})")
    return bytes(data[pos + 2 : stop]), stop


def read_string(data: bytes, pos: int, end: int, what: str) -> tuple[str, int]:
    """UTF-8 Encoded String (1.5.4): well-formed UTF-8 (no surrogates, no overlongs) without U+0000."""
    if pos + 2 > end:
        raise MalformedPacket(f"{what} length runs past the end of the packet (at byte {pos})")
    stop = pos + 2 + ((data[pos] << 8) | data[pos + 1])
    if stop > end:
        raise MalformedPacket(f"{what} ({stop - pos - 2} bytes) runs past the end of the packet (at byte {pos})")
    try:
        text = str(data[pos + 2 : stop], "utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedPacket(f"{what} is not valid UTF-8 (byte {pos + 2 + exc.start})") from None
    if "\x00" in text:
        raise MalformedPacket(f"{what} contains U+0000 (at byte {data.find(0, pos + 2, stop)})")
    return text, stop


_CONTROL = re.compile("[\x01-\x1f\x7f-\x9f]")


def control_character(text: str) -> int:
    """Where `text` holds a control character U+0001-U+001F or U+007F-U+009F (1.5.4: a receiver MAY treat one
    as malformed, as mosquitto does in client ids, user names and topics); -1 when it holds none."""
    found = _CONTROL.search(text)
    return -1 if found is None else found.start()


def encode_string(text: str, what: str) -> bytes:
    if "\x00" in text:
        raise LocalProtocolError(f"{what} contains U+0000")
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise LocalProtocolError(f"{what} contains a lone surrogate, not encodable as UTF-8") from None
    if len(raw) > 65535:
        raise LocalProtocolError(f"{what} is {len(raw)} bytes long; the maximum is 65535")
    return len(raw).to_bytes(2, "big") + raw


def encode_binary(raw: bytes, what: str) -> bytes:
    if len(raw) > 65535:
        raise LocalProtocolError(f"{what} is {len(raw)} bytes long; the maximum is 65535")
    return len(raw).to_bytes(2, "big") + bytes(raw)
