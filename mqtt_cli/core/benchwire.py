"""`mqtt bench`'s work per message, kept in one small module so that mypyc compiles it (buildmode.COMPILED): the
payload layout, PUBLISH packets built in a reused buffer, and the broker's bytes scanned where they lie (no
object per packet): acknowledgements to send, loss/duplicate/reorder counts, latency samples counted by
histogram bucket in a preallocated list. Sans-IO: bytes in, bytes out, times passed in.

Payload layout (big-endian, then padding up to the payload size `-s`):

    offset 0  u64  send time, ns (CLOCK_REALTIME of the publishing process, taken just before the write)
    offset 8  u32  publisher number (the client number %i, global across workers)
    offset 12 u64  sequence number, from 0, per publisher
    offset 20 ...  padding (0x2e '.'); a payload is never shorter than these 20 bytes

Latency buckets (HDR-style, log-linear, over microseconds): values below 128 us have a bucket each (exact);
above, each power of two is split in 64 buckets, so a bucket is at most 1/64 (1.6 %) wide.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = [
    "BUCKETS",
    "HEADER",
    "HEADER_SIZE",
    "PAD_BYTE",
    "Acks",
    "Closed",
    "Latencies",
    "Publishes",
    "Receiver",
    "after_props",
    "bucket_of",
    "bucket_range",
    "packet_at",
    "split_frames",
]

HEADER: Final = struct.Struct(">QIQ")
HEADER_SIZE: Final = 20  # HEADER.size
PAD_BYTE: Final = b"."
_PAD: Final = 0x2E  # PAD_BYTE's value
# A payload is the bench's when its send time lies this close to its receive time: another publisher's
# payload of 20 bytes or more read as a send time is almost never within an hour of now.
_MAX_AGE_NS: Final = 3600 * 1_000_000_000
_MAX_SKEW_NS: Final = 1_000_000_000  # a receive time before the send time (the wall clock stepped back)
_NO_HEADER: Final = (0, 0, 0)  # a payload not the bench's: its "send time" 0 is never within the hour

_SUB_BITS: Final = 7  # 128 exact buckets, then 64 per power of two
_SUB: Final = 128
_HALF: Final = 64
#: Buckets enough for any latency below 2**63 us.
BUCKETS: Final = _SUB + (63 - _SUB_BITS) * _HALF

_PUBACK: Final = b"\x40\x02"
_PUBREC: Final = b"\x50\x02"
_PUBREL: Final = b"\x62\x02"
_PUBCOMP: Final = b"\x70\x02"


def bucket_of(us: int) -> int:
    """The histogram bucket of a latency in microseconds (negative values count as 0)."""
    if us < _SUB:
        return us if us > 0 else 0
    shift = us.bit_length() - _SUB_BITS
    return (shift << 6) + (us >> shift)  # _SUB + (shift - 1) * _HALF + (us >> shift) - _HALF


def bucket_range(index: int) -> tuple[int, int]:
    """[low, high] microseconds a bucket holds, both inclusive."""
    if index < _SUB:
        return index, index
    shift = (index - _SUB) // _HALF + 1
    low = ((index - _SUB) % _HALF + _HALF) << shift
    return low, low + (1 << shift) - 1


class Closed(Exception):
    """The broker closed the connection, or sent what we cannot read."""


def split_frames(buf: bytes) -> tuple[list[tuple[int, bytes]], int]:
    """The complete packets at the start of `buf` (first byte, body), and where the incomplete rest begins."""
    out: list[tuple[int, bytes]] = []
    pos = 0
    n = len(buf)
    while n - pos >= 2:
        i = pos + 1
        mult = 1
        length = 0
        while True:
            if i >= n:
                return out, pos
            b = buf[i]
            length += (b & 127) * mult
            i += 1
            if b < 128:
                break
            mult <<= 7
            if mult > 1 << 21:
                raise Closed("bad remaining length")
        if i + length > n:
            break
        out.append((buf[pos], buf[i : i + length]))
        pos = i + length
    return out, pos


def packet_at(buf: bytes, pos: int) -> tuple[int, int]:
    """(where the body starts, its length) of the packet at `pos`; (-1, 0) while its remaining length is
    incomplete (the body may be too). Closed when the remaining length is malformed."""
    n = len(buf)
    i = pos + 1
    length = 0
    mult = 1
    while i < n:
        b = buf[i]
        i += 1
        length += (b & 127) * mult
        if b < 128:
            return i, length
        mult <<= 7
        if mult > 1 << 21:
            raise Closed("bad remaining length")
    return -1, 0


def after_props(body: bytes, p: int) -> int:
    """Where an MQTT 5 property block that starts at `p` (with its length) ends."""
    length = 0
    mult = 1
    while True:
        b = body[p]
        p += 1
        length += (b & 127) * mult
        if b < 128:
            return p + length
        mult <<= 7


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 127
        n >>= 7
        out.append(b | 128 if n else b)
        if not n:
            return bytes(out)


class Publishes:
    """One publisher's PUBLISH packets. The packet is built once; a batch is that many copies in one buffer,
    reused, in which each message gets its packet identifier (QoS 1/2), send time and sequence number by one
    struct.pack_into: no object per message."""

    def __init__(self, topic: bytes, qos: int, retain: bool, version: int, size: int, publisher: int) -> None:
        v5 = version == 5
        body = 2 + len(topic) + (2 if qos else 0) + (1 if v5 else 0) + max(size, HEADER_SIZE)
        head = bytes([0x30 | qos << 1 | int(retain)]) + _varint(body) + len(topic).to_bytes(2, "big") + topic
        # Patched per message from `self.at` (into each copy): the packet identifier, the (empty) property
        # block's length byte as a pad byte (0), then the payload header.
        self.at = len(head)
        self.patch = struct.Struct(">" + ("H" if qos else "") + ("x" if v5 else "") + "QIQ")
        packet = head + bytes(self.patch.size) + PAD_BYTE * max(0, size - HEADER_SIZE)
        self.packet = packet
        self.size = len(packet)
        self.qos = qos
        self.publisher = publisher
        self.seq = 0  # of the next message
        self.pid = 0  # the last packet identifier given
        self.buf = bytearray(packet)
        self.room = 1  # packets the buffer holds

    def build(self, n: int, sent_ns: int) -> bytes:
        """The next `n` messages (n >= 1), sent at `sent_ns`, as one bytes object."""
        size = self.size
        if n > self.room:
            self.buf = bytearray(self.packet * n)
            self.room = n
        buf = self.buf
        pack = self.patch.pack_into
        publisher = self.publisher
        seq = self.seq
        off = self.at
        if self.qos:
            pid = self.pid
            for _ in range(n):
                pid = pid % 65535 + 1
                pack(buf, off, pid, sent_ns, publisher, seq)
                seq += 1
                off += size
            self.pid = pid
        else:
            for _ in range(n):
                pack(buf, off, sent_ns, publisher, seq)
                seq += 1
                off += size
        self.seq = seq
        return bytes(memoryview(buf)[: n * size])


class Latencies:
    """Latency samples (us) counted by bucket in a list of every bucket, made once: recording one allocates
    nothing. `take` hands the counts over (a Histogram adds them) and starts again from zero."""

    def __init__(self) -> None:
        self.counts: list[int] = [0] * BUCKETS
        self.total = 0
        self.sum_us = 0
        self.min_us = -1  # none yet
        self.max_us = 0

    def settle(self, total: int, sum_us: int, min_us: int, max_us: int) -> None:
        """A scan's running figures, kept in locals while it ran (Receiver.feed), written back."""
        self.total = total
        self.sum_us = sum_us
        self.min_us = min_us
        self.max_us = max_us

    def record(self, us: int) -> None:
        if us < 0:
            us = 0
        self.counts[us if us < _SUB else bucket_of(us)] += 1
        self.total += 1
        self.sum_us += us
        if us > self.max_us:
            self.max_us = us
        if self.min_us < 0 or us < self.min_us:
            self.min_us = us

    def take(self) -> list[tuple[int, int]]:
        """(bucket, count) of every bucket counted since the last take, which are set back to zero (the total,
        sum, minimum and maximum too: read them first)."""
        out: list[tuple[int, int]] = []
        if not self.total:
            return out
        counts = self.counts
        for b in range(bucket_of(self.min_us), bucket_of(self.max_us) + 1):
            n = counts[b]
            if n:
                out.append((b, n))
                counts[b] = 0
        self.total = 0
        self.sum_us = 0
        self.min_us = -1
        self.max_us = 0
        return out


class Receiver:
    """One subscriber's side of the wire. `feed` takes what a read returned and when it arrived, scans the
    complete packets in place (what is left waits for the next read) and returns the acknowledgements to send;
    every bench payload gives a latency sample (into the worker's Latencies) and is counted per publisher in a
    bitmap of sequence numbers: distinct, duplicates (neither distinct nor reordered) and reordered (a distinct
    one below the previous distinct one), as the C load generator mqttload counts them."""

    def __init__(self, version: int, latencies: Latencies) -> None:
        self.v5 = version == 5
        self.latencies = latencies
        self.rest = b""
        self.delivered = 0  # PUBLISH packets, duplicates included
        self.samples = 0  # latency samples
        self.kernel_samples = 0  # ... whose receive time was the kernel's
        self.foreign = 0  # PUBLISH packets without a bench payload
        self.distinct = 0
        self.dups = 0
        self.reordered = 0
        self.bits: dict[int, bytearray] = {}  # by publisher: a bit per sequence number seen
        self.last: dict[int, int] = {}  # by publisher: the last distinct sequence number

    def feed(self, data: bytes, now_ns: int, kernel: bool) -> bytes:
        """`data` read at `now_ns` (the kernel's arrival time when `kernel`): the acknowledgements to send
        (b"" for none). Closed on a DISCONNECT or a malformed length."""
        buf = self.rest + data if self.rest else data
        n = len(buf)
        pos = 0
        acks = bytearray()
        lat = self.latencies
        counts = lat.counts
        total = lat.total
        sum_us = lat.sum_us
        min_us = lat.min_us
        max_us = lat.max_us
        unpack = HEADER.unpack_from
        v5 = self.v5
        delivered = samples = foreign = 0
        distinct = self.distinct
        dups = self.dups
        reordered = self.reordered
        # The publisher of the last sample, its bitmap and last sequence number (most reads hold one's).
        current = -1
        bits = bytearray()
        size = 0  # len(bits)
        last = -1
        while n - pos >= 2:
            first = buf[pos]
            i = pos + 2
            length = buf[pos + 1]
            if length >= 128:  # a remaining length of more than one byte (a payload of 128 bytes or more)
                i, length = packet_at(buf, pos)
                if i < 0:
                    break
            end = i + length
            if end > n:
                break
            kind = first >> 4
            if kind == 3:  # PUBLISH
                delivered += 1
                p = i + 2 + (buf[i] << 8 | buf[i + 1])
                qos = (first >> 1) & 3
                if qos:
                    acks += _PUBACK if qos == 1 else _PUBREC
                    acks += buf[p : p + 2]
                    p += 2
                if v5:
                    p = after_props(buf, p)
                ours = end - p >= HEADER_SIZE and (end - p == HEADER_SIZE or buf[p + HEADER_SIZE] == _PAD)
                header: tuple[int, int, int] = unpack(buf, p) if ours else _NO_HEADER  # (typed: unpacked natively)
                sent_ns, publisher, seq = header
                if -_MAX_SKEW_NS <= now_ns - sent_ns <= _MAX_AGE_NS:
                    us = (now_ns - sent_ns) // 1000
                    if us < 0:
                        us = 0
                    counts[bucket_of(us)] += 1
                    total += 1
                    sum_us += us
                    if us > max_us:
                        max_us = us
                    if min_us < 0 or us < min_us:
                        min_us = us
                    samples += 1
                    if publisher != current:
                        if current >= 0:
                            self.last[current] = last
                        current = publisher
                        bits = self._bitmap(publisher, seq)
                        size = len(bits)
                        last = self.last.get(publisher, -1)
                    byte = seq >> 3
                    bit = 1 << (seq & 7)
                    if byte >= size:
                        bits.extend(bytes(max(size, byte + 1 - size)))
                        size = len(bits)
                    seen = bits[byte]
                    if seen & bit:
                        dups += 1
                    else:
                        bits[byte] = seen | bit
                        distinct += 1
                        if seq < last:
                            reordered += 1
                        last = seq
                else:
                    foreign += 1
            elif kind == 6:  # PUBREL -> PUBCOMP
                acks += _PUBCOMP
                acks += buf[i : i + 2]
            elif kind == 14:
                raise Closed("DISCONNECT from the broker")
            pos = end
        if current >= 0:
            self.last[current] = last
        self.rest = buf[pos:] if pos < n else b""
        lat.settle(total, sum_us, min_us, max_us)
        self.delivered += delivered
        self.samples += samples
        if kernel:
            self.kernel_samples += samples
        self.foreign += foreign
        self.distinct = distinct
        self.dups = dups
        self.reordered = reordered
        return bytes(acks)

    def _bitmap(self, publisher: int, seq: int) -> bytearray:
        """The bitmap of `publisher`'s sequence numbers, made at its first message."""
        bits = self.bits.get(publisher)
        if bits is None:
            bits = self.bits[publisher] = bytearray(max(1024, (seq >> 3) + 1))
        return bits


class Acks:
    """A publisher's side of the wire: `feed` takes what a read returned and counts the messages acknowledged
    (PUBACK, PUBCOMP); `replies` are then the PUBRELs that PUBRECs ask for (b"" for none)."""

    def __init__(self) -> None:
        self.rest = b""
        self.replies = b""

    def feed(self, data: bytes) -> int:
        buf = self.rest + data if self.rest else data
        n = len(buf)
        pos = 0
        done = 0
        rel = bytearray()
        while n - pos >= 2:
            first = buf[pos]
            i = pos + 2
            length = buf[pos + 1]
            if length >= 128:
                i, length = packet_at(buf, pos)
                if i < 0:
                    break
            end = i + length
            if end > n:
                break
            kind = first >> 4
            if kind == 4 or kind == 7:  # PUBACK, PUBCOMP
                done += 1
            elif kind == 5:  # PUBREC -> PUBREL
                rel += _PUBREL
                rel += buf[i : i + 2]
            elif kind == 14:
                raise Closed("DISCONNECT from the broker")
            pos = end
        self.rest = buf[pos:] if pos < n else b""
        self.replies = bytes(rel)
        return done
