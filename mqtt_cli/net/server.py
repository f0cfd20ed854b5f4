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
WRITER_LINGER = 1.0  # seconds a writer waits for more output before it ends
SWEEP_INTERVAL = 0.5  # seconds between keep-alive checks (a late close by half a second is within the spec)


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
    """The network side of one connection: its stream, and its writer while one runs.

    An idle connection costs one task (its reader): a writer task is started when output appears and stays
    a moment after its buffer empties (so a busy subscriber keeps one), then ends.
    """

    __slots__ = ("closing", "raw", "stream", "wake", "writing")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        # The plain socket under a TCP stream, for non-blocking sends outside any task (None for TLS).
        sock = getattr(stream, "socket", None)
        self.raw: Any = getattr(sock, "_sock", None) if isinstance(stream, trio.SocketStream) else None
        self.writing = False
        self.wake: trio.Event | None = None  # set to hand a lingering writer more output
        self.closing: trio.Event | None = None  # the reader waits on it for the writer's last bytes


@dataclass(slots=True, eq=False)
class _Listening:
    """One configured listener while it is open: its sockets (two for "localhost"), and its accept loop."""

    spec: Listener
    sockets: list[trio.SocketListener]
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    conns: set[ServerConnection] = field(default_factory=set)

    @property
    def bound(self) -> list[Listener]:
        return [Listener(self.spec.scheme, *s.socket.getsockname()[:2]) for s in self.sockets]


class BrokerServer:
    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self.core = BrokerCore(options.broker, trio.current_time())
        self.active = 0
        self._open: list[_Listening] = []
        self._tls: ssl.SSLContext | None = None
        self._ticker_wake = trio.Event()
        self._nursery: trio.Nursery | None = None  # where writers run; set by run() (or a test)

    @property
    def bound(self) -> list[Listener]:
        """The addresses listened on (a port 0 replaced by the one the system chose)."""
        return [b for lst in self._open for b in lst.bound]

    # --- plumbing ------------------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Sends what the core produced: straight to the socket when it takes it, else through a writer task.

        Most of the time the kernel's socket buffer has room, so a delivery or an answer leaves with one
        non-blocking send() from the task that produced it, without waking any other task. Only what the socket
        does not take at once (a slow or busy subscriber) goes to a writer task, which exists while it has work.
        """
        core = self.core
        while core.dirty:
            nursery = self._nursery
            assert nursery is not None
            for conn in core.take_dirty():
                net = conn.context
                if net is None:
                    continue
                if net.writing:
                    if net.wake is not None:
                        net.wake.set()
                    continue
                out = conn.out
                raw = net.raw
                if out and raw is not None:
                    try:
                        sent = raw.send(out)
                    except OSError:  # would block, or the peer is gone: the writer finds out which
                        sent = 0
                    if sent == len(out):
                        out.clear()
                        if conn.wants_drain:
                            core.drained(conn, trio.current_time())  # may make `conn` dirty again
                        if not conn.close_requested:
                            continue
                    elif sent:
                        del out[:sent]
                if out or conn.close_requested:
                    net.writing = True
                    nursery.start_soon(self._writer, conn, net)
        if core.notices:
            report = self.options.on_notice
            while core.notices:
                notice = core.notices.popleft()
                if report is not None:
                    report(notice)

    async def _writer(self, conn: ServerConnection, net: _Conn) -> None:
        core = self.core
        stream = net.stream
        try:
            while True:
                while conn.out:
                    data = bytes(conn.out)
                    conn.out.clear()
                    await stream.send_all(data)
                    if conn.wants_drain:
                        core.drained(conn, trio.current_time())
                        self._flush()
                if conn.close_requested:
                    await stream.aclose()  # the reader sees the stream closed and ends
                    return
                net.wake = trio.Event()
                with trio.move_on_after(WRITER_LINGER):
                    await net.wake.wait()
                net.wake = None
                if not conn.out and not conn.close_requested:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            core.connection_lost(conn, trio.current_time())
            self._flush()
            with contextlib.suppress(Exception):
                await trio.aclose_forcefully(stream)
        finally:
            net.writing = False
            if net.closing is not None:
                net.closing.set()

    async def _handle(self, stream: trio.abc.Stream, listening: _Listening | None = None) -> None:
        core = self.core
        opts = self.options
        if opts.max_connections and self.active >= opts.max_connections:
            await trio.aclose_forcefully(stream)
            return
        self.active += 1
        conn = core.open(_peer(stream), trio.current_time())
        net = _Conn(stream)
        conn.context = net
        if listening is not None:
            listening.conns.add(conn)
        try:
            while not conn.closed:
                try:
                    data = await stream.receive_some(READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
                if not data:
                    break
                core.receive(conn, data, trio.current_time())
                self._flush()
                if core.timers_changed:
                    core.timers_changed = False
                    self._ticker_wake.set()  # a will delay or session expiry may now come first
        except Exception as exc:  # a bug must cost one connection, never the broker
            core.internal_error(conn, trio.current_time(), f"{type(exc).__name__}: {exc}")
        finally:
            self.active -= 1
            if listening is not None:
                listening.conns.discard(conn)
            self._flush()  # a closing connection's last bytes (DISCONNECT, refusing CONNACK) get their writer
            core.connection_lost(conn, trio.current_time())
            self._flush()
            if net.writing:  # it sends what is left (a DISCONNECT, a refusing CONNACK), then closes
                net.closing = trio.Event()
                with trio.CancelScope(shield=True), trio.move_on_after(DRAIN_ON_SHUTDOWN):
                    await net.closing.wait()
            conn.context = None
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await trio.aclose_forcefully(stream)

    def _sweep(self, now: float) -> None:
        """Closes connections silent past their keep alive (1.5x), or without a CONNECT after CONNECT_TIMEOUT."""
        core = self.core
        for conn in list(core.connections):
            if conn.closed:
                continue
            if conn.connected:
                if conn.keepalive and now >= conn.last_received + 1.5 * conn.keepalive:
                    core.keepalive_expired(conn, now)
            elif now >= conn.opened_at + CONNECT_TIMEOUT:  # from the start: a trickle of bytes does not extend it
                core.connection_lost(conn, now)
                conn.close_requested = True
                core.dirty.add(conn)

    async def _ticker(self) -> None:
        core = self.core
        next_sweep = trio.current_time() + SWEEP_INTERVAL
        while True:
            now = trio.current_time()
            deadline = core.tick(now)
            if now >= next_sweep:
                self._sweep(now)
                next_sweep = now + SWEEP_INTERVAL
            self._flush()
            with trio.move_on_at(min(deadline or math.inf, next_sweep)):
                await self._ticker_wake.wait()
            self._ticker_wake = trio.Event()

    # --- running --------------------------------------------------------------------------------------------

    async def run(self, stop: trio.Event, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listens and serves until `stop` is set, then shuts down gracefully."""
        opts = self.options
        if any(lst.scheme == "mqtts" for lst in opts.listeners):
            self._tls = tls_context(opts)
        self._open = await self._listen(opts.listeners)
        if opts.ready_file is not None:
            _write_ready_file(opts.ready_file, self.bound)
        if opts.on_listening is not None:
            opts.on_listening(self.bound)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._ticker)
            for listening in self._open:
                nursery.start_soon(self._accept, listening)
            task_status.started(self)
            await stop.wait()
            await self.shutdown()
            nursery.cancel_scope.cancel()

    async def _listen(self, specs: list[Listener]) -> list[_Listening]:
        """Opens the listeners of `specs`, all or none (ServerError naming the one that failed)."""
        opened: list[_Listening] = []
        for spec in specs:
            try:
                sockets = await trio.open_tcp_listeners(spec.port, host=spec.host)
            except OSError as exc:
                for listening in opened:
                    for sock in listening.sockets:
                        await sock.aclose()
                raise ServerError(f"cannot listen on {spec.url}: {exc.strerror or exc}") from None
            opened.append(_Listening(spec, sockets))
        return opened

    async def _accept(self, listening: _Listening) -> None:
        """Accepts connections until the listener is closed (a reload that removed it, or shutdown)."""
        nursery = self._nursery
        assert nursery is not None

        async def accept_from(sock: trio.SocketListener) -> None:
            while True:
                try:
                    stream: trio.abc.Stream = await sock.accept()
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    return
                except OSError:  # out of file descriptors or memory: as trio.serve_listeners, wait and retry
                    await trio.sleep(0.1)
                    continue
                if listening.spec.scheme == "mqtts":
                    assert self._tls is not None  # the context at accept time: a reload's new certificate applies
                    stream = trio.SSLStream(stream, self._tls, server_side=True, https_compatible=False)
                nursery.start_soon(self._handle_quietly, stream, listening)

        with listening.scope:
            async with trio.open_nursery() as accepting:
                for sock in listening.sockets:
                    accepting.start_soon(accept_from, sock)

    async def _handle_quietly(self, stream: trio.abc.Stream, listening: _Listening | None = None) -> None:
        # A failed TLS handshake, or a peer gone mid-write: that connection only.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await self._handle(stream, listening)

    async def reload(self, options: ServeOptions) -> list[str]:
        """Applies a new configuration, or raises ServerError and changes nothing; returns what changed.

        Listeners kept (same URL) keep their sockets and connections; new ones are opened first, so a port
        that cannot be bound leaves everything as it was; removed ones stop accepting and their connections
        are ended (5.0: DISCONNECT 0x8B, wills published). Certificates are read again: new TLS connections
        use them. Limits: see BrokerCore.reconfigure.
        """
        tls = tls_context(options) if any(lst.scheme == "mqtts" for lst in options.listeners) else None
        kept = [lst for lst in self._open if lst.spec in options.listeners]
        old_specs = [lst.spec for lst in self._open]
        added = await self._listen([spec for spec in options.listeners if spec not in old_specs])
        changes = [f"listener {lst.spec.url} opened" for lst in added]
        now = trio.current_time()
        for listening in self._open:
            if listening.spec in options.listeners:
                continue
            listening.scope.cancel()
            for sock in listening.sockets:
                await sock.aclose()
            ended = list(listening.conns)
            for conn in ended:
                self.core.disconnect(conn, now, 0x8B, f"listener {listening.spec.url} removed")
            changes.append(f"listener {listening.spec.url} closed ({len(ended)} connections ended)")
        self._open = kept + added
        self._tls = tls
        if options.broker != self.options.broker:
            changes.append("limits changed")
        self.core.reconfigure(options.broker, now)
        options.on_notice = options.on_notice or self.options.on_notice
        options.on_listening = options.on_listening or self.options.on_listening
        self.options = options
        assert self._nursery is not None
        for listening in added:
            self._nursery.start_soon(self._accept, listening)
        self._flush()
        self._ticker_wake.set()
        if options.ready_file is not None:
            _write_ready_file(options.ready_file, self.bound)
        return changes

    async def shutdown(self) -> None:
        """Publishes wills, sends 5.0 clients DISCONNECT 0x8B, and gives writers a moment to send it all."""
        self.core.shutdown(trio.current_time())
        self._flush()
        with trio.move_on_after(DRAIN_ON_SHUTDOWN):
            while any(c.context is not None and c.context.writing for c in self.core.connections):
                await trio.sleep(0.01)


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
    try:
        tmp.write_text(json.dumps(data) + "\n")
        tmp.replace(path)  # atomic: a script polling for the file never reads half of it
    except OSError as exc:
        raise ServerError(f"cannot write the ready file {path}: {exc.strerror or exc}") from None


async def serve(
    options: ServeOptions, stop: trio.Event | None = None, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """Runs the broker until `stop` is set (then shuts down gracefully) or the caller cancels it."""
    await BrokerServer(options).run(stop if stop is not None else trio.Event(), task_status=task_status)
