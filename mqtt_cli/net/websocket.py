"""MQTT over WebSocket as a byte stream, for both ends: the clients' ws[s]:// transport and the broker's listeners.

wsproto does the framing (sans-IO); this module moves its bytes over a trio stream. MQTT rides in binary
messages (MQTT 5.0 section 6): packets may be split across frames and messages, and one message may hold several
packets, so the stream hands over the bytes of every binary frame as they come. A text frame is a protocol
violation [MQTT-6.0.0-1]: the connection closes with 1003. Pings are answered, closes answered with their code.

Binary and continuation frames are read here (`_DataFrames`), not by wsproto: wsproto takes about 20 µs per
frame in Python, more than the broker spends routing a message, and a client that writes each packet in a frame
of its own would pay it per message. Everything else (the handshake, pings, closes, and checking them) stays
wsproto's: control frames are handed to it whole, and as it never sees a data frame its view of the connection
(open, closing) stays right. Only binary messages are MQTT, so the reader needs no UTF-8 or extension handling.

Every write goes out as one binary frame (the broker writes what one flush produced in one call). Sending is
single-file: the task that finds no send in progress sends everything queued, including control frames (pongs,
close replies) queued meanwhile by the reading task, so two tasks never write to the transport at once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    Request,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from .errors import ConnectFailed
from .readsize import READ_SIZE

__all__ = ["SUBPROTOCOLS", "CloseReason", "FrameError", "HandshakeRefused", "WebSocketStream"]

# What we accept, in order of preference: "mqtt" is the standard's [MQTT-6.0.0-3]; "mqttv3.1" is what MQTT 3.1
# clients (and old paho) offer, and mosquitto accepts it too.
SUBPROTOCOLS = ("mqtt", "mqttv3.1")
CLOSE_TIMEOUT = 1.0  # seconds a closing handshake may take before the transport is closed anyway
# A server that closes in answer to the upgrade request most often does not speak WebSocket there.
_NOT_WEBSOCKET = "is it a WebSocket listener? a plain MQTT port takes mqtt:// (mqtts:// over TLS)"


class HandshakeRefused(Exception):
    """A server-side upgrade that did not happen (wrong path, no WebSocket request, not MQTT); the peer was told."""


class FrameError(Exception):
    """A frame that breaks RFC 6455; `code` is the close code to answer with."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


class _DataFrames:
    """Reads frames from the bytes a peer sent: the payload of binary frames (and their continuations) comes out,
    unmasked, as it arrives (a frame is not waited for whole); control frames are returned whole, to hand to
    wsproto. `masked`: whether the peer must mask (a client does, a server must not; RFC 6455 5.1)."""

    __slots__ = ("buffer", "final", "in_message", "mask", "masked", "offset", "remaining")

    def __init__(self, masked: bool) -> None:
        self.masked = masked
        self.buffer = b""  # an incomplete header or control frame
        self.in_message = False  # a fragmented binary message has begun and not ended
        self.remaining = 0  # payload bytes of the current data frame still to come
        self.mask = b""
        self.offset = 0  # bytes of the current frame's payload already unmasked (where the mask key stands)
        self.final = False

    def feed(self, data: bytes | bytearray, out: bytearray, control: list[bytes]) -> None:
        """Appends the payload bytes in `data` to `out`, whole control frames to `control`; raises FrameError.

        Only an incomplete header or control frame is kept for the next call: payloads go out as they come."""
        buf = self.buffer + data if self.buffer else data
        self.buffer = b""
        view = memoryview(buf)
        pos = 0
        end = len(buf)
        while pos < end:
            if self.remaining:
                take = min(self.remaining, end - pos)
                chunk = view[pos : pos + take]
                out += self._unmask(chunk) if self.mask else chunk
                pos += take
                self.offset += take
                self.remaining -= take
                if not self.remaining:
                    self.in_message = not self.final
                continue
            if end - pos < 2:
                break
            first, second = buf[pos], buf[pos + 1]
            length = second & 0x7F
            header = 2
            if length == 126:
                header = 4
            elif length == 127:
                header = 10
            if second & 0x80:
                header += 4
            if end - pos < header:
                break
            if length == 126:
                length = int.from_bytes(buf[pos + 2 : pos + 4], "big")
            elif length == 127:
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                if length >> 63:
                    raise FrameError(CloseReason.PROTOCOL_ERROR, "frame length with its top bit set")
            if first & 0x70:
                raise FrameError(CloseReason.PROTOCOL_ERROR, "reserved bits set (no extension was agreed)")
            if bool(second & 0x80) is not self.masked:
                raise FrameError(CloseReason.PROTOCOL_ERROR, "a client must mask its frames, a server must not")
            opcode = first & 0x0F
            if opcode & 0x08:  # control frame: wsproto checks and handles it, whole
                if end - pos < header + length:
                    break
                control.append(bytes(view[pos : pos + header + length]))
                pos += header + length
                continue
            if opcode == 0x1:
                raise FrameError(CloseReason.UNSUPPORTED_DATA, "MQTT over WebSocket is binary [MQTT-6.0.0-1]")
            if opcode == 0x2:
                if self.in_message:
                    raise FrameError(CloseReason.PROTOCOL_ERROR, "a new message before the last one ended")
            elif opcode == 0x0:
                if not self.in_message:
                    raise FrameError(CloseReason.PROTOCOL_ERROR, "a continuation frame outside a message")
            else:
                raise FrameError(CloseReason.PROTOCOL_ERROR, f"unknown opcode 0x{opcode:X}")
            self.final = bool(first & 0x80)
            self.mask = bytes(view[pos + header - 4 : pos + header]) if self.masked else b""
            self.offset = 0
            self.remaining = length
            pos += header
            if not length:
                self.in_message = not self.final
        if pos < end:
            self.buffer = bytes(view[pos:])

    def _unmask(self, chunk: memoryview) -> bytes | bytearray:
        shift = self.offset & 3
        return _xor(chunk, self.mask[shift:] + self.mask[:shift])


def _xor(data: memoryview, key: bytes) -> bytes | bytearray:
    """`data` XOR the 4-byte `key` repeated: masking and unmasking."""
    n = len(data)
    if n <= 512:  # one XOR of two big integers: the fastest for short payloads
        stream = (key * ((n >> 2) + 1))[:n]
        return (int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")).to_bytes(n, "little")
    out = bytearray(data)  # longer: every fourth byte through a XOR table (as wsproto does)
    for i in range(4):
        out[i::4] = out[i::4].translate(_XOR_TABLES[key[i]])
    return out


_XOR_TABLES = [bytes(a ^ b for a in range(256)) for b in range(256)]


class WebSocketStream(trio.abc.Stream):
    """A byte stream over a WebSocket connection that completed its handshake (either end)."""

    def __init__(self, stream: trio.abc.Stream, ws: WSConnection, server: bool, leftover: bytes = b"") -> None:
        self.transport = stream
        self._ws = ws
        self._frames = _DataFrames(masked=server)
        self._mask_bit = 0 if server else 0x80
        self._leftover = leftover  # what came after the handshake in the same read (a pipelined CONNECT)
        self._closed = False
        self._pending = bytearray()  # wire bytes waiting for the sending task
        self._sending = False
        self.subprotocol: str | None = None
        self.resource: str | None = None  # the path the client asked for (server side)

    # --- handshakes ------------------------------------------------------------------------------------------

    @classmethod
    async def connect(cls, stream: trio.abc.Stream, host: str, target: str, where: str) -> WebSocketStream:
        """Client side: asks for `target` with subprotocol "mqtt"; `where` names the server in errors."""
        ws = WSConnection(ConnectionType.CLIENT)
        await stream.send_all(ws.send(Request(host=host, target=target, subprotocols=["mqtt"])))
        try:
            head, leftover = await _read_head(stream)
        except trio.BrokenResourceError as err:
            raise ConnectFailed(f"WebSocket upgrade with {where} failed: {err}; {_NOT_WEBSOCKET}") from None
        except HandshakeRefused:
            closed = f"{where} closed the connection during the WebSocket upgrade"
            raise ConnectFailed(f"{closed}; {_NOT_WEBSOCKET}") from None
        try:
            ws.receive_data(head)
            events = list(ws.events())
        except RemoteProtocolError as err:
            raise ConnectFailed(f"WebSocket upgrade with {where} failed: {err}") from None
        for event in events:
            if isinstance(event, AcceptConnection):
                self = cls(stream, ws, server=False, leftover=leftover)
                self.subprotocol = event.subprotocol
                return self
            if isinstance(event, RejectConnection):
                hint = "; is the path right? (often /mqtt: ws://HOST:PORT/mqtt)" if event.status_code == 404 else ""
                raise ConnectFailed(f"{where} refused the WebSocket upgrade (HTTP {event.status_code}){hint}")
        raise ConnectFailed(f"WebSocket upgrade with {where} failed: no answer to the upgrade request")

    @classmethod
    async def accept(cls, stream: trio.abc.Stream, path: str | None = None) -> WebSocketStream:
        """Server side: reads the upgrade request and answers it (`path` None: any resource). The caller bounds the
        time it takes.

        Refused (HTTP status, then HandshakeRefused): not a WebSocket upgrade (400), another path than the
        listener's (404), subprotocols offered but neither "mqtt" nor "mqttv3.1" (400). A request offering no
        subprotocol at all is accepted: the standard binds clients to offer one, and refusing gains nothing.
        Bytes the client sent right after its request (a pipelined CONNECT) are kept for the first read.
        """
        ws = WSConnection(ConnectionType.SERVER)
        head, leftover = await _read_head(stream)
        try:
            ws.receive_data(head)
            events = list(ws.events())
        except RemoteProtocolError as err:
            hint = err.event_hint
            if isinstance(hint, RejectConnection):
                with contextlib.suppress(LocalProtocolError):
                    await _send_quietly(stream, ws.send(hint))
            raise HandshakeRefused(f"bad WebSocket upgrade request: {err}") from None
        for event in events:
            if not isinstance(event, Request):
                continue
            resource = event.target.split("?", 1)[0]
            if path is not None and resource != path:
                await _refuse(stream, ws, 404, f"no MQTT here; the listener's path is {path}")
                raise HandshakeRefused(f"WebSocket upgrade for {resource!r}, the listener's path is {path}")
            offered = list(event.subprotocols)
            chosen = next((p for p in SUBPROTOCOLS if p in offered), None)
            if offered and chosen is None:
                await _refuse(stream, ws, 400, 'the WebSocket subprotocol must be "mqtt"')
                raise HandshakeRefused(f"WebSocket subprotocols {', '.join(offered)}: none is mqtt")
            await stream.send_all(ws.send(AcceptConnection(subprotocol=chosen)))
            self = cls(stream, ws, server=True, leftover=leftover)
            self.subprotocol = chosen
            self.resource = resource
            return self
        await _refuse(stream, ws, 400, "not a WebSocket upgrade request")
        raise HandshakeRefused("not a WebSocket upgrade request")

    # --- sending ---------------------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Sends `data` as one binary message (one frame)."""
        if self._closed or self._ws.state is not ConnectionState.OPEN:
            raise trio.ClosedResourceError("the WebSocket is closed")
        pending = self._pending
        n = len(data)
        # The frame header (RFC 6455 5.2), written here: wsproto's send costs several microseconds a frame.
        if n < 126:
            pending += bytes((0x82, n | self._mask_bit))
        elif n < 65536:
            pending += bytes((0x82, 126 | self._mask_bit)) + n.to_bytes(2, "big")
        else:
            pending += bytes((0x82, 127 | self._mask_bit)) + n.to_bytes(8, "big")
        if self._mask_bit:  # a client masks with a fresh key per frame (5.3)
            key = os.urandom(4)
            pending += key
            pending += _xor(memoryview(data), key)
        else:
            pending += data
        await self._drain()

    async def _queue(self, event: Event) -> None:
        """A control frame: queued behind what is being sent, sent now if nothing is."""
        with contextlib.suppress(LocalProtocolError):  # the state no longer allows it (closed meanwhile)
            self._pending += self._ws.send(event)
        await self._drain()

    async def _drain(self) -> None:
        if self._sending:
            return  # the task sending now sends this too, before it returns
        self._sending = True
        try:
            while self._pending:
                chunk = bytes(self._pending)
                self._pending.clear()
                await self.transport.send_all(chunk)
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    # --- receiving -------------------------------------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The payload bytes of the next binary frames; b"" once the connection is closed (by either end)."""
        out = bytearray()
        control: list[bytes] = []
        while True:
            if self._closed:
                return b""
            data: bytes | bytearray = self._leftover
            self._leftover = b""
            if not data:
                try:
                    data = await self.transport.receive_some(READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if not data:
                    self._closed = True
                    return b""
            try:
                self._frames.feed(data, out, control)
            except FrameError as err:
                await self._close(err.code, str(err))
            for frame in control:
                if self._closed:
                    break  # what follows a close (ours or the peer's) is not read
                self._ws.receive_data(frame)
                await self._handle_control()
            control.clear()
            if out:
                return bytes(out)

    async def _handle_control(self) -> None:
        for event in self._ws.events():
            if isinstance(event, Ping):
                await self._queue(event.response())
            elif isinstance(event, CloseConnection):
                if self._ws.state is ConnectionState.REMOTE_CLOSING:
                    self._closed = True
                    await self._queue(event.response())
                else:  # wsproto found the control frame wrong: say why, with its code (1002, 1007)
                    await self._close(event.code, event.reason)

    # --- closing ---------------------------------------------------------------------------------------------

    async def _close(self, code: int, reason: str | None = None) -> None:
        if self._ws.state is ConnectionState.OPEN:
            await self._queue(CloseConnection(code=code, reason=reason))
        self._closed = True

    async def aclose(self, code: int = CloseReason.NORMAL_CLOSURE) -> None:
        """Sends a close frame with `code` (1000; the broker going down: 1001), then closes the transport."""
        if not self._closed and self._ws.state is ConnectionState.OPEN:
            with trio.move_on_after(CLOSE_TIMEOUT):
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                    await self._close(code)
        self._closed = True
        await self.transport.aclose()


MAX_HEAD = 16384  # bytes of HTTP head an upgrade may take (h11's own limit)


async def _read_head(stream: trio.abc.Stream) -> tuple[bytes, bytes]:
    """An HTTP head (up to its blank line) and what came after it; wsproto gets only the head, as what follows
    is frames, read by _DataFrames."""
    buf = b""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            return buf[: end + 4], buf[end + 4 :]
        if len(buf) > MAX_HEAD:
            return buf, b""  # h11 refuses it (too long), with a 431 or 400 for the peer
        data = await stream.receive_some(READ_SIZE)
        if not data:
            raise HandshakeRefused("closed before the end of its WebSocket upgrade")
        buf += data


async def _refuse(stream: trio.abc.Stream, ws: WSConnection, status: int, text: str) -> None:
    body = (text + "\n").encode()
    headers: Sequence[tuple[bytes, bytes]] = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
    data = ws.send(RejectConnection(status_code=status, headers=list(headers), has_body=True))
    data += ws.send(RejectData(data=body))
    await _send_quietly(stream, data)


async def _send_quietly(stream: trio.abc.Stream, data: bytes) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(data)
