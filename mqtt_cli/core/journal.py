"""The bridge's journal of QoS 2 forwards (sans-IO: records to bytes and back, and the state they add up to).

Exactly once across a bridge that is killed needs what both brokers cannot know: which message from the source
became which packet identifier towards the destination, and how far that flow got. Each step is one record,
appended before the packet it describes is written to the network (one record class each, the letter its tag):

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
from collections.abc import Iterator
from dataclasses import dataclass

from .encoder import encode
from .framing import FRAME_OVERHEAD, FrameDamaged, frame, frames
from .packets import Publish
from .reader import PacketReader

__all__ = [
    "HEADER",
    "Completed",
    "Forwarded",
    "JournalCorrupt",
    "JournalEntry",
    "JournalRecord",
    "JournalState",
    "Released",
    "SourceLost",
    "SourceReleased",
    "parse",
    "record",
]

HEADER = b"MQTTBJ1\n"
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


# The records, one class per kind (the letter is its tag in the file).


@dataclass(frozen=True, slots=True)
class Forwarded:
    """F: the PUBLISH (as sent, with `dst_pid`) of the source's (`src_side`, `src_pid`) went to `dst_side`."""

    seq: int
    dst_side: int
    dst_pid: int
    src_side: int
    src_pid: int
    publish: Publish


@dataclass(frozen=True, slots=True)
class Released:
    """R: the destination sent PUBREC for `seq` (PUBREL is what to re-send now)."""

    seq: int


@dataclass(frozen=True, slots=True)
class Completed:
    """C: the destination sent PUBCOMP for `seq`."""

    seq: int


@dataclass(frozen=True, slots=True)
class SourceReleased:
    """S: the source sent PUBREL for its packet id (it will not send that message again)."""

    src_side: int
    src_pid: int


@dataclass(frozen=True, slots=True)
class SourceLost:
    """L: the source broker forgot the session of that side."""

    src_side: int


JournalRecord = Forwarded | Released | Completed | SourceReleased | SourceLost


def record(rec: JournalRecord) -> bytes:
    """One framed record."""
    if type(rec) is Forwarded:
        body = b"F" + _F.pack(rec.seq, rec.dst_side, rec.dst_pid, rec.src_side, rec.src_pid) + encode(rec.publish, 5)
    elif type(rec) is Released:
        body = b"R" + _SEQ.pack(rec.seq)
    elif type(rec) is Completed:
        body = b"C" + _SEQ.pack(rec.seq)
    elif type(rec) is SourceReleased:
        body = b"S" + _SRC.pack(rec.src_side, rec.src_pid)
    elif type(rec) is SourceLost:
        body = b"L" + bytes((rec.src_side,))
    else:
        raise ValueError(f"unknown journal record {rec!r}")
    return frame(body)


def parse(data: bytes) -> Iterator[tuple[int, JournalRecord]]:
    """Yields (offset, record) for each whole record; raises JournalCorrupt on damage (not on a short tail)."""
    for pos, _, rec in _records(data):
        yield pos, rec


def _records(data: bytes) -> Iterator[tuple[int, int, JournalRecord]]:
    """(offset, end offset, record) of each whole record."""
    if not data.startswith(HEADER):
        raise JournalCorrupt("not a bridge journal (bad header)", 0)
    try:
        for pos, body in frames(data, len(HEADER)):
            try:
                rec = _decode(body)
            except (ValueError, struct.error) as err:
                raise JournalCorrupt(f"unreadable record ({err})", pos) from None
            yield pos, pos + FRAME_OVERHEAD + len(body), rec
    except FrameDamaged as err:
        raise JournalCorrupt("checksum mismatch", err.offset) from None


def _decode(body: bytes) -> JournalRecord:
    kind = body[:1]
    if kind == b"F":
        seq, dst_side, dst_pid, src_side, src_pid = _F.unpack_from(body, 1)
        (publish,) = PacketReader(5).feed(body[1 + _F.size :])
        if type(publish) is not Publish or publish.packet_id != dst_pid:
            raise ValueError("F record without its PUBLISH")
        return Forwarded(seq, dst_side, dst_pid, src_side, src_pid, publish)
    if kind == b"R" and len(body) == 9:
        return Released(_SEQ.unpack_from(body, 1)[0])
    if kind == b"C" and len(body) == 9:
        return Completed(_SEQ.unpack_from(body, 1)[0])
    if kind == b"S" and len(body) == 4:
        return SourceReleased(*_SRC.unpack_from(body, 1))
    if kind == b"L" and len(body) == 2:
        return SourceLost(body[1])
    raise ValueError(f"record type {kind!r}, {len(body)} bytes")


class JournalState:
    """What the records add up to: the live entries, by seq and by source packet id."""

    def __init__(self) -> None:
        self.entries: dict[int, JournalEntry] = {}
        self.by_src: dict[tuple[int, int], int] = {}
        self.max_seq = 0

    def apply(self, rec: JournalRecord) -> None:
        if type(rec) is Forwarded:
            old = self.entries.get(rec.seq)
            if old is not None:  # handed over again (the destination lost its session): new packet id
                old.dst_pid, old.publish, old.released = rec.dst_pid, rec.publish, False
            else:
                e = JournalEntry(rec.seq, rec.dst_side, rec.dst_pid, rec.publish, rec.src_side, rec.src_pid)
                self.entries[e.seq] = e
                self.by_src[(e.src_side, e.src_pid)] = e.seq
            self.max_seq = max(self.max_seq, rec.seq)
        elif type(rec) is Released:
            entry = self.entries.get(rec.seq)
            if entry is not None:
                entry.released = True
        elif type(rec) is Completed:
            entry = self.entries.get(rec.seq)
            if entry is not None:
                entry.completed = True
                self._maybe_drop(entry)
        elif type(rec) is SourceReleased:
            seq = self.by_src.get((rec.src_side, rec.src_pid))
            if seq is not None:
                self._src_done(self.entries[seq])
        elif type(rec) is SourceLost:
            for e in [e for e in self.entries.values() if e.src_side == rec.src_side and not e.src_done]:
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
        good = len(HEADER)
        for _, end, rec in _records(data):
            self.apply(rec)
            good = end
        return good

    def snapshot(self) -> bytes:
        """A new file holding only the live entries (compaction)."""
        out = [HEADER]
        for e in self.entries.values():
            out.append(record(Forwarded(e.seq, e.dst_side, e.dst_pid, e.src_side, e.src_pid, e.publish)))
            if e.released:
                out.append(record(Released(e.seq)))
            if e.completed:
                out.append(record(Completed(e.seq)))
            if e.src_done:
                out.append(record(SourceReleased(e.src_side, e.src_pid)))
        return b"".join(out)
