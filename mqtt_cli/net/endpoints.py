"""Where a broker is: endpoints, broker URLs and TLS client contexts, without trio.

    endpoint = parse_url("mqtts://user:pw@broker:8883/site/#").endpoint

URLs: mqtt[s]://[user[:pass]@]host[:port][/topic], ws[s]://[user[:pass]@]host[:port][/path] (the MQTT
subprotocol over WebSocket, path /mqtt by default) and unix:///path/to/socket. Apart from transports.py (trio)
so that the one-shot clients' fast path (net/blocking.py) loads neither trio nor, without TLS, ssl.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.records import record

if TYPE_CHECKING:
    import ssl

__all__ = ["DEFAULT_PORTS", "Endpoint", "ParsedURL", "TLSOptions", "make_ssl_context", "parse_url"]

DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883, "ws": 80, "wss": 443}
#: The minimum TLS versions --tls-version takes: the names of ssl.TLSVersion members.
_TLS_VERSIONS = {"tlsv1.2": "TLSv1_2", "tlsv1.3": "TLSv1_3", "1.2": "TLSv1_2", "1.3": "TLSv1_3"}


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
    from urllib.parse import unquote, urlsplit  # only for -L/--url

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
    import ssl  # only for TLS: a plain one-shot client does without it (about 8 ms)
    from pathlib import Path

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
        ctx.minimum_version = ssl.TLSVersion[version]
    if options.alpn:
        ctx.set_alpn_protocols(list(options.alpn))
    return ctx
