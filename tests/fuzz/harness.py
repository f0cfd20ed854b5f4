"""Fuzz targets: functions of one `bytes` input that raise `AssertionError` (or anything else) on a defect.

    codec_input(data)    PacketReader (strict and tolerant, whole and chunked) and encode/decode round trips
    broker_input(data)   BrokerCore, driven sans-IO by a program of operations from several clients

The same targets serve atheris (scripts/fuzz.py: coverage-guided, long runs), hypothesis (tests/fuzz: a bounded,
deterministic run in the suite) and the regression inputs in tests/fuzz/regressions.py. Invariants checked:

* no exception other than a documented `RemoteProtocolError` comes out of the codec, none at all out of
  `BrokerCore` (the network layer turns one into "internal error" and drops the connection: a defect);
* a protocol error closes the connection; a connected 5.0 client is first sent DISCONNECT with the error's
  reason code (0x82 also accepted for a packet type only a server sends, as issue #16 asks);
* no packet is left unprocessed in a live connection's buffer (a hang: the client waits for an answer);
* what the broker writes is valid MQTT for the client's version, only server packet types, within the client's
  Maximum Packet Size;
* memory is bounded: queues, in-flight windows, topic aliases, the reader's buffer and the output buffer stay
  within the configured limits;
* decoding does not depend on how the bytes are cut; a decoded packet encodes, decodes to itself, and encodes
  to the same bytes again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mqtt_cli.core import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    LocalProtocolError,
    PacketReader,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    RemoteProtocolError,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    UnsupportedProtocolVersion,
    Will,
    decode,
    encode,
)
from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.reasons import REASONS_BY_PACKET
from mqtt_cli.core.server import ServerConnection

__all__ = ["BROKER_CONFIG", "broker_input", "codec_input"]

# Error reason codes a reader may report: those a DISCONNECT or a CONNACK can carry.
_ERROR_CODES = frozenset(c for c in REASONS_BY_PACKET[14] | REASONS_BY_PACKET[2] if c >= 0x80)
# Packet types only a server sends (a client sending one is a protocol error, 0x82).
_SERVER_ONLY = frozenset({2, 9, 11, 13})
# Packet types a server may send.
_SERVER_SENDS = (ConnAck, Publish, PubAck, PubRec, PubRel, PubComp, SubAck, UnsubAck, PingResp, Disconnect, Auth)


class Source:
    """The fuzzer's bytes, read as a program: each read takes the next bytes (zeros once exhausted)."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        b = self.data[self.pos]
        self.pos += 1
        return b

    def take(self, n: int) -> bytes:
        chunk = self.data[self.pos : self.pos + n]
        self.pos += len(chunk)
        return chunk

    def rest(self) -> bytes:
        return self.take(self.left)

    def pick(self, options: tuple[Any, ...]) -> Any:
        return options[self.byte() % len(options)]

    def flag(self) -> bool:
        return bool(self.byte() & 1)


# --- the codec ----------------------------------------------------------------------------------------------


def _comparable(item: Any) -> Any:
    if isinstance(item, RemoteProtocolError):
        return (type(item).__name__, item.message, item.reason_code, item.packet, item.fatal)
    return item


def _read(pieces: list[bytes], version: int | None, strict: bool, limit: int | None) -> list[Any]:
    """Everything a reader gives for the pieces: packets and (in line) errors; a strict reader stops at its first."""
    reader = PacketReader(version, max_packet_size=limit, strict=strict)
    out: list[Any] = []
    for piece in pieces:
        try:
            out += reader.feed(piece)
        except RemoteProtocolError as err:
            out += err.packets
            out.append(err)
            break
    for item in out:
        if isinstance(item, RemoteProtocolError):
            assert item.reason_code in _ERROR_CODES, f"reason code 0x{item.reason_code:02X} for {item!r}"
            assert item.packet_type is not None or item.fatal, f"no packet type on {item!r}"
    return out


def _roundtrip(packet: Any, version: int) -> None:
    """A packet a strict reader accepted: it encodes, decodes back to itself, and encodes the same again."""
    if type(packet) is Connect:
        version = packet.protocol_version
    try:
        wire = encode(packet, version)
    except LocalProtocolError as exc:
        raise AssertionError(f"decoded but cannot be encoded at level {version}: {packet!r}: {exc}") from exc
    again = decode(wire, version)
    assert again == packet, f"round trip changed {packet!r} into {again!r}"
    assert encode(again, version) == wire, f"encoding of {packet!r} is not stable"


def codec_input(data: bytes) -> None:
    src = Source(data)
    mode = src.byte()
    version = (None, 3, 4, 5)[mode & 3]
    strict = not mode & 4
    limit = (None, 64, 1024)[(mode >> 3) % 3]
    step = src.byte() % 9 + 1
    stream = src.rest()
    whole = _read([stream], version, strict, limit)
    chunked = _read([stream[i : i + step] for i in range(0, len(stream), step)] or [b""], version, strict, limit)
    assert [_comparable(x) for x in whole] == [_comparable(x) for x in chunked], "decoding depends on the cutting"
    level = version or 4
    for item in whole:
        packet = item.packet if isinstance(item, RemoteProtocolError) else item
        if isinstance(item, RemoteProtocolError):
            if isinstance(packet, Connect) and packet.protocol_version in (3, 4, 5):
                level = packet.protocol_version
            continue
        _roundtrip(packet, level)
        if type(packet) is Connect:
            level = packet.protocol_version


# --- the broker ---------------------------------------------------------------------------------------------

# Small limits, so that a short program reaches them.
BROKER_CONFIG = BrokerConfig(
    limits=Limits(
        max_keepalive=100,
        max_topic_alias=3,
        max_inflight=3,
        max_queued_messages=5,
        max_queued_bytes=0,
        max_packet_size=2048,
    ),
    max_buffered_bytes=4096,
    sys_interval=5.0,
)

_CLIENT_IDS = ("c0", "c1", "c2", "", "idQ1")
_TOPICS = ("a", "a/b", "a/b/c", "b", "$SYS/x", "x/y/z/w", "tQw", "tQ0", "tQu")
_FILTERS = ("a/#", "+/b", "#", "a/b", "$share/g/a/#", "$share/g/#", "+", "$SYS/#", "a/+/c", "fQh/x", "fQ0", "fQu")
# What the encoder refuses to write, written anyway: placeholders of the same length replaced in the encoded
# bytes (a wildcard in a topic name, '#' not last, U+0000, invalid UTF-8, a control character).
_BREAKS = ((b"tQw", b"t/+"), (b"fQh", b"f/#"), (b"Q0", b"Q\x00"), (b"Qu", b"\xc3("), (b"Q1", b"\x01\x1b"))
_PAYLOADS = (0, 1, 10, 100, 1500, 3000)
_TIME_STEPS = (0.0, 0.5, 1.0, 3.0, 10.0, 30.0, 100.0, 5000.0)


@dataclass
class _Slot:
    """One client: its current connection, a strict reader fed the same bytes (what the broker must make of
    them), and the protocol level it speaks."""

    conn: ServerConnection | None = None
    shadow: PacketReader = field(default_factory=lambda: PacketReader(None, max_packet_size=2048))
    version: int = 4
    since_drain: int = 0  # bytes received since `out` was last taken
    since_open: int = 0  # bytes sent on the current connection
    pending: bytearray = field(default_factory=bytearray)  # packets written, not yet sent


def _properties(src: Source, **choices: tuple[Any, ...]) -> Properties:
    named = {name: src.pick(options) for name, options in choices.items()}
    return Properties(**{k: v for k, v in named.items() if v is not None})


def _packet(src: Source, version: int, connect: bool) -> tuple[Any, int]:
    """A packet a client could send (or nearly: some combinations break a rule on purpose), and its level;
    with `connect`, a CONNECT (what a new connection sends first)."""
    kind = 0 if connect else src.byte() % 14
    v5 = version == 5
    pid = src.pick((1, 2, 3, 4, 5, 65535))
    if kind == 0:
        level = src.pick((3, 4, 5))
        v5 = level == 5
        will = None
        if src.byte() & 3 == 0:
            will_props = (
                _properties(src, will_delay_interval=(None, 0, 2, 10), message_expiry_interval=(None, 1))
                if v5
                else Properties()
            )
            will = Will(src.pick(_TOPICS), b"will", src.byte() % 3, src.flag(), will_props)
        props = Properties()
        if v5:
            props = _properties(
                src,
                session_expiry_interval=(None, 0, 5, 0xFFFFFFFF),
                receive_maximum=(None, 1, 2, 65535),
                maximum_packet_size=(None, 30, 64, 1000),
                topic_alias_maximum=(None, 0, 2),
                request_response_information=(None, 1),
            )
        client_id = src.pick(_CLIENT_IDS) or ("c3" if level == 3 else "")
        user = src.pick((None, "u"))
        keepalive = src.pick((60, 60, 30, 2, 0, 200))
        packet = Connect(client_id, src.flag(), keepalive, user, b"p" if user else None, will, props, level)
        return packet, level
    if kind <= 3:
        qos = src.byte() % 3
        topic = src.pick(_TOPICS)
        props = Properties()
        if v5:
            props = _properties(
                src, topic_alias=(None, None, 1, 2, 3, 4), message_expiry_interval=(None, 0, 1, 10),
                payload_format_indicator=(None, 1), subscription_identifier=(None, None, None, 9),
            )  # fmt: skip
            if props.topic_alias is not None and src.flag():
                topic = ""
        payload = bytes(src.pick(_PAYLOADS))
        return Publish(topic, payload, qos, src.flag(), bool(qos) and src.flag(), pid if qos else None, props), version
    if kind == 4:
        subs = tuple(
            Subscription(
                src.pick(_FILTERS), src.byte() % 3,
                *((src.flag(), src.flag(), src.byte() % 3) if v5 else ()),
            )
            for _ in range(src.byte() % 3 + 1)
        )  # fmt: skip
        props = _properties(src, subscription_identifier=(None, 1, 7)) if v5 else Properties()
        return Subscribe(pid, subs, props), version
    if kind == 5:
        return Unsubscribe(pid, tuple(src.pick(_FILTERS) for _ in range(src.byte() % 2 + 1))), version
    if 6 <= kind <= 9:
        cls = (PubAck, PubRec, PubRel, PubComp)[kind - 6]
        code = src.pick((0, 0, 0x10, 0x80, 0x92)) if v5 else 0
        return cls(pid, code), version
    if kind == 10:
        return PingReq(), version
    if kind == 11:
        props = _properties(src, session_expiry_interval=(None, 0, 7)) if v5 else Properties()
        return Disconnect(src.pick((0, 0, 4, 0x80)) if v5 else 0, props), version
    if kind == 12:
        return Auth(0x18, Properties(authentication_method="x")), 5
    return src.pick((ConnAck(), SubAck(pid, (0,)))), version


class _BrokerRun:
    def __init__(self) -> None:
        self.config = BROKER_CONFIG
        self.now = 1000.0
        self.core = BrokerCore(self.config, self.now)
        self.slots = [_Slot() for _ in range(4)]
        self.receive_maximum_seen = self.config.limits.max_inflight

    # --- operations ---

    def open(self, slot: _Slot) -> ServerConnection:
        if slot.conn is not None:
            self.core.connection_lost(slot.conn, self.now)
        slot.conn = self.core.open(f"127.0.0.1:{40000 + self.slots.index(slot)}", self.now)
        slot.shadow = PacketReader(None, max_packet_size=self.config.limits.max_packet_size)
        slot.since_drain = slot.since_open = 0
        return slot.conn

    def feed(self, slot: _Slot, data: bytes) -> None:
        conn = slot.conn if slot.conn is not None else self.open(slot)
        if not data:
            return
        was_closed = conn.closed
        was_connected = conn.connected
        version = conn.version
        shortcut = not conn.connected and data[0] != 0x10 and not conn.reader.buffered  # closed unread
        error, before = (None, []) if was_closed or shortcut else self._shadow(slot, data)
        out_before = len(conn.out)
        slot.since_drain += len(data)
        slot.since_open += len(data)
        self.core.receive(conn, data, self.now)
        if error is not None:
            self._after_error(conn, error, before, was_connected, version, out_before)
        if not conn.closed and not was_closed and not shortcut:  # no protocol error: _after_error saw it closed
            # The broker's reader holds what the shadow holds: not one whole packet may wait in it, or the client
            # waits for an answer that comes only when it sends something else (a hang).
            assert conn.reader.buffered == slot.shadow.buffered
            try:
                waiting = slot.shadow.feed(b"")
            except RemoteProtocolError as err:
                waiting = [err]
            assert not waiting, f"left unprocessed in the broker's reader: {waiting!r}"
        self.settle()

    def flush(self, slot: _Slot, cut: int) -> None:
        data = bytes(slot.pending)
        slot.pending.clear()
        cut %= len(data) + 1
        self.feed(slot, data[:cut])
        self.feed(slot, data[cut:])

    def _shadow(self, slot: _Slot, data: bytes) -> tuple[RemoteProtocolError | None, list[Any]]:
        """What a strict reader makes of the bytes: the first error, and the packets before it."""
        try:
            packets = slot.shadow.feed(data)
        except RemoteProtocolError as err:
            return err, err.packets
        for packet in packets:
            if type(packet) is Connect and packet.protocol_version == 5:
                rm = packet.properties.receive_maximum or self.config.limits.max_inflight
                self.receive_maximum_seen = max(self.receive_maximum_seen, rm)
        return None, packets

    def _after_error(
        self, conn: ServerConnection, err: RemoteProtocolError, before: list[Any], was_connected: bool,
        version: int, out_before: int,
    ) -> None:  # fmt: skip
        assert conn.closed, f"protocol error left the connection open: {err!r}"
        if before or not was_connected or version != 5 or isinstance(err, UnsupportedProtocolVersion):
            return  # closed by an earlier packet, or before CONNECT: no DISCONNECT due
        if err.reason_code not in REASONS_BY_PACKET[14]:
            return
        sent = [p for p in PacketReader(5).feed(bytes(conn.out[out_before:])) if isinstance(p, Disconnect)]
        allowed = {err.reason_code}
        if err.packet_type in _SERVER_ONLY:
            allowed.add(0x82)
        if err.reason_code == 0x8F and isinstance(err.packet, Subscribe | Unsubscribe):
            allowed = {0x81}  # an invalid filter is malformed (4.7, 4.13): closed with 0x81, as mosquitto does
        assert sent and sent[-1].reason_code in allowed, (
            f"closed for {err!r} with {sent[-1] if sent else 'no DISCONNECT'}; expected reason code {sorted(allowed)}"
        )

    def advance(self, dt: float) -> None:
        self.now += dt
        self.core.tick(self.now)
        for slot in self.slots:
            conn = slot.conn
            if conn is not None:
                deadline = conn.keepalive_deadline()
                if deadline is not None and deadline <= self.now:
                    self.core.keepalive_expired(conn, self.now)
        self.settle()

    def drain(self, slot: _Slot) -> None:
        conn = slot.conn
        if conn is None:
            return
        self.check_output(conn)
        conn.out.clear()
        slot.since_drain = 0
        self.core.drained(conn, self.now)
        self.settle()

    def lose(self, slot: _Slot) -> None:
        if slot.conn is not None:
            self.core.connection_lost(slot.conn, self.now)
            slot.conn = None
            self.settle()

    # --- what the network layer does after each call, and the invariants ---

    def settle(self) -> None:
        for conn in list(self.core.output(self.now).sends):
            if conn.close_requested:
                self.check_output(conn)
                conn.out.clear()
                self.core.connection_lost(conn, self.now)
                for slot in self.slots:
                    if slot.conn is conn:
                        slot.conn = None
        self.check_bounds()

    def check_output(self, conn: ServerConnection) -> None:
        """What the broker wrote is valid MQTT of the connection's version, server packets only, within the
        client's Maximum Packet Size."""
        data = bytes(conn.out)
        if not data:
            return
        reader = PacketReader(conn.version)
        try:
            packets = reader.feed(data)
        except RemoteProtocolError as err:
            raise AssertionError(f"the broker wrote invalid MQTT at level {conn.version}: {err!r}") from err
        assert not reader.buffered, "the broker wrote part of a packet"
        limit = conn.client_max_packet_size
        for packet in packets:
            assert isinstance(packet, _SERVER_SENDS), f"a server does not send {packet!r}"
            if limit is not None and type(packet) is not ConnAck:
                size = len(encode(packet, conn.version))
                assert size <= limit, f"{type(packet).__name__} of {size} bytes over the client's maximum {limit}"

    def check_bounds(self) -> None:
        c, lim = self.config, self.config.limits
        core = self.core
        assert core.connected == sum(1 for s in core.sessions.values() if s.connection is not None)
        for session in core.sessions.values():
            if lim.max_queued_messages:
                assert len(session.queue) <= lim.max_queued_messages, f"queue of {len(session.queue)} messages"
            if lim.max_queued_bytes:
                assert session.queued_bytes <= lim.max_queued_bytes
            assert len(session.outgoing) <= self.receive_maximum_seen, f"{len(session.outgoing)} in flight"
            assert len(session.incoming) <= 65535
        for slot in self.slots:
            conn = slot.conn
            if conn is None:
                continue
            assert len(conn.aliases_in or ()) <= lim.max_topic_alias
            assert conn.reader.buffered < lim.max_packet_size
            bound = c.max_buffered_bytes + 2 * lim.max_packet_size + 2 * slot.since_drain + 1024
            assert len(conn.out) <= bound, f"{len(conn.out)} bytes waiting for a client (bound {bound})"


def broker_input(data: bytes) -> None:
    src = Source(data)
    run = _BrokerRun()
    while src.left:
        op = src.byte() % 16
        slot = run.slots[src.byte() % len(run.slots)]
        if op == 0:
            run.open(slot)
            run.settle()
        elif op <= 9:
            conn = slot.conn
            fresh = conn is None or (not conn.connected and not slot.since_open and not slot.pending)
            packet, level = _packet(src, slot.version, fresh)
            try:
                wire = bytearray(encode(packet, level))
            except LocalProtocolError:
                continue  # a combination the encoder refuses (the raw operation covers broken bytes)
            for placeholder, broken in _BREAKS:
                if placeholder in wire and src.flag():
                    wire = bytearray(wire.replace(placeholder, broken))
            if src.byte() < 24:  # now and then, one byte changed
                wire[src.byte() % len(wire)] ^= src.byte() | 1
            if type(packet) is Connect:
                slot.version = level
            # Several packets may arrive in one read: they wait in `pending` until a flush, then come in two
            # pieces cut anywhere.
            slot.pending += wire
            if src.byte() & 3:
                run.flush(slot, src.byte())
        elif op <= 11:
            run.feed(slot, src.take(src.byte() % 64 + 1))
        elif op <= 13:
            run.advance(src.pick(_TIME_STEPS))
        elif op == 14:
            run.drain(slot)
        else:
            run.lose(slot)
    for slot in run.slots:
        run.flush(slot, 0)
    run.core.shutdown(run.now)
    run.settle()
