"""The broker's HTTP endpoint for monitoring: GET /metrics, /healthz, /readyz (docs/broker.md); also the admin
API and the dashboard (net/admin_api.py), with credentials.

A small HTTP/1.1 server on trio with h11 (sans-IO): GET and HEAD (DELETE for the admin API), one request per
connection (answered with Connection: close), requests bounded in size and time, over TLS when given a
certificate. The figures are core/metrics.py's, from the
broker's own counters, plus the process's CPU, memory and descriptors read here from /proc/self.
"""

from __future__ import annotations

import contextlib
import os
import resource
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import h11
import trio

from mqtt_cli.core.broker import BrokerCore
from mqtt_cli.core.config import MetricsAddress
from mqtt_cli.core.metrics import (
    OPENMETRICS_TYPE,
    TEXT_TYPE,
    ConnectedClients,
    ProcessFigures,
    broker_families,
    log_families,
    process_families,
    render,
    wants_openmetrics,
)
from mqtt_cli.net.admin_api import AdminSource, answer, is_admin_path

__all__ = ["MetricsSource", "bind_metrics", "open_metrics", "process_figures"]

MAX_REQUEST = 8192  # bytes of request line and headers; more is answered 431
REQUEST_TIMEOUT = 10.0  # seconds for a client to send its request
_REASONS = {
    200: b"OK",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    503: b"Service Unavailable",
}
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class MetricsSource:
    """What the endpoint reads: the broker's core, whether it is ready, and its connections by listener."""

    core: Callable[[], BrokerCore]
    ready: Callable[[], bool]
    connected: Callable[[], Iterable[ConnectedClients]]
    log_lines_lost: Callable[[], int] | None = None  # the broker's log (net/log.py), when it has one
    admin: AdminSource | None = None  # the admin API and dashboard
    tls: ssl.SSLContext | None = None  # HTTPS


def process_figures() -> ProcessFigures:
    """This process's CPU time, memory and descriptors, from /proc/self (Linux)."""
    times = os.times()
    with open("/proc/self/statm", "rb") as f:
        vsize, rss = (int(x) for x in f.read().split()[:2])
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    # Fields after the command name (which may hold spaces), from field 3 on: starttime is field 22, in ticks.
    start_ticks = int(stat[stat.rindex(b")") + 2 :].split()[19])
    with open("/proc/stat", "rb") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    return ProcessFigures(
        cpu_seconds=times.user + times.system,
        resident_memory_bytes=rss * _PAGE,
        virtual_memory_bytes=vsize * _PAGE,
        open_fds=len(os.listdir("/proc/self/fd")),
        max_fds=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        start_time_seconds=btime + start_ticks / _TICKS,
    )


async def bind_metrics(address: MetricsAddress) -> list[trio.SocketListener]:
    """The endpoint's sockets; OSError when the address cannot be bound (the caller says where)."""
    return await trio.open_tcp_listeners(address.port, host=address.host)


@contextlib.asynccontextmanager
async def open_metrics(
    sockets: list[trio.SocketListener] | None, source: MetricsSource
) -> AsyncIterator[MetricsAddress | None]:
    """Serves the endpoint on `sockets` (bind_metrics; None: nothing) while the block runs; yields where."""
    if not sockets:
        yield None
        return
    host, port = sockets[0].socket.getsockname()[:2]
    try:
        async with trio.open_nursery() as nursery:
            for sock in sockets:
                nursery.start_soon(trio.serve_listeners, _handler(source), [sock])
            try:
                yield MetricsAddress(host, port, source.tls is not None)
            finally:
                nursery.cancel_scope.cancel()
                for sock in sockets:
                    with trio.CancelScope(shield=True), contextlib.suppress(OSError, trio.ClosedResourceError):
                        await sock.aclose()
    except BaseExceptionGroup as group:  # what the block raised, as it would without the endpoint
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


def _handler(source: MetricsSource) -> Callable[[trio.SocketStream], Any]:
    async def handle(raw: trio.SocketStream) -> None:
        stream: trio.abc.Stream = raw
        if source.tls is not None:
            stream = trio.SSLStream(raw, source.tls, server_side=True)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError, h11.ProtocolError):
            try:
                with trio.move_on_after(REQUEST_TIMEOUT):
                    await _serve_one(stream, source)
            finally:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    await stream.aclose()

    return handle


async def _serve_one(stream: trio.abc.Stream, source: MetricsSource) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST)
    size = 0
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            code = exc.error_status_hint
            await _answer(stream, conn, code, f"{code} {'request too large' if code == 431 else 'bad request'}\n",
                          force=True)  # fmt: skip
            return
        if event is h11.NEED_DATA:
            data = await stream.receive_some(MAX_REQUEST)
            size += len(data)
            if size > MAX_REQUEST:  # h11 checks only what stays incomplete; the bound is on the whole request
                await _answer(stream, conn, 431, "431 request too large\n", force=True)
                return
            conn.receive_data(bytes(data))  # h11 takes bytes; trio may give a bytearray
            if not data and conn.their_state is not h11.DONE:
                return
            continue
        if isinstance(event, h11.Request):
            break
        return
    method = event.method.decode("ascii", "replace")
    path = event.target.decode("ascii", "replace").split("?", 1)[0]
    headers = {name.decode("ascii", "replace").lower(): value.decode("latin-1") for name, value in event.headers}
    if source.admin is not None and is_admin_path(path):
        got = answer(source.admin, method, path, headers.get("authorization", ""))
        body = got.body.decode()
        await _answer(stream, conn, got.status, body, got.content_type, head=method == "HEAD", extra=got.headers)
        return
    if path not in ("/metrics", "/healthz", "/readyz"):
        await _answer(stream, conn, 404, "not found: try /metrics, /healthz or /readyz\n", head=method == "HEAD")
        return
    if method not in ("GET", "HEAD"):
        await _answer(stream, conn, 405, "only GET (and HEAD)\n", extra=[("Allow", "GET, HEAD")])
        return
    head = method == "HEAD"
    if path == "/healthz":
        await _answer(stream, conn, 200, "ok\n", head=head)
    elif path == "/readyz":
        if source.ready():
            await _answer(stream, conn, 200, "ready\n", head=head)
        else:
            await _answer(stream, conn, 503, "not ready: starting or shutting down\n", head=head)
    else:
        openmetrics = wants_openmetrics(headers.get("accept", ""))
        core = source.core()
        families = broker_families(core, source.connected(), trio.current_time())
        if source.log_lines_lost is not None:
            families += log_families(source.log_lines_lost())
        families += process_families(process_figures())
        body = render(families, openmetrics)
        await _answer(stream, conn, 200, body, OPENMETRICS_TYPE if openmetrics else TEXT_TYPE, head=head)


async def _answer(
    stream: trio.abc.Stream,
    conn: h11.Connection,
    status: int,
    body: str,
    content_type: str = "text/plain; charset=utf-8",
    *,
    head: bool = False,
    force: bool = False,
    extra: list[tuple[str, str]] | None = None,
) -> None:
    data = body.encode()
    headers = [("Content-Type", content_type), ("Content-Length", str(len(data))), ("Connection", "close")]
    headers += extra or []
    if force:  # the request could not be parsed: h11 would not let us answer it, so the bytes are ours
        reason = {400: "Bad Request", 431: "Request Header Fields Too Large"}.get(status, "Error")
        lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers), "", ""]
        await stream.send_all("\r\n".join(lines).encode() + data)
        return
    out = conn.send(h11.Response(status_code=status, headers=headers, reason=_REASONS.get(status, b"")))
    if not head:
        out += conn.send(h11.Data(data=data))
    out += conn.send(h11.EndOfMessage())
    await stream.send_all(out)
