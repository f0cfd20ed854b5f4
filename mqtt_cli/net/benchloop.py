"""`mqtt bench`'s paced loop: the publishers of a worker timed by a timerfd (message gaps under 2 ms) over plain
TCP, and the worker's subscribers, served by one trio task that waits in an epoll set of its own.

Why not a trio task per client: a turn of trio's run loop costs several times a blocking wait (on an AMD EPYC
about 46 µs of CPU against 13 for a timerfd read), and paced this fast every message takes two (its tick, its
delivery). At 10,000 msg/s the bench's core filled, ticks ran late, and the tail it measured was its own. Here a
tick, an acknowledgement or a delivery costs one epoll_wait and its work. The loop is still a trio task: every
10 ms it gives trio's loop a turn (the parent's requests, keepalives, signals), where it can be cancelled, and a
write the kernel cannot take at once is finished there, in order.
"""

from __future__ import annotations

import math
import select
import socket
import time
from typing import TYPE_CHECKING

import trio

from ..core.benchwire import Acks, Closed, Publishes, Receiver
from .benchio import read_nowait, timer_periods
from .ticker import Ticker

if TYPE_CHECKING:
    from .bench import Conn, Worker

_TURN_NS = 10_000_000  # trio's loop gets a turn at least this often
_LOST = (Closed, trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class _Pub:
    """One publisher in the loop."""

    __slots__ = (
        "acks", "conn", "count", "drain_until", "inflight", "last_ack_ns", "packets", "pending", "ticker", "watched"
    )  # fmt: skip

    def __init__(self, conn: Conn, ticker: Ticker, packets: Publishes, count: int) -> None:
        self.conn = conn
        self.ticker: Ticker | None = ticker  # None once it stopped sending (then draining its acknowledgements)
        self.packets = packets
        self.count = count  # messages to send (0: until the run's end)
        self.acks = Acks()
        self.acks.rest, conn.buf = conn.buf, b""
        self.pending = 0  # messages due and not sent yet (the window was full)
        self.inflight = 0
        self.last_ack_ns = 0
        self.drain_until = 0
        self.watched = False  # its socket is in the epoll set (once it drains), else read at ticks and turns


class _Sub:
    """One subscriber in the loop."""

    __slots__ = ("conn", "raw", "receiver", "stamped")

    def __init__(self, conn: Conn, raw: socket.socket, receiver: Receiver) -> None:
        self.conn = conn
        self.raw = raw
        self.receiver = receiver
        self.stamped = conn.timestamps


class PacedLoop:
    """Runs a worker's paced publishers and serves its subscribers over plain TCP."""

    def __init__(self, worker: Worker, pubs: list[_Pub]) -> None:
        self.worker = worker
        spec = worker.spec
        assert worker.start_ns is not None
        self.end_ns = worker.start_ns + round(spec.duration * 1e9) if spec.duration else math.inf
        self.qos = spec.qos
        self.window = max(1, spec.inflight)
        # The acknowledgements are read at a tick once half the window waits for them (and at trio's turns): one
        # read for many, where a wake-up for each would cost as much as the message. mosquitto's sends to the
        # publisher are not held meanwhile: each message carries the TCP acknowledgement of what came before.
        self.read_acks_at = max(1, self.window // 2)
        self.drain_ns = round(max(spec.drain, 5.0) * 1e9)
        self.ep = select.epoll()
        self.ticks: dict[int, _Pub] = {}  # by timerfd
        self.pubs: dict[int, _Pub] = {}  # by socket
        self.subs: dict[int, _Sub] = {}  # by socket
        self.owed: list[tuple[Conn, memoryview]] = []  # writes the kernel took part of: finished in trio's turn
        for pub in pubs:
            assert pub.ticker is not None and pub.conn.raw is not None
            self.ticks[pub.ticker.fd] = pub
            self.pubs[pub.conn.raw.fileno()] = pub
            self.ep.register(pub.ticker.fd, select.EPOLLIN)
        # Every subscriber at once: one left to its task until trio's next turn would answer late, and mosquitto
        # holds a delivery while the one before is unacknowledged (Nagle's algorithm).
        for conn, receiver in worker.subscribed:
            if conn.raw is not None and conn in worker.conns:
                self.subs[conn.raw.fileno()] = _Sub(conn, conn.raw, receiver)
                self.ep.register(conn.raw.fileno(), select.EPOLLIN)

    @classmethod
    def open(cls, worker: Worker, publishers: list[tuple[Conn, Publishes, int]]) -> PacedLoop | None:
        """A loop for these (connection, packets, count) publishers, or None where a timerfd is not to be had."""
        assert worker.start_ns is not None
        interval_ns = round(worker.spec.msg_interval * 1e9)
        pubs: list[_Pub] = []
        for conn, packets, count in publishers:
            ticker = Ticker.start(worker.start_ns, interval_ns)
            if ticker is None:
                for pub in pubs:
                    assert pub.ticker is not None
                    pub.ticker.close()
                return None
            pubs.append(_Pub(conn, ticker, packets, count))
        return cls(worker, pubs)

    async def run(self) -> None:
        worker = self.worker
        worker.polling = True
        try:
            turn_ns = time.monotonic_ns() + _TURN_NS
            while self.pubs:
                for fd, _ in self.ep.poll(max(0, turn_ns - time.monotonic_ns()) / 1e9):
                    self._event(fd)
                while self.owed:
                    conn, rest = self.owed.pop(0)
                    try:
                        await conn.send_rest(rest)
                    except _LOST:
                        self._lost(conn)
                if (now := time.monotonic_ns()) >= turn_ns:
                    for pub in list(self.pubs.values()):
                        if pub.ticker is None and now > pub.drain_until:
                            self._finish(pub)  # acknowledgements still missing: given up on, as a publisher task does
                        elif not pub.watched:
                            self._poll_acks(pub)
                    await trio.lowlevel.checkpoint()
                    turn_ns = time.monotonic_ns() + _TURN_NS
        finally:
            for pub in list(self.pubs.values()):
                self._finish(pub)
            self.ep.close()
            worker.polling = False
            worker.polling_over.set()  # the subscribers go back to their own tasks (the drain)

    def _event(self, fd: int) -> None:
        if (pub := self.ticks.get(fd)) is not None:
            self._tick(pub)
            return
        conn = None
        try:
            if (pub := self.pubs.get(fd)) is not None:
                conn = pub.conn
                self._acked(pub)
            elif (sub := self.subs.get(fd)) is not None:
                conn = sub.conn
                self._delivered(sub)
        except _LOST:
            if conn is not None:
                self._lost(conn)

    def _tick(self, pub: _Pub) -> None:
        periods = timer_periods(pub.ticker.fd) if pub.ticker is not None else 0
        if periods <= 0:
            return
        if time.monotonic_ns() >= self.end_ns:
            self._stop(pub)
            return
        pub.pending += periods
        try:
            if pub.inflight >= self.read_acks_at:
                self._acked(pub)
            self._send(pub)
        except _LOST:
            self._lost(pub.conn)

    def _send(self, pub: _Pub) -> None:
        due = pub.pending
        if pub.count:
            due = min(due, pub.count - pub.packets.seq)
        if self.qos:
            due = min(due, self.window - pub.inflight)
        if due <= 0:
            return
        worker = self.worker
        # The wall clock: the kernel's receive timestamps are on it.
        data = pub.packets.build(due, time.time_ns())
        if self.qos:
            pub.inflight += due
            worker.inflight += due
        pub.pending -= due
        worker.fig.sent += due
        if not self.qos:
            worker.fig.acked += due
        self._write(pub.conn, data)
        if pub.count and pub.packets.seq >= pub.count:
            self._stop(pub)

    def _poll_acks(self, pub: _Pub) -> None:
        try:
            self._acked(pub)
        except _LOST:
            self._lost(pub.conn)

    def _acked(self, pub: _Pub) -> None:
        data = pub.conn.receive_nowait()
        if data is None:
            return
        if not data:
            raise Closed("closed by the broker")
        done = pub.acks.feed(data)
        if pub.acks.replies:
            self._write(pub.conn, pub.acks.replies)
        if not done:
            return
        pub.inflight -= done
        self.worker.inflight -= done
        self.worker.fig.acked += done
        pub.last_ack_ns = time.monotonic_ns()
        if pub.ticker is not None:
            if pub.pending:
                self._send(pub)
        elif pub.inflight:
            pub.drain_until = pub.last_ack_ns + self.drain_ns
        else:
            self._finish(pub)

    def _delivered(self, sub: _Sub) -> None:
        got = read_nowait(sub.raw, sub.stamped)
        if got is None:
            return
        if not got.data:
            raise Closed("closed by the broker")
        receiver = sub.receiver
        before = receiver.delivered
        acks = receiver.feed(got.data, got.now, got.kernel)
        if acks:
            self._write(sub.conn, acks)
        if receiver.delivered != before:
            worker = self.worker
            worker.fig.last_delivery_ns = at = time.monotonic_ns()
            worker.last_delivery = at / 1e9

    def _write(self, conn: Conn, data: bytes) -> None:
        if self.owed and any(owing is conn for owing, _ in self.owed):
            self.owed.append((conn, memoryview(data)))  # behind what it owes already
        elif (rest := conn.send_nowait(data)) is not None:
            self.owed.append((conn, rest))

    def _stop(self, pub: _Pub) -> None:
        """The publisher sent its last message: it waits for the acknowledgements still missing, if any."""
        self._drop_ticker(pub)
        if self.qos and pub.inflight:
            pub.drain_until = time.monotonic_ns() + self.drain_ns
            assert pub.conn.raw is not None
            self.ep.register(pub.conn.raw.fileno(), select.EPOLLIN)
            pub.watched = True
        else:
            self._finish(pub)

    def _drop_ticker(self, pub: _Pub) -> None:
        if pub.ticker is not None:
            self.ticks.pop(pub.ticker.fd, None)
            self.ep.unregister(pub.ticker.fd)
            pub.ticker.close()
            pub.ticker = None

    def _finish(self, pub: _Pub) -> None:
        raw = pub.conn.raw
        assert raw is not None
        if self.pubs.pop(raw.fileno(), None) is None:
            return
        self._drop_ticker(pub)
        if pub.watched:
            self.ep.unregister(raw.fileno())
        self.worker.publisher_finished(pub.inflight, pub.last_ack_ns if self.qos else 0)

    def _lost(self, conn: Conn) -> None:
        assert conn.raw is not None
        fd = conn.raw.fileno()
        if (pub := self.pubs.get(fd)) is not None:
            self._finish(pub)
        elif self.subs.pop(fd, None) is not None:
            self.ep.unregister(fd)  # its task ends when the loop does
        self.worker.lost(conn)
