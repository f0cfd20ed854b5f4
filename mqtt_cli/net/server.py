"""The broker's network side: listeners, one reader and one writer task per connection, timers, shutdown.

All protocol decisions are BrokerCore's (mqtt_cli/core/broker.py); this module only moves bytes and time.
A reader parses and routes everything a read holds in one call, then wakes the writers of the connections
that got output. A writer sends whatever accumulated since its last send in one write, so deliveries to a
busy subscriber coalesce; a publisher never waits for a subscriber's socket.
"""

from __future__ import annotations

import contextlib
import json
import math
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio

from mqtt_cli.core.broker import BrokerConfig, BrokerCore, Notice
from mqtt_cli.core.server import ServerConnection

__all__ = ["Listener", "ServeOptions", "ServerError", "parse_listen_url", "serve"]

READ_SIZE = 65536
CONNECT_TIMEOUT = 10.0  # seconds a new connection has to send its CONNECT
DRAIN_ON_SHUTDOWN = 2.0  # seconds writers get to send the last DISCONNECTs and wills


class ServerError(Exception):
    """A start-up failure to report in one line (port in use, unreadable certificate, bad URL)."""


@dataclass(frozen=True, slots=True)
class Listener:
    scheme: str  # mqtt or mqtts
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_listen_url(url: str) -> Listener:
    """`mqtt://host:port` or `mqtts://host:port` (port 0: any free port)."""
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts", "tcp", "ssl"):
        raise ServerError(f"listener {url!r}: the scheme must be mqtt:// or mqtts://")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ServerError(f"listener {url!r}: only scheme://host:port is understood")
    scheme = "mqtts" if parts.scheme in ("mqtts", "ssl") else "mqtt"
    try:
        port = parts.port
    except ValueError:
        raise ServerError(f"listener {url!r}: the port must be a number from 0 to 65535") from None
    if port is None:
        port = 8883 if scheme == "mqtts" else 1883
    return Listener(scheme, parts.hostname or "127.0.0.1", port)


@dataclass(slots=True)
class ServeOptions:
    listeners: list[Listener]
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_cafile: Path | None = None
    require_certificate: bool = False
    max_connections: int = 0  # 0: unlimited
    ready_file: Path | None = None
    on_notice: Callable[[Notice], None] | None = None
    on_listening: Callable[[list[Listener]], None] | None = None


def tls_context(options: ServeOptions) -> ssl.SSLContext:
    if options.tls_cert is None or options.tls_key is None:
        raise ServerError("an mqtts:// listener needs --tls-cert and --tls-key")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(options.tls_cert, options.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ServerError(f"cannot load TLS certificate {options.tls_cert} and key {options.tls_key}: {exc}") from None
    if options.tls_cafile is not None:
        try:
            ctx.load_verify_locations(options.tls_cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ServerError(f"cannot load the CA file {options.tls_cafile}: {exc}") from None
    if options.require_certificate:
        if options.tls_cafile is None:
            raise ServerError("--require-certificate needs --tls-cafile to check client certificates against")
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class _Conn:
    """The network side of one connection: its stream, the writer's wake-up, and its end."""

    __slots__ = ("done", "event", "stream")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.event = trio.Event()
        self.done = trio.Event()  # the writer has sent everything and stopped

    def wake(self) -> None:
        self.event.set()


class BrokerServer:
    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self.core = BrokerCore(options.broker, trio.current_time())
        self.active = 0
        self.bound: list[Listener] = []
        self._ticker_wake = trio.Event()

    # --- plumbing ------------------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Wakes the writers of connections with output, and reports what the core noticed."""
        core = self.core
        if core.dirty:
            for conn in core.take_dirty():
                if conn.context is not None:
                    conn.context.wake()
        if core.notices and self.options.on_notice is not None:
            while core.notices:
                self.options.on_notice(core.notices.popleft())
        elif core.notices:
            core.notices.clear()

    async def _reader(self, conn: ServerConnection, stream: trio.abc.Stream, opened: float) -> None:
        core = self.core
        while not conn.closed:
            if conn.connected:
                deadline = conn.keepalive_deadline() or math.inf
            else:
                deadline = opened + CONNECT_TIMEOUT
            with trio.move_on_at(deadline):
                try:
                    data = await stream.receive_some(READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
                if not data:
                    core.connection_lost(conn, trio.current_time())
                    self._flush()
                    return
                core.receive(conn, data, trio.current_time())
                self._flush()
                self._ticker_wake.set()  # a will delay or session expiry may now be the next deadline
                continue
            # The deadline passed with nothing read.
            if conn.connected:
                core.keepalive_expired(conn, trio.current_time())
            else:
                core.connection_lost(conn, trio.current_time())
            self._flush()
            return

    async def _writer(self, conn: ServerConnection, net: _Conn) -> None:
        core = self.core
        stream = net.stream
        while True:
            await net.event.wait()
            net.event = trio.Event()
            while conn.out:
                data = bytes(conn.out)
                conn.out.clear()
                await stream.send_all(data)
                if conn.wants_drain:
                    core.drained(conn, trio.current_time())
                    self._flush()
            if conn.close_requested:
                return

    async def _handle(self, stream: trio.abc.Stream) -> None:
        core = self.core
        opts = self.options
        if opts.max_connections and self.active >= opts.max_connections:
            await trio.aclose_forcefully(stream)
            return
        self.active += 1
        now = trio.current_time()
        conn = core.open(_peer(stream), now)
        net = _Conn(stream)
        conn.context = net
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer_task, conn, net)
                try:
                    await self._reader(conn, stream, now)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    core.connection_lost(conn, trio.current_time())
                    self._flush()
                except Exception as exc:  # a bug must cost one connection, never the broker
                    core.internal_error(conn, trio.current_time(), f"{type(exc).__name__}: {exc}")
                    self._flush()
                # The reader is done: the writer sends what is left (a DISCONNECT, a CONNACK), then stops.
                net.wake()
                with trio.move_on_after(DRAIN_ON_SHUTDOWN):
                    await net.done.wait()
                nursery.cancel_scope.cancel()
        finally:
            self.active -= 1
            conn.context = None
            core.connection_lost(conn, trio.current_time())
            self._flush()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await trio.aclose_forcefully(stream)

    async def _writer_task(self, conn: ServerConnection, net: _Conn) -> None:
        try:
            await self._writer(conn, net)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            # The peer is gone: the reader learns it from its next receive, or from this.
            self.core.connection_lost(conn, trio.current_time())
            self._flush()
        finally:
            net.done.set()

    async def _ticker(self) -> None:
        core = self.core
        while True:
            deadline = core.tick(trio.current_time())
            self._flush()
            with trio.move_on_at(min(deadline or math.inf, trio.current_time() + 1.0)):
                await self._ticker_wake.wait()
            self._ticker_wake = trio.Event()

    # --- running --------------------------------------------------------------------------------------------

    async def run(self, stop: trio.Event, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listens and serves until `stop` is set, then shuts down gracefully."""
        opts = self.options
        ctx = None
        if any(lst.scheme == "mqtts" for lst in opts.listeners):
            ctx = tls_context(opts)
        listeners: list[trio.abc.Listener[Any]] = []
        for spec in opts.listeners:
            try:
                tcp = await trio.open_tcp_listeners(spec.port, host=spec.host)
            except OSError as exc:
                for lst in listeners:
                    await lst.aclose()
                raise ServerError(f"cannot listen on {spec.url}: {exc.strerror or exc}") from None
            for lst in tcp:
                sockname = lst.socket.getsockname()
                self.bound.append(Listener(spec.scheme, sockname[0], sockname[1]))
                if spec.scheme == "mqtts":
                    assert ctx is not None
                    listeners.append(trio.SSLListener(lst, ctx, https_compatible=False))
                else:
                    listeners.append(lst)
        if opts.ready_file is not None:
            _write_ready_file(opts.ready_file, self.bound)
        if opts.on_listening is not None:
            opts.on_listening(self.bound)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._ticker)
            for lst in listeners:
                nursery.start_soon(trio.serve_listeners, self._handle_quietly, [lst])
            task_status.started(self)
            await stop.wait()
            await self.shutdown()
            nursery.cancel_scope.cancel()

    async def _handle_quietly(self, stream: trio.abc.Stream) -> None:
        # A failed TLS handshake, or a peer gone mid-write: that connection only.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await self._handle(stream)

    async def shutdown(self) -> None:
        """Publishes wills, sends 5.0 clients DISCONNECT 0x8B, and gives writers a moment to send it all."""
        self.core.shutdown(trio.current_time())
        self._flush()
        with trio.move_on_after(DRAIN_ON_SHUTDOWN):
            for conn in list(self.core.connections):
                net = conn.context
                if net is not None:
                    await net.done.wait()


def _peer(stream: trio.abc.Stream) -> str:
    inner = getattr(stream, "transport_stream", stream)
    sock = getattr(inner, "socket", None)
    try:
        host, port = sock.getpeername()[:2]  # type: ignore[union-attr]
    except (AttributeError, OSError):
        return "?"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _write_ready_file(path: Path, bound: list[Listener]) -> None:
    data = {"listeners": [{"url": b.url, "host": b.host, "port": b.port} for b in bound]}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data) + "\n")
    tmp.replace(path)  # atomic: a script polling for the file never reads half of it


async def serve(
    options: ServeOptions, stop: trio.Event | None = None, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """Runs the broker until `stop` is set (then shuts down gracefully) or the caller cancels it."""
    await BrokerServer(options).run(stop if stop is not None else trio.Event(), task_status=task_status)
