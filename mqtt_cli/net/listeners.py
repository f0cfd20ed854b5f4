"""The broker's listeners: their records, and what each kind of listener (core.config.Scheme) does on the network.

A kind is described once, by its entry in core.config.Scheme (scheme, default port, transport, TLS, WebSocket);
what it does here follows from those facts: its transport (`_TRANSPORTS`: TCP or a Unix socket) binds it, names its
peers, prints its URL and says whether it is local; TLS wraps its streams (OpenListener.wrap); WebSocket upgrades
them (BrokerServer._admit). A new kind made of a transport and layers that exist needs its Scheme entry only; a new
transport is one `_Transport` entry here.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from mqtt_cli.core.auth import OPEN_POLICY, AuthPolicy, is_loopback, unsafe_listener_error
from mqtt_cli.core.config import (
    ALL_VERSIONS,
    ListenerSettings,
    Scheme,
    Transport,
    listener_from_url,
    parse_listener_url,
)
from mqtt_cli.core.server import ServerConnection
from mqtt_cli.net.tls13 import set_tls13_ciphersuites
from mqtt_cli.net.tlsstream import TLSStream

if TYPE_CHECKING:
    from mqtt_cli.net.server import ServeOptions

__all__ = [
    "Listener",
    "ListenerTLS",
    "OpenListener",
    "ServerError",
    "bind",
    "listener_policy",
    "listener_record",
    "parse_listen_url",
    "peer_name",
    "remove_socket_file",
    "tls_context",
    "tls_for",
]


class ServerError(Exception):
    """A start-up failure to report in one line (port in use, unreadable certificate, bad URL)."""


@dataclass(frozen=True, slots=True)
class ListenerTLS:
    """A TLS listener's files; a listener without its own uses the server's (--tls-cert, --tls-key, ...)."""

    cert: Path | None = None
    key: Path | None = None
    cafile: Path | None = None
    require_certificate: bool = False
    # Its policy (mosquitto's listener options): the lowest version, cipher lists, revocation list, CA directory.
    tls_version: str | None = None
    ciphers: str | None = None
    ciphers_tls13: str | None = None
    crlfile: Path | None = None
    capath: Path | None = None


@dataclass(frozen=True, slots=True)
class Listener:
    """Where the broker listens and what it allows there; also what a bound listener reports (its real port).

    `path`: the WebSocket resource clients must ask for (None: any), or the Unix socket's file. `mode`: the Unix
    socket's file mode (None: as the umask leaves it). `versions`: the protocol levels allowed (3: 3.1, 4: 3.1.1,
    5: 5.0; None: all); others are refused with CONNACK 0x01 (3.x) or 0x84 (5.0). `max_connections`: 0 for no
    limit of the listener's own. `tls`: None uses the server's files. `auth`: the authentication settings of
    this listener (per_listener_settings), handed as they are to BrokerCore with each connection.
    """

    scheme: Scheme
    host: str = "127.0.0.1"
    port: int = 1883
    path: str | None = None
    mode: int | None = None
    versions: frozenset[int] | None = None
    max_connections: int = 0
    tls: ListenerTLS | None = None
    auth: AuthPolicy | None = field(default=None, compare=False)  # its own policy; None: ServeOptions.auth

    def __post_init__(self) -> None:
        if not isinstance(self.scheme, Scheme):  # "ws" from a configuration file: the enum (ValueError if unknown)
            object.__setattr__(self, "scheme", Scheme(self.scheme))

    @property
    def url(self) -> str:
        return _TRANSPORTS[self.scheme.transport].url(self)


def parse_listen_url(url: str) -> Listener:
    """A listener URL (port 0: any free port), with its settings as query parameters:

    mqtt://HOST:PORT, mqtts://HOST:PORT, ws://HOST:PORT[/PATH], wss://HOST:PORT[/PATH] (no path: any), and
    unix:///PATH; parameters `versions=3.1.1,5`, `max_connections=N` and, for unix, `mode=0660`. Parsed by
    core.config (the configuration file's listeners are the same records).
    """
    try:
        return listener_record(listener_from_url(url))
    except ValueError as exc:
        raise ServerError(f"listener {url!r}: {exc}") from None


def listener_record(settings: ListenerSettings, auth: AuthPolicy | None = None) -> Listener:
    """The server's record of a configured listener (`auth`: its authentication settings, if its own)."""
    address = parse_listener_url(settings.url)
    tls = None
    own = settings.certfile or settings.keyfile or settings.cafile or settings.require_certificate
    policy = [getattr(settings, key) for key in ("tls_version", "ciphers", "ciphers_tls13", "crlfile", "capath")]
    if address.scheme.tls and (own or any(v is not None for v in policy)):
        tls = ListenerTLS(_path(settings.certfile), _path(settings.keyfile), _path(settings.cafile),
                          settings.require_certificate, settings.tls_version, settings.ciphers,
                          settings.ciphers_tls13, _path(settings.crlfile), _path(settings.capath))  # fmt: skip
    versions = None
    if set(settings.versions) != set(ALL_VERSIONS):
        versions = frozenset(v.level for v in settings.versions)
    return Listener(
        address.scheme, address.host, address.port, address.path or None, settings.mode, versions,
        settings.max_connections, tls, auth,
    )  # fmt: skip


def _path(name: str | None) -> Path | None:
    return None if name is None else Path(name)


def tls_context(files: ListenerTLS, where: str = "an mqtts:// or wss:// listener") -> ssl.SSLContext:
    if files.cert is None or files.key is None:
        raise ServerError(f"{where} needs a certificate and its key (--tls-cert and --tls-key)")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as exc:
        raise ServerError(f"cannot load TLS certificate {files.cert} and key {files.key}: {exc}") from None
    if files.cafile is not None:
        try:
            ctx.load_verify_locations(files.cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ServerError(f"cannot load the CA file {files.cafile}: {exc}") from None
    if files.capath is not None:
        if not files.capath.is_dir():
            raise ServerError(f"capath {files.capath} is not a directory")
        ctx.load_verify_locations(capath=files.capath)
    _tls_policy(ctx, files, where)
    if files.require_certificate:
        if files.cafile is None and files.capath is None:
            raise ServerError(f"{where}: requiring certificates needs a CA file (--tls-cafile) to check them against")
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


_TLS_VERSIONS = {"tlsv1.1": ssl.TLSVersion.TLSv1_1, "tlsv1.2": ssl.TLSVersion.TLSv1_2,
                 "tlsv1.3": ssl.TLSVersion.TLSv1_3}  # fmt: skip


def _tls_policy(ctx: ssl.SSLContext, files: ListenerTLS, where: str) -> None:
    """A listener's TLS policy onto its context: lowest version, cipher lists, revocation list (mosquitto checks
    the client certificate itself against it, as OpenSSL's X509_V_FLAG_CRL_CHECK does here)."""
    if files.tls_version is not None:
        ctx.minimum_version = _TLS_VERSIONS[files.tls_version]
        if files.tls_version == "tlsv1.1":
            ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL's default level refuses TLS 1.1's signatures
    if files.ciphers is not None:
        try:
            ctx.set_ciphers(files.ciphers)
        except ssl.SSLError:
            raise ServerError(f"{where}: ciphers {files.ciphers!r}: no cipher OpenSSL knows") from None
    if files.ciphers_tls13 is not None:
        error = set_tls13_ciphersuites(ctx, files.ciphers_tls13)
        if error is not None:
            raise ServerError(f"{where}: ciphers_tls1.3 {files.ciphers_tls13!r}: {error}")
    if files.crlfile is not None:
        try:
            ctx.load_verify_locations(files.crlfile)
        except (OSError, ssl.SSLError) as exc:
            raise ServerError(f"cannot load the revocation list {files.crlfile}: {exc}") from None
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF


def tls_for(spec: Listener, options: ServeOptions, policy: AuthPolicy) -> ssl.SSLContext:
    files = spec.tls or options.default_tls()
    ctx = tls_context(files, f"listener {spec.url}")
    if policy.uses_certificates and not files.require_certificate:
        if files.cafile is None:
            raise ServerError(
                f"listener {spec.url}: a certificate identity as user name needs a CA file (--tls-cafile) to check "
                "certificates against"
            )
        ctx.verify_mode = ssl.CERT_OPTIONAL  # a client without one is refused at CONNECT (not authorized)
    return ctx


def listener_policy(options: ServeOptions, spec: Listener) -> AuthPolicy:
    """The policy a listener's connections get, `allow_anonymous` decided; ServerError for one that must not start
    (open to the network without any authentication, anonymous access not allowed explicitly)."""
    policy = spec.auth or options.auth
    local = _TRANSPORTS[spec.scheme.transport].local(spec)
    if not local:
        error = unsafe_listener_error(policy, spec.url, spec.host)
        if error is not None:
            raise ServerError(error)
    return policy.resolved(local)


class OpenListener:
    """A listener the server has open: its sockets, its accepting tasks and the connections it accepted."""

    def __init__(self, spec: Listener, sockets: list[trio.abc.Listener[Any]], bound: list[Listener]) -> None:
        self.spec = spec
        self.bound = bound  # one per socket, with the port the system gave
        self.sockets = sockets
        self.connections: set[ServerConnection] = set()
        self.active = 0
        self.closed = False
        self.cancel_scope = trio.CancelScope()
        self.socket_inode: int | None = None  # the socket file we made (removed on close if still ours)
        # A TLS listener's context, used for each connection when it is accepted: a reload swaps it, and the
        # connections accepted from then on get the new certificate.
        self.tls: ssl.SSLContext | None = None
        self.policy: AuthPolicy = OPEN_POLICY  # what its connections are checked against (set when opened)

    def __repr__(self) -> str:
        return f"<OpenListener {', '.join(b.url for b in self.bound)}>"

    def wrap(self, stream: trio.abc.Stream) -> trio.abc.Stream:
        """An accepted connection's stream with the listener's layers below MQTT that need no waiting: TLS, with
        the context in force now (as trio.SSLListener does; ours, net/tlsstream.py, whose handshake
        BrokerServer._admit does). The WebSocket upgrade is the server's to wait for (BrokerServer._admit), as
        `spec.scheme.websocket` says."""
        if self.tls is None:
            return stream
        assert isinstance(stream, trio.SocketStream)  # (TLS listens on TCP only)
        # WebSocket: https_compatible, as browsers close TLS without close_notify
        return TLSStream(stream, self.tls, server_side=True, https_compatible=self.spec.scheme.websocket)


async def bind(spec: Listener, options: ServeOptions) -> OpenListener:
    """Opens the sockets of `spec` (nothing accepted yet), with its policy and TLS context; ServerError says why it
    cannot."""
    policy = listener_policy(options, spec)
    ctx = tls_for(spec, options, policy) if spec.scheme.tls else None
    listener = await _TRANSPORTS[spec.scheme.transport].bind(spec)
    listener.tls = ctx
    listener.policy = policy
    return listener


async def _bind_tcp(spec: Listener) -> OpenListener:
    try:
        tcp = await trio.open_tcp_listeners(spec.port, host=spec.host)
    except OSError as exc:
        raise ServerError(f"cannot listen on {spec.url}: {exc.strerror or exc}") from None
    bound = []
    for lst in tcp:
        host, port = lst.socket.getsockname()[:2]
        bound.append(replace(spec, host=host, port=port))
    return OpenListener(spec, list(tcp), bound)


async def _bind_unix(spec: Listener) -> OpenListener:
    """A Unix socket listener. A socket file left by a dead server is replaced; one a live server answers on,
    or a file that is not a socket, is an error (nothing is removed)."""
    assert spec.path is not None
    path = spec.path
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ServerError(f"cannot listen on {spec.url}: {exc.strerror}") from None
    if info is not None:
        if not stat.S_ISSOCK(info.st_mode):
            raise ServerError(f"cannot listen on {spec.url}: {path} is not a socket; remove it or pick another path")
        if await _someone_listens(path):
            raise ServerError(f"cannot listen on {spec.url}: another server is listening on {path}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        await sock.bind(path)
        if spec.mode is not None:
            os.chmod(path, spec.mode)
        sock.listen(socket.SOMAXCONN)
        inode = os.stat(path).st_ino
    except OSError as exc:
        sock.close()
        raise ServerError(f"cannot listen on {spec.url}: {exc.strerror or exc}") from None
    listener = OpenListener(spec, [trio.SocketListener(sock)], [spec])
    listener.socket_inode = inode
    return listener


async def _someone_listens(path: str) -> bool:
    probe = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with trio.move_on_after(1):
            await probe.connect(path)
        return True  # it answered (or its backlog is full: alive too)
    except OSError:
        return False  # refused: nobody listens; the file is a dead server's
    finally:
        probe.close()


def remove_socket_file(listener: OpenListener) -> None:
    """Removes the socket file we made (a Unix socket's), unless someone replaced it since."""
    path = listener.spec.path
    if listener.socket_inode is None or path is None:
        return
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == listener.socket_inode:
            os.unlink(path)
    listener.socket_inode = None


def peer_name(stream: trio.abc.Stream, spec: Listener | None = None) -> str:
    """How the log names a connection's peer: `HOST:PORT`, `unix:PATH`."""
    return _TRANSPORTS[spec.scheme.transport if spec is not None else Transport.TCP].peer(stream, spec)


def _unix_peer(stream: trio.abc.Stream, spec: Listener | None) -> str:
    return f"unix:{spec.path if spec is not None else '?'}"


def _tcp_peer(stream: trio.abc.Stream, spec: Listener | None) -> str:
    inner = getattr(stream, "transport_stream", stream)
    sock = getattr(inner, "socket", None)
    try:
        host, port = sock.getpeername()[:2]  # type: ignore[union-attr]
    except (AttributeError, OSError, ValueError):
        return "?"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _tcp_url(spec: Listener) -> str:
    host = f"[{spec.host}]" if ":" in spec.host else spec.host
    where = f"{spec.scheme}://{host}:{spec.port}"
    return where + (spec.path or "") if spec.scheme.websocket else where


@dataclass(frozen=True, slots=True)
class _Transport:
    """What a transport does for the listeners on it."""

    bind: Callable[[Listener], Awaitable[OpenListener]]  # its sockets opened (ServerError: why not)
    peer: Callable[[trio.abc.Stream, Listener | None], str]  # a connection's peer, as the log names it
    url: Callable[[Listener], str]  # the listener's URL, as the log and the ready file show it
    local: Callable[[Listener], bool]  # only this machine can connect (anonymous access allowed by default)


_TRANSPORTS = {
    Transport.TCP: _Transport(_bind_tcp, _tcp_peer, _tcp_url, lambda spec: is_loopback(spec.host)),
    Transport.UNIX: _Transport(_bind_unix, _unix_peer, lambda spec: f"{spec.scheme}://{spec.path}", lambda spec: True),
}
