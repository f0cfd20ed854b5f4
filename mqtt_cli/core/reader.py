"""Reading a byte stream, in any chunking, into MQTT control packets: `PacketReader`, and `decode` for one.

    reader = PacketReader()              # learns the version from the CONNECT it reads, or is told it
    for packet in reader.feed(chunk): ...

The reader frames packets and decodes the common ones itself (a PUBLISH with a topic and a property block seen
before, a bare acknowledgement: the hot path); any other packet, and any that breaks a rule, goes to
decoder.decode_body, which checks every rule and says what is wrong (tests/core/test_fast_paths.py holds the two
to the same results). `PacketReader` raises `RemoteProtocolError` subclasses carrying the 5.0 reason code to
answer with; in tolerant mode (`strict=False`, for `mqtt dump`) it returns those errors in line with the packets
and goes on.
"""

from __future__ import annotations

from typing import Any, NoReturn

from .decoder import ACK_CLASSES, decode_body
from .errors import MalformedPacket, PacketTooLarge, RemoteProtocolError
from .packets import PACKET_NAMES, Connect, Packet, Publish
from .properties import EMPTY_PROPERTIES, SEEN_PROPERTIES, Properties
from .records import mutable_twin

__all__ = ["PacketReader", "decode", "plain_ack_packet"]

# First bytes of PUBACK, PUBREC, PUBREL, PUBCOMP with their required fixed-header flags.
_PLAIN_ACKS = frozenset({0x40, 0x50, 0x62, 0x70})

# Topic names repeat: remember the ones already decoded and checked, by their bytes. Bounded; shared by all
# readers, since whether bytes are a valid topic name does not depend on the connection. Handing out the same
# str object for the same topic also lets later lookups keyed by topic reuse its cached hash.
_TOPICS_SEEN: dict[bytes, str] = {}
_TOPICS_SEEN_MAX = 4096


def _valid_topic(raw: bytes) -> str:
    """The topic name in `raw` if it is a valid, non-empty one (then remembered), else ""."""
    try:
        topic = raw.decode()
    except UnicodeDecodeError:
        return ""
    if not topic or "+" in topic or "#" in topic or "\x00" in topic:
        return ""
    if len(_TOPICS_SEEN) >= _TOPICS_SEEN_MAX:
        _TOPICS_SEEN.clear()
    _TOPICS_SEEN[raw] = topic
    return topic


_MutablePublish = mutable_twin(Publish)
_SEEN_PUBLISH_PROPERTIES = SEEN_PROPERTIES[3]
_EMPTY = EMPTY_PROPERTIES


def plain_ack_packet(ack: int) -> Any:
    """The packet a `plain_acks` reader's int stands for (PubAck, PubRec, PubRel or PubComp, reason 0)."""
    return ACK_CLASSES[ack >> 20](ack & 0xFFFF, 0, _EMPTY)


def _too_large(first: int, size: int, limit: int) -> PacketTooLarge:
    return PacketTooLarge(
        f"{PACKET_NAMES[first >> 4]} of {size} bytes exceeds the maximum packet size {limit}",
        packet_type=first >> 4,
        fatal=True,
    )


class PacketReader:
    """Turns a byte stream, in any chunking, into packets.

    `version` is the protocol level the stream speaks (3, 4 or 5); None until a CONNECT tells it (other packets
    are read as 3.1.1 until then). `max_packet_size` bounds whole packets (fixed header included):
    a larger one raises PacketTooLarge before its body is buffered.

    `strict=True` (brokers, clients): a packet that breaks a rule raises its RemoteProtocolError; the packets
    decoded before it in the same `feed` are in `error.packets`. `strict=False` (capture decoders): such errors
    come back in the list in place of the packet (with `error.packet` set when it could be decoded) and
    reading goes on. Either way, an error with `fatal` set (the framing itself is broken) ends the stream: the
    reader raises it again on every later `feed`.

    `plain_acks=True` (the broker): a PUBACK, PUBREC, PUBREL or PUBCOMP with nothing but its packet identifier
    comes back as an int, `plain_ack(first byte, packet identifier)`, not a packet object: most are handled from
    the two numbers, and building a packet record costs more than handling it (`plain_ack_packet` builds it).
    """

    __slots__ = ("_chunks", "_error", "_have", "_need", "max_packet_size", "plain_acks", "strict", "version")

    def __init__(
        self,
        version: int | None = None,
        *,
        max_packet_size: int | None = None,
        strict: bool = True,
        plain_acks: bool = False,
    ):
        if version not in (None, 3, 4, 5):
            raise ValueError(f"version must be 3, 4, 5 or None, not {version!r}")
        self.version = version
        self.max_packet_size = max_packet_size
        self.strict = strict
        self.plain_acks = plain_acks
        self._chunks: list[bytes] = []  # bytes of an incomplete packet
        self._have = 0
        self._need = 0  # bytes needed before decoding is worth trying again
        self._error: RemoteProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole packet."""
        return self._have

    def feed(self, received: bytes | bytearray | memoryview) -> list[Any]:
        """Adds received bytes; returns the packets they complete (and, when not strict, errors in line)."""
        if self._error is not None:
            raise self._error
        # Kept and sliced into payloads: must not change under us (and bytes is what a compiled reader works on).
        data = received if type(received) is bytes else bytes(received)
        if self._have:
            data = self._joined(data)
        if not data:
            return []
        out: list[Any] = []
        n = len(data)
        pos = 0
        version = self.version or 4
        limit = self.max_packet_size
        twin = _MutablePublish
        topics_seen = _TOPICS_SEEN
        seen_props = _SEEN_PUBLISH_PROPERTIES
        publish = Publish
        acks = ACK_CLASSES
        while pos < n:
            # Fixed header: type and flags, then the Remaining Length (1.5.5) in at most four bytes.
            if pos + 1 >= n:
                self._need = 2
                break
            first = data[pos]
            length = data[pos + 1]
            body = pos + 2
            minimal = True
            if length & 0x80:
                byte = data[body] if body < n else 0x80
                if not byte & 0x80:  # two bytes (up to 16 KiB): kept inline, as common as the one-byte length
                    length = (length & 0x7F) | byte << 7
                    minimal = byte != 0
                    body += 1
                else:
                    length, body, minimal = self._long_length(data, pos, n, out)
                    if length < 0:
                        self._need = body - pos + 1
                        break
            end = body + length
            if limit is not None and end - pos > limit:
                self._fail(_too_large(first, end - pos, limit), out)
            if end > n:
                self._need = end - pos
                break
            if first & 0xF0 == 0x30 and minimal:
                # Fast path for the common PUBLISH: valid flags, a valid topic, no properties or ones seen before.
                # Anything else takes the general decoder, which checks the same rules and says what is wrong.
                qos = (first >> 1) & 3
                if body + 2 <= end and qos != 3 and (qos or not first & 8):
                    topic_end = body + 2 + ((data[body] << 8) | data[body + 1])
                    rest = topic_end + 2 if qos else topic_end
                    props: Properties | None = _EMPTY
                    if version == 5:
                        # Only an empty or an already seen (hence valid) short property block is taken here.
                        plen = data[rest] if rest < end else 128
                        if plen:
                            props = seen_props.get(data[rest + 1 : rest + 1 + plen]) if plen < 128 else None
                            if props is None:
                                plen = end
                        rest += 1 + plen
                    if rest <= end:
                        raw_topic = data[body + 2 : topic_end]
                        topic = topics_seen.get(raw_topic)
                        if topic is None:
                            topic = _valid_topic(raw_topic)
                        if topic:
                            if not qos:
                                packet = twin(topic, data[rest:end], 0, first & 1 == 1, False, None, props)
                                packet.__class__ = publish
                                out.append(packet)
                                pos = end
                                continue
                            pid = (data[topic_end] << 8) | data[topic_end + 1]
                            if pid:
                                packet = twin(topic, data[rest:end], qos, first & 1 == 1, first & 8 == 8, pid, props)
                                packet.__class__ = publish
                                out.append(packet)
                                pos = end
                                continue
            elif length == 2 and first in _PLAIN_ACKS and minimal:
                # Fast path for an acknowledgement of a QoS exchange with nothing but its packet identifier (in 5.0:
                # reason code 0, no properties); identifier 0 takes the general decoder, which says what is wrong.
                pid = (data[body] << 8) | data[body + 1]
                if pid:
                    out.append(first << 16 | pid if self.plain_acks else acks[first >> 4](pid, 0, _EMPTY))
                    pos = end
                    continue
            packet = self._decode_other(data, pos, body, end, version, minimal, out)
            pos = end
            if type(packet) is Connect and packet.protocol_version in (3, 4, 5):
                version = self.version = packet.protocol_version
        if pos < n:
            self._keep(data, pos, n)
        else:
            self._need = 0  # `_keep` for the common case, without the call
        return out

    def _joined(self, data: bytes) -> bytes:
        """The bytes kept from earlier feeds followed by `data`; b"" while they cannot complete a packet yet."""
        self._chunks.append(data)
        self._have += len(data)
        if self._have < self._need:
            return b""
        data = b"".join(self._chunks)
        self._chunks.clear()
        self._have = 0
        return data

    def _long_length(self, data: bytes, pos: int, n: int, out: list[Any]) -> tuple[int, int, bool]:
        """The Remaining Length of the packet at `pos` when it takes more than one byte: (length, where the body
        starts, whether the length was minimally encoded). A length of -1: the bytes end inside it."""
        length = data[pos + 1] & 0x7F
        body = pos + 2
        shift = 7
        while body < n:
            byte = data[body]
            body += 1
            length |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return length, body, byte != 0
            shift += 7
            if shift == 28:
                first = data[pos]
                self._fail(
                    MalformedPacket(
                        f"remaining length of a {PACKET_NAMES[first >> 4]} packet is longer than four bytes",
                        packet_type=first >> 4,
                        fatal=True,
                    ),
                    out,
                )
        return -1, body, True

    def _decode_other(
        self, data: bytes, pos: int, body: int, end: int, version: int, minimal: bool, out: list[Any]
    ) -> Any:
        """Decodes the whole packet at data[pos:end] that no fast path took, with every rule checked, into `out`;
        returns it (None: the error in its place had no packet). Strict, an error is raised instead."""
        first = data[pos]
        n = len(data)
        try:
            # Decoded from its own bytes, so that the positions errors name count from the packet's start.
            packet = decode_body(first, data[pos:end] if pos or end != n else data, body - pos, end - pos, version)
            if not minimal and version == 5:
                raise MalformedPacket(
                    "remaining length is not minimally encoded", packet=packet, packet_type=first >> 4
                )
        except RemoteProtocolError as err:
            if not self.strict and err.packet is None and first >> 4:
                # Tolerant: try again, reading bad texts with replacements; keep whichever says more.
                try:
                    decode_body(first, data[pos:end], body - pos, end - pos, version, lenient=True)
                except RemoteProtocolError as again:
                    if again.packet is not None:
                        err = again
            if self.strict:
                self._need = 0  # what is left may hold whole packets: look at it on the next feed
                self._keep(data, end, n)
                err.packets = out
                raise
            out.append(err)
            return err.packet
        out.append(packet)
        return packet

    def _keep(self, data: bytes, pos: int, n: int) -> None:
        if pos < n:
            rest = data[pos:] if pos else data
            self._chunks.append(rest)
            self._have = n - pos
        else:
            self._need = 0

    def _fail(self, err: RemoteProtocolError, out: list[Any]) -> NoReturn:
        self._error = err
        self._chunks.clear()
        self._have = 0
        err.packets = out
        raise err


def decode(data: bytes | bytearray | memoryview, version: int | None = None) -> Packet:
    """Decodes exactly one whole packet (strict); raises MalformedPacket when `data` is not exactly one."""
    reader = PacketReader(version)
    packets = reader.feed(data)
    if len(packets) != 1 or reader.buffered:
        raise MalformedPacket(
            f"expected exactly one whole packet, got {len(packets)} and {reader.buffered} bytes left over"
        )
    packet: Packet = packets[0]
    return packet
