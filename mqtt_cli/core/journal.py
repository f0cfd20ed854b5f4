"""The bridge's journal of QoS 2 forwards (sans-IO: records to bytes and back, and the state they add up to).

Exactly once across a bridge that is killed needs what both brokers cannot know: which message from the source
became which packet identifier towards the destination, and how far that flow got. Each step is one record,
appended before the packet it describes is written to the network:

    F  forwarded: seq, destination side and packet id, source side and packet id, the PUBLISH as sent
    R  released: the destination sent PUBREC for seq (PUBREL is what to re-send now)
    C  completed: the destination sent PUBCOMP for seq
    S  source released: the source sent PUBREL for its packet id (it will not send that message again)
    L  source session lost: the source broker forgot the session of that side

An entry lives until it is both completed and source-released. On start, the live entries say what to re-send
to each destination (PUBLISH with DUP, or PUBREL) and which of the source's re-sends are already forwarded.

File: an 8-byte header, then records framed as length (u32) + CRC-32 (u32) + body. A short last record is the
normal trace of a process killed while writing and is ignored; a bad CRC or an unknown record elsewhere makes
the whole file corrupt (JournalCorrupt): the owner moves it aside, it never reads on past damage.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from .codec import PacketReader, encode
from .packets import Publish

__all__ = ["HEADER", "JournalCorrupt", "JournalEntry", "JournalState", "parse", "record"]

HEADER = b"MQTTBJ1\n"
_FRAME = struct.Struct(">II")
_F = struct.Struct(">QBHBH")  # seq, dst side, dst pid, src side, src pid
_SEQ = struct.Struct(">Q")
_SRC = struct.Struct(">BH")


class JournalCorrupt(ValueError):
    """The journal cannot be trusted from `offset` on; the message says what is wrong there."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} at byte {offset}")
        self.offset = offset


@dataclass(slots=True)
class JournalEntry:
    seq: int
    dst_side: int
    dst_pid: int
    publish: Publish  # as sent to the destination, with dst_pid
    src_side: int
    src_pid: int
    released: bool = False
    completed: bool = False
    src_done: bool = False


def _frame(body: bytes) -> bytes:
    return _FRAME.pack(len(body), zlib.crc32(body)) + body


def record(kind: str, *args: object) -> bytes:
    """One framed record: ("F", seq, dst_side, dst_pid, src_side, src_pid, publish), ("R", seq), ("C", seq),
    ("S", src_side, src_pid), ("L", src_side)."""
    if kind == "F":
        seq, dst_side, dst_pid, src_side, src_pid, publish = args
        body = b"F" + _F.pack(seq, dst_side, dst_pid, src_side, src_pid) + encode(publish, 5)  # type: ignore[arg-type]
    elif kind in ("R", "C"):
        body = kind.encode() + _SEQ.pack(args[0])  # type: ignore[arg-type]
    elif kind == "S":
        body = b"S" + _SRC.pack(args[0], args[1])  # type: ignore[arg-type]
    elif kind == "L":
        body = b"L" + bytes((args[0],))  # type: ignore[arg-type]
    else:
        raise ValueError(f"unknown journal record {kind!r}")
    return _frame(body)


def parse(data: bytes) -> Iterator[tuple[int, tuple[object, ...]]]:
    """Yields (offset, record) for each whole record; raises JournalCorrupt on damage (not on a short tail)."""
    if not data.startswith(HEADER):
        raise JournalCorrupt("not a bridge journal (bad header)", 0)
    pos = len(HEADER)
    n = len(data)
    while pos + 8 <= n:
        length, crc = _FRAME.unpack_from(data, pos)
        end = pos + 8 + length
        if end > n:
            return  # cut short by a crash while writing: that record's packet was never sent
        body = data[pos + 8 : end]
        if zlib.crc32(body) != crc:
            raise JournalCorrupt("checksum mismatch", pos)
        try:
            yield pos, _decode(body)
        except (ValueError, struct.error) as err:
            raise JournalCorrupt(f"unreadable record ({err})", pos) from None
        pos = end


def _decode(body: bytes) -> tuple[object, ...]:
    kind = body[:1]
    if kind == b"F":
        seq, dst_side, dst_pid, src_side, src_pid = _F.unpack_from(body, 1)
        (publish,) = PacketReader(5).feed(body[1 + _F.size :])
        if type(publish) is not Publish or publish.packet_id != dst_pid:
            raise ValueError("F record without its PUBLISH")
        return ("F", seq, dst_side, dst_pid, src_side, src_pid, publish)
    if kind in (b"R", b"C") and len(body) == 9:
        return (kind.decode(), _SEQ.unpack_from(body, 1)[0])
    if kind == b"S" and len(body) == 4:
        return ("S", *_SRC.unpack_from(body, 1))
    if kind == b"L" and len(body) == 2:
        return ("L", body[1])
    raise ValueError(f"record type {kind!r}, {len(body)} bytes")


class JournalState:
    """What the records add up to: the live entries, by seq and by source packet id."""

    def __init__(self) -> None:
        self.entries: dict[int, JournalEntry] = {}
        self.by_src: dict[tuple[int, int], int] = {}
        self.max_seq = 0

    def apply(self, rec: tuple[object, ...]) -> None:
        kind = rec[0]
        if kind == "F":
            _, seq, dst_side, dst_pid, src_side, src_pid, publish = rec
            old = self.entries.get(seq)  # type: ignore[arg-type]
            if old is not None:  # handed over again (the destination lost its session): new packet id
                old.dst_pid, old.publish, old.released = dst_pid, publish, False  # type: ignore[assignment]
            else:
                e = JournalEntry(seq, dst_side, dst_pid, publish, src_side, src_pid)  # type: ignore[arg-type]
                self.entries[e.seq] = e
                self.by_src[(e.src_side, e.src_pid)] = e.seq
            self.max_seq = max(self.max_seq, seq)  # type: ignore[call-overload]
        elif kind == "R":
            e = self.entries.get(rec[1])  # type: ignore[arg-type]
            if e is not None:
                e.released = True
        elif kind == "C":
            e = self.entries.get(rec[1])  # type: ignore[arg-type]
            if e is not None:
                e.completed = True
                self._maybe_drop(e)
        elif kind == "S":
            seq = self.by_src.get((rec[1], rec[2]))  # type: ignore[arg-type]
            if seq is not None:
                self._src_done(self.entries[seq])
        elif kind == "L":
            for e in [e for e in self.entries.values() if e.src_side == rec[1] and not e.src_done]:
                self._src_done(e)

    def _src_done(self, e: JournalEntry) -> None:
        e.src_done = True
        self.by_src.pop((e.src_side, e.src_pid), None)
        self._maybe_drop(e)

    def _maybe_drop(self, e: JournalEntry) -> None:
        if e.completed and e.src_done:
            del self.entries[e.seq]
            self.by_src.pop((e.src_side, e.src_pid), None)

    def load(self, data: bytes) -> int:
        """Applies every record in `data` (a whole file); returns the length of the good part."""
        end = len(HEADER)
        for pos, rec in parse(data):
            self.apply(rec)
            end = pos + 8 + _FRAME.unpack_from(data, pos)[0]
        return end

    def snapshot(self) -> bytes:
        """A new file holding only the live entries (compaction)."""
        out = [HEADER]
        for e in self.entries.values():
            out.append(record("F", e.seq, e.dst_side, e.dst_pid, e.src_side, e.src_pid, e.publish))
            if e.released:
                out.append(record("R", e.seq))
            if e.completed:
                out.append(record("C", e.seq))
            if e.src_done:
                out.append(record("S", e.src_side, e.src_pid))
        return b"".join(out)
