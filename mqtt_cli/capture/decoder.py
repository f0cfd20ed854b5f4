"""MQTT decoding of one direction of a connection, fed the reassembled stream one capture record at a time.

    half = DirectionDecoder(version=None, synced=True)
    items = half.data(chunk, ts, frame)     # [(ts, frame, first byte, Remaining Length, offset, obj), ...]
    items = half.gap(lost, ts, frame)       # the capture lost `lost` bytes here
    items = half.end(ts, frame)             # the stream ends (FIN, RST, end of the capture)

Packets come from the project's codec (`PacketReader(strict=False)`); `obj` is a packet, or a
`RemoteProtocolError` (with `.packet` when the bytes could still be decoded), or a `StreamNote` for what
happened to the stream itself (a gap, bytes skipped to re-synchronise, a packet cut by the end of the stream).
Each item carries the timestamp and frame number of the record holding its last byte (the caller passes each
piece of the stream with the record it arrived in, also when TCP held it back): after a gap, packets decoded
once the stream is re-synchronised keep the records they arrived in.

Re-synchronisation: when the gap falls inside a packet whose header was seen, the next packet starts where
that one ends (exact, from TCP sequence numbers). Otherwise the candidates are the starts of the segments that
follow, each accepted only when a chain of plausible fixed headers from it lands on a segment boundary
(`framing.chain_verdict`); bytes before the accepted boundary are reported as skipped, never parsed.
"""

from __future__ import annotations

from typing import Any

from mqtt_cli.core import PacketReader, RemoteProtocolError

from ..core.packets import PACKET_NAMES as NAMES
from .framing import NO, WAIT, YES, HeaderWalker, chain_verdict

__all__ = ["DirectionDecoder", "Item", "StreamNote", "align"]

# (ts ns, frame or None for a raw stream, first byte, Remaining Length, offset, obj)
Item = tuple[int | None, int | None, int, int, int, Any]

# Bytes held past a candidate boundary while its chain is incomplete, before the candidate is given up.
MAX_HUNT = 8 << 20


def align(heads: list[tuple[int, int, int]], objs: list[Any]) -> list[tuple[int, int, int]]:
    """Headers for the packets: one each. They always agree (walker and reader frame alike); should they not,
    the packets are kept and the missing header details are -1."""
    if len(heads) != len(objs):
        heads = heads[: len(objs)] + [(0, -1, -1)] * (len(objs) - len(heads))
    return heads


class StreamNote:
    """Something that happened to the byte stream rather than a packet: reported as a MALFORMED record."""

    __slots__ = ("kind", "lost", "message", "skipped")

    def __init__(self, kind: str, message: str, lost: int = 0, skipped: int = 0) -> None:
        self.kind = kind  # "gap", "skipped", "truncated"
        self.message = message
        self.lost = lost  # bytes the capture lost
        self.skipped = skipped  # bytes captured but not decoded as packets

    def __repr__(self) -> str:
        return f"StreamNote({self.kind!r}, {self.message!r})"


class _Hunt:
    """Bytes held while looking for a packet boundary, with the records they came in."""

    __slots__ = ("base", "bounds", "candidates", "chunks", "data", "dropped", "dropped_at", "proven")

    def __init__(self, base: int, proven: int | None) -> None:
        self.base = base  # stream offset of data[0]
        self.data = bytearray()
        self.chunks: list[tuple[int, int | None, int | None]] = []  # (stream offset, ts, frame) of each record held
        self.bounds: set[int] = set()  # stream offsets where records begin
        self.candidates: list[int] = []  # offsets still to judge, ascending
        self.proven = proven  # an offset known to begin a packet
        self.dropped = 0  # bytes given up on
        self.dropped_at: tuple[int | None, int | None, int] | None = None  # (ts, frame, offset) of the first

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    def add(self, chunk: bytes, ts: int | None, frame: int | None, candidate: bool) -> None:
        at = self.end
        self.data += chunk
        self.chunks.append((at, ts, frame))
        self.bounds.add(at)
        if candidate:
            self.candidates.append(at)

    def drop_before(self, offset: int) -> None:
        """Gives up on the bytes before `offset` (no packet can start there)."""
        count = min(offset, self.end) - self.base
        if count <= 0:
            return
        if not self.dropped and self.chunks:
            self.dropped_at = (self.chunks[0][1], self.chunks[0][2], self.base)
        self.dropped += count
        del self.data[:count]
        self.base += count
        keep = [c for c in self.chunks if c[0] >= self.base]
        if len(keep) < len(self.chunks):
            # The record containing the new base stays, re-anchored at it.
            cut = self.chunks[len(self.chunks) - len(keep) - 1]
            keep.insert(0, (self.base, cut[1], cut[2]))
        self.chunks = keep
        self.bounds = {b for b in self.bounds if b >= self.base}


class DirectionDecoder:
    """One direction's packets; re-synchronises after gaps and broken framing instead of misparsing."""

    __slots__ = ("_hunt", "_lost", "_reader", "_version", "_walker")

    def __init__(self, version: int | None = None, *, synced: bool = True, offset: int = 0) -> None:
        self._version = version
        self._reader = PacketReader(version, strict=False)
        self._walker = HeaderWalker(offset)
        self._hunt: _Hunt | None = None if synced else _Hunt(offset, None)
        self._lost: tuple[RemoteProtocolError, list[tuple[int, int, int]]] | None = None

    @property
    def version(self) -> int | None:
        """The protocol level of the stream: given, or learnt from a CONNECT (None: read as 3.1.1)."""
        return self._reader.version or self._version

    @version.setter
    def version(self, value: int | None) -> None:
        self._version = value
        self._reader.version = value

    @property
    def hunting(self) -> bool:
        return self._hunt is not None

    @property
    def holding(self) -> bool:
        """Bytes are held while looking for a boundary: the packets in them will carry their own, earlier records."""
        hunt = self._hunt
        return hunt is not None and bool(hunt.data)

    def decode_synced(self, chunk: bytes) -> tuple[list[tuple[int, int, int]], list[Any]] | None:
        """The hot path, for a decoder that is not hunting: (headers, packets) of what `chunk` completes, all
        belonging to the caller's current record. None when framing broke: then call `data` semantics instead
        (the caller uses `framing_lost`)."""
        heads = self._walker.walk(chunk)
        try:
            return heads, self._reader.feed(chunk)
        except RemoteProtocolError as err:
            self._lost = (err, heads)
            return None

    # --- input ---------------------------------------------------------------------------------------------

    def data(self, chunk: bytes, ts: int | None, frame: int | None) -> list[Item]:
        hunt = self._hunt
        if hunt is None:
            return self._decode(chunk, ts, frame)
        hunt.add(chunk, ts, frame, candidate=True)
        out: list[Item] = []
        self._judge(out)
        return out

    def gap(self, lost: int, ts: int | None, frame: int | None) -> list[Item]:
        """`lost` bytes of the stream were not captured; resume at the next boundary that can be proven."""
        out: list[Item] = []
        hunt = self._hunt
        if hunt is not None:
            # Already hunting: nothing held can chain across the hole; judge it as if the stream ended there.
            self._judge(out, final=True)
            hunt = self._hunt
        if hunt is not None:
            at = hunt.end
            self._report_dropped(hunt, out, everything=True)
            proven = hunt.proven if hunt.proven is not None and hunt.proven >= at + lost else None
            self._hunt = _Hunt(at + lost, proven)
            out.append(
                (
                    ts,
                    frame,
                    -1,
                    -1,
                    at,
                    StreamNote("gap", f"{lost} bytes not captured at stream offset {at}", lost=lost),
                )
            )
            return out
        walker = self._walker
        at = walker.offset
        resume = at + lost
        what = f"{lost} bytes not captured at stream offset {at}"
        current = walker.in_packet
        end = walker.packet_end
        proven = None
        if current is not None and end is not None:
            what += f"; the {NAMES[current[0] >> 4]} being received ({current[1]} bytes of body) is lost"
            if end >= resume:
                proven = end  # the next packet starts where the lost one ends
        elif walker.partial_header:
            what += "; the packet being received is lost"
        self._hunt = _Hunt(resume, proven)
        out.append((ts, frame, -1, -1, at, StreamNote("gap", what, lost=lost)))
        return out

    def end(self, ts: int | None, frame: int | None) -> list[Item]:
        """The stream is over: report a packet cut short, or bytes that never made sense."""
        out: list[Item] = []
        if self._hunt is not None:
            self._judge(out, final=True)
        hunt = self._hunt
        if hunt is not None:
            self._report_dropped(hunt, out, everything=True)
            self._hunt = _Hunt(hunt.end, None)
            return out
        walker = self._walker
        current = walker.in_packet
        if current is not None:
            first, length, start = current
            have = walker.offset - start
            total = (walker.packet_end or 0) - start
            note = StreamNote(
                "truncated",
                f"the stream ends inside a {NAMES[first >> 4]}: {have} of its {total} bytes were captured",
                skipped=have,
            )
            out.append((ts, frame, first, length, start, note))
        elif walker.partial_header:
            note = StreamNote("truncated", "the stream ends inside a fixed header")
            out.append((ts, frame, -1, -1, walker.offset, note))
        return out

    # --- synchronised decoding -----------------------------------------------------------------------------

    def framing_lost(self, chunk: bytes, ts: int | None, frame: int | None) -> list[Item]:
        """After `decode_synced` returned None for `chunk`: the items of that record, then hunting begins."""
        assert self._lost is not None
        err, heads = self._lost
        self._lost = None
        return self._framing_lost(err, heads, chunk, ts, frame)

    def _decode(self, chunk: bytes, ts: int | None, frame: int | None) -> list[Item]:
        heads = self._walker.walk(chunk)
        try:
            objs = self._reader.feed(chunk)
        except RemoteProtocolError as err:
            return self._framing_lost(err, heads, chunk, ts, frame)
        if not objs:
            return []
        heads = align(heads, objs)
        return [(ts, frame, h[0], h[1], h[2], obj) for h, obj in zip(heads, objs, strict=True)]

    def _framing_lost(
        self,
        err: RemoteProtocolError,
        heads: list[tuple[int, int, int]],
        chunk: bytes,
        ts: int | None,
        frame: int | None,
    ) -> list[Item]:
        """A Remaining Length over four bytes: nothing after it can be framed. Report, then hunt."""
        objs = err.packets
        out: list[Item] = [(ts, frame, h[0], h[1], h[2], obj) for h, obj in zip(heads, objs, strict=False)]
        chunk_at = self._walker.offset - len(chunk)
        at = self._walker.broken_at
        if at is None or at < chunk_at:
            at = chunk_at
        first = chunk[at - chunk_at] if at - chunk_at < len(chunk) else 0
        out.append((ts, frame, first, -1, at, err))
        hunt = self._hunt = _Hunt(at, None)
        # The broken header's own record is no candidate: the next records' starts are.
        hunt.add(chunk[at - chunk_at :], ts, frame, candidate=False)
        self._judge(out)
        return out

    # --- re-synchronisation --------------------------------------------------------------------------------

    def _judge(self, out: list[Item], final: bool = False) -> None:
        """Judges candidate offsets in order; on the first accepted one, decodes from it and stops hunting."""
        hunt = self._hunt
        assert hunt is not None
        if hunt.proven is not None:
            if hunt.proven <= hunt.end:
                self._resync(hunt.proven, out)
            return
        version = self._reader.version or self._version
        while hunt.candidates:
            cand = hunt.candidates[0]
            hunt.drop_before(cand)
            verdict = chain_verdict(hunt.data, 0, hunt.bounds, version, hunt.base)
            if verdict == WAIT and (final or hunt.end - cand > MAX_HUNT):
                verdict = NO
            if verdict == YES:
                self._resync(cand, out)
                return
            if verdict == WAIT:
                return
            hunt.candidates.pop(0)
        if not final:
            hunt.drop_before(hunt.end)  # no candidate left: what is held cannot start a packet

    def _report_dropped(self, hunt: _Hunt, out: list[Item], everything: bool = False) -> None:
        if everything:
            hunt.drop_before(hunt.end)
        if hunt.dropped and hunt.dropped_at is not None:
            ts, frame, at = hunt.dropped_at
            if everything:
                what = f"{hunt.dropped} bytes skipped: no packet boundary could be proven in them"
            else:
                what = f"{hunt.dropped} bytes skipped to the packet boundary at stream offset {hunt.base}"
            note = StreamNote("skipped", what, skipped=hunt.dropped)
            out.append((ts, frame, -1, -1, at, note))
            hunt.dropped = 0
            hunt.dropped_at = None

    def _resync(self, at: int, out: list[Item]) -> None:
        hunt = self._hunt
        assert hunt is not None
        hunt.drop_before(at)
        self._report_dropped(hunt, out)
        self._hunt = None
        self._reader = PacketReader(self._reader.version or self._version, strict=False)
        self._walker = HeaderWalker(at)
        # Decode what was held, record by record, each with its own timestamp and frame number.
        chunks = hunt.chunks
        if not chunks:  # nothing held: a gap that ended exactly where the lost packet did, then the stream's end
            return
        ends = [c[0] for c in chunks[1:]] + [hunt.end]
        for (start, ts, frame), end in zip(chunks, ends, strict=True):
            if end > start:
                out.extend(self.data(bytes(hunt.data[start - hunt.base : end - hunt.base]), ts, frame))
