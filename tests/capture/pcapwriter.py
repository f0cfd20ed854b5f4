"""Captures written byte by byte for the tests (and benchmarks/dump.py): pcap and pcapng files, link layers,
IPv4/IPv6 and TCP, and TCP conversations whose segments can be split, reordered, repeated or dropped.

Checksums are left at zero: readers of captures (ours, tshark with its defaults) do not verify them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
ETHERNET, RAW, NULL, LOOP, SLL, SLL2 = 1, 101, 0, 108, 113, 276

Record = tuple[int, bytes]  # (timestamp in ns, frame)


# --- files -------------------------------------------------------------------------------------------------


def pcap(
    records: Iterable[Record],
    linktype: int = ETHERNET,
    *,
    nanos: bool = False,
    big_endian: bool = False,
    snaplen: int = 262144,
    caplen: int | None = None,
) -> bytes:
    """A classic pcap file; `caplen` cuts every frame to that many bytes (a small snap length)."""
    order = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    out = [struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for ts, frame in records:
        sec, frac = divmod(ts, 1_000_000_000)
        if not nanos:
            frac //= 1000
        data = frame if caplen is None else frame[:caplen]
        out.append(struct.pack(order + "IIII", sec, frac, len(data), len(frame)))
        out.append(data)
    return b"".join(out)


def _option(order: str, code: int, value: bytes) -> bytes:
    pad = (-len(value)) % 4
    return struct.pack(order + "HH", code, len(value)) + value + b"\x00" * pad


def _block(order: str, btype: int, body: bytes) -> bytes:
    body += b"\x00" * ((-len(body)) % 4)
    length = len(body) + 12
    return struct.pack(order + "II", btype, length) + body + struct.pack(order + "I", length)


@dataclass
class Interface:
    linktype: int = ETHERNET
    tsresol: int | None = None  # if_tsresol option byte: 6 = microseconds (default), 9 = ns, 0x80|n = 2^-n
    snaplen: int = 0


def pcapng(
    packets: Iterable[tuple[int, int, bytes]],
    interfaces: Sequence[Interface] = (Interface(),),
    *,
    big_endian: bool = False,
    simple: bool = False,
    extra_blocks: bool = True,
) -> bytes:
    """A pcapng file: `packets` are (interface index, timestamp in ns, frame). `simple` writes simple packet
    blocks (no timestamp, interface 0). `extra_blocks` adds blocks a reader must skip (name resolution, stats)."""
    order = ">" if big_endian else "<"
    shb = struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1) + _option(order, 4, b"tests") + _option(order, 0, b"")
    out = [_block(order, 0x0A0D0D0A, shb)]
    for iface in interfaces:
        opts = b""
        if iface.tsresol is not None:
            opts += _option(order, 9, bytes([iface.tsresol]))
        opts += _option(order, 2, b"lo") + _option(order, 0, b"")
        out.append(_block(order, 1, struct.pack(order + "HHI", iface.linktype, 0, iface.snaplen) + opts))
    if extra_blocks:
        out.append(
            _block(
                order,
                4,
                struct.pack(order + "HH", 1, 8)
                + bytes([127, 0, 0, 1])
                + b"lo\x00\x00"
                + struct.pack(order + "HH", 0, 0),
            )
        )
    for index, ts, frame in packets:
        if simple:
            out.append(_block(order, 3, struct.pack(order + "I", len(frame)) + frame))
            continue
        code = interfaces[index].tsresol
        if code is None or code == 6:
            ticks = ts // 1000
        elif code & 0x80:
            ticks = (ts << (code & 0x7F)) // 1_000_000_000
        else:
            ticks = ts * 10**code // 1_000_000_000
        body = struct.pack(order + "IIIII", index, ticks >> 32, ticks & 0xFFFFFFFF, len(frame), len(frame)) + frame
        body += b"\x00" * ((-len(frame)) % 4)  # the packet data is padded before the options
        out.append(_block(order, 6, body + _option(order, 1, b"pkt") + _option(order, 0, b"")))
    if extra_blocks:
        out.append(_block(order, 5, struct.pack(order + "III", 0, 0, 0)))  # interface statistics
    return b"".join(out)


# --- link layers and IP ------------------------------------------------------------------------------------


def ipv4(src: str, dst: str, payload: bytes, proto: int = 6, *, frag: int = 0) -> bytes:
    total = 20 + len(payload)
    return (
        struct.pack("!BBHHHBBH", 0x45, 0, total, 1, frag, 64, proto, 0)
        + bytes(int(x) for x in src.split("."))
        + bytes(int(x) for x in dst.split("."))
        + payload
    )


def _v6(addr: str) -> bytes:
    import ipaddress

    return ipaddress.IPv6Address(addr).packed


def ipv6(src: str, dst: str, payload: bytes, proto: int = 6, *, hop_by_hop: bool = False) -> bytes:
    if hop_by_hop:  # an extension header to walk past
        payload = bytes([proto, 0]) + b"\x01\x04\x00\x00\x00\x00" + payload
        proto = 0
    return struct.pack("!IHBB", 0x60000000, len(payload), proto, 64) + _v6(src) + _v6(dst) + payload


def ip(src: str, dst: str, payload: bytes, proto: int = 6) -> bytes:
    return (ipv6 if ":" in src else ipv4)(src, dst, payload, proto)


def ethernet(packet: bytes, *, vlans: Sequence[int] = (), v6: bool | None = None) -> bytes:
    etype = 0x86DD if (v6 if v6 is not None else packet[0] >> 4 == 6) else 0x0800
    tags = b"".join(struct.pack("!HH", 0x8100 if i == len(vlans) - 1 else 0x88A8, vid) for i, vid in enumerate(vlans))
    frame = b"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb" + tags + struct.pack("!H", etype) + packet
    return frame + b"\x00" * max(0, 60 - len(frame))  # Ethernet pads short frames: the IP length must win


def sll(packet: bytes) -> bytes:
    etype = 0x86DD if packet[0] >> 4 == 6 else 0x0800
    return struct.pack("!HHH8sH", 0, 772, 6, b"\x00" * 8, etype) + packet


def sll2(packet: bytes) -> bytes:
    etype = 0x86DD if packet[0] >> 4 == 6 else 0x0800
    return struct.pack("!HHIHBB8s", etype, 0, 1, 772, 0, 6, b"\x00" * 8) + packet


def null(packet: bytes, *, big_endian: bool = False, af_inet6: int = 30) -> bytes:
    family = 2 if packet[0] >> 4 == 4 else af_inet6
    return struct.pack(">I" if big_endian else "<I", family) + packet


LINKS = {
    ETHERNET: ethernet,
    RAW: lambda p: p,
    NULL: null,
    LOOP: lambda p: null(p, big_endian=True, af_inet6=24),
    SLL: sll,
    SLL2: sll2,
}


def tcp(sport: int, dport: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> bytes:
    header = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 0x50, flags, 65535, 0, 0)
    return header + payload


# --- TCP conversations -------------------------------------------------------------------------------------


@dataclass
class Segment:
    """One TCP segment of a conversation, before it becomes a frame."""

    from_client: bool
    seq: int
    ack: int
    flags: int
    payload: bytes = b""
    ts: int = 0


@dataclass
class Conversation:
    """A TCP connection between a client and a server, built segment by segment.

    `send(data, from_client)` appends data segments (split into `mss`-sized pieces), with the sequence numbers
    a real stack would use; `frames(link)` turns the segments into (ts, frame) records."""

    client: str = "127.0.0.1"
    server: str = "127.0.0.1"
    cport: int = 40000
    sport: int = 1883
    isn_client: int = 1000
    isn_server: int = 5000
    ts: int = 1_700_000_000_000_000_000
    step: int = 1000  # ns between segments
    segments: list[Segment] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cseq = self.isn_client
        self.sseq = self.isn_server

    def _add(self, from_client: bool, flags: int, payload: bytes = b"") -> Segment:
        seq = self.cseq if from_client else self.sseq
        ack = self.sseq if from_client else self.cseq
        self.ts += self.step
        seg = Segment(from_client, seq, ack, flags, payload, self.ts)
        self.segments.append(seg)
        length = len(payload) + (1 if flags & (SYN | FIN) else 0)
        if from_client:
            self.cseq += length
        else:
            self.sseq += length
        return seg

    def handshake(self) -> Conversation:
        self._add(True, SYN)
        self._add(False, SYN | ACK)
        self._add(True, ACK)
        return self

    def send(self, data: bytes, from_client: bool = True, mss: int | None = None) -> Conversation:
        size = mss or max(len(data), 1)
        for at in range(0, len(data), size):
            self._add(from_client, PSH | ACK, data[at : at + size])
        return self

    def ack(self, from_client: bool) -> Conversation:
        self._add(from_client, ACK)
        return self

    def close(self) -> Conversation:
        self._add(True, FIN | ACK)
        self._add(False, FIN | ACK)
        self._add(True, ACK)
        return self

    def frames(self, link: int = ETHERNET, segments: Iterable[Segment] | None = None) -> list[Record]:
        out = []
        for seg in self.segments if segments is None else segments:
            if seg.from_client:
                src, dst, sp, dp = self.client, self.server, self.cport, self.sport
            else:
                src, dst, sp, dp = self.server, self.client, self.sport, self.cport
            packet = ip(src, dst, tcp(sp, dp, seg.seq, seg.ack, seg.flags, seg.payload))
            out.append((seg.ts, LINKS[link](packet)))
        return out


def udp_frame(src: str, dst: str, sport: int, dport: int, payload: bytes, ts: int) -> Record:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    return ts, ethernet(ip(src, dst, udp, proto=17))
