"""pcapng files (dumpcap's and Wireshark's format): sections in either byte order, several interfaces with
their own link types and timestamp resolutions, enhanced, simple and obsolete packet blocks.

Blocks other than these (name resolution, interface statistics, decryption secrets, custom) are skipped.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

from .errors import CorruptCapture
from .pcap import MAX_FRAME

__all__ = ["PCAPNG_MAGIC", "PcapngReader"]

PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"  # the Section Header Block's type, the same in both byte orders

_SHB = 0x0A0D0D0A
_IDB = 1
_OPB = 2  # obsolete packet block
_SPB = 3
_EPB = 6
_BOM = 0x1A2B3C4D
_OPT_TSRESOL = 9
_OPT_TSOFFSET = 14
_CHUNK = 1 << 20
_MAX_BLOCK = MAX_FRAME + 4096


class _Interface:
    __slots__ = ("div", "linktype", "mul", "offset_ns", "snaplen")

    def __init__(self, linktype: int, snaplen: int) -> None:
        self.linktype = linktype
        self.snaplen = snaplen
        self.mul, self.div = 1000, 1  # the default resolution: microseconds
        self.offset_ns = 0

    def set_resolution(self, code: int) -> None:
        exp = code & 0x7F
        if code & 0x80:  # a negative power of two
            self.mul, self.div = 1_000_000_000, 1 << exp
        elif exp <= 9:
            self.mul, self.div = 10 ** (9 - exp), 1
        else:
            self.mul, self.div = 1, 10 ** (exp - 9)


class PcapngReader:
    """Reads the packets of a pcapng stream whose first bytes (`head`, at least the magic) have been read already."""

    def __init__(self, stream: BinaryIO, head: bytes, name: str) -> None:
        self._stream = stream
        self._head = head
        self.name = name
        self.offset = 0
        self.frames = 0

    def records(self) -> Iterator[tuple[int | None, int, bytes, int]]:
        read = getattr(self._stream, "read1", self._stream.read)  # see PcapReader.records
        buf = self._head
        pos = 0
        n = len(buf)
        base = 0
        number = 0
        order = "<"
        head = struct.Struct("<II")
        epb = struct.Struct("<IIIII")
        u32 = struct.Struct("<I")
        interfaces: list[_Interface] = []
        try:
            while True:
                if n - pos < 12:
                    more = read(_CHUNK)
                    if not more:
                        if pos < n:
                            raise self._truncated(f"a block header has {n - pos} bytes", base + pos)
                        return
                    base += pos
                    buf = buf[pos:] + more
                    pos = 0
                    n = len(buf)
                    continue
                btype, length = head.unpack_from(buf, pos)
                if btype == _SHB:
                    # The byte order of the section (this block included) comes from its byte-order magic.
                    (bom,) = struct.unpack_from("<I", buf, pos + 8)
                    if bom == _BOM:
                        order = "<"
                    elif bom == 0x4D3C2B1A:
                        order = ">"
                    else:
                        raise CorruptCapture(
                            f"{self.name} is corrupt: section header at byte {base + pos} has no byte-order magic",
                            base + pos,
                        )
                    head = struct.Struct(order + "II")
                    epb = struct.Struct(order + "IIIII")
                    u32 = struct.Struct(order + "I")
                    btype, length = head.unpack_from(buf, pos)
                    interfaces = []
                if length < 12 or length & 3 or length > _MAX_BLOCK:
                    raise CorruptCapture(
                        f"{self.name} is corrupt: block at byte {base + pos} has length {length}", base + pos
                    )
                end = pos + length
                if end > n:
                    more = read(max(_CHUNK, end - n))
                    if not more:
                        raise self._truncated(
                            f"the block at byte {base + pos} has {n - pos} of {length} bytes", base + pos
                        )
                    base += pos
                    buf = buf[pos:] + more
                    pos = 0
                    n = len(buf)
                    continue
                (trailer,) = u32.unpack_from(buf, end - 4)
                if trailer != length:
                    raise CorruptCapture(
                        f"{self.name} is corrupt: block at byte {base + pos} says {length} bytes at its start"
                        f" and {trailer} at its end",
                        base + pos,
                    )
                if btype == _EPB:
                    iface_id, high, low, caplen, _orig = epb.unpack_from(buf, pos + 8)
                    start = pos + 28
                    if caplen > length - 32 or iface_id >= len(interfaces):
                        raise self._bad_packet(iface_id, caplen, len(interfaces), base + pos)
                    iface = interfaces[iface_id]
                    number += 1
                    ts = ((high << 32) | low) * iface.mul // iface.div + iface.offset_ns
                    yield ts, iface.linktype, buf[start : start + caplen], number
                elif btype == _SPB:
                    if not interfaces:
                        raise self._bad_packet(0, 0, 0, base + pos)
                    (orig,) = u32.unpack_from(buf, pos + 8)
                    iface = interfaces[0]
                    caplen = min(orig, length - 16)
                    if iface.snaplen:
                        caplen = min(caplen, iface.snaplen)
                    number += 1
                    yield None, iface.linktype, buf[pos + 12 : pos + 12 + caplen], number  # no timestamp
                elif btype == _OPB:
                    iface_id, _drops, high, low, caplen, _orig = struct.unpack_from(order + "HHIIII", buf, pos + 8)
                    if caplen > length - 32 or iface_id >= len(interfaces):
                        raise self._bad_packet(iface_id, caplen, len(interfaces), base + pos)
                    iface = interfaces[iface_id]
                    number += 1
                    ts = ((high << 32) | low) * iface.mul // iface.div + iface.offset_ns
                    yield ts, iface.linktype, buf[pos + 28 : pos + 28 + caplen], number
                elif btype == _IDB:
                    interfaces.append(self._interface(buf, pos, end, order))
                pos = end
        finally:
            self.frames = number
            self.offset = base + pos

    def _interface(self, buf: bytes, pos: int, end: int, order: str) -> _Interface:
        linktype, _reserved, snaplen = struct.unpack_from(order + "HHI", buf, pos + 8)
        iface = _Interface(linktype, snaplen)
        opt = pos + 16
        stop = end - 4
        while opt + 4 <= stop:
            code, olen = struct.unpack_from(order + "HH", buf, opt)
            value = opt + 4
            if code == 0 or value + olen > stop:  # opt_endofopt, or an option running past the block
                break
            if code == _OPT_TSRESOL and olen >= 1:
                iface.set_resolution(buf[value])
            elif code == _OPT_TSOFFSET and olen >= 8:
                (seconds,) = struct.unpack_from(order + "q", buf, value)
                iface.offset_ns = seconds * 1_000_000_000
            opt = value + ((olen + 3) & ~3)
        return iface

    def _truncated(self, what: str, offset: int) -> CorruptCapture:
        return CorruptCapture(f"{self.name} is truncated: {what}", offset)

    def _bad_packet(self, iface_id: int, caplen: int, count: int, offset: int) -> CorruptCapture:
        if iface_id >= count:
            what = f"refers to interface {iface_id} but {count} interface(s) are described before it"
        else:
            what = f"claims {caplen} bytes of frame, more than the block holds"
        return CorruptCapture(f"{self.name} is corrupt: the packet block at byte {offset} {what}", offset)
