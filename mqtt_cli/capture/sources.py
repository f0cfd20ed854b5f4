"""Opening a capture: a file or standard input, decompressed when it is compressed, its format told by content.

    source = open_capture("traffic.pcapng.gz")      # or "-" for standard input
    for ts_ns, linktype, frame, number in source.records(): ...

File names never decide anything: a pcap called `.pcapng`, a gzip without `.gz` and a pipe all work.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import sys
import zlib
from collections.abc import Iterator
from itertools import chain
from typing import TYPE_CHECKING, BinaryIO, TypeVar, cast

from .errors import CaptureError, CorruptCapture, NotACapture
from .pcap import PCAP_MAGICS, PcapReader
from .pcapng import PCAPNG_MAGIC, PcapngReader

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["CaptureSource", "open_binary", "open_capture", "read_head"]

Record = tuple[int | None, int, bytes, int]
_T = TypeVar("_T")

_COMPRESSIONS: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)
_ZSTD = b"\x28\xb5\x2f\xfd"


def _decompressor(name: str, whole: BinaryIO) -> BinaryIO:
    """A stream of the decompressed bytes (it stays open: the records are read from it)."""
    # Binary streams all three, which typeshed types as BufferedIOBase and not as the BinaryIO the readers take.
    if name == "gzip":
        return cast(BinaryIO, gzip.GzipFile(fileobj=whole, mode="rb"))
    if name == "bzip2":
        return cast(BinaryIO, bz2.BZ2File(whole, "rb"))
    return cast(BinaryIO, lzma.LZMAFile(whole, "rb"))


class _Prepended(io.RawIOBase):
    """A stream that gives `head` (bytes already read to sniff the format) and then the rest of `rest`."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(view))
        view[: len(data)] = data
        return len(data)


def read_head(stream: BinaryIO, n: int) -> bytes:
    """Up to `n` bytes; fewer only at the end of the stream (a pipe may deliver them in pieces)."""
    head = b""
    while len(head) < n:
        more = stream.read(n - len(head))
        if not more:
            break
        head += more
    return head


def open_binary(path: str) -> tuple[BinaryIO, str, int | None]:
    """(stream, display name, size in bytes or None) for a path, or for standard input when `path` is "-"."""
    if path == "-":
        return sys.stdin.buffer, "standard input", None
    try:
        stream = open(path, "rb")  # noqa: SIM115 - the CaptureSource owns and closes it
    except IsADirectoryError:
        raise CaptureError(f"{path} is a directory, not a capture file") from None
    except OSError as exc:
        raise CaptureError(f"cannot open {path}: {exc.strerror or exc}") from None
    info = os.fstat(stream.fileno())
    # A FIFO or a character device has no size: no progress bar then.
    return stream, path, info.st_size if stat.S_ISREG(info.st_mode) else None


class CaptureSource:
    """An opened capture: `records()` yields (timestamp in ns or None, link type, frame bytes, frame number).

    `position()` is how many bytes of the file (compressed bytes for a compressed one) have been read, for a
    progress bar; `size` the file's size when it has one.
    """

    def __init__(self, path: str = "-", *, stream: BinaryIO | None = None, name: str | None = None) -> None:
        """Opens `path` ("-" for standard input), or reads `stream` (which stays the caller's to close)."""
        if stream is None:
            raw, self.name, self.size = open_binary(path)
        else:
            raw, self.name, self.size = stream, name or "stream", None
        self._owned = stream is None
        self._raw = raw
        self.compression: str | None = None
        try:
            stream, head = self._decompressed(raw)
            self.format, self._reader = self._sniff(stream, head)
        except BaseException:
            self.close()
            raise

    def _decompressed(self, raw: BinaryIO) -> tuple[BinaryIO, bytes]:
        head = read_head(raw, 6)
        if not head:
            raise NotACapture(f"{self.name} is empty: expected a pcap or pcapng capture")
        if head.startswith(_ZSTD):
            raise NotACapture(
                f"{self.name} is zstd-compressed: decompress it first (zstd -dc {self.name} | mqtt dump -)"
            )
        for magic, name in _COMPRESSIONS:
            if head.startswith(magic):
                self.compression = name
                stream = _decompressor(name, io.BufferedReader(_Prepended(head, raw), 1 << 16))
                try:
                    return stream, read_head(stream, 4)
                except (OSError, EOFError, lzma.LZMAError) as exc:
                    raise CorruptCapture(f"{self.name}: cannot decompress ({name}): {exc}", 0) from None
        return raw, head

    def _sniff(self, stream: BinaryIO, head: bytes) -> tuple[str, PcapReader | PcapngReader]:
        magic = head[:4]
        inner = f"{self.compression}-compressed " if self.compression else ""
        if magic in PCAP_MAGICS:
            return "pcap", PcapReader(stream, head, self.name)
        if magic == PCAPNG_MAGIC:
            return "pcapng", PcapngReader(stream, head, self.name)
        shown = " ".join(f"{b:02x}" for b in head[:4])
        raise NotACapture(
            f"{self.name} is not a capture file: its {inner}content starts with {shown or 'nothing'}, not a pcap or"
            " pcapng magic number",
            unknown_format=True,
        )

    def records(self) -> Iterator[Record]:
        reader = self._reader
        if isinstance(reader, PcapReader):
            # A list of records per read: the per-record step is chain's, in C, not a generator's resume.
            return chain.from_iterable(self._guarded(reader.record_lists()))
        return self._guarded(reader.records())

    def _guarded(self, items: Iterator[_T]) -> Iterator[_T]:
        """`items`, with a damaged or truncated compressed stream reported as CorruptCapture."""
        try:
            yield from items
        except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
            # A compressed stream that stops early or is damaged: everything before it has been yielded.
            where = self._reader.offset
            raise CorruptCapture(
                f"{self.name}: the {self.compression or 'capture'} stream is truncated or damaged after byte {where}"
                f" of the {'decompressed ' if self.compression else ''}capture ({exc})",
                where,
            ) from None

    def position(self) -> int:
        try:
            return self._raw.tell()
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        if self._owned and self._raw is not sys.stdin.buffer:
            self._raw.close()

    def __enter__(self) -> CaptureSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_capture(path: str) -> CaptureSource:
    """Opens `path` ("-" for standard input); raises NotACapture or CaptureError with a one-line message."""
    return CaptureSource(path)
