"""Captured frames to dump records: which connections are MQTT, TCP reassembly, per-direction decoding.

    dissector = Dissector(ports={1883}, tls_ports={8883}, detect=True)
    for record in dissector.run(source.records()): ...   # or frame() per frame, then finish()

A connection is MQTT when one of its ports is in `ports`, or (with `detect`) when its first payload is an MQTT
CONNECT. One of `tls_ports`, or an MQTT port whose stream starts with a TLS record, is reported once as
encrypted. Everything else (UDP, other TCP, handshakes and bare ACKs) is skipped silently; frames of a link
type we cannot read are counted (`stats.unsupported`). A connection's state is dropped once both directions
closed.

Each packet carries the record (timestamp, frame) holding its last byte, also when that data was held back
(out of order, behind a capture gap, while re-synchronising). So that a connection's records still come out
in frame order (a PUBLISH before its PUBACK), they are held back too while either direction holds data, then
sorted by frame (as tshark shows them). Across connections, records come out as they are released.

The hot path (`frame`, first branch): in-order data on a direction that decodes in sync goes straight from
the frame to the codec and to records, without the general machinery of reassembly and re-synchronisation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from mqtt_cli.core import ConnAck, Connect, RemoteProtocolError

from .decoder import DirectionDecoder, Item, align
from .errors import CaptureError
from .frames import ACK, FIN, LINKTYPES, RST, SYN, decode_frame, flow_endpoints, reverse_flow
from .records import Record, RecordBuilder, RecordContext, format_ts
from .tcp import HalfStream, Piece

__all__ = ["Dissector", "DissectorStats", "looks_like_connect", "looks_like_tls"]

_MQTT, _TLS, _IGNORED, _PENDING = 1, 2, 3, 4
_EMPTY: list[Record] = []
_MASK = 0xFFFFFFFF
_NOT_PLAIN = FIN | SYN | RST
# Packets of a connection looked at for its CONNECT and CONNACK (client identifier, protocol version).
_WATCH = 16
# Records of a connection held back while one direction waits for a hole to fill: past this many, the holes
# are declared lost (as tcp.MAX_PENDING_* do for the held data itself), which bounds memory.
MAX_HELD_RECORDS = 16384


def looks_like_connect(data: bytes) -> bool:
    """Does `data` begin with an MQTT CONNECT (fixed header, then protocol name "MQTT" or "MQIsdp")?"""
    if len(data) < 8 or data[0] != 0x10:
        return False
    pos = 1
    while pos < 5 and data[pos] & 0x80:
        pos += 1
    return data[pos + 1 : pos + 9].startswith((b"\x00\x04MQTT", b"\x00\x06MQIsdp"))


def looks_like_tls(data: bytes) -> bool:
    """A TLS record header (handshake, alert, change cipher spec, application data; version 3.x). As MQTT it
    would be a CONNECT with reserved flags set, which no MQTT stream can begin with."""
    return len(data) >= 2 and 0x14 <= data[0] <= 0x17 and data[1] == 0x03


class DissectorStats:
    """Counters over the whole capture, for --stats."""

    __slots__ = ("connections", "encrypted", "frames", "gaps", "lost_bytes", "skipped_bytes", "unsupported")
    _COUNTS = ("connections", "encrypted", "frames", "gaps", "lost_bytes", "skipped_bytes")

    def __init__(self) -> None:
        self.frames = 0  # frames read (counted by Dissector.run)
        self.connections = 0  # MQTT connections
        self.encrypted = 0  # TLS connections, not decoded
        self.gaps = 0
        self.lost_bytes = 0
        self.skipped_bytes = 0
        self.unsupported: Counter[int] = Counter()  # link type -> frames skipped: we cannot read that link layer

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self._COUNTS}


class _Connection:
    __slots__ = ("client", "held", "index", "kind", "version", "watch")

    def __init__(self, kind: int, version: int | None) -> None:
        self.index = -1  # the connection's number in the capture, once it is reported
        self.kind = kind
        self.client: str | None = None  # "" between a CONNECT without client id and its CONNACK
        self.version = version
        self.watch = _WATCH
        self.held: list[Record] | None = None  # records held back while a direction holds data (see _release)


class _Direction:
    __slots__ = (
        "closed",
        "conn",
        "ctx",
        "decoder",
        "dst",
        "fast",
        "flow",
        "from_client",
        "last_frame",
        "last_ts",
        "peer",
        "src",
        "tcp",
    )

    def __init__(self, conn: _Connection, flow: bytes, src: str, dst: str, from_client: bool | None) -> None:
        self.conn = conn
        self.flow = flow
        self.src = src
        self.dst = dst
        self.from_client = from_client
        self.tcp = HalfStream()
        self.decoder: DirectionDecoder | None = None
        self.peer: _Direction = self
        self.last_ts: int | None = None  # the latest segment's record, for what the end of the stream reports
        self.last_frame = 0
        self.closed = False
        self.fast = False  # MQTT, decoding in sync: in-order data may take the hot path
        self.ctx: RecordContext | None = None  # made when first needed, dropped when what it holds changes

    def context(self) -> RecordContext:
        ctx = self.ctx
        if ctx is None:
            conn = self.conn
            ctx = self.ctx = RecordContext(self.src, self.dst, conn.index, conn.client or None, self.from_client)
        return ctx


class Dissector:
    """Frames in, dump records out; see the module's docstring."""

    def __init__(
        self,
        ports: Iterable[int] = (1883,),
        tls_ports: Iterable[int] = (8883,),
        *,
        detect: bool = True,
        version: int | None = None,
        keep_objects: bool = False,
        json_text: bool = False,
        on_numbered: Callable[[int], None] | None = None,
    ) -> None:
        self.ports = frozenset(ports)
        self.tls_ports = frozenset(tls_ports)
        self.detect = detect
        self.version = version
        self.stats = DissectorStats()
        self._flows: dict[bytes, _Direction] = {}
        self._streams = 0
        # Told each connection's number as it is given out (the pipeline ranks them across a capture's parts).
        self._on_numbered = on_numbered
        self._builder = RecordBuilder(keep_objects)
        # json_text: PUBLISH records of the hot path come as JSON text (str), for `mqtt dump --json` unfiltered.
        # (list[Any]: records, or with json_text records and texts; `frame` says list[Record] for the common case.)
        self._build_packets: Callable[..., list[Any]] = (
            self._builder.build_texts if json_text else self._builder.build_packets
        )

    # --- frames --------------------------------------------------------------------------------------------

    def run(self, frames: Iterable[tuple[int | None, int, bytes, int]]) -> Iterator[Record]:
        """Every record of a capture's frames, then of its end. A capture that turns out truncated or corrupt
        (CaptureError from `frames`) still gives the records of everything before the damage; the error is
        raised after them."""
        for batch in self.batches(frames):
            yield from batch

    def batches(self, frames: Iterable[tuple[int | None, int, bytes, int]]) -> Iterator[list[Record]]:
        """`run`, a list of records at a time (those of one frame, or of the capture's end): cheaper to consume.

        The hot path of `frame` is repeated here, inline (a call per frame is a good part of a frame's cost);
        `frame` stays the one definition of what a frame does, and every frame off that path goes to it."""
        frame = self.frame
        flows = self._flows
        build = self._build_packets
        error: CaptureError | None = None
        number = 0
        try:
            for ts, linktype, data, number in frames:  # `number` counts the frames once done
                seg = decode_frame(linktype, data)
                if seg is not None:
                    flow, seq, _ack, flags, payload, missing = seg
                    d = flows.get(flow)
                    if d is not None and d.fast:
                        tcp = d.tcp
                        if seq == tcp.next_seq and not flags & _NOT_PLAIN and not missing:
                            if not payload:
                                continue
                            size = len(payload)
                            tcp.offset += size
                            tcp.next_seq = (seq + size) & _MASK
                            d.last_ts = ts
                            d.last_frame = number
                            decoder = d.decoder
                            assert decoder is not None
                            decoded = decoder.decode_synced(payload)
                            if decoded is None:
                                records = self._framing_lost(d, payload, ts, number)
                            else:
                                heads, objs = decoded
                                if not objs:
                                    continue
                                conn = d.conn
                                if conn.watch:
                                    self._watch(d, objs)
                                if len(heads) != len(objs):
                                    heads = align(heads, objs)
                                records = build(heads, objs, ts, number, d.ctx or d.context(), conn.version or 4)
                            if records:
                                yield records
                            continue
                records = frame(ts, linktype, data, number)
                if records:
                    yield records
        except CaptureError as exc:
            error = exc
        finally:
            self.stats.frames = max(self.stats.frames, number)
        yield self.finish()
        if error is not None:
            raise error

    def frame(self, ts: int | None, linktype: int, frame: bytes, number: int) -> list[Record]:
        """Takes one captured frame; returns the records of the packets it completes."""
        seg = decode_frame(linktype, frame)
        if seg is None:
            if linktype not in LINKTYPES:
                self.stats.unsupported[linktype] += 1
            return _EMPTY
        flow, seq, ack, flags, payload, missing = seg
        d = self._flows.get(flow)
        if d is not None and d.fast:  # fast: nothing held back in either direction (see _refresh)
            tcp = d.tcp
            if seq == tcp.next_seq and not flags & _NOT_PLAIN and not missing:
                if not payload:
                    return _EMPTY
                size = len(payload)
                tcp.offset += size
                tcp.next_seq = (seq + size) & _MASK
                d.last_ts = ts
                d.last_frame = number
                decoder = d.decoder
                assert decoder is not None
                decoded = decoder.decode_synced(payload)
                if decoded is None:
                    return self._framing_lost(d, payload, ts, number)
                heads, objs = decoded
                if not objs:
                    return _EMPTY
                conn = d.conn
                if conn.watch:
                    self._watch(d, objs)
                if len(heads) != len(objs):
                    heads = align(heads, objs)
                return self._build_packets(heads, objs, ts, number, d.ctx or d.context(), conn.version or 4)
        if d is None or (flags & SYN and self._reused(d, seq, flags)):
            if not payload and not flags & SYN:
                return _EMPTY  # a bare ACK or FIN of a connection we know nothing of
            out = self._close(d) if d is not None else _EMPTY
            d = self._open(flow)
            return out + self._segment(d, ts, number, seq, ack, flags, payload, missing)
        return self._segment(d, ts, number, seq, ack, flags, payload, missing)

    def _framing_lost(self, d: _Direction, payload: bytes, ts: int | None, number: int) -> list[Record]:
        """The hot path's decoding of `payload` found the framing broken: its records, then off the hot path."""
        decoder = d.decoder
        assert decoder is not None
        out = self._records(d, decoder.framing_lost(payload, ts, number))
        d.fast = False
        self._refresh(d.peer)  # this direction may now hold data: the peer's records wait for it
        return out

    def finish(self) -> list[Record]:
        """The capture is over: reports what is still held (gaps, packets cut short) and forgets every connection."""
        out: list[Record] = []
        for d in list(self._flows.values()):
            if d.flow in self._flows:
                out += self._close(d)
        return out

    # --- connections ---------------------------------------------------------------------------------------

    def _open(self, flow: bytes) -> _Direction:
        src, dst, sport, dport = flow_endpoints(flow)
        from_client: bool | None = None
        if sport in self.tls_ports or dport in self.tls_ports:
            kind = _TLS
            from_client = dport in self.tls_ports
        elif sport in self.ports or dport in self.ports:
            kind = _MQTT
            if (dport in self.ports) != (sport in self.ports):
                from_client = dport in self.ports
        else:
            kind = _PENDING if self.detect else _IGNORED
        conn = _Connection(kind, self.version)
        d = _Direction(conn, flow, src, dst, from_client)
        p = _Direction(conn, reverse_flow(flow), dst, src, None if from_client is None else not from_client)
        d.peer, p.peer = p, d
        self._flows[d.flow] = d
        self._flows[p.flow] = p
        if kind == _MQTT:
            self._number(conn)
            self.stats.connections += 1
        return d

    def _number(self, conn: _Connection) -> None:
        conn.index = self._streams
        self._streams += 1
        if self._on_numbered is not None:
            self._on_numbered(conn.index)

    @staticmethod
    def _reused(d: _Direction, seq: int, flags: int) -> bool:
        """A SYN on a known flow that is not a retransmission of its first one: a new connection, same ports."""
        if d.conn.kind == _IGNORED:
            return flags & ACK == 0
        nxt = d.tcp.next_seq
        return nxt is not None and (seq + 1) & _MASK != nxt

    def _close(self, d: _Direction) -> list[Record]:
        out: list[Record] = []
        for half in (d, d.peer):
            if not half.closed:
                out += self._end(half)
        self._forget(d)
        return self._release(d, out)

    def _forget(self, d: _Direction) -> None:
        self._flows.pop(d.flow, None)
        self._flows.pop(d.peer.flow, None)

    def _end(self, d: _Direction) -> list[Record]:
        """The direction is over (FIN reached, RST, or end of capture): flush reassembly and decoding."""
        d.closed = True
        d.fast = False
        if d.conn.kind != _MQTT:
            return _EMPTY
        items: list[Item] = []
        for piece in d.tcp.flush():
            items += self._feed(d, piece)
        if d.decoder is not None:
            items += d.decoder.end(d.last_ts, d.last_frame)
        return self._records(d, items) if items else _EMPTY

    # --- segments, the general path ------------------------------------------------------------------------

    def _segment(
        self, d: _Direction, ts: int | None, number: int, seq: int, ack: int, flags: int, payload: bytes, missing: int
    ) -> list[Record]:
        conn = d.conn
        if conn.kind == _IGNORED or (conn.kind == _TLS and conn.index >= 0):
            if flags & (FIN | RST):
                self._forget(d)
            return _EMPTY
        d.last_ts = ts
        d.last_frame = number
        pieces = d.tcp.segment(seq, flags, payload, missing, ts, number)
        if pieces and d.decoder is None and isinstance(pieces[0][0], bytes):
            kind = self._classify(d, pieces[0][0])
            if kind == _TLS:
                return self._encrypted(d, ts, number)
            if kind != _MQTT:
                return _EMPTY
        elif conn.kind != _MQTT:
            return _EMPTY
        peer = d.peer
        out = _EMPTY
        if flags & ACK and peer.tcp.pending:
            # The peer acknowledging bytes of its own stream that the capture never had: a gap there.
            peer_items: list[Item] = []
            for piece in peer.tcp.peer_ack(ack):
                peer_items += self._feed(peer, piece)
            if peer_items:
                out = self._records(peer, peer_items)
        if pieces:
            items: list[Item] = []
            for piece in pieces:
                items += self._feed(d, piece)
            if items:
                out = out + self._records(d, items)
        if flags & RST or d.tcp.finished:
            out = out + self._end(d)
            if flags & RST and not peer.closed:
                out = out + self._end(peer)
            if peer.closed:
                self._forget(d)
        out = self._release(d, out)
        self._refresh(d)
        self._refresh(peer)
        return out

    @staticmethod
    def _refresh(d: _Direction) -> None:
        """The hot path is for a direction decoding in sync on a connection that holds nothing back."""
        decoder = d.decoder
        d.fast = (
            d.conn.kind == _MQTT and not d.closed and decoder is not None and not decoder.hunting and not _holding(d)
        )

    def _release(self, d: _Direction, out: list[Record]) -> list[Record]:
        """The records to give out now: none while the connection holds data back (a later record could belong
        to an earlier frame), then everything held, merged by frame."""
        conn = d.conn
        held = conn.held
        if _holding(d):
            if held is None:
                held = conn.held = []  # even empty: what fills the hole may come before what it releases
            held += out
            if len(held) <= MAX_HELD_RECORDS:
                return _EMPTY
            out = self._give_up_holes(d)
        elif held is None:
            return out
        conn.held = None
        return _by_frame(held + out)

    def _give_up_holes(self, d: _Direction) -> list[Record]:
        """Too much waits behind a hole: declare the holes of both directions lost and decode what follows."""
        out: list[Record] = []
        for half in (d, d.peer):
            items: list[Item] = []
            for piece in half.tcp.flush():
                items += self._feed(half, piece)
            if items:
                out += self._records(half, items)
        return out

    def _classify(self, d: _Direction, first: bytes) -> int:
        """The first bytes of a connection not decoded yet: MQTT (pending detection, or on an MQTT port), TLS."""
        conn = d.conn
        if looks_like_tls(first):
            if conn.kind == _MQTT:  # TLS on an MQTT port: reported, not decoded
                conn.kind = _TLS
                self.stats.connections -= 1
                self.stats.encrypted += 1
                return _TLS
            if conn.kind == _PENDING:
                conn.kind = _IGNORED  # TLS on a port nobody said was MQTT: not ours to report
        elif conn.kind == _PENDING:
            if looks_like_connect(first):
                d.from_client, d.peer.from_client = True, False
                conn.kind = _MQTT
                self._number(conn)
                self.stats.connections += 1
            else:
                conn.kind = _IGNORED
        elif conn.kind == _TLS and conn.index < 0:
            self._number(conn)
            self.stats.encrypted += 1
        return conn.kind

    def _encrypted(self, d: _Direction, ts: int | None, number: int) -> list[Record]:
        conn = d.conn
        if conn.index < 0:
            self._number(conn)
        return [
            {
                "ts": format_ts(ts),
                "frame": number,
                "src": d.src,
                "dst": d.dst,
                "type": "MALFORMED",
                "error": "TLS-encrypted connection: not decoded",
                "encrypted": True,
                "offset": 0,
                "stream": conn.index,
                "client": None,
                "from_client": d.from_client,
            }
        ]

    def _feed(self, d: _Direction, stamped: Piece) -> list[Item]:
        decoder = d.decoder
        if decoder is None:
            # Decoding starts in sync only when the connection's first byte was captured (its SYN was seen).
            decoder = d.decoder = DirectionDecoder(d.conn.version, synced=d.tcp.start_seen)
        piece, ts, number = stamped
        if isinstance(piece, int):
            self.stats.gaps += 1
            self.stats.lost_bytes += piece
            return decoder.gap(piece, ts, number)
        return decoder.data(piece, ts, number)

    # --- records -------------------------------------------------------------------------------------------

    def _records(self, d: _Direction, items: list[Item]) -> list[Record]:
        conn = d.conn
        build = self._builder.build
        out = []
        for item in items:
            obj = item[5]
            if conn.watch:
                self._watch(d, [obj])
            skipped = getattr(obj, "skipped", 0) if not isinstance(obj, RemoteProtocolError) else 0
            if skipped:
                self.stats.skipped_bytes += skipped
            out.append(build(item, d.ctx or d.context(), conn.version or 4))
        return out

    def _watch(self, d: _Direction, objs: list[Any]) -> None:
        """The start of a connection: its CONNECT (protocol version, client identifier, who is the client) and
        CONNACK (a client identifier assigned by the server)."""
        conn = d.conn
        d.ctx = d.peer.ctx = None  # what records share may change here
        for obj in objs:
            packet = obj.packet if isinstance(obj, RemoteProtocolError) else obj
            if type(packet) is Connect:
                conn.client = packet.client_id
                d.from_client, d.peer.from_client = True, False
                if packet.protocol_version in (3, 4, 5):  # a level we do not know: read on as 3.1.1, as tshark
                    conn.version = packet.protocol_version
                    if d.peer.decoder is not None:
                        d.peer.decoder.version = packet.protocol_version
            elif type(packet) is ConnAck:
                if not conn.client and packet.properties.assigned_client_identifier:
                    conn.client = packet.properties.assigned_client_identifier
                conn.watch = 0
                return
        conn.watch = max(conn.watch - len(objs), 0)


def _holding(d: _Direction) -> bool:
    """Does either direction of d's connection hold data back (out of order, or while re-synchronising)? Its
    packets will carry earlier frames than what arrives meanwhile."""
    peer = d.peer
    if d.tcp.pending or peer.tcp.pending:
        return True
    return (d.decoder is not None and d.decoder.holding) or (peer.decoder is not None and peer.decoder.holding)


def _frame(rec: Record) -> int:
    number: int = rec["frame"]
    return number


def _by_frame(records: list[Record]) -> list[Record]:
    """Records of one connection in frame order (the format's order: by the record holding the packet's last
    byte, packets completed in the same record in stream order); sorted() is stable."""
    return sorted(records, key=_frame) if len(records) > 1 else records
