"""Checksummed frames of an append-only file (sans-IO): the bridge's QoS 2 journal (core/journal.py) and the
broker's change file (net/changefile.py) are a header and then these.

A frame is the length of its body (u32, big-endian), the body's CRC-32 (u32), then the body. A frame cut short at
the end of a file is the normal trace of a process killed while appending it (the write never completed, so
nothing it held was acknowledged): reading stops there. A checksum that does not match is damage.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

__all__ = ["FRAME_OVERHEAD", "FrameDamaged", "frame", "frames"]

_FRAME = struct.Struct(">II")
FRAME_OVERHEAD = _FRAME.size


class FrameDamaged(ValueError):
    """The frame at `offset` does not match its checksum: nothing from there on can be trusted."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"checksum mismatch at byte {offset}")
        self.offset = offset


def frame(body: bytes) -> bytes:
    """`body` framed."""
    return _FRAME.pack(len(body), zlib.crc32(body)) + body


def frames(data: bytes, start: int) -> Iterator[tuple[int, bytes]]:
    """(offset, body) of each whole frame of `data` from `start`; stops at a frame cut short; FrameDamaged at one
    whose checksum does not match."""
    pos = start
    n = len(data)
    while pos + FRAME_OVERHEAD <= n:
        length, crc = _FRAME.unpack_from(data, pos)
        end = pos + FRAME_OVERHEAD + length
        if end > n:
            return
        body = data[pos + FRAME_OVERHEAD : end]
        if zlib.crc32(body) != crc:
            raise FrameDamaged(pos)
        yield pos, body
        pos = end
