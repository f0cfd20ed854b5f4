"""Byte streams to a broker: TCP, TLS, Unix sockets and WebSockets (wsproto), and broker URLs.

    endpoint = parse_url("mqtts://user:pw@broker:8883/site/#")
    stream = await open_transport(endpoint, ssl_context)      # a trio.abc.Stream, whatever the transport

URLs: mqtt[s]://[user[:pass]@]host[:port][/topic], ws[s]://[user[:pass]@]host[:port][/path] (the MQTT
subprotocol over WebSocket, path /mqtt by default) and unix:///path/to/socket.
"""

from __future__ import annotations

import errno
import os
import ssl
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import trio

from ..core.records import record
from .errors import ConnectFailed, TLSFailed

__all__ = [
    "DEFAULT_PORTS",
    "Endpoint",
    "ParsedURL",
    "TLSOptions",
    "direct_sender",
    "make_ssl_context",
    "open_transport",
    "parse_url",
]

DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883, "ws": 80, "wss": 443}
_TLS_VERSIONS = {
    "tlsv1.2": ssl.TLSVersion.TLSv1_2,
    "tlsv1.3": ssl.TLSVersion.TLSv1_3,
    "1.2": ssl.TLSVersion.TLSv1_2,
    "1.3": ssl.TLSVersion.TLSv1_3,
}


def direct_sender(stream: trio.abc.Stream) -> Callable[[bytes | bytearray | memoryview], int] | None:
    """A non-blocking send() on the TCP socket under `stream`, callable outside any task (None for any other
    stream: TLS, WebSocket, Unix). A reader answers from where it is, without a task switch per round trip.

    It raises BlockingIOError when the socket is full and OSError once the stream is closed: it writes to the
    socket's descriptor as it is at each call, so a closed stream's number, reused, is never written to.
    """
    if type(stream) is not trio.SocketStream:
        return None
    sock = stream.socket
    write = os.write

    def send(data: bytes | bytearray | memoryview) -> int:
        fd = sock.fileno()
        if fd < 0:
            raise OSError(errno.EBADF, "the stream is closed")
        return write(fd, data)

    return send


@record
class Endpoint:
    """Where a broker listens. `scheme`: mqtt, mqtts, ws, wss or unix."""

    scheme: str = "mqtt"
    host: str = "localhost"
    port: int = 1883
    path: str = "/mqtt"  # WebSocket resource, or the Unix socket's path for unix
    tls: bool = False

    def __str__(self) -> str:
        if self.scheme == "unix":
            return f"unix:{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        where = f"{self.scheme}://{host}:{self.port}"
        return where + self.path if self.scheme in ("ws", "wss") else where


@record
class ParsedURL:
    endpoint: Endpoint
    username: str | None = None
    password: str | None = None
    topic: str | None = None  # mqtt[s]:// URLs: the path without its leading slash


def parse_url(url: str) -> ParsedURL:
    """Parses a broker URL; raises ValueError saying what is wrong."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "unix":
        path = unquote(parts.path or parts.netloc)
        if not path:
            raise ValueError(f"{url!r}: a unix URL needs a socket path (unix:///run/mqtt.sock)")
        return ParsedURL(Endpoint("unix", "", 0, path))
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"{url!r}: the scheme must be mqtt, mqtts, ws, wss or unix")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r}: the port is not a number in 1..65535") from None
    host = parts.hostname
    if not host:
        raise ValueError(f"{url!r}: no host name")
    tls = scheme in ("mqtts", "wss")
    path = unquote(parts.path)
    topic = None
    ws_path = "/mqtt"
    if scheme in ("ws", "wss"):
        ws_path = (parts.path or "/mqtt") + (f"?{parts.query}" if parts.query else "")
    elif path not in ("", "/"):
        topic = path[1:]
    endpoint = Endpoint(scheme, host, port or DEFAULT_PORTS[scheme], ws_path, tls)
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return ParsedURL(endpoint, username, password, topic)


@record
class TLSOptions:
    cafile: str | None = None
    capath: str | None = None
    cert: str | None = None
    key: str | None = None
    insecure: bool = False  # no certificate or host name check
    version: str | None = None  # minimum version: tlsv1.2 or tlsv1.3
    alpn: tuple[str, ...] = ()


def make_ssl_context(options: TLSOptions, option_name: Callable[[str], str] = "--{}".format) -> ssl.SSLContext:
    """A client context; raises ValueError for options that cannot work (a missing file, an unknown version).
    `option_name` says how the caller's user names an option in messages (`cafile` -> `--cafile`, the clients';
    the bridge has `--remote-cafile`, or a TOML key)."""
    n = option_name
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    for name, value in (("cafile", options.cafile), ("cert", options.cert), ("key", options.key)):
        if value is not None:
            # opened here, so that a missing and an unreadable file are told apart and named alike
            try:
                open(value, "rb").close()
            except OSError as err:
                raise ValueError(f"{n(name)} {value}: {err.strerror}") from None
    if options.capath is not None and not Path(options.capath).is_dir():
        raise ValueError(f"{n('capath')} {options.capath}: no such directory")
    try:
        if options.cafile or options.capath:
            ctx.load_verify_locations(cafile=options.cafile, capath=options.capath)
        if options.cert:
            if options.key is None and b"PRIVATE KEY-----" not in Path(options.cert).read_bytes():
                # OpenSSL would only say "[SSL] PEM lib"
                raise ValueError(f"{n('cert')} {options.cert}: the file holds no private key: give it with {n('key')}")
            ctx.load_cert_chain(options.cert, options.key)
        elif options.key:
            raise ValueError(f"{n('key')} needs {n('cert')}")
    except ssl.SSLError as err:
        raise ValueError(f"cannot load the TLS certificates: {err.reason or err}") from None
    except OSError as err:
        raise ValueError(f"cannot read {err.filename or 'a TLS file'}: {err.strerror}") from None
    if options.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if options.version:
        version = _TLS_VERSIONS.get(options.version.lower())
        if version is None:
            raise ValueError(f"{n('tls-version')} {options.version}: use tlsv1.2 or tlsv1.3")
        ctx.minimum_version = version
    if options.alpn:
        ctx.set_alpn_protocols(list(options.alpn))
    return ctx


async def open_transport(endpoint: Endpoint, ssl_context: ssl.SSLContext | None = None) -> trio.abc.Stream:
    """Opens the stream (TLS handshake and WebSocket upgrade included); the caller bounds it with a timeout.

    Raises ConnectFailed (nothing listens, unreachable, DNS) or TLSFailed (handshake).
    """
    stream: trio.abc.Stream
    try:
        if endpoint.scheme == "unix":
            stream = await trio.open_unix_socket(endpoint.path)
        else:
            stream = await trio.open_tcp_stream(endpoint.host, endpoint.port)
    except OSError as err:
        raise ConnectFailed(f"cannot connect to {endpoint}: {_os_reason(err)}") from None
    try:
        if endpoint.tls:
            ctx = ssl_context or ssl.create_default_context()
            hostname = endpoint.host if ctx.check_hostname else None
            tls = trio.SSLStream(stream, ctx, server_hostname=hostname, https_compatible=endpoint.scheme == "wss")
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError as err:
                cause = err.__cause__
                what = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or cause or err
                raise TLSFailed(f"TLS handshake with {endpoint} failed: {what}") from None
            stream = tls
        if endpoint.scheme in ("ws", "wss"):
            port = endpoint.port
            host = endpoint.host if port == DEFAULT_PORTS[endpoint.scheme] else f"{endpoint.host}:{port}"
            from .websocket import WebSocketStream  # wsproto only for ws[s]: one-shot start-up stays short

            stream = await WebSocketStream.connect(stream, host, endpoint.path, str(endpoint))
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return stream


def _os_reason(err: OSError) -> str:
    """The reason people need ("Connection refused"), also when trio tried several addresses."""
    cause = err.__cause__
    while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        cause = cause.exceptions[0]
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    return err.strerror or str(err)
