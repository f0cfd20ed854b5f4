"""A blocking client for the one-shot commands' fast path: `ClientConnection` (mqtt_cli.core) over a plain TCP
socket, without trio.

    client = BlockingClient(settings)      # plain mqtt:// endpoints only (see `supports`)
    client.connect()
    client.publish("a/b", b"hi", 1)
    client.wait_acknowledged()
    client.disconnect()

It does what the trio client (net/client.py) does for one connection's work, with the same errors (the
`mqtt_cli.net.errors` classes, the same words) and the same bounds: connecting within `connect_timeout`,
acknowledgements within `ack_timeout` without progress, DISCONNECT written within 2 s; keepalive is kept while
waiting. It has no reconnecting, TLS, WebSocket or Unix socket: the commands use the trio client for those.
Importing it costs a fraction of trio's import, which is most of what a one-shot `mqtt pub` would spend.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import time
from collections import deque
from typing import TYPE_CHECKING

from mqtt_cli.core.errors import LocalProtocolError
from mqtt_cli.core.events import (
    Acknowledged,
    ConnectionAccepted,
    ConnectionRefused,
    Disconnected,
    Event,
    MessagesReceived,
    PongReceived,
    PublishAcknowledged,
    SubscribeAcknowledged,
    UnsubscribeAcknowledged,
)
from mqtt_cli.core.properties import EMPTY_PROPERTIES, Properties

from .errors import BrokerRefused, ClientError, ConnectFailed, ConnectionLost, PublishFailed, refused_error
from .readsize import READ_SIZE
from .settings import ClientSettings, new_connection, random_client_id, version_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from mqtt_cli.core.packets import Publish, Subscription

__all__ = ["BlockingClient", "WorkTimedOut", "supports"]

#: Linux's TCP_QUICKACK (elsewhere None): see BlockingClient._wait_readable.
_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


class WorkTimedOut(Exception):  # not an error: the caller's own bound (-W) was reached
    """A wait went past `BlockingClient.deadline`."""


def supports(settings: ClientSettings) -> bool:
    """The blocking client can do what `settings` ask: a plain TCP connection, without reconnecting."""
    return settings.endpoint.scheme == "mqtt" and not settings.endpoint.tls and not settings.reconnect


class BlockingClient:
    """One connection, driven by the caller's calls. Counters as the trio client's: `published`, `written`
    (QoS 0 on the wire), `acknowledged`, `refused`; `failure` once the connection is lost."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self.conn = new_connection(settings)
        self.endpoint = settings.endpoint
        self.version = 0
        self.failure: ClientError | None = None
        self.published = 0
        self.written = 0
        self.acknowledged = 0
        self.refused: list[PublishAcknowledged] = []
        self.messages: deque[Publish | PongReceived] = deque()  # received, not yet taken by next_message()
        self._sock: socket.socket | None = None
        self._results: dict[int, SubscribeAcknowledged | UnsubscribeAcknowledged] = {}
        self._markers: deque[int] = deque()  # pings_sent values whose PINGRESP goes into `messages`
        self._pongs = 0
        self._qos0_unwritten = 0
        #: The caller's bound on its work (time.monotonic()), the commands' -W: a wait past it raises WorkTimedOut.
        self.deadline: float | None = None
        self._while_waiting: Callable[[], object] | None = None

    # --- connecting ---------------------------------------------------------------------------------------

    def connect(self, while_waiting: Callable[[], object] | None = None) -> ConnectionAccepted:
        """Connects and says CONNECT, as the trio client does (auto: 5.0, then 3.1.1 when the broker refuses
        5.0); raises ConnectFailed or BrokerRefused. `while_waiting` is called once, when the first CONNECT is
        written: work of the caller's (a one-shot command's imports) done while the broker answers."""
        s = self.settings
        versions = (s.version,) if s.version else (5, 4)
        self._while_waiting = while_waiting
        for version in versions:
            try:
                return self._handshake(version, s.clean_start)
            except BrokerRefused as err:
                if version == 5 and len(versions) > 1 and err.reason_code in (0x84, -1):
                    continue  # auto: the broker does not speak 5.0; try 3.1.1
                raise
        raise AssertionError("not reached")

    def _handshake(self, version: int, clean_start: bool) -> ConnectionAccepted:
        s = self.settings
        conn = self.conn
        deadline = time.monotonic() + s.connect_timeout
        sock = self._open(deadline)
        try:
            # 3.1 has no empty client identifiers
            client_id = random_client_id("mqtt-") if version == 3 and not conn.client_id else None
            conn.connect(clean_start=clean_start, version=version, client_id=client_id)
            received = 0
            reset = False
            try:
                sock.sendall(conn.data_to_send(time.monotonic()))
            except OSError:
                reset = True  # the read below ends it as "closed in answer to CONNECT"
            if self._while_waiting is not None:
                work, self._while_waiting = self._while_waiting, None
                work()
            while True:
                data = b""
                try:
                    if not self._wait_readable(sock, deadline):
                        raise ConnectFailed(f"no answer from {self.endpoint} within {s.connect_timeout:g} s")
                    data = sock.recv(READ_SIZE)
                except OSError:
                    reset = True  # a reset in answer to CONNECT is the same as closing
                received += len(data)
                conn.receive_data(data, time.monotonic())
                events = conn.events()
                for i, event in enumerate(events):
                    if isinstance(event, ConnectionAccepted):
                        self._sock = sock
                        self.version = conn.version
                        self._dispatch(events[i + 1 :])
                        return event
                    if isinstance(event, ConnectionRefused | Disconnected):
                        raise refused_error(self.endpoint, version_name(version), event, received, reset)
        except BaseException:
            sock.close()
            raise

    def _open(self, deadline: float) -> socket.socket:
        """A TCP connection to the endpoint, each address in turn (the first failure's reason is told)."""
        endpoint = self.endpoint
        # An ASCII name as bytes: the idna codec (and stringprep, unicodedata) is not loaded for it.
        host = endpoint.host.encode("ascii") if endpoint.host.isascii() else endpoint.host
        try:
            infos = socket.getaddrinfo(host, endpoint.port, type=socket.SOCK_STREAM)
        except OSError as err:
            raise ConnectFailed(f"cannot connect to {endpoint}: {err.strerror or err}") from None
        first = ""
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                code = sock.connect_ex(address)
                if code == errno.EINPROGRESS:
                    _, writable, _ = select.select([], [sock], [], max(deadline - time.monotonic(), 0))
                    if not writable:
                        timeout = self.settings.connect_timeout
                        raise ConnectFailed(f"no answer from {endpoint} within {timeout:g} s")
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if code:  # worded as trio's socket words it (net/transports.py tells that reason)
                        first = first or f"Error connecting to {address!r}: {os.strerror(code)}"
                        sock.close()
                        continue
                elif code:
                    first = first or os.strerror(code)
                    sock.close()
                    continue
            except BaseException:
                sock.close()
                raise
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        raise ConnectFailed(f"cannot connect to {endpoint}: {first or 'no address'}")

    # --- the work -----------------------------------------------------------------------------------------

    def publish(
        self, topic: str, payload: bytes = b"", qos: int = 0, retain: bool = False,
        properties: Properties = EMPTY_PROPERTIES,
    ) -> None:  # fmt: skip
        """Hands a message to the connection, written with what follows it (as the trio client's writer
        batches); waits (bounded) while the broker's receive maximum is reached. Raises PublishFailed for a
        message the broker's limits forbid."""
        if self.failure is not None:
            raise self.failure
        while qos and not self.conn.window_open:
            self._flush()
            self._wait_progress()
        try:
            self.conn.publish(topic, payload, qos, retain, properties)
        except LocalProtocolError as err:
            raise PublishFailed(f"cannot publish to {topic!r}: {err}") from None
        self.published += 1
        if not qos:
            self._qos0_unwritten += 1

    def wait_acknowledged(self) -> None:
        """Waits until every message handed over is acknowledged (QoS 1/2) or written (QoS 0)."""
        self._flush()
        while self.conn.inflight or self._qos0_unwritten:
            if self.failure is not None:
                raise self.failure
            self._wait_progress()

    def subscribe(
        self, subscriptions: list[Subscription], properties: Properties = EMPTY_PROPERTIES, *, marker: bool = False
    ) -> tuple[int, ...]:
        """Subscribes and waits for SUBACK; returns its codes. `marker`: a PINGREQ follows at once, and its
        PINGRESP comes into `messages` as PongReceived after the retained messages (as the trio client's)."""
        pid = self._request(lambda: self.conn.subscribe(subscriptions, properties))
        if marker:
            self.conn.ping(time.monotonic())
            self._markers.append(self.conn.pings_sent)
        self._flush()
        return self._await_result(pid).reason_codes

    def unsubscribe(self, topic_filters: list[str]) -> tuple[int, ...]:
        pid = self._request(lambda: self.conn.unsubscribe(topic_filters))
        self._flush()
        return self._await_result(pid).reason_codes

    def next_message(self) -> Publish | PongReceived:
        """The next message (or PINGRESP marker) received. Raises the connection's failure when it ends."""
        while not self.messages:
            if self.failure is not None:
                raise self.failure
            self._read(None)
        return self.messages.popleft()

    def next_messages(self) -> list[Publish] | PongReceived:
        """next_message() a read at a time: the messages received up to the next marker (a non-empty list, in
        order), or the marker. Raises the connection's failure when it ends."""
        messages = self.messages
        while not messages:
            if self.failure is not None:
                raise self.failure
            self._read(None)
        first = messages.popleft()
        if isinstance(first, PongReceived):
            return first
        batch = [first]
        while messages:
            message = messages[0]
            if isinstance(message, PongReceived):
                break
            messages.popleft()
            batch.append(message)
        return batch

    def disconnect(self) -> None:
        """Sends DISCONNECT (written within 2 s at most) and closes the socket."""
        sock = self._sock
        if sock is None:
            return
        self._sock = None
        try:
            if self.conn.connected:
                self.conn.disconnect(properties=self.settings.disconnect_properties)
                self.conn.events()
                sock.settimeout(2)
                sock.sendall(self.conn.data_to_send(time.monotonic()))
        except OSError:
            pass
        finally:
            sock.close()

    def close(self) -> None:
        """Closes the socket without a word (the will, if any, goes out)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # --- waiting ------------------------------------------------------------------------------------------

    def _request(self, send: object) -> int:
        if self.failure is not None:
            raise self.failure
        try:
            pid: int = send()  # type: ignore[operator]
        except LocalProtocolError as err:
            raise ClientError(str(err)) from None
        return pid

    def _await_result(self, pid: int) -> SubscribeAcknowledged | UnsubscribeAcknowledged:
        timeout = self.settings.ack_timeout
        deadline = time.monotonic() + timeout
        while pid not in self._results:
            if self.failure is not None:
                raise self.failure
            if time.monotonic() >= deadline:
                raise ConnectionLost(f"no answer from the broker for {timeout:g} s")
            self._read(deadline)
        return self._results.pop(pid)

    def _wait_progress(self) -> None:
        """Reads until something is acknowledged; gives up when nothing is for ack_timeout."""
        timeout = self.settings.ack_timeout
        deadline = time.monotonic() + timeout
        done = self.acknowledged + len(self.refused)
        while self.acknowledged + len(self.refused) == done and self.conn.inflight:
            if self.failure is not None:
                raise self.failure
            if time.monotonic() >= deadline:
                raise PublishFailed(f"the broker acknowledged nothing for {timeout:g} s")
            self._read(deadline)

    def _wait_readable(self, sock: socket.socket, deadline: float | None) -> bool:
        if _QUICKACK is not None:
            # About to wait: what was received is acknowledged now, not up to 40 ms later. Linux delays the ACK
            # once we have answered the broker quickly (its "pingpong" mode), and a broker that leaves Nagle on
            # (mosquitto) holds a small packet back until its previous one is acknowledged: the retained
            # message after the SUBACK, rr's response after the PUBACK. Setting the option sends a pending ACK
            # and leaves that mode until our next write.
            try:  # noqa: SIM105 (a plain try: this runs before every read)
                sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
            except OSError:
                pass
        wait = None if deadline is None else max(deadline - time.monotonic(), 0)
        readable, _, _ = select.select([sock], [], [], wait)
        return bool(readable)

    def _read(self, deadline: float | None) -> None:
        """One read (or a keepalive timer going off), its events dispatched; bounded by `deadline`."""
        conn = self.conn
        sock = self._sock
        if sock is None:
            self.failure = self.failure or ConnectionLost(f"connection to {self.endpoint} lost: it was closed")
            return
        if self.deadline is not None:
            if time.monotonic() >= self.deadline:
                raise WorkTimedOut
            deadline = self.deadline if deadline is None else min(deadline, self.deadline)
        timer = conn.next_deadline()
        until = deadline if timer is None else timer if deadline is None else min(deadline, timer)
        try:
            if not self._wait_readable(sock, until):
                conn.handle_timeout(time.monotonic())
                self._dispatch(conn.events())
                self._flush()
                return
            data = sock.recv(READ_SIZE)
        except OSError as err:
            conn.connection_lost(f"reading failed: {err}")
            self._dispatch(conn.events())
            return
        conn.receive_data(data, time.monotonic())
        self._dispatch(conn.events())
        self._flush()

    def _flush(self) -> None:
        data = self.conn.data_to_send(time.monotonic())
        sock = self._sock
        if data and sock is not None:
            try:
                sock.sendall(data)
            except OSError as err:
                self._take_last_words()
                self.conn.connection_lost(f"writing failed: {err}")
                self._dispatch(self.conn.events())
                return
        self.written += self._qos0_unwritten
        self._qos0_unwritten = 0

    def _take_last_words(self) -> None:
        """After a failed write: what the broker sent before closing (a refusal, say) still counts, as it does
        for the trio client's reader."""
        sock = self._sock
        if sock is None:
            return
        try:
            sock.setblocking(False)
            while data := sock.recv(READ_SIZE):
                self.conn.receive_data(data, time.monotonic())
        except OSError:
            pass
        self._dispatch(self.conn.events())

    def _dispatch(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, MessagesReceived):
                self.messages.extend(event.messages)
            elif isinstance(event, Acknowledged):
                self.acknowledged += len(event.contexts)
            elif isinstance(event, PublishAcknowledged):
                if event.reason_code < 0x80:
                    self.acknowledged += 1
                else:
                    self.refused.append(event)
            elif isinstance(event, SubscribeAcknowledged | UnsubscribeAcknowledged):
                self._results[event.packet_id] = event
            elif isinstance(event, PongReceived):
                self._pongs += 1
                while self._markers and self._markers[0] <= self._pongs:
                    self._markers.popleft()
                    self.messages.append(event)
            elif isinstance(event, Disconnected):
                if self._sock is not None:
                    self._sock.close()
                    self._sock = None
                reason = event.reason
                self.failure = self.failure or ConnectionLost(f"connection to {self.endpoint} lost: {reason}")
