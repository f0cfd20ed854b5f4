"""MQTT fixed headers seen from the capture side: where each packet starts, its first byte and Remaining Length.

The codec (`PacketReader`) decodes packets but does not tell, for each one, the fixed header's flags nibble,
its Remaining Length or its offset in the stream; `mqtt dump` reports all three. `HeaderWalker` follows the same
bytes the reader is fed and frames them the same way (spec 2.1 and 1.5.5), so the n-th header it completes
belongs to the n-th packet the reader returns. It reads fixed headers only, never a packet's body.

`chain_verdict` is how a stream is re-synchronised where no boundary is known (after a capture gap, or when a
connection's start was not captured): a candidate offset is accepted when plausible fixed headers, read one
after the other from it, land exactly on a TCP segment boundary (senders write whole packets, so segments
end at packet ends). It never guesses inside a segment.
"""

from __future__ import annotations

from ..core.packets import REQUIRED_FLAGS

__all__ = ["HeaderWalker", "chain_verdict"]


# The smallest Remaining Length each type can have (0 for RESERVED, which is never plausible anyway).
_MIN_LENGTH = (0, 10, 2, 2, 2, 2, 2, 2, 5, 3, 4, 2, 0, 0, 0, 0)
_EXACT_V3 = {4: 2, 5: 2, 6: 2, 7: 2, 11: 2, 12: 0, 13: 0, 14: 0, 2: 2}

Header = tuple[int, int, int]  # (first byte, Remaining Length, stream offset of the first byte)


class HeaderWalker:
    """Frames fixed headers over a byte stream fed in chunks; O(1) per chunk for bodies spanning chunks."""

    __slots__ = ("_current", "_partial", "_partial_at", "_skip", "broken_at", "offset")

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset  # stream offset of the next byte to be fed
        self.broken_at: int | None = None  # where a Remaining Length of more than four bytes starts
        self._skip = 0  # body bytes of the current packet still to come
        self._current: Header = (0, 0, 0)  # the packet whose body is being skipped
        self._partial = b""  # the start of a fixed header cut by the end of a chunk
        self._partial_at = 0

    @property
    def in_packet(self) -> Header | None:
        """The header of the packet being received (its body incomplete), if any."""
        return self._current if self._skip else None

    @property
    def packet_end(self) -> int | None:
        """Stream offset where the packet being received ends, when its header is complete."""
        return self.offset + self._skip if self._skip else None

    @property
    def partial_header(self) -> bool:
        return bool(self._partial)

    def walk(self, data: bytes) -> list[Header]:
        """Headers of the packets completed by `data`, in stream order."""
        n = len(data)
        base = self.offset
        self.offset = base + n
        if n >= 2 and data[1] + 2 == n and data[1] < 0x80 and not self._skip and not self._partial:
            return [(data[0], n - 2, base)]  # the common record: one small packet, whole
        out: list[Header] = []
        pos = 0
        if self._skip:
            skip = self._skip
            if skip > n:
                self._skip = skip - n
                return out
            out.append(self._current)
            self._skip = 0
            pos = skip
        if self._partial:
            # A header cut by the previous chunk: complete it from this one (a header is at most 5 bytes).
            head = self._partial + data[pos : pos + 4]
            parsed = _header(head, 0)
            if parsed is None:
                self._partial = head
                return out
            if parsed[0] < 0:
                self.broken_at = self._partial_at
                return out
            size, length = parsed
            used = size - len(self._partial)
            end = pos + used + length
            first = self._partial[0]
            start = self._partial_at
            self._partial = b""
            if end > n:
                self._skip = end - n
                self._current = (first, length, start)
                return out
            out.append((first, length, start))
            pos = end
        while pos < n:
            if pos + 1 >= n:
                self._partial = data[pos:]
                self._partial_at = base + pos
                break
            length = data[pos + 1]
            body = pos + 2
            if length & 0x80:
                parsed = _header(data, pos)
                if parsed is None:
                    self._partial = data[pos:]
                    self._partial_at = base + pos
                    break
                if parsed[0] < 0:
                    self.broken_at = base + pos
                    break
                size, length = parsed
                body = pos + size
            end = body + length
            if end > n:
                self._skip = end - n
                self._current = (data[pos], length, base + pos)
                break
            out.append((data[pos], length, base + pos))
            pos = end
        return out


def _header(data: bytes | bytearray, pos: int) -> tuple[int, int] | None:
    """(header size, Remaining Length) of the fixed header at `pos`; None if cut short; (-1, 0) if over 4 bytes."""
    value = 0
    shift = 0
    i = pos + 1
    n = len(data)
    while i < n:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return i - pos, value
        shift += 7
        if shift == 28:
            return -1, 0
    return None


WAIT, NO, YES = -1, 0, 1


def chain_verdict(data: bytes | bytearray, start: int, boundaries: set[int], version: int | None, base: int = 0) -> int:
    """Is `start` a packet boundary of `data`? YES, NO, or WAIT (the chain runs past the data: need more).

    `boundaries` are the stream offsets (`data` begins at offset `base`) where TCP segments begin, a segment's
    end being the next one's start; the end of `data` is a boundary too. `version` (None if unknown) refines
    which headers are plausible.
    """
    pos = start
    n = len(data)
    count = 0
    while True:
        if count and (pos == n or pos + base in boundaries):
            return YES
        if pos + 1 >= n:
            return WAIT
        first = data[pos]
        ptype = first >> 4
        required = REQUIRED_FLAGS[ptype]
        if ptype == 0 or (required >= 0 and first & 15 != required):
            return NO
        if ptype == 3 and (first & 6 == 6 or first & 14 == 8):  # QoS 3, or DUP on QoS 0
            return NO
        if ptype == 15 and version is not None and version < 5:
            return NO
        parsed = _header(data, pos)
        if parsed is None:
            return WAIT
        size, length = parsed
        if size < 0 or (size > 2 and data[pos + size - 1] == 0):  # too long, or not minimally encoded
            return NO
        if length < _MIN_LENGTH[ptype] or (ptype == 3 and first & 6 and length < 4):
            return NO
        if version is not None and version < 5 and _EXACT_V3.get(ptype, length) != length:
            return NO
        body = pos + size
        if ptype == 3 and body + 2 <= n and (data[body] << 8 | data[body + 1]) + 2 > length:
            return NO  # the topic would run past the packet
        pos = body + length
        count += 1
        if pos > n:
            return WAIT
