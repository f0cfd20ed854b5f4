"""Byte streams to a broker: TCP, TLS, Unix sockets and WebSockets (wsproto), and broker URLs.

    endpoint = parse_url("mqtts://user:pw@broker:8883/site/#")
    stream = await open_transport(endpoint, ssl_context)      # a trio.abc.Stream, whatever the transport

URLs: mqtt[s]://[user[:pass]@]host[:port][/topic], ws[s]://[user[:pass]@]host[:port][/path] (the MQTT
subprotocol over WebSocket, path /mqtt by default) and unix:///path/to/socket. Endpoints, URLs and TLS
contexts are defined in endpoints.py (without trio) and offered here too.
"""

from __future__ import annotations

import errno
import os
import ssl
from collections.abc import Callable
from functools import partial

import trio

from .endpoints import DEFAULT_PORTS, Endpoint, ParsedURL, TLSOptions, make_ssl_context, parse_url
from .errors import ConnectFailed, TLSFailed
from .tlsstream import TLSStream

__all__ = [
    "DEFAULT_PORTS",
    "Endpoint",
    "ParsedURL",
    "TLSOptions",
    "direct_sender",
    "direct_socket",
    "make_ssl_context",
    "open_transport",
    "parse_url",
    "receive_direct",
    "send_direct",
    "tcp_socket",
]


def tcp_socket(stream: trio.abc.Stream) -> trio.socket.SocketType | None:
    """The socket under a plain `trio.SocketStream` (TCP or a Unix socket), for send_direct and receive_direct;
    None for any other stream (TLS, WebSocket). A broker keeps this instead of a closure per connection: idle
    connections are many."""
    return stream.socket if type(stream) is trio.SocketStream else None


def direct_socket(stream: trio.abc.Stream) -> trio.socket.SocketType | TLSStream | None:
    """What send_direct and receive_direct take for `stream`: the socket under a plain SocketStream (tcp_socket),
    or our own TLS stream itself (net/tlsstream.py, encrypting as it sends); None for any other stream."""
    return stream if type(stream) is TLSStream else tcp_socket(stream)


def send_direct(sock: trio.socket.SocketType | TLSStream, data: bytes | bytearray | memoryview) -> int:
    """A non-blocking send() on a socket from tcp_socket (or direct_socket), callable outside any task: a reader
    answers from where it is, without a task switch per round trip.

    It raises BlockingIOError when the socket is full and OSError once the stream is closed: it writes to the
    socket's descriptor as it is at each call, so a closed stream's number, reused, is never written to. A
    TLSStream returns 0 or all (TLSStream.send_nowait: what it did not send is offered again, as here).
    """
    if type(sock) is TLSStream:
        return sock.send_nowait(data)
    fd = sock.fileno()
    if fd < 0:
        raise OSError(errno.EBADF, "the stream is closed")
    return os.write(fd, data)


def receive_direct(sock: trio.socket.SocketType | TLSStream, max_bytes: int) -> bytes | None:
    """A non-blocking read on a socket from tcp_socket (or direct_socket): what it holds (b"" at the end of the
    stream), or None when it has nothing yet (wait_readable, then again). A closed stream raises
    ClosedResourceError and a failed socket OSError, as receive_some does (a TLSStream: BrokenResourceError for a
    TLS failure, and exactly max_bytes only when it may hold more: TLSStream.receive_nowait)."""
    if type(sock) is TLSStream:
        return sock.receive_nowait(max_bytes)
    fd = sock.fileno()
    if fd < 0:
        raise trio.ClosedResourceError("the stream is closed")
    try:
        return os.read(fd, max_bytes)
    except BlockingIOError:
        return None


def direct_sender(stream: trio.abc.Stream) -> Callable[[bytes | bytearray | memoryview], int] | None:
    """send_direct on the TCP socket under `stream` as one callable (None for any other stream)."""
    sock = tcp_socket(stream)
    return None if sock is None else partial(send_direct, sock)


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
                raise tls_failure(endpoint, err.__cause__ or err) from None
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


# What to try, by OpenSSL's verify code (X509_V_ERR_*) of the broker's certificate.
_SELF_SIGNED = "the broker's certificate is self-signed: give it with --cafile FILE to trust it, or --insecure to skip the check (testing only)"  # noqa: E501
_UNKNOWN_CA = "the broker's certificate is signed by a CA this system does not trust: give that CA with --cafile FILE (or --capath DIR)"  # noqa: E501
_VERIFY_ADVICE = {
    18: _SELF_SIGNED,  # depth zero self-signed certificate
    19: _UNKNOWN_CA,  # self-signed certificate in the chain
    20: _UNKNOWN_CA,  # unable to get local issuer certificate
    21: _UNKNOWN_CA,  # unable to verify the first certificate
    2: _UNKNOWN_CA,  # unable to get issuer certificate
    10: "the broker's certificate has expired: it needs a new one (--insecure skips the check, testing only)",
    9: "the broker's certificate is not valid yet: check the clocks of both machines",
}
#: What to try, by a fragment of OpenSSL's reason for a handshake that failed otherwise.
_REASON_ADVICE = (
    (("UNEXPECTED_EOF", "WRONG_VERSION_NUMBER", "HTTP_REQUEST", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"),
     "not-tls"),
    (("UNKNOWN_CA",), "the broker does not trust the client certificate given with --cert (it names a CA the broker "
                      "does not know)"),
    (("CERTIFICATE_REQUIRED", "BAD_CERTIFICATE", "HANDSHAKE_FAILURE"),
     "the broker likely wants a client certificate it trusts: give --cert and --key"),
    (("PROTOCOL_VERSION", "UNSUPPORTED_PROTOCOL", "NO_PROTOCOLS_AVAILABLE"),
     "the broker and this client share no TLS version: see --tls-version"),
    (("NO_APPLICATION_PROTOCOL",), "the broker accepts none of the --alpn protocols given"),
)  # fmt: skip


def tls_failure(endpoint: Endpoint, cause: BaseException) -> TLSFailed:
    """The error for a TLS handshake that failed: what went wrong, and what to try (as the plain-to-TLS case
    says "is it a TLS port?")."""
    code = getattr(cause, "verify_code", None)
    what = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or str(cause) or repr(cause)
    advice = _VERIFY_ADVICE.get(code) if isinstance(code, int) else None
    if code in (62, 64):  # host name or IP address mismatch
        advice = (f"the broker's certificate is not for {endpoint.host}: connect with a name it was issued for "
                  "(--insecure skips the check, testing only)")  # fmt: skip
    if advice is None:
        reason = str(getattr(cause, "reason", None) or cause).upper()
        eof = isinstance(cause, ssl.SSLEOFError | ConnectionError) or not isinstance(cause, ssl.SSLError)
        kind = next((a for fragments, a in _REASON_ADVICE if any(f in reason for f in fragments)), None)
        if kind == "not-tls" or (kind is None and eof):
            plain = {"mqtts": "mqtt://", "wss": "ws://"}.get(endpoint.scheme, "a plain URL")
            what = f"{what} (the broker closed the connection during the TLS handshake)" if eof else what
            advice = f"is it a plain (not TLS) port? use {plain}, or the broker's TLS port (8883 for MQTT)"
        else:
            advice = kind
    return TLSFailed(f"TLS handshake with {endpoint} failed: {what}" + (f"; {advice}" if advice else ""))


def _os_reason(err: OSError) -> str:
    """The reason people need ("Connection refused"), also when trio tried several addresses."""
    cause = err.__cause__
    while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        cause = cause.exceptions[0]
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    return err.strerror or str(err)
