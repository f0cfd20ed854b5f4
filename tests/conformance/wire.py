"""Raw MQTT on a blocking socket, for the conformance tests: bytes are built and read here by hand, not by
mqtt_cli's codec, so a codec mistake cannot hide itself (and malformed packets can be sent at all).

Every read has a deadline (the socket's timeout), so no test can hang on a broker that stays silent."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import uuid
from dataclasses import dataclass, field
from enum import IntEnum

import pytest

from tests.brokers import Broker

TIMEOUT = 3.0


class T(IntEnum):
    """Control packet types (fixed header, high nibble)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


class P(IntEnum):
    """5.0 property identifiers."""

    PAYLOAD_FORMAT = 0x01
    MESSAGE_EXPIRY = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_ID = 0x0B
    SESSION_EXPIRY = 0x11
    ASSIGNED_CLIENT_ID = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTH_METHOD = 0x15
    AUTH_DATA = 0x16
    REQUEST_PROBLEM_INFO = 0x17
    WILL_DELAY = 0x18
    REQUEST_RESPONSE_INFO = 0x19
    RESPONSE_INFO = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_AVAILABLE = 0x28
    SUBSCRIPTION_ID_AVAILABLE = 0x29
    SHARED_AVAILABLE = 0x2A


_BYTE = {P.PAYLOAD_FORMAT, P.REQUEST_PROBLEM_INFO, P.REQUEST_RESPONSE_INFO, P.MAXIMUM_QOS, P.RETAIN_AVAILABLE}
_BYTE |= {P.WILDCARD_AVAILABLE, P.SUBSCRIPTION_ID_AVAILABLE, P.SHARED_AVAILABLE}
_U16 = {P.SERVER_KEEP_ALIVE, P.RECEIVE_MAXIMUM, P.TOPIC_ALIAS_MAXIMUM, P.TOPIC_ALIAS}
_U32 = {P.MESSAGE_EXPIRY, P.SESSION_EXPIRY, P.WILL_DELAY, P.MAXIMUM_PACKET_SIZE}
_BIN = {P.CORRELATION_DATA, P.AUTH_DATA}
_STR = {P.CONTENT_TYPE, P.RESPONSE_TOPIC, P.ASSIGNED_CLIENT_ID, P.AUTH_METHOD, P.RESPONSE_INFO}
_STR |= {P.SERVER_REFERENCE, P.REASON_STRING}

Props = list[tuple[int, object]]

# --- encoding -----------------------------------------------------------------------------------------------


def vbi(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def s(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack(">H", len(raw)) + raw


def props(items: Props | None) -> bytes:
    body = bytearray()
    for pid, value in items or []:
        body += vbi(pid)
        if pid in _BYTE:
            body.append(int(value))  # type: ignore[call-overload]
        elif pid in _U16:
            body += struct.pack(">H", value)
        elif pid in _U32:
            body += struct.pack(">I", value)
        elif pid == P.SUBSCRIPTION_ID:
            body += vbi(int(value))  # type: ignore[call-overload]
        elif pid == P.USER_PROPERTY:
            key, val = value  # type: ignore[misc]
            body += s(key) + s(val)
        else:
            body += s(value)  # type: ignore[arg-type]
    return vbi(len(body)) + bytes(body)


def packet(ptype: int, flags: int, body: bytes) -> bytes:
    return bytes([(ptype << 4) | flags]) + vbi(len(body)) + body


@dataclass
class Will:
    topic: str | bytes
    payload: bytes = b"will"
    qos: int = 0
    retain: bool = False
    props: Props | None = None


def connect(
    client_id: str | bytes,
    version: int = 5,
    *,
    clean: bool = True,
    keepalive: int = 60,
    will: Will | None = None,
    username: str | bytes | None = None,
    password: bytes | None = None,
    properties: Props | None = None,
    reserved: bool = False,
) -> bytes:
    name = b"MQIsdp" if version == 3 else b"MQTT"
    flags = (0x02 if clean else 0) | (0x01 if reserved else 0)
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if username is not None:
        flags |= 0x80
    if password is not None:
        flags |= 0x40
    body = s(name) + bytes([version, flags]) + struct.pack(">H", keepalive)
    if version == 5:
        body += props(properties)
    body += s(client_id)
    if will is not None:
        if version == 5:
            body += props(will.props)
        body += s(will.topic) + s(will.payload)
    if username is not None:
        body += s(username)
    if password is not None:
        body += s(password)
    return packet(T.CONNECT, 0, body)


def publish(
    topic: str | bytes,
    payload: bytes = b"",
    *,
    qos: int = 0,
    pid: int = 0,
    retain: bool = False,
    dup: bool = False,
    v5: bool = True,
    properties: Props | None = None,
) -> bytes:
    flags = (0x08 if dup else 0) | (qos << 1) | (0x01 if retain else 0)
    body = s(topic) + (struct.pack(">H", pid) if qos else b"")
    if v5:
        body += props(properties)
    return packet(T.PUBLISH, flags, body + payload)


def subscribe(
    pid: int, *filters: tuple[str | bytes, int], v5: bool = True, properties: Props | None = None, flags: int = 2
) -> bytes:
    """`filters`: (filter, options byte: QoS in bits 0-1, 5.0 options above)."""
    body = struct.pack(">H", pid) + (props(properties) if v5 else b"")
    for topic, options in filters:
        body += s(topic) + bytes([options])
    return packet(T.SUBSCRIBE, flags, body)


def unsubscribe(pid: int, *filters: str | bytes, v5: bool = True, flags: int = 2) -> bytes:
    body = struct.pack(">H", pid) + (props(None) if v5 else b"")
    return packet(T.UNSUBSCRIBE, flags, body + b"".join(s(f) for f in filters))


def ack(ptype: T, pid: int, reason: int | None = None) -> bytes:
    """PUBACK / PUBREC / PUBREL / PUBCOMP; `reason` only for 5.0 (None: the short form)."""
    body = struct.pack(">H", pid) + (bytes([reason]) if reason is not None else b"")
    return packet(ptype, 2 if ptype == T.PUBREL else 0, body)


def disconnect(reason: int | None = None, properties: Props | None = None) -> bytes:
    if reason is None:
        return packet(T.DISCONNECT, 0, b"")
    return packet(T.DISCONNECT, 0, bytes([reason]) + (props(properties) if properties is not None else b""))


PINGREQ = packet(T.PINGREQ, 0, b"")

# --- decoding -----------------------------------------------------------------------------------------------


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        out = self.data[self.at : self.at + n]
        if len(out) != n:
            raise AssertionError(f"packet too short: {self.data!r}")
        self.at += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def vbi(self) -> int:
        value, mult = 0, 1
        while True:
            byte = self.u8()
            value += (byte & 0x7F) * mult
            if not byte & 0x80:
                return value
            mult *= 128

    def bytes_(self) -> bytes:
        return self.take(self.u16())

    def rest(self) -> bytes:
        out = self.data[self.at :]
        self.at = len(self.data)
        return out

    def props(self) -> Props:
        end = self.vbi() + self.at
        out: Props = []
        while self.at < end:
            pid = self.vbi()
            if pid in _BYTE:
                out.append((pid, self.u8()))
            elif pid in _U16:
                out.append((pid, self.u16()))
            elif pid in _U32:
                out.append((pid, self.u32()))
            elif pid == P.SUBSCRIPTION_ID:
                out.append((pid, self.vbi()))
            elif pid == P.USER_PROPERTY:
                out.append((pid, (self.bytes_().decode(), self.bytes_().decode())))
            elif pid in _BIN:
                out.append((pid, self.bytes_()))
            else:
                out.append((pid, self.bytes_().decode()))
        return out


@dataclass
class Packet:
    type: T
    flags: int
    body: bytes
    v5: bool = True
    # decoded fields, filled in by decode()
    pid: int = 0
    reason: int = 0
    session_present: bool = False
    topic: str = ""
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    codes: list[int] = field(default_factory=list)
    props: Props = field(default_factory=list)

    def prop(self, pid: int) -> object:
        return next((v for k, v in self.props if k == pid), None)

    def all(self, pid: int) -> list[object]:
        return [v for k, v in self.props if k == pid]


# 5.0 reason codes a server may send, by packet type (5.0 2.4 and each packet's table)
_SUBACK_CODES = {0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2}
REASON_CODES: dict[T, set[int]] = {
    T.CONNACK: {0x00} | set(range(0x80, 0x8A)) | {0x8A, 0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F},
    T.PUBACK: {0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99},
    T.PUBREC: {0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99},
    T.PUBREL: {0x00, 0x92},
    T.PUBCOMP: {0x00, 0x92},
    T.SUBACK: _SUBACK_CODES,
    T.UNSUBACK: {0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91},
    T.DISCONNECT: {0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93, 0x94}
    | {0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xA2},
    T.AUTH: {0x00, 0x18, 0x19},
}


def decode(ptype: int, flags: int, body: bytes, v5: bool) -> Packet:
    """Every 5.0 reason code is checked against the packet's table ([MQTT-3.2.2-8], [MQTT-3.4.2-1], ...)."""
    p = _decode(ptype, flags, body, v5)
    if v5 and p.type in REASON_CODES:
        codes = p.codes if p.type in (T.SUBACK, T.UNSUBACK) else [p.reason]
        assert set(codes) <= REASON_CODES[p.type], f"{p.type.name} with a reason code it may not carry: {p}"
    return p


def _decode(ptype: int, flags: int, body: bytes, v5: bool) -> Packet:
    p = Packet(T(ptype), flags, body, v5)
    r = Reader(body)
    if p.type == T.CONNACK:
        p.session_present = bool(r.u8() & 1)
        p.reason = r.u8()
        if v5 and r.at < len(body):
            p.props = r.props()
    elif p.type == T.PUBLISH:
        p.dup, p.qos, p.retain = bool(flags & 8), (flags >> 1) & 3, bool(flags & 1)
        p.topic = r.bytes_().decode()
        if p.qos:
            p.pid = r.u16()
        if v5:
            p.props = r.props()
        p.payload = r.rest()
    elif p.type in (T.PUBACK, T.PUBREC, T.PUBREL, T.PUBCOMP, T.UNSUBACK, T.SUBACK):
        p.pid = r.u16()
        if p.type in (T.SUBACK, T.UNSUBACK):
            if v5:
                p.props = r.props()
            p.codes = list(r.rest())
        elif r.at < len(body):
            p.reason = r.u8()
            if r.at < len(body):
                p.props = r.props()
    elif p.type in (T.DISCONNECT, T.AUTH) and body:
        p.reason = r.u8()
        if r.at < len(body):
            p.props = r.props()
    return p


class Closed(Exception):
    """The broker closed the connection."""


class Conn:
    """One raw client connection."""

    def __init__(self, broker: Broker, v5: bool = True, timeout: float = TIMEOUT) -> None:
        self.broker, self.v5 = broker, v5
        self.sock = socket.create_connection((broker.host, broker.port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.buf = b""

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed first: tests check closed()
            self.sock.sendall(data)

    def _fill(self, timeout: float) -> bool:
        """False on end of stream."""
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            return False
        if not chunk:
            return False
        self.buf += chunk
        return True

    def recv(self, timeout: float = TIMEOUT) -> Packet:
        """The next packet; Closed if the stream ends first, TimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 2:
                length, mult, at = 0, 1, 1
                while at < len(self.buf) and at < 5:
                    length += (self.buf[at] & 0x7F) * mult
                    mult *= 128
                    if not self.buf[at] & 0x80:
                        break
                    at += 1
                else:
                    at = -1
                if at > 0 and len(self.buf) >= at + 1 + length:
                    head, body = self.buf[0], self.buf[at + 1 : at + 1 + length]
                    self.buf = self.buf[at + 1 + length :]
                    return decode(head >> 4, head & 0x0F, body, self.v5)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no packet from the broker")
            try:
                if not self._fill(left):
                    raise Closed
            except TimeoutError:
                raise TimeoutError("no packet from the broker") from None

    def expect(self, ptype: T, timeout: float = TIMEOUT) -> Packet:
        """The next packet that is not a PUBLISH (PUBLISHes before it are kept in `self.skipped`)."""
        got = self.recv(timeout)
        assert got.type == ptype, f"expected {ptype.name}, got {got.type.name} {got}"
        return got

    def connack(self, timeout: float = TIMEOUT) -> Packet:
        return self.expect(T.CONNACK, timeout)

    def closed(self, timeout: float = TIMEOUT) -> list[Packet]:
        """Waits for the broker to close the connection; returns the packets it sent first (AssertionError if
        the connection is still open after `timeout`)."""
        seen: list[Packet] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                seen.append(self.recv(max(0.0, deadline - time.monotonic())))
            except Closed:
                return seen
            except TimeoutError:
                raise AssertionError(f"the connection is still open (received {seen})") from None

    def silent(self, timeout: float = 0.3) -> None:
        """Nothing arrives within `timeout` and the connection stays open."""
        try:
            got = self.recv(timeout)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected {got}")

    def quiet(self) -> None:
        """Nothing is waiting for this client: a PINGREQ's PINGRESP is the next packet (a broker answers in
        order, so whatever it meant to send before the PINGREQ would come first)."""
        self.send(PINGREQ)
        got = self.recv()
        assert got.type == T.PINGRESP, f"unexpected {got}"

    def open(self) -> bool:
        """A PINGREQ is still answered (packets before the PINGRESP are passed over)."""
        self.send(PINGREQ)
        try:
            while self.recv().type != T.PINGRESP:
                pass
        except (Closed, TimeoutError):
            return False
        return True


def client(broker: Broker, client_id: str, version: int = 5, **kw: object) -> Conn:
    """A connected client (CONNACK 0 checked); keyword arguments go to connect()."""
    c = Conn(broker, v5=version == 5)
    c.send(connect(client_id, version, **kw))  # type: ignore[arg-type]
    got = c.connack()
    assert got.reason == 0, got
    c.connack_packet = got  # type: ignore[attr-defined]
    return c


def spec(*, v311: tuple[str, ...] = (), v5: tuple[str, ...] = ()) -> pytest.MarkDecorator:
    """The normative statements a test checks, by version ("3.1.0-2" for [MQTT-3.1.0-2]); docs/CONFORMANCE.md
    lists each statement with its tests, and tests/conformance/test_doc.py keeps the two in step."""
    return pytest.mark.spec(v311=v311, v5=v5)


VERSIONS = pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])


def uid(prefix: str = "c") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def closed_without(conn: Conn, ptype: T, timeout: float = TIMEOUT) -> list[Packet]:
    """The broker closes the connection without sending a packet of `ptype` first."""
    seen = conn.closed(timeout)
    assert all(p.type != ptype for p in seen), seen
    return seen


def refused(conn: Conn, v5: bool, reason_v5: int | None = None, timeout: float = TIMEOUT) -> list[Packet]:
    """The broker closes; a 5.0 DISCONNECT or CONNACK before the close carries `reason_v5` when given."""
    seen = conn.closed(timeout)
    if v5 and reason_v5 is not None:
        if conn.broker.kind == "mosquitto" and not seen:
            return seen  # mosquitto closes many protocol errors without a word, which 4.13 allows
        assert seen, "closed without a reason code"
        assert seen[-1].type in (T.DISCONNECT, T.CONNACK) and seen[-1].reason == reason_v5, seen
    return seen
