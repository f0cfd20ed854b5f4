"""MQTT over WebSocket as a byte stream, for both ends: the clients' ws[s]:// transport and the broker's listeners.

wsproto does the framing (sans-IO); this module moves its bytes over a trio stream. MQTT rides in binary
messages (MQTT 5.0 section 6): packets may be split across frames and messages, and one message may hold several
packets, so the stream hands over the bytes of every binary frame as they come. A text frame is a protocol
violation [MQTT-6.0.0-1]: the connection closes with 1003. Pings are answered, closes answered with their code.

Every write goes out as one binary frame (the broker writes what one flush produced in one call). Sending is
single-file: the task that finds no send in progress sends everything queued, including control frames (pongs,
close replies) queued meanwhile by the reading task, so two tasks never write to the transport at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from .errors import ConnectFailed

__all__ = ["SUBPROTOCOLS", "CloseReason", "HandshakeRefused", "WebSocketStream"]

# What we accept, in order of preference: "mqtt" is the standard's [MQTT-6.0.0-3]; "mqttv3.1" is what MQTT 3.1
# clients (and old paho) offer, and mosquitto accepts it too.
SUBPROTOCOLS = ("mqtt", "mqttv3.1")
READ_SIZE = 65536
CLOSE_TIMEOUT = 1.0  # seconds a closing handshake may take before the transport is closed anyway


class HandshakeRefused(Exception):
    """A server-side upgrade that did not happen (wrong path, no WebSocket request, not MQTT); the peer was told."""


class WebSocketStream(trio.abc.Stream):
    """A byte stream over a WebSocket connection that completed its handshake (either end)."""

    def __init__(self, stream: trio.abc.Stream, ws: WSConnection) -> None:
        self.transport = stream
        self._ws = ws
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
        while True:
            try:
                data = await stream.receive_some(READ_SIZE)
            except trio.BrokenResourceError as err:
                raise ConnectFailed(f"WebSocket upgrade with {where} failed: {err}") from None
            if not data:
                raise ConnectFailed(f"{where} closed the connection during the WebSocket upgrade")
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    self = cls(stream, ws)
                    self.subprotocol = event.subprotocol
                    return self
                if isinstance(event, RejectConnection | RejectData):
                    status = getattr(event, "status_code", "")
                    raise ConnectFailed(f"{where} refused the WebSocket upgrade (HTTP {status})")

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
        while True:
            data = await stream.receive_some(READ_SIZE)
            if not data:
                raise HandshakeRefused("closed before its WebSocket upgrade request")
            try:
                ws.receive_data(data)
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
                self = cls(stream, ws)
                self.subprotocol = chosen
                self.resource = resource
                return self

    # --- sending ---------------------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Sends `data` as one binary message (one frame)."""
        if self._closed or self._ws.state is not ConnectionState.OPEN:
            raise trio.ClosedResourceError("the WebSocket is closed")
        self._pending += self._ws.send(Message(data=bytes(data)))
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
        while True:
            for event in self._ws.events():  # also what came with the handshake
                kind = type(event)
                if kind is BytesMessage:
                    out += event.data  # type: ignore[attr-defined]
                elif kind is Ping:
                    await self._queue(event.response())  # type: ignore[attr-defined]
                elif kind is TextMessage:
                    await self._close(CloseReason.UNSUPPORTED_DATA, "MQTT over WebSocket is binary")
                elif kind is CloseConnection:
                    assert isinstance(event, CloseConnection)
                    if self._ws.state is ConnectionState.REMOTE_CLOSING:
                        self._closed = True
                        await self._queue(event.response())
                    else:  # wsproto could not parse a frame: say why, with its code (1002, 1007, 1009)
                        await self._close(event.code, event.reason)
            if out:
                return bytes(out)
            if self._closed:
                return b""
            try:
                data = await self.transport.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self._closed = True
                return b""
            self._ws.receive_data(data)

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


async def _refuse(stream: trio.abc.Stream, ws: WSConnection, status: int, text: str) -> None:
    body = (text + "\n").encode()
    headers: Sequence[tuple[bytes, bytes]] = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
    data = ws.send(RejectConnection(status_code=status, headers=list(headers), has_body=True))
    data += ws.send(RejectData(data=body))
    await _send_quietly(stream, data)


async def _send_quietly(stream: trio.abc.Stream, data: bytes) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(data)
