"""`mqtt bench`'s paced loop: the publishers of a worker timed by a timerfd (message gaps under 2 ms) over plain
TCP, and the worker's subscribers, served by one trio task that waits in an epoll set of its own.

Why not a trio task per client: a turn of trio's run loop costs several times a blocking wait (on an AMD EPYC
about 46 µs of CPU against 13 for a timerfd read), and paced this fast every message takes two (its tick, its
delivery). At 10,000 msg/s the bench's core filled, ticks ran late, and the tail it measured was its own. Here a
tick, an acknowledgement or a delivery costs one epoll_wait and its work. The loop is still a trio task: about
every 100 ms, between ticks, it gives trio's loop a turn (the parent's requests, keepalives, signals), where it can
be cancelled, and a write the kernel cannot take at once is finished there, in order. At rates that leave no gap
for a turn (above about 3,000 msg/s) it comes after a second at the latest: Ctrl-C takes up to that long.

The tail measured is the broker's only while the bench answers at once: mosquitto (by default Nagle's algorithm
on) holds a small write while what it sent before is unacknowledged, so an acknowledgement sent late delays the
next delivery. Hence deliveries are answered before ticks are served, and turns are rare and come between
messages.
"""

from __future__ import annotations

import math
import select
import socket
import time
from typing import TYPE_CHECKING

import trio

from ..core.benchwire import Acks, Closed, Publishes, Receiver
from .benchio import read_nowait, send_nowait, timer_periods
from .ticker import Ticker

if TYPE_CHECKING:
    from .bench import Conn, Worker

# trio's loop gets a turn every 100 ms in a gap between ticks that holds one (a turn costs 100-250 µs on an AMD
# EPYC), else after a second at the latest (a quarter of the keepalive if that is shorter). A turn that delays a
# tick puts two messages in one write, and mosquitto holds the second's delivery until our acknowledgement of the
# first (Nagle's algorithm): at 10,000 msg/s a turn every 10 ms would put one message in a hundred at the p99, and
# one every 100 ms raises it by a third against one a second.
_TURN_NS = 100_000_000
_TURN_GAP_NS = 300_000
_TURN_LATE_NS = 1_000_000_000
_LOST = (Closed, trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class _Client:
    """A connection the loop writes to."""

    def __init__(self, conn: Conn, raw: socket.socket) -> None:
        self.conn = conn
        self.raw = raw
        self.wrote = False  # since trio's last turn (then the connection's keepalive clock is told)
        self.locked = False  # another task holds the connection's lock (a keepalive cut short): writes queue


class _Pub(_Client):
    """One publisher in the loop."""

    def __init__(self, conn: Conn, raw: socket.socket, ticker: Ticker, packets: Publishes, count: int) -> None:
        super().__init__(conn, raw)
        self.ticker: Ticker | None = ticker  # None once it stopped sending (then draining its acknowledgements)
        self.packets = packets
        self.count = count  # messages to send (0: until the run's end)
        self.acks = Acks()
        self.acks.rest, conn.buf = conn.buf, b""
        self.pending = 0  # messages due and not sent yet (the window was full)
        self.inflight = 0
        self.unread = 0  # messages sent since its acknowledgements were last read
        self.last_ack_ns = 0
        self.drain_until = 0
        self.watched = False  # its socket is in the epoll set (once it drains), else read at ticks and turns


class _Sub(_Client):
    """One subscriber in the loop."""

    def __init__(self, conn: Conn, raw: socket.socket, receiver: Receiver) -> None:
        super().__init__(conn, raw)
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
        # A publisher's acknowledgements are read at a tick once it sent half a window since the last read (a
        # third at QoS 2, whose messages take two reads), when its window is full, and at trio's turns: one read
        # for many, where a wake-up or a read each would cost as much as the message. mosquitto's sends to the
        # publisher are not held meanwhile: each message carries the TCP acknowledgement of what came before.
        self.read_acks_at = max(1, self.window // (3 if self.qos == 2 else 2))
        self.drain_ns = round(max(spec.drain, 5.0) * 1e9)
        self.interval_ns = max(1, round(spec.msg_interval * 1e9))  # every publisher ticks in phase from start_ns
        self.start_ns = worker.start_ns
        self.turn_late_ns = min(_TURN_LATE_NS, spec.keepalive * 250_000_000 or _TURN_LATE_NS)
        self.ep = select.epoll()
        self.ticks: dict[int, _Pub] = {}  # by timerfd
        self.pubs: dict[int, _Pub] = {}  # by socket
        self.subs: dict[int, _Sub] = {}  # by socket
        self.owed: list[tuple[Conn, memoryview]] = []  # writes the kernel took part of: finished in trio's turn
        # The worker's figures, counted here and added to the worker's before trio runs anything else.
        self.sent = 0
        self.acked = 0
        self.inflight = 0  # its change
        self.last_delivery_ns = 0
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
            assert conn.raw is not None
            pubs.append(_Pub(conn, conn.raw, ticker, packets, count))
        return cls(worker, pubs)

    async def run(self) -> None:
        worker = self.worker
        worker.polling = True
        # The subscribers' tasks stop waiting for reads (then wait for the loop's end): left in trio's epoll set,
        # each would wake at every turn and read deliveries there.
        for sub in self.subs.values():
            if sub.conn.reading is not None:
                sub.conn.reading.cancel()
        self._resumed()
        try:
            turn_ns = time.monotonic_ns() + _TURN_NS
            while self.pubs:
                # Ticks last: the acknowledgement of a delivery already here goes out before the next message.
                ticked: list[_Pub] = []
                now = time.monotonic_ns()
                until = turn_ns if now < turn_ns else turn_ns + self.turn_late_ns  # a turn put off waits for an event
                for fd, _ in self.ep.poll(max(0, until - now) / 1e9):
                    if (pub := self.ticks.get(fd)) is not None:
                        ticked.append(pub)
                    else:
                        self._event(fd)
                for pub in ticked:
                    self._tick(pub)
                if self.owed:
                    self._flush()
                while self.owed:
                    conn, rest = self.owed.pop(0)
                    try:
                        await conn.send_rest(rest)
                    except _LOST:
                        self._lost(conn)
                    self._resumed()
                if (now := time.monotonic_ns()) >= turn_ns and (
                    self.interval_ns - (now - self.start_ns) % self.interval_ns >= _TURN_GAP_NS
                    or now >= turn_ns + self.turn_late_ns
                ):
                    for pub in list(self.pubs.values()):
                        if pub.ticker is None and now > pub.drain_until:
                            self._finish(pub)  # acknowledgements still missing: given up on, as a publisher task does
                        elif not pub.watched:
                            self._poll_acks(pub)
                    self._flush()
                    await trio.lowlevel.checkpoint()
                    self._resumed()
                    turn_ns = time.monotonic_ns() + _TURN_NS
        finally:
            for pub in list(self.pubs.values()):
                self._finish(pub)
            self._flush()
            self.ep.close()
            worker.polling = False
            worker.polling_over.set()  # the subscribers go back to their own tasks (the drain)

    def _flush(self) -> None:
        """Adds what the loop counted to the worker's figures, and tells each connection written to since the last
        turn that it was (its keepalive clock)."""
        worker = self.worker
        fig = worker.fig
        fig.sent += self.sent
        fig.acked += self.acked
        worker.inflight += self.inflight
        self.sent = self.acked = self.inflight = 0
        if self.last_delivery_ns:
            fig.last_delivery_ns = self.last_delivery_ns
            worker.last_delivery = self.last_delivery_ns / 1e9
            self.last_delivery_ns = 0
        now = time.monotonic()
        for client in (*self.pubs.values(), *self.subs.values()):
            if client.wrote:
                client.conn.last_sent = now
                client.wrote = False

    def _resumed(self) -> None:
        """Which connections' locks are held, read again whenever the loop waited: other tasks (a keepalive cut
        short) take one only then, and a write of the loop's own cut short holds one until it is finished."""
        for client in (*self.pubs.values(), *self.subs.values()):
            client.locked = client.conn.lock.locked()

    def _event(self, fd: int) -> None:
        conn = None
        try:
            if (sub := self.subs.get(fd)) is not None:
                conn = sub.conn
                self._delivered(sub)
            elif (pub := self.pubs.get(fd)) is not None:
                conn = pub.conn
                self._acked(pub)
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
            if pub.unread >= self.read_acks_at or pub.inflight >= self.window:
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
        # The wall clock: the kernel's receive timestamps are on it.
        data = pub.packets.build(due, time.time_ns())
        self._write(pub, data)
        if self.qos:
            pub.inflight += due
            self.inflight += due
        else:
            self.acked += due
        pub.pending -= due
        pub.unread += due
        self.sent += due
        if pub.count and pub.packets.seq >= pub.count:
            self._stop(pub)

    def _poll_acks(self, pub: _Pub) -> None:
        try:
            self._acked(pub)
        except _LOST:
            self._lost(pub.conn)

    def _acked(self, pub: _Pub) -> None:
        pub.unread = 0
        got = read_nowait(pub.raw, False)
        if got is None:
            return
        if not got.data:
            raise Closed("closed by the broker")
        done = pub.acks.feed(got.data)
        if pub.acks.replies:
            self._write(pub, pub.acks.replies)
        if not done:
            return
        pub.inflight -= done
        self.inflight -= done
        self.acked += done
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
            self._write(sub, acks)
        if receiver.delivered != before:
            self.last_delivery_ns = time.monotonic_ns()

    def _write(self, client: _Client, data: bytes) -> None:
        """Writes `data` now if the kernel takes it, else queues what is left for trio's turn (as Conn.send would
        write it, without its trip through the interpreter)."""
        conn = client.conn
        if client.locked or (self.owed and any(owing is conn for owing, _ in self.owed)):
            self.owed.append((conn, memoryview(data)))  # behind what it owes already, or a keepalive cut short
            return
        client.wrote = True
        n = send_nowait(client.raw, data)
        if n != len(data):
            self.owed.append((conn, conn.cut(data, n)))

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
