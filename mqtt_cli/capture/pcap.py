"""Classic pcap files (tcpdump's format): microsecond or nanosecond timestamps, either byte order.

The hot path of `mqtt dump`: records are cut out of large reads with one `struct.unpack_from` each, so a
record costs one tuple and one slice of the buffer, never a read call; they are handed over a list per read.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from itertools import chain
from typing import BinaryIO

from .errors import CorruptCapture

__all__ = ["MAX_FRAME", "PCAP_MAGICS", "PcapReader"]

# magic as it appears in the file -> (struct byte order, nanoseconds per timestamp fraction, record header size)
PCAP_MAGICS: dict[bytes, tuple[str, int, int]] = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000, 16),
    b"\xa1\xb2\xc3\xd4": (">", 1000, 16),
    b"\x4d\x3c\xb2\xa1": ("<", 1, 16),
    b"\xa1\xb2\x3c\x4d": (">", 1, 16),
    # Alexey Kuznetzov's "modified pcap": microseconds, 8 more bytes (ifindex, protocol, type) per record.
    b"\x34\xcd\xb2\xa1": ("<", 1000, 24),
    b"\xa1\xb2\xcd\x34": (">", 1000, 24),
}

# No link layer frame is this large; a record header claiming more is garbage, not a frame to wait for.
MAX_FRAME = 1 << 24
_CHUNK = 1 << 20

Frame = tuple[int | None, int, bytes, int]


class PcapReader:
    """Reads the records of a pcap stream whose first bytes (`head`, at least the magic) have been read already."""

    def __init__(self, stream: BinaryIO, head: bytes, name: str) -> None:
        self._stream = stream
        self.name = name
        order, self._frac_ns, self._rec_size = PCAP_MAGICS[head[:4]]
        rest = head[4:24]
        rest += _read_exact(stream, 20 - len(rest))
        if len(rest) < 20:
            raise CorruptCapture(f"{name}: the pcap file header is truncated ({4 + len(rest)} of 24 bytes)", 0)
        major, minor, _zone, _sigfigs, snaplen, network = struct.unpack(order + "HHiIII", rest)
        self.version = (major, minor)
        self.snaplen = snaplen
        self.linktype = network & 0xFFFF  # the upper bits may carry FCS information
        self._header = struct.Struct(order + "IIII")
        self.offset = 24  # bytes of the (decompressed) capture read: exact once records() stopped
        self.frames = 0

    def records(self) -> Iterator[Frame]:
        """(timestamp in ns, link type, frame, frame number) of every record, in order."""
        return chain.from_iterable(self.record_lists())

    def record_lists(self) -> Iterator[list[Frame]]:
        """`records`, a list at a time: those of one read (cheaper to go through than a generator's resumes; a
        live pipe's records still come as soon as they are read). A truncated or corrupt capture raises
        CorruptCapture after the list of the records before the damage."""
        # read1: what is there (at most one system call), so that a live pipe's records come as they are written
        # instead of once a whole chunk has arrived.
        read = getattr(self._stream, "read1", self._stream.read)
        unpack = self._header.unpack_from
        rec_size = self._rec_size
        frac_ns = self._frac_ns
        linktype = self.linktype
        buf = b""
        pos = 0
        n = 0
        base = self.offset  # file offset of buf[0]
        number = 0
        out: list[Frame] = []
        append = out.append
        try:
            while True:
                if n - pos < rec_size:
                    if out:
                        yield out
                        out = []
                        append = out.append
                    more = read(_CHUNK)
                    if not more:
                        if pos < n:
                            raise CorruptCapture(
                                f"{self.name} is truncated: the header of record {number + 1} (at byte {base + pos})"
                                f" has {n - pos} of {rec_size} bytes",
                                base + pos,
                            )
                        return
                    base += pos
                    buf = buf[pos:] + more
                    pos = 0
                    n = len(buf)
                    continue
                sec, frac, caplen, _origlen = unpack(buf, pos)
                start = pos + rec_size
                end = start + caplen
                if end > n:
                    if out:
                        yield out
                        out = []
                        append = out.append
                    if caplen > MAX_FRAME:
                        raise CorruptCapture(
                            f"{self.name} is corrupt: record {number + 1} (at byte {base + pos}) claims"
                            f" {caplen} bytes of frame",
                            base + pos,
                        )
                    more = read(max(_CHUNK, end - n))
                    if not more:
                        raise CorruptCapture(
                            f"{self.name} is truncated: record {number + 1} (at byte {base + pos}) has {n - start}"
                            f" of its {caplen} bytes",
                            base + pos,
                        )
                    base += pos
                    buf = buf[pos:] + more
                    pos = 0
                    n = len(buf)
                    continue
                number += 1
                append((sec * 1_000_000_000 + frac * frac_ns, linktype, buf[start:end], number))
                pos = end
        finally:
            self.frames = number
            self.offset = base + pos


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    data = b""
    while len(data) < n:
        more = stream.read(n - len(data))
        if not more:
            break
        data += more
    return data
