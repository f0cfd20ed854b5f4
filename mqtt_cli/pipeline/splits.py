"""Cutting a capture file into record-aligned byte ranges that Spark tasks read in parallel.

    plan = plan_file(path, file_id, target_bytes)          # on the driver: ranges, no record read yet
    scans = [scan(split) for split in plan.splits]         # in parallel: where each range's first record is
    windows = settle(plan, scans)                          # on the driver: exact boundaries, frame numbers
    for ts, linktype, frame, number in read_window(window): ...   # in parallel: the records of one window

A range begins somewhere inside a record; `scan` finds the first record that starts in it without reading what
comes before:

* pcap: re-synchronise on a chain of plausible record headers (a caplen within the snap length and not above
  the original length, a valid fraction of a second, timestamps within a day of each other), 16 deep or to
  the end of the file.
* pcapng: blocks carry their length at both ends; a chain of 8 blocks whose two lengths agree is a boundary.

Then it hops from record to record to the end of its range, counting packet records (for global frame numbers)
and keeping pcapng's section headers and interface descriptions, so that each window can be read with the
interface table in force where it starts. The hop from the file's true start is authoritative: a boundary
found by re-synchronisation that the previous range's hop does not land on is corrected on the driver.

A window is read by the capture package's own readers (`mqtt_cli.capture.pcap` / `pcapng`): its bytes are
the file header (pcap) or the section header and interface blocks in force (pcapng), then the file's bytes
from the window's first record to its last. Compressed captures cannot be cut: they are one window.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from mqtt_cli.capture.errors import CaptureError, NotACapture
from mqtt_cli.capture.pcap import MAX_FRAME, PCAP_MAGICS
from mqtt_cli.capture.pcapng import PCAPNG_MAGIC
from mqtt_cli.capture.sources import CaptureSource

__all__ = ["FilePlan", "Scan", "Split", "Window", "plan_file", "read_window", "scan", "settle"]

_PCAP_CHAIN = 16
_PCAPNG_CHAIN = 8
_MAX_BLOCK = MAX_FRAME + 4096
_SHB, _IDB, _OPB, _SPB, _EPB = 0x0A0D0D0A, 1, 2, 3, 6
_PACKET_BLOCKS = frozenset({_OPB, _SPB, _EPB})
_DAY = 86400
_READ = 1 << 20


@dataclass(frozen=True)
class Split:
    """A byte range [start, end) of a file, as planned: `start` may fall inside a record."""

    file_id: int
    path: str
    index: int
    start: int
    end: int
    kind: str  # "pcap", "pcapng" or "stream" (compressed, or too small to cut: read whole by CaptureSource)
    header: bytes = b""  # pcap: the 24-byte file header
    order: str = "<"  # pcapng: the byte order of the first section
    known_start: bool = False  # `start` is a record boundary (the first range, or corrected by the driver)


@dataclass
class Scan:
    """What a range holds: its first record boundary, the first one at or past its end, its packet records."""

    boundary: int | None  # None: no record starts in the range
    stop: int  # the offset where the hop left the range (the next range's boundary)
    packets: int = 0
    blocks: list[tuple[int, bytes]] = field(default_factory=list)  # pcapng: (offset, SHB or IDB bytes)
    error: str | None = None  # the file is corrupt at `stop`: nothing after it is read


@dataclass(frozen=True)
class Window:
    """What one Spark task reads: records [start, stop) of a file, numbered from `first_frame`."""

    file_id: int
    path: str
    index: int
    kind: str
    start: int
    stop: int
    first_frame: int  # number of the window's first packet record, minus one
    prefix: bytes  # what the capture reader must see first (file header, or section and interface blocks)
    packets: int = -1  # "stream" windows: read no further than this many records (the damage comes after)


@dataclass
class FilePlan:
    file_id: int
    path: str
    size: int
    kind: str
    splits: list[Split]


def plan_file(path: str, file_id: int, target: int) -> FilePlan:
    """Ranges of about `target` bytes; one "stream" split for a compressed or small file. Raises CaptureError
    (NotACapture) as `mqtt dump` would for a file that cannot be opened or is no capture."""
    with CaptureSource(path) as source:  # the same opening, sniffing and error messages as `mqtt dump`
        kind = source.format
        compressed = source.compression is not None
        size = source.size or 0
    with open(path, "rb") as f:
        head = f.read(24)
    if compressed or size <= target or not size:
        return FilePlan(file_id, path, size, "stream", [Split(file_id, path, 0, 0, size, "stream", known_start=True)])
    count = max(1, round(size / target))
    step = -(-size // count)
    splits = []
    order = "<"
    if kind == "pcapng":
        order = "<" if head[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
    first = 24 if kind == "pcap" else 0
    for index in range(count):
        start = first if index == 0 else index * step
        end = min(size, (index + 1) * step)
        if start >= end:
            continue
        splits.append(Split(file_id, path, index, start, end, kind, head, order, known_start=index == 0))
    return FilePlan(file_id, path, size, kind, splits)


# --- scanning a range (in a Spark task) ------------------------------------------------------------------------


class _Bytes:
    """Random access to a file through a buffer: the hop reads a few bytes per record."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self._f = f
        self.size = size
        self._base = 0
        self._buf = b""

    def get(self, pos: int, n: int) -> bytes:
        end = pos + n
        if pos < self._base or end > self._base + len(self._buf):
            self._f.seek(pos)
            self._buf = self._f.read(max(n, _READ))
            self._base = pos
        return self._buf[pos - self._base : end - self._base]


def scan(split: Split) -> Scan:
    """Finds the range's first record and hops over its records (see the module's docstring)."""
    if split.kind == "stream":
        return _scan_stream(split)
    with open(split.path, "rb") as f:
        data = _Bytes(f, _file_size(f))
        if split.kind == "pcap":
            return _scan_pcap(split, data)
        return _scan_pcapng(split, data)


def _scan_stream(split: Split) -> Scan:
    """A file read whole (compressed, or small): its records are counted, the damage found, as `mqtt dump` would."""
    count = 0
    try:
        with CaptureSource(split.path) as source:
            for _record in source.records():
                count += 1
    except CaptureError as exc:
        return Scan(split.start, split.end, count, error=str(exc))
    return Scan(split.start, split.end, count)


def _file_size(f: BinaryIO) -> int:
    f.seek(0, io.SEEK_END)
    return f.tell()


def _pcap_format(header: bytes) -> tuple[struct.Struct, int, int, int]:
    order, frac_ns, rec_size = PCAP_MAGICS[header[:4]]
    (snaplen,) = struct.unpack_from(order + "I", header, 16)
    frac_max = 1_000_000 if frac_ns == 1000 else 1_000_000_000
    return struct.Struct(order + "IIII"), rec_size, frac_max, snaplen or MAX_FRAME


def _pcap_plausible(data: _Bytes, pos: int, fmt: tuple[struct.Struct, int, int, int]) -> bool:
    """A chain of plausible record headers from `pos`, _PCAP_CHAIN deep or ending exactly at the end of file."""
    header, rec_size, frac_max, snaplen = fmt
    first_sec = None
    for _ in range(_PCAP_CHAIN):
        if pos == data.size:
            return True
        raw = data.get(pos, rec_size)
        if len(raw) < 16:
            return False
        sec, frac, caplen, origlen = header.unpack_from(raw)
        if frac >= frac_max or caplen > origlen or caplen > max(snaplen, 65535) or origlen > MAX_FRAME:
            return False
        if first_sec is None:
            first_sec = sec
        elif abs(sec - first_sec) > _DAY:
            return False
        pos += rec_size + caplen
        if pos > data.size:
            return False
    return True


def _scan_pcap(split: Split, data: _Bytes) -> Scan:
    fmt = _pcap_format(split.header)
    header, rec_size = fmt[0], fmt[1]
    pos = split.start
    if not split.known_start:
        while pos < split.end and not _pcap_plausible(data, pos, fmt):
            pos += 1
        if pos >= split.end:
            return Scan(None, split.end)
    boundary = pos
    count = 0
    while pos < split.end:
        raw = data.get(pos, rec_size)
        if len(raw) < rec_size:
            if pos < data.size:
                msg = f"the header of a record (at byte {pos}) has {len(raw)} of {rec_size} bytes"
                return Scan(boundary, pos, count, error=f"{split.path} is truncated: {msg}")
            break
        caplen = header.unpack_from(raw)[2]
        end = pos + rec_size + caplen
        if caplen > MAX_FRAME:
            msg = f"{split.path} is corrupt: a record (at byte {pos}) claims {caplen} bytes of frame"
            return Scan(boundary, pos, count, error=msg)
        if end > data.size:
            msg = f"{split.path} is truncated: a record (at byte {pos}) has {data.size - pos - rec_size} of its"
            return Scan(boundary, pos, count, error=f"{msg} {caplen} bytes")
        count += 1
        pos = end
    return Scan(boundary, pos, count)


def _pcapng_chain(data: _Bytes, pos: int, order: str) -> bool:
    u32 = struct.Struct(order + "I")
    for _ in range(_PCAPNG_CHAIN):
        if pos == data.size:
            return True
        raw = data.get(pos, 8)
        if len(raw) < 8:
            return False
        length = u32.unpack_from(raw, 4)[0]
        if length < 12 or length & 3 or length > _MAX_BLOCK or pos + length > data.size:
            return False
        if u32.unpack(data.get(pos + length - 4, 4))[0] != length:
            return False
        pos += length
    return True


def _scan_pcapng(split: Split, data: _Bytes) -> Scan:
    order = split.order
    pos = split.start
    if not split.known_start:
        pos += (-pos) % 4  # blocks are 32-bit aligned from the file's start
        while pos < split.end and not _pcapng_chain(data, pos, order):
            pos += 4
        if pos >= split.end:
            return Scan(None, split.end)
    boundary = pos
    count = 0
    blocks: list[tuple[int, bytes]] = []
    while pos < split.end:
        raw = data.get(pos, 12)
        if len(raw) < 12:
            if pos < data.size:
                return Scan(boundary, pos, count, blocks, f"{split.path} is truncated: a block header has {len(raw)}")
            break
        btype = struct.unpack_from(order + "I", raw)[0]
        if btype == _SHB:
            bom = raw[8:12]
            order = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">" if bom == b"\x1a\x2b\x3c\x4d" else order
        length = struct.unpack_from(order + "I", raw, 4)[0]
        if length < 12 or length & 3 or length > _MAX_BLOCK:
            return Scan(
                boundary, pos, count, blocks, f"{split.path} is corrupt: block at byte {pos} has length {length}"
            )
        if pos + length > data.size:
            msg = f"{split.path} is truncated: the block at byte {pos} has {data.size - pos} of {length} bytes"
            return Scan(boundary, pos, count, blocks, msg)
        if btype in (_SHB, _IDB):
            blocks.append((pos, data.get(pos, length)))
        elif btype in _PACKET_BLOCKS:
            count += 1
        pos += length
    return Scan(boundary, pos, count, blocks)


# --- settling the plan (on the driver) ---------------------------------------------------------------------------


def settle(plan: FilePlan, scans: list[Scan]) -> tuple[list[Window], int, str | None]:
    """Windows with exact boundaries and frame numbers, the file's packet records, and its corruption message if
    any. A range whose
    re-synchronised boundary the previous hop does not land on is scanned again here from the right place."""
    windows: list[Window] = []
    frames = 0
    expected: int | None = None
    blocks: list[bytes] = []  # pcapng: the section header and interfaces in force
    for split, result in zip(plan.splits, scans, strict=True):
        if expected is not None and result.boundary != expected:
            if expected >= split.end:
                result = Scan(expected, expected)
            else:
                fixed = Split(split.file_id, split.path, split.index, expected, split.end, split.kind,
                              split.header, split.order, known_start=True)  # fmt: skip
                result = scan(fixed)
        if result.boundary is None:
            continue
        prefix = b""
        if plan.kind == "pcap":
            prefix = split.header
        elif plan.kind == "pcapng" and result.boundary > 0:
            prefix = b"".join(blocks)
        if result.stop > result.boundary or plan.kind == "stream":
            windows.append(
                Window(plan.file_id, plan.path, split.index, plan.kind, result.boundary, result.stop, frames, prefix,
                       result.packets)
            )  # fmt: skip
        frames += result.packets
        for _offset, block in result.blocks:
            if block[:4] == PCAPNG_MAGIC:
                blocks = [block]
            else:
                blocks.append(block)
        if result.error is not None:
            return windows, frames, result.error
        expected = result.stop
    return windows, frames, None


# --- reading a window (in a Spark task) --------------------------------------------------------------------------


class _Range(io.RawIOBase):
    """`prefix`, then bytes [start, stop) of a file."""

    def __init__(self, prefix: bytes, f: BinaryIO, start: int, stop: int) -> None:
        self._prefix = prefix
        self._f = f
        self._left = stop - start
        f.seek(start)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._prefix:
            n = min(len(buffer), len(self._prefix))
            buffer[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        if self._left <= 0:
            return 0
        data = self._f.read(min(len(buffer), self._left))
        self._left -= len(data)
        buffer[: len(data)] = data
        return len(data)


def read_window(window: Window) -> Iterator[tuple[int | None, int, bytes, int]]:
    """The window's records with their global frame numbers, read by the capture package's readers. A
    CaptureError past the records read is raised after them, as by CaptureSource.records."""
    base = window.first_frame
    if window.kind == "stream":
        if window.packets <= 0:
            return
        with CaptureSource(window.path) as source:
            for record in source.records():
                yield record
                if record[3] >= window.packets:
                    return  # what follows is the damage `scan` found: reported once, by the driver
        return
    with open(window.path, "rb") as f:
        stream = io.BufferedReader(_Range(window.prefix, f, window.start, window.stop), _READ)
        try:
            source = CaptureSource(stream=stream, name=window.path)  # type: ignore[arg-type]
        except NotACapture as exc:  # cannot happen for a window of a file that was sniffed: say so loudly
            raise CaptureError(f"{window.path}: window {window.index} unreadable: {exc}") from None
        for ts, linktype, frame, number in source.records():
            yield ts, linktype, frame, base + number
