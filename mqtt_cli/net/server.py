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
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio

from mqtt_cli.core.auth import (
    OPEN_POLICY,
    AuthPolicy,
    CertificateIdentity,
    certificate_identity,
    is_loopback,
    unsafe_listener_error,
)
from mqtt_cli.core.broker import BrokerConfig, BrokerCore, Notice
from mqtt_cli.core.server import ServerConnection

__all__ = ["Listener", "ServeOptions", "ServerError", "parse_listen_url", "serve"]

READ_SIZE = 65536
CONNECT_TIMEOUT = 10.0  # seconds a new connection has to send its CONNECT
DRAIN_ON_SHUTDOWN = 2.0  # seconds writers get to send the last DISCONNECTs and wills
WRITER_LINGER = 1.0  # seconds a writer waits for more output before it ends
SWEEP_INTERVAL = 0.5  # seconds between keep-alive checks (a late close by half a second is within the spec)
LOGIN_FAILURE_DELAY = 1.0  # seconds a client refused for its credentials waits for its CONNACK (that task only)


class ServerError(Exception):
    """A start-up failure to report in one line (port in use, unreadable certificate, bad URL)."""


@dataclass(frozen=True, slots=True)
class Listener:
    scheme: str  # mqtt or mqtts
    host: str
    port: int
    auth: AuthPolicy | None = field(default=None, compare=False)  # per-listener settings; None: ServeOptions.auth

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
    auth: AuthPolicy = OPEN_POLICY  # for listeners without their own (allow_anonymous None: decided per listener)


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
    elif any(policy.uses_certificates for policy in _policies(options)):
        if options.tls_cafile is None:
            raise ServerError("a certificate identity as user name needs --tls-cafile to check certificates against")
        ctx.verify_mode = ssl.CERT_OPTIONAL  # a client without one is refused at CONNECT (not authorized)
    return ctx


def _policies(options: ServeOptions) -> list[AuthPolicy]:
    return [spec.auth or options.auth for spec in options.listeners]


def listener_policy(options: ServeOptions, spec: Listener) -> AuthPolicy:
    """The policy a listener's connections get, `allow_anonymous` decided; ServerError for one that must not start
    (open to the network without any authentication, anonymous access not allowed explicitly)."""
    policy = spec.auth or options.auth
    error = unsafe_listener_error(policy, spec.url, spec.host)
    if error is not None:
        raise ServerError(error)
    return policy.resolved(is_loopback(spec.host))


class _Conn:
    """The network side of one connection: its stream, and its writer while one runs.

    An idle connection costs one task (its reader): a writer task is started when output appears and stays
    a moment after its buffer empties (so a busy subscriber keeps one), then ends.
    """

    __slots__ = ("closing", "listener", "raw", "stream", "wake", "writing")

    def __init__(self, stream: trio.abc.Stream, listener: int = -1) -> None:
        self.stream = stream
        self.listener = listener  # its index in options.listeners (-1: none, a test's own stream)
        # The plain socket under a TCP stream, for non-blocking sends outside any task (None for TLS).
        sock = getattr(stream, "socket", None)
        self.raw: Any = getattr(sock, "_sock", None) if isinstance(stream, trio.SocketStream) else None
        self.writing = False
        self.wake: trio.Event | None = None  # set to hand a lingering writer more output
        self.closing: trio.Event | None = None  # the reader waits on it for the writer's last bytes


class BrokerServer:
    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self.core = BrokerCore(options.broker, trio.current_time())
        self.active = 0
        self.bound: list[Listener] = []
        self._ticker_wake = trio.Event()
        self._nursery: trio.Nursery | None = None  # where writers run; set by run() (or a test)
        self.policies: list[AuthPolicy] = []  # per listener (index in options.listeners), allow_anonymous decided

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
                if conn.login_failed:  # its refusing CONNACK waits a moment, in a writer task of its own
                    net.writing = True
                    nursery.start_soon(self._writer, conn, net, LOGIN_FAILURE_DELAY)
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

    async def _writer(self, conn: ServerConnection, net: _Conn, delay: float = 0.0) -> None:
        core = self.core
        stream = net.stream
        try:
            if delay:
                await trio.sleep(delay)
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

    async def _handle(self, stream: trio.abc.Stream, policy: AuthPolicy = OPEN_POLICY, listener: int = -1) -> None:
        core = self.core
        opts = self.options
        if opts.max_connections and self.active >= opts.max_connections:
            await trio.aclose_forcefully(stream)
            return
        certificate = None
        if isinstance(stream, trio.SSLStream) and policy.uses_certificates:
            try:
                certificate = await _client_certificate(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await trio.aclose_forcefully(stream)
                return
        self.active += 1
        conn = core.open(_peer(stream), trio.current_time(), policy, certificate)
        net = _Conn(stream, listener)
        conn.context = net
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
            self._flush()  # a closing connection's last bytes (DISCONNECT, refusing CONNACK) get their writer
            core.connection_lost(conn, trio.current_time())
            self._flush()
            if net.writing:  # it sends what is left (a DISCONNECT, a refusing CONNACK), then closes
                net.closing = trio.Event()
                with trio.move_on_after(DRAIN_ON_SHUTDOWN):
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
        ctx = None
        if any(lst.scheme == "mqtts" for lst in opts.listeners):
            ctx = tls_context(opts)
        listeners: list[tuple[trio.abc.Listener[Any], int]] = []
        self.policies = [listener_policy(opts, spec) for spec in opts.listeners]  # before any socket is opened
        for index, spec in enumerate(opts.listeners):
            try:
                tcp = await trio.open_tcp_listeners(spec.port, host=spec.host)
            except OSError as exc:
                for lst, _ in listeners:
                    await lst.aclose()
                raise ServerError(f"cannot listen on {spec.url}: {exc.strerror or exc}") from None
            for lst in tcp:
                sockname = lst.socket.getsockname()
                self.bound.append(Listener(spec.scheme, sockname[0], sockname[1]))
                if spec.scheme == "mqtts":
                    assert ctx is not None
                    listeners.append((trio.SSLListener(lst, ctx, https_compatible=False), index))
                else:
                    listeners.append((lst, index))
        if opts.ready_file is not None:
            _write_ready_file(opts.ready_file, self.bound)
        if opts.on_listening is not None:
            opts.on_listening(self.bound)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._ticker)
            for lst, index in listeners:
                nursery.start_soon(trio.serve_listeners, partial(self._handle_quietly, index=index), [lst])
            task_status.started(self)
            await stop.wait()
            await self.shutdown()
            nursery.cancel_scope.cancel()

    async def _handle_quietly(self, stream: trio.abc.Stream, index: int = -1) -> None:
        # A failed TLS handshake, or a peer gone mid-write: that connection only.
        policy = self.policies[index] if index >= 0 else OPEN_POLICY  # looked up per connection: reload swaps it
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await self._handle(stream, policy, index)

    def reload_auth(self, policies: list[AuthPolicy]) -> None:
        """New auth policies (read with net/auth_files.py), one per `options.listeners` entry: checked for every
        listener first (ServerError, nothing applied), then new connections get them and connected clients are
        re-checked (BrokerCore.replace_policy: some disconnected, some subscriptions dropped)."""
        specs = self.options.listeners
        if len(policies) != len(specs):
            raise ValueError(f"{len(policies)} policies for {len(specs)} listeners")
        resolved = [
            listener_policy(self.options, replace(spec, auth=p)) for spec, p in zip(specs, policies, strict=True)
        ]
        now = trio.current_time()
        self.policies = resolved
        for conn in list(self.core.connections):
            net = conn.context
            if net is not None and net.listener >= 0:
                self.core.apply_policy(conn, resolved[net.listener], now)
        self._flush()

    async def shutdown(self) -> None:
        """Publishes wills, sends 5.0 clients DISCONNECT 0x8B, and gives writers a moment to send it all."""
        self.core.shutdown(trio.current_time())
        self._flush()
        with trio.move_on_after(DRAIN_ON_SHUTDOWN):
            while any(c.context is not None and c.context.writing for c in self.core.connections):
                await trio.sleep(0.01)


async def _client_certificate(stream: trio.SSLStream[Any]) -> CertificateIdentity | None:
    """The verified client certificate's identity (the handshake is done here, within the CONNECT timeout)."""
    with trio.move_on_after(CONNECT_TIMEOUT) as scope:
        await stream.do_handshake()
    if scope.cancelled_caught:
        raise trio.BrokenResourceError("no TLS handshake in time")
    cert = stream.getpeercert()
    if not cert:
        return None
    return certificate_identity(cert.get("subject", ()))  # type: ignore[arg-type]


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
