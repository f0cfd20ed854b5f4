"""The load engine of `mqtt bench`: worker processes, each a trio loop driving its share of the clients.

Speed decides the shape: control packets (CONNECT, SUBSCRIBE, DISCONNECT) are encoded by the core codec, but
the work per message is mqtt_cli/core/benchwire.py's (compiled with mypyc): PUBLISH packets patched in a reused
buffer, what the broker sends scanned in place (no packet objects per message); the payload layout is there too.
Histograms and figures: mqtt_cli/core/benchstats.py.

Processes: `run()` (in the command's process, no trio) forks `workers` processes. Client k (publishers,
subscribers, or plain connections) belongs to worker k % workers. Workers report `ready` once every client of
theirs has connected (or failed); the parent answers `go` with the start time, so that publishing starts
when every subscriber, in every worker, is subscribed. Every second the parent asks every worker for its figures
at once (`sample`, answered by `tick`), so that a live line adds counts of one moment; at the end the workers
send `final`; the parent merges them exactly (benchstats.Figures.merge).

Latency: the send time is the wall clock read just before the write; the receive time is the kernel's arrival
timestamp of the segment (SO_TIMESTAMPNS, read with recvmsg), so that neither the bench's wake-ups nor its
work between reads count; the wall clock as recv() returned where the kernel gives none (TLS, WebSocket, no
SO_TIMESTAMPNS, --clock user). The figures say which (`clock`). The collector is frozen after set-up and off
while measuring: a collection pause would land in the tail.
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import trio

from ..core.benchstats import Clock, ErrorKind, Figures, expand_topic
from ..core.benchwire import Acks, Closed, Latencies, Publishes, Receiver, after_props, packet_at, split_frames
from ..core.encoder import encode
from ..core.packets import Connect, Disconnect, Subscribe, Subscription
from .benchio import SO_TIMESTAMPNS, Read, read_nowait, send_nowait
from .benchloop import PacedLoop
from .cputime import CpuTime, cpu_time
from .errors import ClientError, TLSFailed
from .readsize import READ_SIZE
from .ticker import Ticker
from .transports import Endpoint, open_transport

_PINGREQ = b"\xc0\x00"
_IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
_PER_SOURCE = 20000  # connections per 127.0.0.x source address (the ephemeral port range holds ~28,000)
_WRITE_BYTES = 65536  # unpaced: messages built per write (a socket buffer's worth, as C load generators queue)
_EXACT_PACING = 0.002  # message gaps below this are timed by a timerfd (see Worker.publisher)
# In a flood, a subscriber whose read was short and asked for no answer waits this long before the next read, so
# that it reads in bulk, as C load generators do. Read at once, each small write of the broker's goes out alone
# (our acknowledgements release its Nagle hold) and wakes us: mosquitto pays for each, and delivered 73-76k msg/s
# at QoS 0 against 88-94k/s with the wait (AMD EPYC). QoS 1/2 deliveries are answered, and read, at once.
_BULK_READ = 16384
_BULK_WAIT = 0.0005


class Mode(Enum):
    CONN = "conn"
    PUB = "pub"
    SUB = "sub"
    PUBSUB = "pubsub"


@dataclass
class Spec:
    """One bench run, as the command resolved it. Handed to forked workers as it is (never pickled)."""

    mode: Mode
    endpoint: Endpoint
    ssl_context: ssl.SSLContext | None = None
    version: int = 4
    keepalive: int = 60
    clean: bool = True
    username: str | None = None
    password: bytes | None = None
    id_prefix: str = "bench"
    clients: int = 1  # -c: publishers (pub, pubsub), subscribers (sub), connections (conn)
    subs: int = 1  # --subs (pubsub)
    start_number: int = 1  # -n
    connect_interval: float = 0.0  # -i, seconds
    msg_interval: float = 1.0  # -I, seconds (0: as fast as the window allows)
    limit: int = 0  # -L: total messages, 0 = no limit
    duration: float = 0.0  # seconds of publishing (conn, sub: of holding); 0 = until the limit or Ctrl-C
    topic: str = "bench/%i"
    sub_filter: str = "bench/+"
    size: int = 256
    qos: int = 0
    sub_qos: int = 0
    retain: bool = False
    inflight: int = 100  # unacknowledged QoS 1/2 messages per publisher
    workers: int = 1
    parallel: int = 64  # TCP+CONNECT handshakes in flight per worker
    connect_timeout: float = 10.0
    drain: float = 2.0  # seconds without a delivery before giving up on the missing ones
    source_addresses: list[str] = field(default_factory=list)
    clock: Clock = Clock.KERNEL  # the receive times wanted: the kernel's where it gives them, or the user clock
    broker_pid: int | None = None  # its CPU time is measured over the run


@dataclass
class Tick:
    figures: Figures
    start_ns: int | None
    now_ns: int
    inflight: int


@dataclass
class Outcome:
    figures: Figures
    start_ns: int | None
    interrupted: bool
    fd_note: str


# --- resources ----------------------------------------------------------------------------------------------


def raise_fd_limit(wanted: int) -> str:
    """Raises RLIMIT_NOFILE towards `wanted` (as far as the hard limit allows); says what happened."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return ""
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft < wanted:
        return f"file descriptor limit {soft} (hard limit {hard}) is below the {wanted} needed: use more --workers"
    return f"file descriptor limit raised to {soft}"


def source_addresses(spec: Spec, total: int) -> list[str]:
    """--ifaddr, else 127.0.0.x addresses when the broker is on loopback and one address' ports would not do."""
    if spec.source_addresses:
        return spec.source_addresses
    host = spec.endpoint.host
    if spec.endpoint.scheme not in ("mqtt", "mqtts") or not host.startswith("127.") or total <= _PER_SOURCE:
        return []
    return [f"127.0.0.{1 + i}" for i in range(math.ceil(total / _PER_SOURCE))]


# --- one connection -----------------------------------------------------------------------------------------


class WorkerFailed(Exception):
    """A worker process ended on an unexpected error (the message says which, and where)."""


class Conn:
    """One client's connection. Plain TCP goes straight to the (non-blocking) socket: a write that the kernel
    takes at once, and a read with data waiting, cost no trip through trio's scheduler; with `timestamp_arrivals()`
    a read carries the kernel's arrival time (a bench that times reads itself measures its own delays too). TLS
    and WebSocket go through their trio stream."""

    __slots__ = (
        "buf", "client_id", "held", "kernel_stamp", "last_sent", "lock", "raw", "reading", "stream", "timestamps"
    )  # fmt: skip

    def __init__(self, stream: trio.abc.Stream | None, client_id: str, raw: socket.socket | None = None) -> None:
        self.stream = stream
        self.raw = raw
        self.lock = trio.Lock()  # held while a write waits for room: later writes queue behind it
        self.held = False  # the lock is held for the rest of a partial write (send_nowait)
        self.last_sent = time.monotonic()
        self.buf = b""
        self.client_id = client_id
        self.timestamps = False  # the kernel timestamps what arrives (SO_TIMESTAMPNS is on)
        self.kernel_stamp = False  # the last read's time is the kernel's
        self.reading: trio.CancelScope | None = None  # a subscriber task's wait for its next read

    def timestamp_arrivals(self) -> bool:
        """Asks the kernel to timestamp what arrives on this connection; False where it cannot."""
        if self.raw is None or SO_TIMESTAMPNS is None:
            return False
        try:
            self.raw.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            return False
        self.timestamps = True
        return True

    async def send(self, data: bytes) -> None:
        rest = memoryview(data) if self.raw is None else self.send_nowait(data)
        if rest is not None:
            await self.send_rest(rest)

    def send_nowait(self, data: bytes) -> memoryview | None:
        """Plain TCP: writes what the kernel takes of `data` now. None when it took all; else what is left, for
        `send_rest`. After a partial write the calling task holds the connection's lock until then, so that no
        other write lands inside the packet cut short."""
        raw = self.raw
        assert raw is not None
        if self.lock.locked():
            return memoryview(data)
        try:
            n = send_nowait(raw, data)
        except OSError as err:
            raise trio.BrokenResourceError(str(err)) from err
        self.last_sent = time.monotonic()
        return None if n == len(data) else self.cut(data, n)

    def cut(self, data: bytes, n: int) -> memoryview:
        """The kernel took the first `n` bytes of `data`, written without waiting while the lock was free: the
        calling task holds the lock from now until `send_rest` has written the rest, which this returns."""
        self.lock.acquire_nowait()
        self.held = True
        return memoryview(data)[n:]

    async def send_rest(self, view: memoryview) -> None:
        """Writes `view` once the kernel has room, after the writes waiting before it."""
        if self.held and self.lock.statistics().owner is trio.lowlevel.current_task():
            try:
                await self._send_rest(view)
            finally:
                self.held = False
                self.lock.release()
        else:
            async with self.lock:
                await self._send_rest(view)
        self.last_sent = time.monotonic()

    async def _send_rest(self, view: memoryview) -> None:
        raw = self.raw
        if raw is None:
            assert self.stream is not None
            await self.stream.send_all(view)
            return
        while view:
            await trio.lowlevel.wait_writable(raw)
            try:
                view = view[send_nowait(raw, view) :]
            except OSError as err:
                raise trio.BrokenResourceError(str(err)) from err

    async def receive(self) -> tuple[bytes, int]:
        """The next bytes, and when they arrived (wall clock, ns): the kernel's timestamp of the last segment read
        when it gave one (then `kernel_stamp` is set), else the time recv() returned."""
        raw = self.raw
        if raw is None:
            assert self.stream is not None
            data = await self.stream.receive_some(READ_SIZE)
            return bytes(data), time.time_ns()  # the same object when it is bytes already
        waited = False
        while (got := self.read_nowait()) is None:
            await trio.lowlevel.wait_readable(raw)
            waited = True
        if not waited:  # data was waiting: let the other clients run too (what was read is the caller's: no cancel)
            await trio.lowlevel.cancel_shielded_checkpoint()
        return got.data, got.now

    def read_nowait(self) -> Read | None:
        """As `receive` on plain TCP, without waiting: None when nothing is waiting."""
        assert self.raw is not None
        try:
            got = read_nowait(self.raw, self.timestamps)
        except OSError as err:
            raise trio.BrokenResourceError(str(err)) from err
        if got is not None:
            self.kernel_stamp = got.kernel
        return got

    async def read_frames(self) -> tuple[list[tuple[int, bytes]], int]:
        """The complete packets of the next read (first byte, body) and the time (ns) the read returned."""
        data, now = await self.receive()
        if not data:
            raise Closed("closed by the broker")
        buf = self.buf + data if self.buf else data
        out, pos = split_frames(buf)
        self.buf = buf[pos:]
        return out, now

    async def aclose(self) -> None:
        if self.raw is not None:
            trio.lowlevel.notify_closing(self.raw)
            self.raw.close()
        elif self.stream is not None:
            await trio.aclose_forcefully(self.stream)


class Worker:
    """One process's share of the run."""

    def __init__(self, spec: Spec, index: int, pipe: multiprocessing.connection.Connection) -> None:
        self.spec = spec
        self.index = index
        self.pipe = pipe
        self.fig = Figures()
        self.receivers: list[Receiver] = []  # one per subscriber
        self.latencies = Latencies()  # all subscribers' samples since the figures were last read
        self.conns: list[Conn] = []
        self.start_ns: int | None = None
        self.cpu_at_go: CpuTime | None = None
        self.go = trio.Event()
        self.stop = trio.CancelScope()  # Ctrl-C, SIGTERM from the parent, or the parent gone
        self.parent_gone = False
        self.total_sent: int | None = None  # all workers' publishers, once they are done
        self.sent_known = trio.Event()
        self.inflight = 0
        self.publishing = 0  # publisher tasks still running
        self.publishers_done = trio.Event()
        self.family = socket.AF_INET
        self.resolving = trio.Lock()
        self.addr: tuple[Any, ...] | None = None
        self.sources = source_addresses(spec, spec.clients + (spec.subs if spec.mode is Mode.PUBSUB else 0))
        self.handshakes = trio.Semaphore(max(1, spec.parallel))
        self.last_delivery = time.monotonic()
        self.subscribed: list[tuple[Conn, Receiver]] = []
        # While the paced loop (benchloop.py) runs, it serves the subscribers over plain TCP: their tasks wait.
        self.polling = False
        self.polling_over = trio.Event()

    # --- plumbing --------------------------------------------------------------------------------------------

    def report(self, kind: str, payload: Any = None) -> None:
        try:
            self.pipe.send((kind, payload))
        except OSError:  # the parent is gone: stop
            self.parent_gone = True
            self.stop.cancel()

    def snapshot(self) -> Figures:
        f = self.fig
        f.latency.absorb(self.latencies)
        receivers = self.receivers
        f.delivered = sum(r.delivered for r in receivers)
        f.kernel_samples = sum(r.kernel_samples for r in receivers)
        f.foreign = sum(r.foreign for r in receivers)
        f.distinct = sum(r.distinct for r in receivers)
        f.dups = sum(r.dups for r in receivers)
        f.reordered = sum(r.reordered for r in receivers)
        return f

    async def listen_parent(self) -> None:
        while True:
            try:
                kind, value = await trio.to_thread.run_sync(self.pipe.recv, abandon_on_cancel=True)
            except (EOFError, OSError):  # the parent is gone (killed): stop, nobody reads the figures
                self.parent_gone = True
                self.stop.cancel()
                return
            if kind == "go":
                self.start_ns = value
                self.cpu_at_go = cpu_time()
                self.go.set()
            elif kind == "sample":
                self.report("tick", Tick(self.snapshot(), self.start_ns, time.monotonic_ns(), self.inflight))
            elif kind == "sent":
                self.total_sent = value
                self.sent_known.set()

    async def pinger(self) -> None:
        ka = self.spec.keepalive
        if not ka:
            return
        while True:
            await trio.sleep(max(0.5, ka / 4))
            due = time.monotonic() - ka / 2
            for conn in list(self.conns):
                if conn.last_sent < due:
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        await conn.send(_PINGREQ)

    # --- connecting -------------------------------------------------------------------------------------------

    async def _open(self, number: int, client_id: str) -> Conn:
        ep = self.spec.endpoint
        if ep.scheme != "mqtt":
            return Conn(await open_transport(ep, self.spec.ssl_context), client_id)
        if self.addr is None:
            async with self.resolving:  # once per worker: the first address that answers is kept for all
                if self.addr is None:
                    infos = await trio.socket.getaddrinfo(ep.host, ep.port, type=socket.SOCK_STREAM)
                    for i, (family, _, _, _, addr) in enumerate(infos):
                        try:
                            raw = await self._connect_raw(family, addr, number)
                        except OSError:
                            if i == len(infos) - 1:
                                raise
                            continue
                        self.family, self.addr = family, addr
                        return Conn(None, client_id, raw)
        return Conn(None, client_id, await self._connect_raw(self.family, self.addr, number))

    async def _connect_raw(self, family: int, addr: Any, number: int) -> socket.socket:
        raw = socket.socket(family, socket.SOCK_STREAM)
        try:
            raw.setblocking(False)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.sources and family == socket.AF_INET:
                with contextlib.suppress(OSError):
                    raw.setsockopt(socket.IPPROTO_IP, _IP_BIND_ADDRESS_NO_PORT, 1)
                raw.bind((self.sources[number % len(self.sources)], 0))
            await trio.socket.from_stdlib_socket(raw).connect(addr)
        except BaseException:
            raw.close()
            raise
        return raw

    async def connect(self, number: int, client_id: str, delay: float) -> Conn | None:
        """A connected client, or None (counted as failed, by kind)."""
        spec = self.spec
        if delay:
            await trio.sleep(delay)
        now = time.monotonic_ns()
        if self.fig.first_connect_ns is None or now < self.fig.first_connect_ns:
            self.fig.first_connect_ns = now
        kind = ErrorKind.TIMEOUT
        conn: Conn | None = None
        async with self.handshakes:
            try:
                with trio.fail_after(spec.connect_timeout):
                    kind = ErrorKind.UNREACHABLE
                    conn = await self._open(number, client_id)
                    kind = ErrorKind.TLS if spec.endpoint.tls else ErrorKind.PROTOCOL
                    packet = Connect(client_id, spec.clean, spec.keepalive, spec.username, spec.password,
                                     protocol_version=spec.version)  # fmt: skip
                    await conn.send(encode(packet, spec.version))
                    kind = ErrorKind.TIMEOUT
                    frames: list[tuple[int, bytes]] = []
                    while not frames:
                        frames, _ = await conn.read_frames()
                    first, body = frames[0]
                    if first >> 4 != 2 or len(body) < 2:
                        kind = ErrorKind.PROTOCOL
                        raise Closed("not a CONNACK")
                    if body[1]:
                        kind = ErrorKind.REFUSED
                        raise Closed(f"refused: {body[1]:#x}")
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError, Closed,
                    ssl.SSLError, ClientError) as err:  # fmt: skip
                if isinstance(err, trio.TooSlowError):
                    kind = ErrorKind.TIMEOUT
                elif isinstance(err, TLSFailed):
                    kind = ErrorKind.TLS
                elif isinstance(err, ClientError):
                    kind = ErrorKind.UNREACHABLE
                elif kind is ErrorKind.TIMEOUT:  # closed or reset in answer to CONNECT
                    kind = ErrorKind.REFUSED
                self.fig.failed += 1
                self.fig.error(kind)
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.aclose()
                return None
        self.fig.connected += 1
        now = time.monotonic_ns()
        if self.fig.last_connack_ns is None or now > self.fig.last_connack_ns:
            self.fig.last_connack_ns = now
        self.conns.append(conn)
        return conn

    def lost(self, conn: Conn) -> None:
        if conn in self.conns:
            self.conns.remove(conn)
            self.fig.error(ErrorKind.DROPPED)

    # --- subscribers ------------------------------------------------------------------------------------------

    async def subscribe(self, conn: Conn) -> Receiver | None:
        """SUBSCRIBE, and the SUBACK; None (counted) when refused or dropped."""
        spec = self.spec
        packet = Subscribe(1, (Subscription(spec.sub_filter, spec.sub_qos),))
        if spec.clock is Clock.KERNEL:
            conn.timestamp_arrivals()
        receiver = Receiver(spec.version, self.latencies)
        try:
            await conn.send(encode(packet, spec.version))
            suback: bytes | None = None
            while suback is None:
                data, now = await conn.receive()
                if not data:
                    raise Closed("closed by the broker")
                buf = conn.buf + data if conn.buf else data
                pos = 0
                while suback is None:
                    i, length = packet_at(buf, pos)
                    if i < 0 or i + length > len(buf):
                        break
                    if buf[pos] >> 4 == 9:
                        suback = buf[i : i + length]
                    pos = i + length
                conn.buf = buf[pos:]
            codes = suback[2:] if spec.version != 5 else suback[after_props(suback, 2) :]
            if not codes or codes[0] >= 0x80:
                self.fig.error(ErrorKind.SUBSCRIBE_REFUSED)
                return None
            # What came behind the SUBACK in the same read (a retained message, a publisher already running)
            # counts, and is acknowledged, like the rest.
            acks = receiver.feed(conn.buf, now, conn.kernel_stamp) if conn.buf else b""
            conn.buf = b""
            if acks:
                await conn.send(acks)
        except (Closed, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.lost(conn)
            return None
        self.fig.subscribers += 1
        self.receivers.append(receiver)
        self.subscribed.append((conn, receiver))
        return receiver

    async def receive(self, conn: Conn, receiver: Receiver) -> None:
        try:
            await self._receive(conn, receiver)
        except (Closed, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.lost(conn)

    async def _receive(self, conn: Conn, receiver: Receiver) -> None:
        fig = self.fig
        feed = receiver.feed
        flood = self.spec.mode is Mode.PUBSUB and self.spec.msg_interval == 0
        while True:
            if self.polling and conn.raw is not None:
                await self.polling_over.wait()
                if conn not in self.conns:
                    return  # lost in the paced loop (and counted there)
            with trio.CancelScope() as conn.reading:  # the paced loop cancels the wait when it takes over
                data, now = await conn.receive()
            if conn.reading.cancelled_caught:
                continue
            if not data:
                raise Closed("closed by the broker")
            before = receiver.delivered
            acks = feed(data, now, conn.kernel_stamp)
            if acks:
                await conn.send(acks)
            if receiver.delivered != before:
                fig.last_delivery_ns = at = time.monotonic_ns()
                self.last_delivery = at / 1e9
            if flood and not acks and len(data) < _BULK_READ:
                await trio.sleep(_BULK_WAIT)

    # --- publishers -------------------------------------------------------------------------------------------

    async def publisher(self, conn: Conn, number: int, count: int) -> None:
        spec = self.spec
        packets = self.packets(conn, number)
        state = _PubState(spec.inflight)
        acks = Acks()
        acks.rest, conn.buf = conn.buf, b""
        fig = self.fig
        qos = spec.qos
        interval = spec.msg_interval
        # Fewer, larger writes cost the broker less per message (its reads of a full socket buffer).
        batch = max(64, _WRITE_BYTES // packets.size)
        ticker: Ticker | None = None
        try:
            async with trio.open_nursery() as nursery:
                await self.go.wait()
                assert self.start_ns is not None
                end = self.start_ns / 1e9 + spec.duration if spec.duration else math.inf
                next_at = _trio_at(self.start_ns / 1e9)
                pending = 0  # paced messages due and not sent yet (the window was full): sent once it opens
                # trio's timers tick in milliseconds: gaps shorter than a few of those are timed by the kernel, so
                # that 10,000 msg/s go one by one, not in bursts of ten (which the broker would queue, and the
                # latency would show). (Over plain TCP the paced loop, benchloop.py, runs those publishers.)
                ticker = Ticker.start(self.start_ns, round(interval * 1e9)) if 0 < interval < _EXACT_PACING else None
                if qos:
                    nursery.start_soon(self._acks, conn, state, acks)
                while (not count or packets.seq < count) and time.monotonic() < end:
                    if ticker is not None:
                        if not pending:
                            pending = await ticker.wait()
                        due = pending
                    elif interval:
                        if not pending:
                            await trio.sleep_until(next_at)
                        late = trio.current_time() - next_at
                        if late >= 0:  # late: those due, at once
                            n = int(late / interval) + 1
                            next_at += n * interval
                            pending += n
                        due = pending
                        if not due:
                            continue
                    else:
                        due = batch
                    if count:
                        due = min(due, count - packets.seq)
                    if qos:
                        while state.inflight >= state.window:
                            await self._next_acks(state)
                        due = min(due, state.window - state.inflight)
                    # The wall clock: the kernel's receive timestamps are on it.
                    data = packets.build(due, time.time_ns())
                    if qos:
                        state.inflight += due
                        self.inflight += due
                    await conn.send(data)
                    pending -= due if interval else 0
                    if not interval:
                        await trio.lowlevel.checkpoint()  # a write the kernel took at once did not yield
                    fig.sent += due
                    if not qos:
                        fig.acked += due
                while state.inflight:
                    with trio.move_on_after(max(spec.drain, 5.0)) as scope:
                        await self._next_acks(state)
                    if scope.cancelled_caught:
                        break
                nursery.cancel_scope.cancel()
        except* (Closed, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.lost(conn)
        finally:
            if ticker is not None:
                ticker.close()
            self.publisher_finished(state.inflight, state.last_ack_ns if qos else 0)

    def publisher_finished(self, unacknowledged: int, last_ack_ns: int) -> None:
        """A publisher is done: what it left unacknowledged leaves the worker's in-flight count, and the
        publishers' end is its last acknowledgement (QoS 1/2) or now."""
        self.publishing -= 1
        if not self.publishing:
            self.publishers_done.set()
        self.inflight -= unacknowledged
        end_ns = last_ack_ns or time.monotonic_ns()
        if self.fig.pub_end_ns is None or end_ns > self.fig.pub_end_ns:
            self.fig.pub_end_ns = end_ns

    def packets(self, conn: Conn, number: int) -> Publishes:
        spec = self.spec
        topic = expand_topic(spec.topic, number, conn.client_id, spec.username).encode()
        return Publishes(topic, spec.qos, spec.retain, spec.version, spec.size, number)

    async def _next_acks(self, state: _PubState) -> None:
        """Until the publisher's _acks task counts the next acknowledgements."""
        state.wake = trio.Event()
        await state.wake.wait()

    async def _acks(self, conn: Conn, state: _PubState, acks: Acks) -> None:
        while True:
            data, _ = await conn.receive()
            await self._acked(conn, state, acks, data)

    async def _acked(self, conn: Conn, state: _PubState, acks: Acks, data: bytes) -> None:
        """Counts the acknowledgements in what a publisher's connection read, and answers PUBRECs."""
        if not data:
            raise Closed("closed by the broker")
        done = acks.feed(data)
        if acks.replies:
            await conn.send(acks.replies)
        if done:
            state.inflight -= done
            self.inflight -= done
            self.fig.acked += done
            state.last_ack_ns = time.monotonic_ns()
            state.wake.set()

    # --- idle connections (conn mode, and publishers' keepalive) ---------------------------------------------

    async def idle(self, conn: Conn) -> None:
        try:
            while True:
                frames, _ = await conn.read_frames()
                if any(first >> 4 == 14 for first, _ in frames):
                    raise Closed("DISCONNECT from the broker")
        except (Closed, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.lost(conn)

    # --- the run ----------------------------------------------------------------------------------------------

    def _mine(self, n: int) -> range:
        return range(self.index, n, self.spec.workers)

    def _mine_subs(self, n: int) -> list[int]:
        # Subscribers from the last worker down, publishers from the first up: one publisher and one subscriber
        # on two workers get a process each.
        w = self.spec.workers
        return [k for k in range(n) if w - 1 - k % w == self.index]

    async def main(self) -> None:
        stop = self.stop
        async with trio.open_nursery() as outer:
            outer.start_soon(self.listen_parent)
            outer.start_soon(self.pinger)
            outer.start_soon(self._signals, stop)
            try:
                with stop:
                    await self._run()
            finally:
                gc.enable()
            if self.cpu_at_go is not None and (used := cpu_time()) is not None:
                used -= self.cpu_at_go
                self.fig.gen_cpu_ns, self.fig.gen_wait_ns = used.cpu_ns, used.wait_ns
            if not self.parent_gone:
                self.report("final", self.snapshot())
            with trio.move_on_after(2):
                await self._goodbye()
            outer.cancel_scope.cancel()

    async def _signals(self, stop: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
            async for _ in received:
                stop.cancel()

    async def _goodbye(self) -> None:
        data = encode(Disconnect(), self.spec.version)
        for conn in self.conns:
            with contextlib.suppress(Exception):
                await conn.send(data)
                await conn.aclose()

    async def _run(self) -> None:
        spec = self.spec
        ramp = spec.connect_interval
        conns: dict[int, Conn | None] = {}
        async with trio.open_nursery() as work:
            subs_n = spec.subs if spec.mode is Mode.PUBSUB else spec.clients if spec.mode is Mode.SUB else 0
            pubs_n = spec.clients if spec.mode in (Mode.PUB, Mode.PUBSUB) else 0
            # Subscribers first (so that none misses the first messages), then publishers / connections.
            async with trio.open_nursery() as setup:
                for k in self._mine_subs(subs_n):

                    async def sub(k: int = k) -> None:
                        self.fig.subs += 1
                        conn = await self.connect(k, f"{spec.id_prefix}s{k + spec.start_number}", k * ramp)
                        receiver = await self.subscribe(conn) if conn is not None else None
                        if conn is not None and receiver is not None:
                            work.start_soon(self.receive, conn, receiver)

                    setup.start_soon(sub)
            async with trio.open_nursery() as setup:
                base = subs_n
                n_conn = spec.clients if spec.mode is Mode.CONN else pubs_n
                for k in self._mine(n_conn):
                    number = spec.start_number + k

                    async def one(k: int = k, number: int = number) -> None:
                        if spec.mode is Mode.CONN:
                            self.fig.conns += 1
                        else:
                            self.fig.pubs += 1
                        conns[k] = await self.connect(base + k, f"{spec.id_prefix}{number}", (base + k) * ramp)

                    setup.start_soon(one)
            # Set-up's objects are never collected again, and nothing is collected while measuring: a pause of
            # the collector would be counted as latency (main() enables it again). Done before `ready`, so that
            # the full collection's tens of milliseconds are not in the run either.
            gc.collect()
            gc.freeze()
            gc.disable()
            self.report("ready")
            await self.go.wait()
            paced: list[tuple[Conn, Publishes, int]] = []
            for k, conn in conns.items():
                if conn is None:
                    continue
                if spec.mode is Mode.CONN:
                    work.start_soon(self.idle, conn)
                else:
                    count = spec.limit // pubs_n + (1 if k < spec.limit % pubs_n else 0) if spec.limit else 0
                    if spec.limit and not count:
                        work.start_soon(self.idle, conn)
                        continue
                    self.publishing += 1
                    if conn.raw is not None and 0 < spec.msg_interval < _EXACT_PACING:
                        paced.append((conn, self.packets(conn, spec.start_number + k), count))
                    else:
                        work.start_soon(self.publisher, conn, spec.start_number + k, count)
            if paced:
                if (loop := PacedLoop.open(self, paced)) is not None:
                    work.start_soon(loop.run)
                else:  # no timerfd: a task each, paced by trio's clock
                    for conn, packets, count in paced:
                        work.start_soon(self.publisher, conn, packets.publisher, count)
            if spec.mode in (Mode.CONN, Mode.SUB):
                if spec.duration:
                    assert self.start_ns is not None
                    await trio.sleep_until(_trio_at(self.start_ns / 1e9 + spec.duration))
                    work.cancel_scope.cancel()
                return  # until Ctrl-C otherwise
            if self.publishing:
                await self.publishers_done.wait()
            self.report("pubdone", self.fig.sent)
            if self.receivers:
                await self.sent_known.wait()
                await self._drain()
            work.cancel_scope.cancel()

    async def _drain(self) -> None:
        assert self.total_sent is not None
        want = self.total_sent * len(self.receivers)
        while sum(r.distinct for r in self.receivers) < want:
            if time.monotonic() - self.last_delivery > self.spec.drain:
                return
            await trio.sleep(0.01)


class _PubState:
    __slots__ = ("inflight", "last_ack_ns", "wake", "window")

    def __init__(self, window: int) -> None:
        self.inflight = 0
        self.window = max(1, window)
        self.wake = trio.Event()
        self.last_ack_ns = 0


def _trio_at(monotonic_s: float) -> float:
    """trio's clock is time.perf_counter-based: a time.monotonic() deadline translated."""
    return trio.current_time() + (monotonic_s - time.monotonic())


# --- processes ----------------------------------------------------------------------------------------------


def _worker_main(spec: Spec, index: int, pipe: multiprocessing.connection.Connection, inherited: list[Any]) -> None:
    # The parent's ends of the pipes (this worker's and earlier ones'), copied by fork: closed, so that a pipe
    # whose parent is gone reads as closed instead of blocking the writer for ever.
    for end in inherited:
        end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # trio's receiver takes over inside the run
    try:
        trio.run(Worker(spec, index, pipe).main)
    except BaseException as err:  # the parent says it in one line; never a traceback from a worker
        leaf: BaseException = err
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        where = leaf.__traceback__
        while where is not None and where.tb_next is not None:
            where = where.tb_next
        line = f" (line {where.tb_lineno} of {where.tb_frame.f_code.co_filename})" if where else ""
        with contextlib.suppress(Exception):
            pipe.send(("crash", f"worker {index}: {type(leaf).__name__}: {leaf}{line}"))
    finally:
        pipe.close()


def run(spec: Spec, on_tick: Callable[[Tick], None]) -> Outcome:
    """Runs the bench in `spec.workers` processes; `on_tick` gets the merged figures of one moment every second.
    Ctrl-C (KeyboardInterrupt here) stops the workers, which send what they have: the outcome says `interrupted`.
    The CPU time of this process and of the broker (spec.broker_pid) from the start to the workers' end is
    added to the figures (each worker measures its own)."""
    total = spec.clients + (spec.subs if spec.mode is Mode.PUBSUB else 0)
    fd_note = raise_fd_limit(total // max(1, spec.workers) + 64)
    pipes, procs = _start_workers(spec)
    ticks: dict[int, Figures] = {}
    finals: dict[int, Figures] = {}
    ready: set[int] = set()
    pubdone: dict[int, int] = {}
    start_ns: int | None = None
    interrupted = False
    crash: str | None = None
    stop_deadline: float | None = None
    inflight: dict[int, int] = {}
    next_sample = time.monotonic() + 1.0
    sampling: set[int] = set()  # workers asked for their figures that have not answered
    sampled_ns = 0
    cpu_at_go: tuple[CpuTime | None, CpuTime | None] = (None, None)
    cpu_at_end: tuple[CpuTime | None, CpuTime | None] = (None, None)
    try:
        while True:
            try:  # the loop's test too: a Ctrl-C anywhere in it stops the workers cleanly
                if len(finals) >= len(pipes):
                    break
                live = [p for i, p in enumerate(pipes) if i not in finals]
                if stop_deadline is not None and time.monotonic() > stop_deadline:
                    break
                wait = max(0.0, min(0.2, next_sample - time.monotonic())) if not sampled_ns else 0.2
                for p in multiprocessing.connection.wait(live, timeout=wait):
                    assert isinstance(p, multiprocessing.connection.Connection)  # wait() gives back our pipes
                    i = pipes.index(p)
                    try:
                        kind, value = p.recv()
                    except (EOFError, OSError):
                        finals.setdefault(i, ticks.get(i, Figures()))
                        continue
                    if kind == "ready":
                        ready.add(i)
                        if len(ready) == len(pipes):
                            cpu_at_go = (cpu_time(), cpu_time(spec.broker_pid) if spec.broker_pid else None)
                            start_ns = time.monotonic_ns()
                            for q in pipes:
                                _tell(q, ("go", start_ns))
                    elif kind == "tick":
                        ticks[i] = value.figures
                        inflight[i] = value.inflight
                        sampling.discard(i)
                    elif kind == "pubdone":
                        pubdone[i] = value
                        if len(pubdone) == len(pipes):
                            for j, q in enumerate(pipes):
                                if j not in finals:
                                    _tell(q, ("sent", sum(pubdone.values())))
                    elif kind == "final":
                        finals[i] = value
                        inflight[i] = 0
                    elif kind == "crash":
                        crash = value
                        finals.setdefault(i, ticks.get(i, Figures()))
                sampling.difference_update(finals)
                if sampled_ns and not sampling:  # every worker answered: the figures of one moment
                    parts = [finals.get(i) or ticks.get(i) or Figures() for i in range(len(pipes))]
                    on_tick(Tick(_merge(parts), start_ns, sampled_ns, sum(inflight.values())))
                    sampled_ns = 0
                if not sampled_ns and time.monotonic() >= next_sample:
                    next_sample += 1.0
                    sampled_ns = time.monotonic_ns()
                    sampling = {i for i in range(len(pipes)) if i not in finals}
                    for i in sampling:
                        _tell(pipes[i], ("sample", None))
            except KeyboardInterrupt:
                if not interrupted:
                    interrupted = True
                    stop_deadline = time.monotonic() + 10
                    for proc in procs:
                        with contextlib.suppress(OSError):
                            if proc.pid:
                                os.kill(proc.pid, signal.SIGTERM)
        cpu_at_end = (cpu_time(), cpu_time(spec.broker_pid) if spec.broker_pid else None)
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
    parts = [finals.get(i) or ticks.get(i) or Figures() for i in range(len(pipes))]
    if crash and not interrupted:
        raise WorkerFailed(crash)
    figures = _merge(parts)
    (mine, broker), (mine_end, broker_end) = cpu_at_go, cpu_at_end
    if mine is not None and mine_end is not None:
        figures.gen_cpu_ns += (mine_end - mine).cpu_ns
        figures.gen_wait_ns += (mine_end - mine).wait_ns
    if broker is not None and broker_end is not None:
        figures.broker_cpu_ns, figures.broker_wait_ns = (broker_end - broker).cpu_ns, (broker_end - broker).wait_ns
    return Outcome(figures, start_ns, interrupted, fd_note)


def _start_workers(
    spec: Spec,
) -> tuple[list[multiprocessing.connection.Connection], list[multiprocessing.context.ForkProcess]]:
    """`spec.workers` forked processes, each with a pipe to this one (its end of the others' pipes closed)."""
    ctx = multiprocessing.get_context("fork")
    pipes: list[multiprocessing.connection.Connection] = []
    procs: list[multiprocessing.context.ForkProcess] = []
    for i in range(spec.workers):
        parent_end, child_end = ctx.Pipe()
        inherited = [*pipes, parent_end]
        proc = ctx.Process(
            target=_worker_main, args=(spec, i, child_end, inherited), daemon=True, name=f"bench-worker-{i}"
        )
        proc.start()
        child_end.close()
        pipes.append(parent_end)
        procs.append(proc)
    return pipes, procs


def _tell(pipe: multiprocessing.connection.Connection, message: tuple[str, Any]) -> None:
    """A message to a worker, which may have finished and closed its end already."""
    with contextlib.suppress(OSError):
        pipe.send(message)


def _merge(parts: list[Figures]) -> Figures:
    out = Figures()
    for part in parts:
        out.merge(part)
    return out
