"""TCP reassembly of one direction: segments in any order in, the byte stream out, in order and once.

    half = HalfStream()
    for piece, ts, frame in half.segment(seq, flags, payload, 0, ts, frame):
        ...   # piece: bytes, the next stream bytes, or an int, that many bytes lost
    half.peer_ack(ack)                                # the other direction's acknowledgement number
    half.flush()                                      # end of capture: what is still held, with its gaps

Every piece comes with the capture record (timestamp, frame number) it arrived in, also when it was held
back: a packet belongs to the record holding its last byte, not to the one that filled the hole before it.
A gap carries the record of the data that follows it (where the hole showed).

Retransmitted and overlapping data is delivered once (the first copy seen wins, as in Wireshark);
out-of-order segments are held until the bytes before them arrive. Bytes that never arrive are reported as
a gap (an int in the output) instead of being silently skipped, when it is certain that they will not come:
the peer acknowledged them (it received what the capture missed), too much data waits behind the hole, or
the stream ends. Sequence numbers wrap at 2**32; stream offsets do not.
"""

from __future__ import annotations

from bisect import bisect_right, insort

__all__ = ["HalfStream", "Piece"]

# (bytes delivered, or an int: that many bytes lost; timestamp in ns; frame number) of the record it came in
Piece = tuple[bytes | int, int | None, int]


def _part(at: int, data: bytes, lost: int, start: int, end: int) -> tuple[int, bytes, int]:
    """The stretch [start, end) of a segment at `at` made of `data` then `lost` missing bytes."""
    low, high = start - at, end - at
    size = len(data)
    return start, data[low : min(high, size)] if low < size else b"", high - max(low, size) if high > size else 0


_MASK = 0xFFFFFFFF
_HALF = 0x80000000
_SYN, _FIN, _RST = 0x02, 0x01, 0x04

# Out-of-order data held behind a hole before the hole is declared lost. Generous: a window's worth.
MAX_PENDING_BYTES = 8 << 20
MAX_PENDING_SEGMENTS = 4096
# Acknowledgements from the peer covering a hole before it is declared lost: one could be a capture that
# recorded the ACK a moment before the data (two CPUs writing one capture), two is the peer's word.
HOLE_ACKS = 2


class HalfStream:
    """One direction of a TCP connection."""

    __slots__ = (
        "fin_offset",
        "hole_acks",
        "next_seq",
        "offset",
        "pending",
        "pending_bytes",
        "start_seen",
        "starts",
    )

    def __init__(self) -> None:
        self.next_seq: int | None = None  # sequence number of the next stream byte expected
        self.offset = 0  # stream offset of that byte (bytes delivered or declared lost so far)
        self.start_seen = False  # the SYN was captured: offset 0 is the first byte the sender sent
        self.fin_offset: int | None = None
        # Out-of-order segments: stream offset -> (payload, bytes missing after it, ts, frame of its record)
        self.pending: dict[int, tuple[bytes, int, int | None, int]] = {}
        self.starts: list[int] = []  # the keys of `pending`, sorted
        self.pending_bytes = 0
        self.hole_acks = 0

    @property
    def finished(self) -> bool:
        """The sender's FIN has been reached: every byte before it was delivered or declared lost."""
        return self.fin_offset is not None and self.offset >= self.fin_offset

    def segment(
        self, seq: int, flags: int, payload: bytes, missing: int = 0, ts: int | None = None, frame: int = 0
    ) -> list[Piece]:
        """Takes one segment of the record (ts, frame); returns the pieces it makes deliverable."""
        nxt = self.next_seq
        if flags & _SYN:
            seq = (seq + 1) & _MASK  # the SYN takes one sequence number; data (rare) starts after it
            if nxt is None:
                self.start_seen = True
        if nxt is None:
            nxt = self.next_seq = seq
        length = len(payload) + missing
        rel = ((seq - nxt + _HALF) & _MASK) - _HALF  # signed distance from the next expected byte
        if flags & (_FIN | _RST) and self.fin_offset is None:
            self.fin_offset = self.offset + rel + length if flags & _FIN else self.offset
        if not length:
            return []
        if rel == 0 and not self.pending:  # the common case: in order, nothing held
            self.offset += length
            self.next_seq = (nxt + length) & _MASK
            return [(payload, ts, frame), (missing, ts, frame)] if missing else [(payload, ts, frame)]
        if rel < 0:
            if rel + length <= 0:
                return []  # a retransmission of bytes already delivered
            cut = -rel  # an overlap: keep the new part
            if cut >= len(payload):
                missing -= cut - len(payload)
                payload = b""
            else:
                payload = payload[cut:]
            rel = 0
        out: list[Piece] = []
        if rel > 0:
            self._hold(self.offset + rel, payload, missing, ts, frame)
            too_much = self.pending_bytes > MAX_PENDING_BYTES or len(self.pending) > MAX_PENDING_SEGMENTS
            if too_much or self.hole_acks >= HOLE_ACKS:
                self._skip_hole(out)
            return out
        self._deliver(payload, missing, ts, frame, out)
        self._drain(out)
        return out

    def peer_ack(self, ack: int) -> list[Piece]:
        """The peer acknowledged up to `ack`: when that is past a hole, the hole's bytes were sent but not captured."""
        nxt = self.next_seq
        if not self.pending or nxt is None:
            return []
        if ((ack - nxt + _HALF) & _MASK) - _HALF > 0:
            self.hole_acks += 1
            if self.hole_acks >= HOLE_ACKS:
                out: list[Piece] = []
                self._skip_hole(out)
                return out
        return []

    def flush(self) -> list[Piece]:
        """Delivers everything still held, gaps included (the end of the capture or of the connection)."""
        out: list[Piece] = []
        while self.pending:
            self._skip_hole(out)
        return out

    # --- internals ---------------------------------------------------------------------------------------

    def _hold(self, at: int, payload: bytes, missing: int, ts: int | None, frame: int) -> None:
        """Holds a segment ahead of the stream, without the parts that held segments already cover (held
        pieces never overlap, so the ones in the way are neighbours in `starts`)."""
        pending = self.pending
        starts = self.starts
        end = at + len(payload) + missing
        i = max(bisect_right(starts, at) - 1, 0)
        pieces = []
        start = at
        while i < len(starts) and starts[i] < end:
            held_at = starts[i]
            held, held_missing, _, _ = pending[held_at]
            held_end = held_at + len(held) + held_missing
            if held_end > start:
                if held_at > start:
                    pieces.append(_part(at, payload, missing, start, held_at))
                start = max(start, held_end)
            i += 1
        if start < end:
            pieces.append(_part(at, payload, missing, start, end))
        for piece_at, data, lost in pieces:
            pending[piece_at] = (data, lost, ts, frame)
            insort(starts, piece_at)
            self.pending_bytes += len(data)

    def _deliver(self, payload: bytes, missing: int, ts: int | None, frame: int, out: list[Piece]) -> None:
        length = len(payload) + missing
        if payload:
            out.append((payload, ts, frame))
        if missing:
            out.append((missing, ts, frame))
        self.offset += length
        self.next_seq = ((self.next_seq or 0) + length) & _MASK
        self.hole_acks = 0

    def _drain(self, out: list[Piece]) -> None:
        """Delivers held segments that the stream has reached, trimming what was already delivered."""
        pending = self.pending
        starts = self.starts
        while starts:
            at = starts[0]
            if at > self.offset:
                return
            del starts[0]
            payload, missing, ts, frame = pending.pop(at)
            self.pending_bytes -= len(payload)
            cut = self.offset - at
            if cut >= len(payload) + missing:
                continue
            if cut >= len(payload):
                missing -= cut - len(payload)
                payload = b""
            elif cut:
                payload = payload[cut:]
            self._deliver(payload, missing, ts, frame, out)

    def _skip_hole(self, out: list[Piece]) -> None:
        """Declares the bytes up to the first held segment lost, then delivers what follows it."""
        if not self.starts:
            return
        first = self.starts[0]
        lost = first - self.offset
        if lost > 0:
            _, _, ts, frame = self.pending[first]  # the hole showed when the data after it came
            out.append((lost, ts, frame))
            self.offset += lost
            self.next_seq = ((self.next_seq or 0) + lost) & _MASK
        self._drain(out)
        self.hole_acks = 0
